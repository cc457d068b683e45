"""Fetch dataset archives from an ordered list of mirrors and trust only verified content.

Each file is streamed to a temporary name in the target folder, decompressed to check that it is
a whole gzip stream, hashed, compared with the pinned SHA-256 of its decompressed content and only
then renamed into place. A mirror that fails (connection error, timeout, HTTP error, a body that is
not gzip, a truncated stream, a checksum mismatch) hands over to the next one; when every mirror
fails, one `DownloadError` explains each attempt and how to fetch the files by hand.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class FileSpec:
    """One file of a dataset: its role, remote name and the SHA-256 of its decompressed content."""

    role: str
    name: str
    sha256: str


@dataclass(frozen=True)
class FetchPolicy:
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


class MirrorFailure(Exception):
    """One attempt at one mirror failed; `transient` says whether retrying that mirror may help."""

    def __init__(self, reason: str, transient: bool):
        super().__init__(reason)
        self.reason = reason
        self.transient = transient


class DownloadError(RuntimeError):
    """No mirror served a verified copy of one or more files."""


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


def _describe_os_error(exc: BaseException, timeout_s: float) -> MirrorFailure:
    if isinstance(exc, urllib.error.HTTPError):
        return MirrorFailure(f"HTTP {exc.code} {exc.reason}", transient=exc.code >= 500)
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return MirrorFailure(f"no answer within the {timeout_s:g} s timeout", transient=True)
    if isinstance(reason, FileNotFoundError):
        return MirrorFailure(f"no such file: {reason.filename}", transient=False)
    if isinstance(exc, http.client.IncompleteRead):
        return MirrorFailure(f"connection closed after {len(exc.partial)} bytes of the body", transient=True)
    return MirrorFailure(f"connection failed: {reason}", transient=True)


def _stream_to(url: str, tmp: Path, timeout_s: float, label: str) -> tuple[str, int]:
    """Copy `url` into `tmp`; return (sha256 of the archive, bytes received)."""
    digest = hashlib.sha256()
    received = 0
    try:
        source, expected = _open_source(url, timeout_s)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise _describe_os_error(exc, timeout_s) from exc
    show_bar = sys.stderr.isatty()
    with (
        source,
        open(tmp, "wb") as sink,
        tqdm(total=expected, unit="B", unit_scale=True, desc=label, disable=not show_bar, leave=False) as bar,
    ):
        try:
            while chunk := source.read(CHUNK_BYTES):
                sink.write(chunk)
                digest.update(chunk)
                received += len(chunk)
                bar.update(len(chunk))
        except (OSError, http.client.HTTPException) as exc:
            raise _describe_os_error(exc, timeout_s) from exc
    if expected is not None and received != expected:
        raise MirrorFailure(f"body ended after {received} of {expected} announced bytes", transient=True)
    return digest.hexdigest(), received


def _verify_gzip_content(tmp: Path, pinned_sha256: str) -> tuple[str, int]:
    """Decompress `tmp` fully; return (content sha256, content bytes) or raise MirrorFailure."""
    with open(tmp, "rb") as raw:
        head = raw.read(2)
    if head != b"\x1f\x8b":
        with open(tmp, "rb") as raw:
            preview = raw.read(40).decode("latin-1").replace("\n", " ").strip()
        raise MirrorFailure(f"body is not gzip (it starts with {preview!r})", transient=False)
    digest = hashlib.sha256()
    size = 0
    try:
        with gzip.open(tmp, "rb") as stream:
            while chunk := stream.read(CHUNK_BYTES):
                digest.update(chunk)
                size += len(chunk)
    except EOFError as exc:
        raise MirrorFailure(
            f"truncated gzip: the compressed stream ends early ({exc})", transient=True
        ) from exc
    except (gzip.BadGzipFile, zlib.error, OSError) as exc:
        raise MirrorFailure(f"corrupt gzip: {exc}", transient=False) from exc
    content_sha256 = digest.hexdigest()
    if content_sha256 != pinned_sha256:
        raise MirrorFailure(
            f"content SHA-256 mismatch: got {content_sha256}, pinned {pinned_sha256}",
            transient=False,
        )
    return content_sha256, size


def fetch_file(
    spec: FileSpec,
    mirrors: Sequence[str],
    dest_dir: str | os.PathLike,
    policy: FetchPolicy = FetchPolicy(),
    sleep: Callable[[float], None] = time.sleep,
) -> FetchedFile | list[tuple[str, list[str]]]:
    """Fetch one file from the first mirror that serves verified content.

    Returns the `FetchedFile`, or, when every mirror failed, the list of (mirror, attempt reasons).
    """
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_parts(dest_dir, spec.name)
    target = dest_dir / spec.name
    failures: list[tuple[str, list[str]]] = []
    for mirror in mirrors:
        url = mirror_url(mirror, spec.name)
        reasons: list[str] = []
        for attempt in range(1, policy.retries + 1):
            try:
                with atomic_path(target) as tmp:
                    archive_sha256, archive_bytes = _stream_to(url, tmp, policy.timeout_s, spec.name)
                    content_sha256, content_bytes = _verify_gzip_content(tmp, spec.sha256)
            except MirrorFailure as failure:
                reasons.append(f"attempt {attempt}: {failure.reason}")
                log.warning("%s from %s: %s", spec.name, mirror, failure.reason)
                if not failure.transient or attempt == policy.retries:
                    break
                sleep(policy.backoff_s * 2 ** (attempt - 1))
                continue
            log.info("%s verified from %s (%d bytes)", spec.name, mirror, archive_bytes)
            return FetchedFile(
                role=spec.role,
                name=spec.name,
                path=str(target),
                mirror=mirror,
                url=url,
                archive_sha256=archive_sha256,
                archive_bytes=archive_bytes,
                content_sha256=content_sha256,
                content_bytes=content_bytes,
                attempts=[f"{m}: {'; '.join(r)}" for m, r in failures],
            )
        failures.append((mirror, reasons))
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
    for spec in specs:
        result = fetch_file(spec, mirrors, dest_dir, policy, sleep)
        if isinstance(result, FetchedFile):
            fetched.append(result)
        else:
            failed[spec.name] = result
    if failed:
        for item in fetched:  # a partial set is useless to the next rule; leave nothing behind
            Path(item.path).unlink(missing_ok=True)
        raise DownloadError(failure_message(dataset, failed, specs, mirrors))
    return fetched
