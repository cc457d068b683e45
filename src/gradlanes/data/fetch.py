"""Fetch dataset archives from an ordered list of mirrors and trust only verified content.

Each file is streamed to a temporary name in the target folder, decompressed to check that it is
a whole gzip stream, hashed, compared with the pinned SHA-256 of its decompressed content and only
then renamed into place. When every mirror fails, one `DownloadError` explains each attempt and
how to fetch the files by hand.

A failed attempt is one of three kinds, and the kind decides what happens next:

* unreachable -- a connection-level failure: a timeout (on connect or while waiting for or reading
  the answer), a refused connection, a host name that does not resolve, an unreachable network.
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
  checksum mismatch, a missing local file. The same request would get the same answer, so the
  next mirror is tried at once; the mirror stays live because it may hold the other files.

Which mirrors are dead is tracked by a `DeadMirrors` object that `fetch_dataset` creates per call,
so two downloads in one process never share it.
"""

from __future__ import annotations

import enum
import errno
import gzip
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
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm import tqdm

from gradlanes.atomic import atomic_path, remove_stale_parts

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
USER_AGENT = "gradlanes-fetch/1 (+https://github.com/gradlanes)"
# errnos a connect() gives when no route leads to the host: as hopeless as a timeout, just faster.
UNREACHABLE_ERRNOS = frozenset({errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EHOSTDOWN})


@dataclass(frozen=True)
class FileSpec:
    """One file of a dataset: its role, remote name and the SHA-256 of its decompressed content."""

    role: str
    name: str
    sha256: str


@dataclass(frozen=True)
class FetchPolicy:
    """`retries` is the number of tries per mirror and file (see the module docstring for which)."""

    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 1.0


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


def _stream_to(url: str, tmp: Path, timeout_s: float, label: str) -> tuple[str, int]:
    """Copy `url` into `tmp`; return (sha256 of the archive, bytes received)."""
    digest = hashlib.sha256()
    received = 0
    try:
        source, expected = _open_source(url, timeout_s)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise _describe_os_error(exc, timeout_s) from exc
    with source, open(tmp, "wb") as sink, _progress_bar(expected, label) as bar:
        try:
            while chunk := source.read(CHUNK_BYTES):
                sink.write(chunk)
                digest.update(chunk)
                received += len(chunk)
                bar.update(len(chunk))  # pragma: no mutate - display only
        except (OSError, http.client.HTTPException) as exc:
            raise _describe_os_error(exc, timeout_s, received) from exc
    if expected is not None and received != expected:
        raise MirrorFailure(
            f"body ended after {received} of {expected} announced bytes", FailureKind.TRANSIENT
        )
    return digest.hexdigest(), received


def _verify_gzip_content(tmp: Path, pinned_sha256: str) -> tuple[str, int]:
    """Decompress `tmp` fully; return (content sha256, content bytes) or raise MirrorFailure."""
    with open(tmp, "rb") as raw:
        head = raw.read(2)
    if head != b"\x1f\x8b":
        with open(tmp, "rb") as raw:
            preview = raw.read(40).decode("latin-1").replace("\n", " ").strip()
        raise MirrorFailure(f"body is not gzip (it starts with {preview!r})", FailureKind.PERMANENT)
    digest = hashlib.sha256()
    size = 0
    try:
        with gzip.open(tmp, "rb") as stream:
            while chunk := stream.read(CHUNK_BYTES):
                digest.update(chunk)
                size += len(chunk)
    except EOFError as exc:
        raise MirrorFailure(
            f"truncated gzip: the compressed stream ends early ({exc})", FailureKind.TRANSIENT
        ) from exc
    except (gzip.BadGzipFile, zlib.error, OSError) as exc:
        raise MirrorFailure(f"corrupt gzip: {exc}", FailureKind.PERMANENT) from exc
    content_sha256 = digest.hexdigest()
    if content_sha256 != pinned_sha256:
        raise MirrorFailure(
            f"content SHA-256 mismatch: got {content_sha256}, pinned {pinned_sha256}",
            FailureKind.PERMANENT,
        )
    return content_sha256, size


def _try_once(spec: FileSpec, url: str, target: Path, timeout_s: float) -> _Verified:
    """One try: stream, verify and rename into place, or raise MirrorFailure leaving nothing."""
    with atomic_path(target) as tmp:
        archive_sha256, archive_bytes = _stream_to(url, tmp, timeout_s, spec.name)
        content_sha256, content_bytes = _verify_gzip_content(tmp, spec.sha256)
    return _Verified(archive_sha256, archive_bytes, content_sha256, content_bytes)


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
            return _MirrorOutcome(reasons, verified=_try_once(spec, url, target, policy.timeout_s))
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
