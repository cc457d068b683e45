"""Optimizers and learning-rate schedules, built with optax so the update is traced with the step.

The schedule reads the step count from the optimizer state, which is a program input, so a
cosine-decayed run still uses one captured program for every step.
"""

from __future__ import annotations

import optax

OPTIMIZERS = ("sgd", "adam")
SCHEDULES = ("constant", "cosine")


def make_optimizer(name: str, learning_rate: float, schedule: str, total_steps: int):
    if schedule == "constant":
        rate = learning_rate
    elif schedule == "cosine":
        rate = optax.cosine_decay_schedule(learning_rate, decay_steps=max(1, total_steps))
    else:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    if name == "sgd":
        return optax.sgd(rate)
    if name == "adam":
        return optax.adam(rate)
    raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
