"""The trained-model file a lane leaves in `resources/models/<lane>/seed-<n>.npz`, and its one reader.

Weights as `param/<name>` arrays, the test-set predictions, and the lane's status (a skipped lane
writes a file too, so the DAG's outputs exist). The agreement checks, the figures and the CLI read
it through `load_model`; the initial weights are read through `load_initial_params`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gradlanes.atomic import atomic_path


@dataclass(frozen=True)
class TrainedModel:
    status: str  # "ok" or "skipped"
    params: dict[str, np.ndarray]
    predictions: np.ndarray | None  # test-set classes, in test order


def save_model(path: Path, params: dict, predictions: np.ndarray | None, status: str) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            arrays = {f"param/{k}": v for k, v in (params or {}).items()}
            if predictions is not None:
                arrays["predictions"] = predictions.astype(np.int16)
            np.savez(handle, status=np.array(status), **arrays)


def load_model(path: Path) -> TrainedModel:
    with np.load(path) as stored:
        params = {k.removeprefix("param/"): stored[k] for k in stored.files if k.startswith("param/")}
        predictions = stored["predictions"] if "predictions" in stored.files else None
        return TrainedModel(str(stored["status"]), params, predictions)


def load_initial_params(path: Path) -> dict[str, np.ndarray]:
    """The seed's initial weights, as `init_weights` wrote them (shared by every lane of a model)."""
    with np.load(path) as stored:
        return {name: stored[name] for name in stored.files}
