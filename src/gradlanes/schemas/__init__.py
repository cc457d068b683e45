"""The JSON schemas of the config and of result records, shipped inside the package so that an
installed (non-editable) gradlanes validates a record without the repository beside it."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

CONFIG = "config.schema.yaml"
RECORD = "record.schema.json"


def schema_path(name: str) -> Path:
    """The file of one schema (`CONFIG` or `RECORD`) as installed with the package."""
    return Path(str(resources.files(__name__).joinpath(name)))
