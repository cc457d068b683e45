"""The training loop every engine shares: batches, timing, evaluation, the step/loss log, NaN stops.

The loop is engine-agnostic: it hands staged batches to `engine.step` and reads back the loss, so
what differs between lanes is only the engine. Per-step time covers staging the batch (host to
device for XLA), the step itself and reading the loss back; evaluation is timed apart.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from gradlanes.data.dataset import Dataset
from gradlanes.engines.compiles import compile_window, total_compiles
from gradlanes.experiment.batching import batch_order, eval_blocks
from gradlanes.experiment.losses import loss_numpy
from gradlanes.experiment.spec import Experiment
from gradlanes.joblog import UserFacingError

log = logging.getLogger(__name__)


class TrainingDiverged(UserFacingError):
    def __init__(self, lane: str, seed: int, step: int, loss: float, last_finite: float | None):
        self.step, self.loss = step, loss
        super().__init__(
            f"lane {lane!r} seed {seed}: the loss became {loss} at step {step} "
            f"(last finite loss {last_finite}); no result is recorded as a success. "
            f"Lower lanes.{lane}.learning_rate or check the inputs."
        )


@dataclass
class TrainResult:
    losses: list[float] = field(default_factory=list)
    step_seconds: list[float] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    params: dict | None = None
    logits: np.ndarray | None = None
    compile_s: float = 0.0
    train_compiles: int = 0
    total_compiles: int = 0
    train_s: float = 0.0
    eval_s: float = 0.0

    @property
    def predictions(self) -> np.ndarray:
        return self.logits.argmax(axis=1)


def _evaluate(engine, staged_test, data: Dataset, exp: Experiment, step: int, result: TrainResult) -> dict:
    started = time.perf_counter()
    logits = np.concatenate([engine.logits(block) for block in staged_test])[: len(data.test_labels)]
    result.eval_s += time.perf_counter() - started
    correct = int((logits.argmax(axis=1) == data.test_labels).sum())
    entry = {
        "step": step,
        "epoch": step / exp.steps_per_epoch,
        "test_loss": loss_numpy(exp.loss, logits, data.test_labels),
        "test_correct": correct,
        "test_accuracy": correct / len(data.test_labels),
    }
    result.evals.append(entry)
    result.logits = logits
    return entry


def train(exp: Experiment, engine, initial_params: dict, data: Dataset) -> TrainResult:
    """Train `engine` from `initial_params` for `exp.steps` steps; evaluate on the test split."""
    result = TrainResult()
    engine.prepare(initial_params)
    staged_test = [engine.stage(*block)[0] for block in eval_blocks(data.test_images, data.test_labels)]
    full_batch = engine.stage(data.train_images, data.train_labels) if exp.full_batch else None
    log_every = max(1, math.ceil(exp.steps / exp.log_rows))
    log.info(
        "lane %s seed %d: %d steps of %d images on %s (%s)",
        exp.lane,
        exp.seed,
        exp.steps,
        exp.batch_size,
        exp.engine,
        engine.device_kind,
    )
    log.info("%8s %14s %10s", "step", "loss", "elapsed_s")
    bar = tqdm(total=exp.steps, desc=exp.lane, unit="step", disable=not sys.stderr.isatty(), leave=False)
    _evaluate(engine, staged_test, data, exp, 0, result)
    fuse = exp.fuse_steps
    order = batch_order(exp.seed, exp.train_images, exp.batch_size, exp.steps)
    with compile_window() as window:
        started = time.perf_counter()
        engine.compile_step()
        result.compile_s = time.perf_counter() - started
        loop_started = time.perf_counter()
        for first in range(1, exp.steps + 1, fuse):
            chunk = [next(order) for _ in range(fuse)]
            t0 = time.perf_counter()
            if full_batch is not None:
                batch = full_batch
            else:
                indices = chunk[0] if fuse == 1 else np.stack(chunk)
                batch = engine.stage(*data.train_batch(indices))
            losses = engine.step(batch)
            per_step = (time.perf_counter() - t0) / fuse  # a fused dispatch is shared by its K steps
            for step, loss in enumerate(losses, first):
                result.step_seconds.append(per_step)
                if not math.isfinite(loss):
                    raise TrainingDiverged(
                        exp.lane, exp.seed, step, loss, result.losses[-1] if result.losses else None
                    )
                result.losses.append(loss)
                if step % log_every == 0 or step in (1, exp.steps):
                    log.info("%8d %14.6f %10.2f", step, loss, time.perf_counter() - loop_started)
                    bar.set_postfix(loss=f"{loss:.4f}")
            bar.update(fuse)
            last = first + fuse - 1
            if last // exp.eval_every > (first - 1) // exp.eval_every or last == exp.steps:
                entry = _evaluate(engine, staged_test, data, exp, last, result)
                log.info(
                    "%8d test loss %.6f accuracy %d / %d",
                    last,
                    entry["test_loss"],
                    entry["test_correct"],
                    len(data.test_labels),
                )
    bar.close()
    result.train_s = float(sum(result.step_seconds))
    result.train_compiles = window.count
    result.total_compiles = total_compiles()
    result.params = engine.params()
    return result
