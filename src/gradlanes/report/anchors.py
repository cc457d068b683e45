"""Published anchors: the prior art's own figures, set beside our comparable lane in the summary.

Which lane each anchor is compared with is configuration, not code, so the anchors live in
`anchors.yaml`, shipped inside the package (read through importlib.resources, so an installed
gradlanes finds it too). Entries are checked as they are read: a typo fails naming the entry and
the key instead of surfacing later as a KeyError in the middle of the summary.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from importlib import resources

import yaml

NoneType = type(None)


class AnchorError(ValueError):
    """anchors.yaml does not say what the summary needs; the message names the entry and key."""


@dataclass(frozen=True)
class Anchor:
    """One published result, quoted as published (their hardware, not ours)."""

    source: str
    experiment: str
    train_images: int
    test_images: int
    wall_s: float | None  # None: not published
    accuracy: float  # percent of `test_images`
    ours: str  # the lane it is compared with
    steps: int | None = None  # the published training length: steps, or else epochs
    epochs: float | None = None

    @property
    def length(self) -> str:
        return f"{self.steps:,}" if self.steps else f"{self.epochs:g} epochs"


#: The types each key may hold; a missing optional key is None.
_KINDS: dict[str, tuple[type, ...]] = {
    "source": (str,),
    "experiment": (str,),
    "train_images": (int,),
    "test_images": (int,),
    "wall_s": (int, float, NoneType),
    "accuracy": (int, float),
    "ours": (str,),
    "steps": (int, NoneType),
    "epochs": (int, float, NoneType),
}
_REQUIRED = [f.name for f in fields(Anchor) if f.name not in ("steps", "epochs")]


def load_anchors() -> list[Anchor]:
    """The anchors shipped with gradlanes, checked."""
    text = (resources.files("gradlanes.report") / "anchors.yaml").read_text(encoding="utf-8")
    return parse_anchors(text, origin="gradlanes/report/anchors.yaml")


def parse_anchors(text: str, origin: str = "anchors") -> list[Anchor]:
    """Anchors from YAML text: a list of mappings with the keys of `Anchor`."""
    entries = yaml.safe_load(text)
    if not isinstance(entries, list):
        raise AnchorError(f"{origin}: expected a list of anchors, found {type(entries).__name__}")
    return [_anchor(entry, f"{origin}: anchor {number}") for number, entry in enumerate(entries, 1)]


def _anchor(entry: object, where: str) -> Anchor:
    if not isinstance(entry, dict):
        raise AnchorError(f"{where}: expected a mapping of keys, found {type(entry).__name__}")
    if isinstance(entry.get("source"), str):
        where += f" ({entry['source']!r})"
    for key in _REQUIRED:
        if key not in entry:
            raise AnchorError(f"{where}: missing key {key!r}")
    for key, value in entry.items():
        if key not in _KINDS:
            raise AnchorError(f"{where}: unknown key {key!r}; known keys: {', '.join(_KINDS)}")
        if isinstance(value, bool) or not isinstance(value, _KINDS[key]):
            kinds = " or ".join("null" if k is NoneType else k.__name__ for k in _KINDS[key])
            raise AnchorError(f"{where}: key {key!r} must be {kinds}, not {value!r}")
    if (entry.get("steps") is None) == (entry.get("epochs") is None):
        raise AnchorError(f"{where}: give the published length as exactly one of 'steps' and 'epochs'")
    return Anchor(**entry)
