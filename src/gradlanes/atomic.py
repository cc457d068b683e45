"""Atomic file writes: a reader (or a rerun) never sees a half-written file.

Every file gradlanes produces is written to a temporary name in the target folder and renamed
into place only when complete; on any error the temporary file is removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

TEMP_SUFFIX = ".part"


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `target`; rename it onto `target` if the block succeeds."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    os.chmod(tmp, 0o666 & ~_current_umask())  # mkstemp's 0600 would hide results from others
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_open(target: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """Open a temporary file beside `target` for writing; rename it into place on success."""
    with atomic_path(target) as tmp, open(tmp, mode, **kwargs) as handle:
        yield handle
        handle.flush()
        os.fsync(handle.fileno())


def write_json(target: str | os.PathLike, payload: Any) -> None:
    """Write `payload` as indented JSON, atomically, with a trailing newline."""
    with atomic_open(target, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=2, sort_keys=False)
        handle.write("\n")


def write_text(target: str | os.PathLike, text: str) -> None:
    with atomic_open(target, "w", encoding="utf-8") as handle:
        handle.write(text)


def remove_stale_parts(folder: str | os.PathLike, name: str) -> None:
    """Delete temporary files an interrupted writer of `name` may have left in `folder`."""
    folder = Path(folder)
    if folder.is_dir():
        for stale in folder.glob(f".{name}.*{TEMP_SUFFIX}"):
            stale.unlink(missing_ok=True)
