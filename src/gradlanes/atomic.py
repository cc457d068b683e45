"""Atomic file writes: a reader (or a rerun) never sees a half-written file.

Every file gradlanes produces is written to a temporary name in the target folder and renamed
into place only when complete; on any error the temporary file is removed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
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


RENAME_EXCHANGE = 2  # linux/fs.h
AT_FDCWD = -100


def _renameat2_exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step with Linux renameat2(RENAME_EXCHANGE); False where unsupported."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    error = ctypes.get_errno()
    if error in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):  # old kernel or filesystem without it
        return False
    raise OSError(error, os.strerror(error), str(a), None, str(b))


def replace_folder(staged: str | os.PathLike, target: str | os.PathLike) -> None:
    """Put the complete folder `staged` at `target`, replacing what was there, as one step.

    On Linux the two folders are exchanged atomically and the old one deleted: a reader sees the
    old folder or the new one, never a mix or nothing. Elsewhere the old folder is renamed aside
    first; a kill between the two renames leaves it at `<target>.replaced`, and
    `recover_folder` puts it back.
    """
    staged, target = Path(staged), Path(target)
    if not target.exists():
        os.replace(staged, target)
        return
    if _renameat2_exchange(staged, target):
        shutil.rmtree(staged)  # now holds the old folder
        return
    aside = aside_path(target)
    shutil.rmtree(aside, ignore_errors=True)
    os.replace(target, aside)
    os.replace(staged, target)
    shutil.rmtree(aside)


def aside_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.replaced")


def recover_folder(target: str | os.PathLike) -> bool:
    """Restore `target` from its aside copy if a replace was killed between its renames."""
    target = Path(target)
    aside = aside_path(target)
    if aside.exists() and not target.exists():
        os.replace(aside, target)
        return True
    shutil.rmtree(aside, ignore_errors=True)
    return False
