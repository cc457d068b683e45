"""The contract between the training loop and an engine, and how an engine describes itself.

An engine is anything that can train one captured program (or, like the hand kernels, the same
model without one): the loop calls the `Engine` methods and nothing else. Each engine module
exports an `EnginePlugin` that says what the engine can run, so the config check, the lane code
and the agreement code ask the plugin instead of comparing engine names. Engines are found through
the `gradlanes.engines` entry-point group (`gradlanes.engines.registry`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:  # the experiment and program modules import JAX; a plugin description must not
    from gradlanes.experiment.spec import Experiment
    from gradlanes.program.capture import CapturedProgram

Params = dict[str, np.ndarray]


class EngineUnavailable(RuntimeError):
    """The engine cannot run on this machine (no GPU, no runtime); the lane is skipped with this reason."""


class Engine(Protocol):
    """What the training loop and the agreement checks call. State stays in the engine's memory."""

    platform: str  # what ran: an XLA platform ("cpu", "gpu"), "numpy", "iree-llvm-cpu", ...
    device_kind: str  # the device that ran, e.g. a CPU model name or "NVIDIA H200"
    dispatches: int  # executions of compiled programs (0 for engines that compile nothing)

    def prepare(self, params: Params) -> None:
        """Take the initial weights, build the optimizer state; compile what is not the train step."""

    def compile_step(self) -> None:
        """Compile the train step (or K fused steps): the one compilation inside the timed window."""

    def stage(self, images: np.ndarray, labels: np.ndarray) -> Any:
        """Move a batch where `step` and `logits` read it (device memory for an accelerator)."""

    def step(self, batch: Any) -> list[float]:
        """Run one dispatch of the train step on a staged batch; the loss of each step it ran."""

    def logits(self, images: Any) -> np.ndarray:
        """The model's outputs for staged test images, at the current weights."""

    def params(self) -> Params:
        """The current weights, on the host."""

    def loss_and_grad(self, params: Params, images: np.ndarray, labels: np.ndarray) -> tuple[float, Params]:
        """The objective and its gradient at `params` (for the agreement checks; not timed)."""


#: How a plugin builds its engine for one lane and seed.
Factory = Callable[["Experiment", "CapturedProgram | None"], Engine]


@dataclass(frozen=True)
class EnginePlugin:
    """An engine as the rest of gradlanes sees it: a name, what it can run, and a factory."""

    name: str
    summary: str  # one line, logged when a lane starts on the engine
    create: Factory  # (experiment, captured program or None) -> Engine; may raise EngineUnavailable
    runs_program: bool = True  # False: implements the model itself and needs no captured program
    compiles: bool = False  # True: compiles the step, once, inside the training window, and dispatches it
    devices: tuple[str, ...] = ("cpu",)
    matmul_precisions: tuple[str, ...] = ("highest",)
    fuses_steps: bool = False  # can run `fuse_steps` K steps per dispatch
    implements_only: Mapping[str, Any] = field(default_factory=dict)  # setting -> the one value it runs

    def settings_errors(self, lane: str, settings: Mapping[str, Any]) -> list[str]:
        """Why this engine cannot run a lane's (schema-valid) settings, one line each."""
        problems = [
            f"'lanes.{lane}.{key}' is {settings.get(key)!r}, but engine {self.name!r} implements only "
            f"{key} {value!r}"
            for key, value in self.implements_only.items()
            if settings.get(key, value) != value
        ]
        device = settings.get("device", "cpu")
        if device not in self.devices:
            problems.append(
                f"'lanes.{lane}.device' is {device!r}, but engine {self.name!r} runs on "
                f"{' or '.join(map(repr, self.devices))}"
            )
        precision = settings.get("matmul_precision", "highest")
        if precision not in self.matmul_precisions:
            problems.append(
                f"'lanes.{lane}.matmul_precision' {precision} is not offered by engine {self.name!r} "
                f"(it computes float32 products at {', '.join(self.matmul_precisions)})"
            )
        if settings.get("fuse_steps", 1) != 1 and not self.fuses_steps:
            problems.append(
                f"'lanes.{lane}.fuse_steps' needs an engine that fuses steps; {self.name!r} does not"
            )
        return problems
