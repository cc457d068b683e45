"""Per-job logging for Snakemake scripts: one log file per job, plain errors for known failures.

A job's log file gets everything; the terminal gets the same lines. Errors gradlanes raises on
purpose (bad data, no reachable mirror, a diverged run) are printed as their message alone, since
the message already says what is wrong and what to do; anything else keeps its traceback.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class UserFacingError(Exception):
    """Base for failures whose message is the whole story (no traceback needed)."""


@contextlib.contextmanager
def job_logging(
    log_path: str | Path | None, expected: tuple[type[BaseException], ...] = ()
) -> Iterator[logging.Logger]:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_path, mode="w", encoding="utf-8"))
    logging.basicConfig(level=logging.INFO, format=FORMAT, handlers=handlers, force=True)
    logger = logging.getLogger("gradlanes")
    try:
        yield logger
    except (UserFacingError, *expected) as error:
        logger.error("%s", error)
        raise SystemExit(1) from None
    except BaseException:
        logger.exception("unexpected failure")
        raise
    finally:
        logging.shutdown()
