"""Check a gzip archive while it arrives: its content's SHA-256 and size, never more than pinned.

Why here and not after the download: a mirror can send a small archive that inflates without end
(a gzip bomb), or a stream that is not deflate at all. Decompressing each chunk as it is written
finds both at once, and the pinned content size caps the work: decompression stops one chunk past
it. Only the content's digest and size are kept; the content itself is never stored.

The archive is read as Python's `gzip` module reads one: one or more members back to back, zero
bytes allowed between and after them, each member's CRC-32 and length checked by zlib.
"""

from __future__ import annotations

import hashlib
import zlib

GZIP_MAGIC = b"\x1f\x8b"
# zlib's window bits for a gzip wrapper: zlib reads the header and checks the CRC-32 and length
GZIP_WBITS = 16 + zlib.MAX_WBITS
#: Decompressed bytes produced per zlib call: memory stays bounded whatever the ratio.
OUTPUT_STEP = 1 << 20
PREVIEW_BYTES = 40


class GzipProblem(Exception):
    """The archive is not the pinned content: `reason` says how, for the user."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class NotGzip(GzipProblem):
    """The body does not start with gzip's magic bytes (an HTML page, a plain file)."""


class CorruptGzip(GzipProblem):
    """The bytes after the header are not a valid deflate stream, or a member's check failed."""


class TruncatedGzip(GzipProblem):
    """The archive ended inside a member."""


class InflatesPastPin(GzipProblem):
    """The content is already longer than the pinned size: a gzip bomb, or another file."""


class ContentMismatch(GzipProblem):
    """A whole archive whose content is not the pinned content."""


class GzipContent:
    """Feed an archive's bytes in order; `finish` says whether its content is the pinned one."""

    def __init__(self, pinned_sha256: str, pinned_bytes: int):
        self.pinned_sha256 = pinned_sha256
        self.pinned_bytes = pinned_bytes
        self.digest = hashlib.sha256()
        self.content_bytes = 0
        self.head = b""  # the first bytes, kept to show what a body that is not gzip starts with
        self._member = None  # the member being inflated; None between members

    def feed(self, chunk: bytes) -> None:
        if len(self.head) < PREVIEW_BYTES:
            self.head += chunk[: PREVIEW_BYTES - len(self.head)]
        if not self.head.startswith(GZIP_MAGIC[: len(self.head)]):
            if len(self.head) == PREVIEW_BYTES:
                raise NotGzip(self._not_gzip())
            return  # not gzip: only the preview is still being collected
        pending = chunk
        while pending:
            if self._member is None:
                pending = pending.lstrip(b"\x00")  # padding between members, as gzip allows
                if not pending:
                    return
                if not pending.startswith(GZIP_MAGIC[: len(pending)]):
                    raise CorruptGzip(
                        "corrupt gzip: what follows a member is neither another member nor zero "
                        f"padding (it starts with {pending[:8]!r})"
                    )
                self._member = zlib.decompressobj(GZIP_WBITS)
            pending = self._inflate(pending)

    def _inflate(self, data: bytes) -> bytes:
        """Decompress `data` into the current member; return what follows the member's end."""
        member = self._member
        while data:
            try:
                out = member.decompress(data, OUTPUT_STEP)
            except zlib.error as exc:
                raise CorruptGzip(f"corrupt gzip: {exc}") from exc
            self._take(out)
            if member.eof:
                self._member = None
                return member.unused_data
            data = member.unconsumed_tail
        return b""

    def _take(self, out: bytes) -> None:
        self.content_bytes += len(out)
        if self.content_bytes > self.pinned_bytes:
            raise InflatesPastPin(
                f"the content inflates past its pinned {self.pinned_bytes:,} bytes "
                f"({self.content_bytes:,} so far): a gzip bomb, or another file"
            )
        self.digest.update(out)

    def _not_gzip(self) -> str:
        if not self.head:
            return "body is not gzip (it is empty)"
        preview = self.head.decode("latin-1").replace("\n", " ").strip(" ")
        return f"body is not gzip (it starts with {preview!r})"

    def finish(self) -> tuple[str, int]:
        """(content SHA-256, content bytes) of a whole archive that holds the pinned content."""
        if not self.head.startswith(GZIP_MAGIC):
            raise NotGzip(self._not_gzip())
        if self._member is not None:
            raise TruncatedGzip(
                f"truncated gzip: the compressed stream ends early, after {self.content_bytes:,} "
                "bytes of content"
            )
        content_sha256 = self.digest.hexdigest()
        if content_sha256 != self.pinned_sha256 or self.content_bytes != self.pinned_bytes:
            raise ContentMismatch(
                f"content SHA-256 mismatch: got {content_sha256} ({self.content_bytes:,} bytes), "
                f"pinned {self.pinned_sha256} ({self.pinned_bytes:,} bytes)"
            )
        return content_sha256, self.content_bytes
