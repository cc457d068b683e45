"""The host interpreter engine: the captured programs evaluated equation by equation in NumPy.

No compiler at all; building the `Interpreter`s walks every program and rejects unsupported
primitives before the first step (`gradlanes.program.interpreter`). With `fuse_steps: K` the step
is the captured `lax.scan` of K steps, run by the interpreter's scan rule: one dispatch, K losses.
"""

from __future__ import annotations

import numpy as np

from gradlanes.environment import cpu_model
from gradlanes.program.capture import CapturedProgram
from gradlanes.program.interpreter import Interpreter


class InterpreterEngine:
    platform = "numpy"

    def __init__(self, program: CapturedProgram):
        self.program = program
        self.device_kind = cpu_model()
        self.dispatches = 0
        self._step = Interpreter(program.step, "step program")
        self._fused = Interpreter(program.fused, "fused-step program") if program.fused is not None else None
        self._forward = Interpreter(program.forward, "forward program")
        self._init_state = Interpreter(program.init_state, "optimizer-init program")
        self._gradient: Interpreter | None = None
        self._carry: list[np.ndarray] = []

    def prepare(self, params: dict) -> None:
        leaves = [np.array(p, dtype=np.float32) for p in self.program.flatten_params(params)]
        self._carry = leaves + self._init_state(*leaves)

    def compile_step(self) -> None:
        """Nothing to compile: the plans were built with the interpreters."""

    def stage(self, images: np.ndarray, labels: np.ndarray):
        return images, labels

    def step(self, batch) -> list[float]:
        *carry, losses = (self._fused or self._step)(*self._carry, *batch)
        self._carry = carry
        return np.atleast_1d(losses).tolist()

    def logits(self, images) -> np.ndarray:
        (logits,) = self._forward(*self._carry[: self.program.n_params], images)
        return logits

    def params(self) -> dict[str, np.ndarray]:
        return self.program.unflatten_params(self._carry[: self.program.n_params])

    def loss_and_grad(self, params: dict, images: np.ndarray, labels: np.ndarray):
        if self._gradient is None:
            self._gradient = Interpreter(self.program.gradient, "gradient program")
        loss, *grads = self._gradient(*self.program.flatten_params(params), images, labels)
        return float(loss), self.program.unflatten_params(grads)
