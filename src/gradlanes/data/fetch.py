"""Fetch dataset archives from an ordered list of mirrors and trust only verified content.

Each file is streamed to a temporary name in the target folder and decompressed as it arrives
(`gradlanes.data.gzip_stream`); only a whole gzip stream whose content has the pinned SHA-256 and
size is renamed into place. What a mirror may cost before that is bounded (`gradlanes.data.limits`):
an archive larger than its pinned content allows, announced or sent, and content that inflates past
its pinned size are stopped at once, and so is a mirror slower than `min_rate_kib_s`. When every
mirror fails, one `DownloadError` explains each attempt and how to fetch the files by hand.

A failed attempt is one of three kinds, and the kind decides what happens next:

* unreachable -- a connection-level failure: a timeout (on connect or while waiting for or reading
  the answer), a refused connection, a host name that does not resolve, an unreachable network.
  A mirror that answers below the minimum rate counts as one that timed out.
  The mirror as a whole is not answering, so retrying it with the same timeout only multiplies the
  wait (a silent server costs `timeout_s` per try). When another live mirror follows, the download
  moves straight on without retrying and marks the mirror dead: the remaining files of the same
  download skip it, recording "skipped: timed out earlier in this download (...)". A mirror that is
  the last live one for a file still gets `retries` tries with exponential backoff, so a single
  flaky mirror keeps its chances; only when its last try also fails at the connection level is it
  marked dead. By then that file, and so the whole download, has failed, and skipping the mirror
  for later files makes the error arrive after one file's tries instead of one set per file.
* transient -- the mirror answered but this try broke: HTTP 5xx, a connection reset or closed
  mid-body, a body shorter than announced, a truncated gzip stream. Retried on the same mirror up
  to `retries` tries with backoff `backoff_s * 2**(try - 1)`, then the next mirror. The mirror is
  not marked dead: it answers, and may serve the next file.
* permanent -- the mirror answered with the wrong thing: HTTP 4xx, an HTML page, corrupt gzip, a
  checksum mismatch, a missing local file, an archive past its bound (announced or sent), content
  that inflates past its pinned size. The same request would get the same answer, so the
  next mirror is tried at once; the mirror stays live because it may hold the other files.

Which mirrors are dead is tracked by a `DeadMirrors` object that `fetch_dataset` creates per call,
so two downloads in one process never share it.
"""

from __future__ import annotations

import enum
import errno
import hashlib
import http.client
import logging
import os
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm import tqdm

from gradlanes.atomic import atomic_path, remove_stale_parts
from gradlanes.data.gzip_stream import GzipContent, GzipProblem, TruncatedGzip
from gradlanes.data.limits import RateFloor, archive_limit

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
USER_AGENT = "gradlanes-fetch/1 (+https://github.com/gradlanes)"
# errnos a connect() gives when no route leads to the host: as hopeless as a timeout, just faster.
UNREACHABLE_ERRNOS = frozenset({errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EHOSTDOWN})


@dataclass(frozen=True)
class FileSpec:
    """One file of a dataset: its role, remote name, and the SHA-256 and size of its decompressed
    content (the size bounds what a mirror may send: `gradlanes.data.limits`)."""

    role: str
    name: str
    sha256: str
    content_bytes: int


@dataclass(frozen=True)
class FetchPolicy:
    """`retries` is the number of tries per mirror and file (see the module docstring for which);
    `min_rate_kib_s` the slowest average a mirror may keep after its first `timeout_s`."""

    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 1.0
    min_rate_kib_s: float = 64.0


@dataclass
class FetchedFile:
    role: str
    name: str
    path: str
    mirror: str
    url: str
    archive_sha256: str
    archive_bytes: int
    content_sha256: str
    content_bytes: int
    attempts: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


class FailureKind(enum.Enum):
    """What a failed try says about the mirror; decides retry, move on, or skip for later files."""

    UNREACHABLE = "unreachable"
    TRANSIENT = "transient"
    PERMANENT = "permanent"


