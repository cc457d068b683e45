"""What one file's download may cost in disk and in time, derived from its pinned content size.

Why: the pinned SHA-256 decides what is trusted, but only once the last byte is in. Before that a
bad mirror can stream without end (filling the disk) or trickle a byte at a time (holding the DAG
forever under a per-read timeout). Both are bounded from what the config already pins:

* Disk: an archive may hold at most `archive_limit(content)` bytes. A deflate encoder never needs
  more than the content plus 5 bytes per 65,535-byte stored block (zlib's `deflateBound`); one
  that codes every byte as a fixed-Huffman literal without falling back to stored blocks needs
  9 bits a byte, content * 9/8 (RFC 1951, 3.2.6). The bound takes the latter, plus 1 MiB for gzip
  headers (a file name, a comment, an extra field of up to 64 KiB) and the 18-byte wrapper of each
  of several members. MNIST's largest file, 47,040,016 bytes of content (9.9 MB as an archive),
  may therefore take at most 53,968,594 bytes on disk.
* Time: after a grace period (the per-read timeout, which also bounds connecting), a mirror must
  keep an average of at least the configured rate: by `elapsed` seconds it owes
  `(elapsed - grace) * rate` bytes. The file's deadline follows, `grace + size / rate`, but a
  mirror falling behind is stopped at the first read that shows it, without waiting for it.
"""

from __future__ import annotations

from dataclasses import dataclass

#: gzip's headers and member wrappers beyond the deflate data (see the module docstring).
GZIP_OVERHEAD_BYTES = 1 << 20
KIB = 1024


def archive_limit(content_bytes: int) -> int:
    """The most bytes an archive of `content_bytes` of content may have."""
    return content_bytes + content_bytes // 8 + GZIP_OVERHEAD_BYTES


@dataclass(frozen=True)
class RateFloor:
    """The slowest a mirror may be: `min_rate_kib_s` on average once `grace_s` has passed."""

    min_rate_kib_s: float
    grace_s: float

    def owed(self, elapsed_s: float) -> float:
        """The bytes a mirror at exactly the floor rate would have sent by `elapsed_s`."""
        return max(0.0, elapsed_s - self.grace_s) * self.min_rate_kib_s * KIB

    def deadline_s(self, size_bytes: int) -> float:
        """The seconds a file of `size_bytes` may take at the floor rate."""
        return self.grace_s + size_bytes / (self.min_rate_kib_s * KIB)

    def too_slow(self, received: int, elapsed_s: float) -> str | None:
        """Why a mirror that sent `received` bytes in `elapsed_s` is too slow, or None."""
        if received >= self.owed(elapsed_s):
            return None
        rate = received / KIB / elapsed_s
        return (
            f"too slow: {received:,} bytes in {elapsed_s:.1f} s ({rate:.3g} KiB/s), below "
            f"download.min_rate_kib_s = {self.min_rate_kib_s:g} after the first {self.grace_s:g} s"
        )
