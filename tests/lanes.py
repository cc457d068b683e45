"""Lane settings for tests: small enough to train in seconds, with one setting changed at a time."""

from __future__ import annotations


def small_lane(**overrides) -> dict:
    """Lane settings small enough for unit tests (seconds, not minutes)."""
    settings = {
        "engine": "xla",
        "device": "cpu",
        "model": "mlp",
        "hidden": 32,
        "init": "lecun_normal",
        "loss": "xent",
        "optimizer": "adam",
        "learning_rate": 1e-3,
        "schedule": "constant",
        "batch_size": 64,
        "steps": 12,
        "train_images": 512,
        "test_images": 200,
        "eval_every": 4,
        "log_rows": 4,
    }
    settings.update(overrides)
    return settings