class MirrorFailure(Exception):
    """One attempt at one mirror failed.

    `symptom` is a past-tense phrase ("timed out") for unreachable failures, used to explain
    why later files skip the mirror.
    """

    def __init__(self, reason: str, kind: FailureKind, symptom: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.symptom = symptom


class DownloadError(RuntimeError):
    """No mirror served a verified copy of one or more files."""


@dataclass
class DeadMirrors:
    """Mirrors found unreachable during one download, so later files do not wait on them again.

    Maps each dead mirror to the note recorded for every file that skips it.
    """

    notes: dict[str, str] = field(default_factory=dict)

    def mark(self, mirror: str, name: str, failure: MirrorFailure) -> None:
        self.notes[mirror] = f"skipped: {failure.symptom} earlier in this download ({name}: {failure.reason})"

    def skip_note(self, mirror: str) -> str | None:
        return self.notes.get(mirror)

    def any_live(self, mirrors: Sequence[str]) -> bool:
        return any(mirror not in self.notes for mirror in mirrors)


@dataclass(frozen=True)
class _Verified:
    archive_sha256: str
    archive_bytes: int
    content_sha256: str
    content_bytes: int


@dataclass
class _MirrorOutcome:
    """The tries at one mirror for one file: the verified copy, or why each try failed."""

    reasons: list[str]
    verified: _Verified | None = None
    last_failure: MirrorFailure | None = None


def mirror_url(mirror: str, name: str) -> str:
    """The address of `name` on `mirror`: an http(s)/file URL or a local folder path."""
    scheme = urllib.parse.urlparse(mirror).scheme
    if scheme in ("http", "https", "file"):
        return urllib.parse.urljoin(mirror.rstrip("/") + "/", urllib.parse.quote(name))
    return str(Path(mirror).expanduser() / name)


def _open_source(url: str, timeout_s: float):
    """Open `url` for streaming; returns (stream, expected_length or None)."""
    scheme = urllib.parse.urlparse(url).scheme
    if scheme in ("http", "https", "file"):
        request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
        response = urllib.request.urlopen(request, timeout=timeout_s)  # noqa: S310 - schemes checked
        length = response.headers.get("Content-Length")
        return response, (int(length) if length and length.isdigit() else None)
    path = Path(url)
    return open(path, "rb"), path.stat().st_size


def _unreachable_symptom(reason: object) -> str | None:
    """The past-tense symptom when `reason` means the host is not answering at all, else None."""
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(reason, ConnectionRefusedError):
        return "refused the connection"
    if isinstance(reason, socket.gaierror):
        return "did not resolve"
    if isinstance(reason, OSError) and reason.errno in UNREACHABLE_ERRNOS:
        return "was unreachable"
    return None


def _describe_os_error(exc: BaseException, timeout_s: float, received: int = 0) -> MirrorFailure:
    """The failure `exc` means; `received` counts the body's bytes read before the failing read."""
    if isinstance(exc, urllib.error.HTTPError):
        kind = FailureKind.TRANSIENT if exc.code >= 500 else FailureKind.PERMANENT
        return MirrorFailure(f"HTTP {exc.code} {exc.reason}", kind)
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    symptom = _unreachable_symptom(reason)
    if symptom == "timed out":
        return MirrorFailure(
            f"no answer within the {timeout_s:g} s timeout", FailureKind.UNREACHABLE, symptom
        )
    if isinstance(reason, FileNotFoundError):
        return MirrorFailure(f"no such file: {reason.filename}", FailureKind.PERMANENT)
    if isinstance(exc, http.client.IncompleteRead):
        return MirrorFailure(
            # partial holds only what the failing read had assembled (whole chunks, when chunked)
            f"connection closed after {received + len(exc.partial)} bytes of the body",
            FailureKind.TRANSIENT,
        )
    if symptom is not None:
        return MirrorFailure(f"connection failed: {reason}", FailureKind.UNREACHABLE, symptom)
    return MirrorFailure(f"connection failed: {reason}", FailureKind.TRANSIENT)


def _progress_bar(expected: int | None, label: str) -> tqdm:
    """A byte counter on a terminal, nothing elsewhere. Display only: excluded from mutation testing,
    since no result depends on it and tests run without a terminal."""
    return tqdm(  # pragma: no mutate
        total=expected,  # pragma: no mutate
        unit="B",  # pragma: no mutate
        unit_scale=True,  # pragma: no mutate
        desc=label,  # pragma: no mutate
        disable=not sys.stderr.isatty(),  # pragma: no mutate
        leave=False,  # pragma: no mutate
    )


def _content_failure(problem: GzipProblem, note: str = "") -> MirrorFailure:
    """What a problem with the archive's content says about the mirror: only a cut-off archive
    may come whole on another try; any other answer would be the same again."""
    kind = FailureKind.TRANSIENT if isinstance(problem, TruncatedGzip) else FailureKind.PERMANENT
    return MirrorFailure(problem.reason + note, kind)


def _announced_too_much(spec: FileSpec, expected: int | None) -> MirrorFailure | None:
    limit = archive_limit(spec.content_bytes)
    if expected is None or expected <= limit:
        return None
    return MirrorFailure(
        f"announces {expected:,} bytes, more than the {limit:,} an archive of its pinned "
        f"{spec.content_bytes:,} bytes of content may have; refused before reading the body",
        FailureKind.PERMANENT,
    )


def _stream_to(
    spec: FileSpec, url: str, tmp: Path, policy: FetchPolicy, clock: Callable[[], float]
) -> _Verified:
    """Copy `url` into `tmp`, checking the content as it arrives; stop at the first chunk that
    passes the archive's bound, inflates past the pinned size, is not gzip, or is too late."""
    digest = hashlib.sha256()
    content = GzipContent(spec.sha256, spec.content_bytes)
    limit = archive_limit(spec.content_bytes)
    floor = RateFloor(policy.min_rate_kib_s, policy.timeout_s)
    received = 0
    started = clock()
    try:
        source, expected = _open_source(url, policy.timeout_s)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise _describe_os_error(exc, policy.timeout_s) from exc
    with source:
        refusal = _announced_too_much(spec, expected)
        if refusal is not None:
            raise refusal
        # read1 returns what one receive brought: a trickle is seen at each byte, not per 1 MiB
        read = getattr(source, "read1", source.read)
        with open(tmp, "wb") as sink, _progress_bar(expected, spec.name) as bar:
            try:
                while chunk := read(CHUNK_BYTES):
                    received += len(chunk)
                    if received > limit:
                        raise MirrorFailure(
                            f"sent more than the {limit:,} bytes an archive of its pinned "
                            f"{spec.content_bytes:,} bytes of content may have (stopped after "
                            f"{received:,} bytes)",
                            FailureKind.PERMANENT,
                        )
                    sink.write(chunk)
                    digest.update(chunk)
                    content.feed(chunk)
                    bar.update(len(chunk))  # pragma: no mutate - display only
                    slow = floor.too_slow(received, clock() - started)
                    if slow is not None:
                        raise MirrorFailure(slow, FailureKind.UNREACHABLE, "was too slow")
            except GzipProblem as problem:
                raise _content_failure(problem, f" (stopped after {received:,} bytes)") from problem
            except (OSError, http.client.HTTPException) as exc:
                raise _describe_os_error(exc, policy.timeout_s, received) from exc
    if expected is not None and received != expected:
        raise MirrorFailure(
            f"body ended after {received} of {expected} announced bytes", FailureKind.TRANSIENT
        )
    try:
        content_sha256, content_bytes = content.finish()
    except GzipProblem as problem:
        raise _content_failure(problem) from problem
    return _Verified(digest.hexdigest(), received, content_sha256, content_bytes)


def _try_once(spec: FileSpec, url: str, target: Path, policy: FetchPolicy) -> _Verified:
    """One try: stream, verify and rename into place, or raise MirrorFailure leaving nothing."""
    with atomic_path(target) as tmp:
        verified = _stream_to(spec, url, tmp, policy, time.monotonic)
    return verified


def _worth_retrying(failure: MirrorFailure, last_live_mirror: bool) -> bool:
    """Retry transient failures; retry a silent mirror only when no other mirror could serve."""
    if failure.kind is FailureKind.TRANSIENT:
        return True
    return failure.kind is FailureKind.UNREACHABLE and last_live_mirror


def _try_mirror(
    spec: FileSpec,
    mirror: str,
    target: Path,
    policy: FetchPolicy,
    sleep: Callable[[float], None],
    last_live_mirror: bool,
) -> _MirrorOutcome:
    """Up to `policy.retries` tries at one mirror, with exponential backoff between them."""
    url = mirror_url(mirror, spec.name)
    reasons: list[str] = []
    tries = max(1, policy.retries)
    for attempt in range(1, tries + 1):
        try:
            return _MirrorOutcome(reasons, verified=_try_once(spec, url, target, policy))
        except MirrorFailure as failure:
            reasons.append(f"attempt {attempt}: {failure.reason}")
            log.warning("%s from %s: %s", spec.name, mirror, failure.reason)
            if attempt == tries or not _worth_retrying(failure, last_live_mirror):
                return _MirrorOutcome(reasons, last_failure=failure)
            sleep(policy.backoff_s * 2 ** (attempt - 1))
    raise AssertionError("the last try always returns")


def _attempt_lines(failures: Sequence[tuple[str, list[str]]]) -> list[str]:
    return [f"{mirror}: {'; '.join(reasons)}" for mirror, reasons in failures]


def fetch_file(
    spec: FileSpec,
    mirrors: Sequence[str],
    dest_dir: str | os.PathLike,
    policy: FetchPolicy = FetchPolicy(),
    sleep: Callable[[float], None] = time.sleep,
    dead: DeadMirrors | None = None,
) -> FetchedFile | list[tuple[str, list[str]]]:
    """Fetch one file from the first mirror that serves verified content.

    `dead` carries the mirrors found unreachable by earlier files of the same download (and
    receives any this file finds); without it, this file is its own download.
    Returns the `FetchedFile`, or, when every mirror failed, the list of (mirror, attempt reasons).
    """
    dead = DeadMirrors() if dead is None else dead
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_parts(dest_dir, spec.name)
    target = dest_dir / spec.name
    failures: list[tuple[str, list[str]]] = []
    for index, mirror in enumerate(mirrors):
        note = dead.skip_note(mirror)
        if note is not None:
            log.info("%s: %s %s", spec.name, mirror, note)
            failures.append((mirror, [note]))
            continue
        last_live = not dead.any_live(mirrors[index + 1 :])
        outcome = _try_mirror(spec, mirror, target, policy, sleep, last_live)
        if outcome.verified is not None:
            log.info("%s verified from %s (%d bytes)", spec.name, mirror, outcome.verified.archive_bytes)
            return FetchedFile(
                role=spec.role,
                name=spec.name,
                path=str(target),
                mirror=mirror,
                url=mirror_url(mirror, spec.name),
                attempts=_attempt_lines(failures),
                **asdict(outcome.verified),
            )
        failure = outcome.last_failure
        if failure is not None and failure.kind is FailureKind.UNREACHABLE:
            dead.mark(mirror, spec.name, failure)
            outcome.reasons.append("marked dead: skipped for the remaining files of this download")
            log.warning(
                "%s %s; skipping it for the remaining files of this download", mirror, failure.symptom
            )
        failures.append((mirror, outcome.reasons))
    return failures


def failure_message(
    dataset: str,
    failed: dict[str, list[tuple[str, list[str]]]],
    specs: Sequence[FileSpec],
    mirrors: Sequence[str],
) -> str:
    """One readable message: what each mirror did, how to fetch by hand, where to point gradlanes."""
    lines = [
        f"Could not download dataset {dataset!r}: no mirror served a verified copy of "
        f"{', '.join(sorted(failed))}.",
        "",
    ]
    for name, attempts in failed.items():
        lines.append(f"{name}:")
        for index, (mirror, reasons) in enumerate(attempts, start=1):
            lines.append(f"  mirror {index} {mirror}")
            lines.extend(f"      {reason}" for reason in reasons)
    public = next((m for m in mirrors if m.startswith(("http://", "https://"))), None)
    public = public or "https://storage.googleapis.com/cvdf-datasets/mnist/"
    lines += [
        "",
        "To fetch the files by hand (from any mirror you can reach) and check them:",
        f"  mkdir -p ~/datasets/{dataset} && cd ~/datasets/{dataset}",
    ]
    lines += [f"  curl -fLO {mirror_url(public, spec.name)}" for spec in specs]
    lines += [f"  gunzip -c {spec.name} | sha256sum   # must print {spec.sha256}" for spec in specs]
    lines += [
        "",
        "Then point the config key dataset.mirrors at that folder, for example:",
        f"  make run MIRROR=~/datasets/{dataset}",
        f'  snakemake --cores all --config \'dataset={{"mirrors": ["~/datasets/{dataset}"]}}\'',
    ]
    return "\n".join(lines)


def fetch_dataset(
    dataset: str,
    specs: Sequence[FileSpec],
    mirrors: Sequence[str],
    dest_dir: str | os.PathLike,
    policy: FetchPolicy = FetchPolicy(),
    sleep: Callable[[float], None] = time.sleep,
) -> list[FetchedFile]:
    """Fetch every file of a dataset; raise one `DownloadError` naming every failure."""
    if not mirrors:
        raise DownloadError(
            f"dataset {dataset!r} has no mirrors: add at least one URL or folder under "
            "dataset.mirrors in config.yaml"
        )
    fetched: list[FetchedFile] = []
    failed: dict[str, list[tuple[str, list[str]]]] = {}
    dead = DeadMirrors()  # per call: a mirror dead for this download may be back for the next
    for spec in specs:
        result = fetch_file(spec, mirrors, dest_dir, policy, sleep, dead)
        if isinstance(result, FetchedFile):
            fetched.append(result)
        else:
            failed[spec.name] = result
    if failed:
        for item in fetched:  # a partial set is useless to the next rule; leave nothing behind
            Path(item.path).unlink(missing_ok=True)
        raise DownloadError(failure_message(dataset, failed, specs, mirrors))
    return fetched
