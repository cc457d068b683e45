"""The engines a lane can run on, behind one small interface the training loop drives.

- `XlaEngine` compiles the captured step ahead of time, once, for one device, and dispatches it
  once per step; the eval forward and the optimizer-init programs are compiled before training so
  that the training window holds exactly one compilation.
- `InterpreterEngine` evaluates the same captured programs equation by equation in NumPy.
- `HandKernelEngine` runs the softmax-regression kernels of `gradlanes.engines.handkernel` (no program).

Each keeps its own weights and optimizer state between steps, in its own memory (device buffers
for XLA, NumPy arrays otherwise); `params()` brings them back to the host.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from gradlanes.engines import handkernel
from gradlanes.environment import cpu_model
from gradlanes.program.capture import CapturedProgram
from gradlanes.program.interpreter import Interpreter
from gradlanes.program.jaxcompat import ClosedJaxpr, jaxpr_as_fun


class DeviceUnavailable(RuntimeError):
    """The requested device kind is not visible to JAX on this machine."""


def find_device(kind: str) -> jax.Device:
    try:
        return jax.devices(kind)[0]
    except RuntimeError as error:
        raise DeviceUnavailable(
            f"JAX sees no {kind.upper()} here (platforms present: "
            f"{', '.join(sorted({d.platform for d in jax.devices()}))}); a {kind} lane runs only "
            "where jaxlib has that backend"
        ) from error


class XlaEngine:
    kind = "xla"

    def __init__(self, program: CapturedProgram, device: jax.Device):
        self.program = program
        self.device = device
        self.platform = device.platform
        self.device_kind = device.device_kind
        self.dispatches = 0
        self._sharding = jax.sharding.SingleDeviceSharding(device)
        self._step = None
        self._forward = None
        self._gradient = None
        self._carry: list[jax.Array] = []

    def _compile(self, program: ClosedJaxpr, donate: tuple[int, ...] = ()):
        specs = [
            jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype, sharding=self._sharding)
            for v in program.jaxpr.invars
        ]
        return jax.jit(jaxpr_as_fun(program), donate_argnums=donate).lower(*specs).compile()

    def prepare(self, params: dict) -> None:
        """Compile eval and init programs, place weights and optimizer state on the device."""
        self._forward = self._compile(self.program.forward)
        leaves = [jax.device_put(p, self.device) for p in self.program.flatten_params(params)]
        state = self._compile(self.program.init_state)(*leaves)
        self._carry = leaves + list(state)

    def compile_step(self) -> None:
        """The one compilation of the training step (or of K fused steps); carry buffers are donated."""
        carried = self.program.n_params + self.program.n_state
        program = self.program.fused if self.program.fused is not None else self.program.step
        self._step = self._compile(program, donate=tuple(range(carried)))

    def stage(self, images: np.ndarray, labels: np.ndarray) -> tuple[jax.Array, jax.Array]:
        return jax.device_put(images, self.device), jax.device_put(labels, self.device)

    def step(self, batch) -> list[float]:
        """One dispatch: one step, or K fused steps; returns the loss of each step."""
        *carry, loss = self._step(*self._carry, *batch)
        self._carry = carry
        self.dispatches += 1
        return np.atleast_1d(np.asarray(loss)).tolist()

    def logits(self, images) -> np.ndarray:
        self.dispatches += 1
        (logits,) = self._forward(*self._carry[: self.program.n_params], images)
        return np.asarray(logits)

    def params(self) -> dict[str, np.ndarray]:
        leaves = [np.asarray(leaf) for leaf in self._carry[: self.program.n_params]]
        return self.program.unflatten_params(leaves)

    def loss_and_grad(self, params: dict, images: np.ndarray, labels: np.ndarray):
        if self._gradient is None:
            self._gradient = self._compile(self.program.gradient)
        args = [
            jax.device_put(a, self.device) for a in (*self.program.flatten_params(params), images, labels)
        ]
        loss, *grads = self._gradient(*args)
        return float(loss), self.program.unflatten_params([np.asarray(g) for g in grads])


class InterpreterEngine:
    kind = "interpreter"
    platform = "numpy"

    def __init__(self, program: CapturedProgram):
        self.program = program
        self.device_kind = cpu_model()
        self.dispatches = 0
        # Building the interpreters walks every program and rejects unsupported primitives now.
        self._step = Interpreter(program.step, "step program")
        self._forward = Interpreter(program.forward, "forward program")
        self._init_state = Interpreter(program.init_state, "optimizer-init program")
        self._gradient: Interpreter | None = None
        self._carry: list[np.ndarray] = []

    def prepare(self, params: dict) -> None:
        leaves = [np.array(p, dtype=np.float32) for p in self.program.flatten_params(params)]
        self._carry = leaves + self._init_state(*leaves)

    def compile_step(self) -> None:
        """Nothing to compile: the plan was built with the interpreter."""

    def stage(self, images: np.ndarray, labels: np.ndarray):
        return images, labels

    def step(self, batch) -> list[float]:
        *carry, loss = self._step(*self._carry, *batch)
        self._carry = carry
        return [float(loss)]

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


class HandKernelEngine:
    kind = "handkernel"
    platform = "numpy"

    def __init__(self, learning_rate: float):
        self.learning_rate = learning_rate
        self.device_kind = cpu_model()
        self.dispatches = 0
        self._params: dict[str, np.ndarray] = {}

    def prepare(self, params: dict) -> None:
        self._params = {k: np.array(v, dtype=np.float32) for k, v in params.items()}

    def compile_step(self) -> None:
        """Nothing to compile."""

    def stage(self, images: np.ndarray, labels: np.ndarray):
        return images, labels

    def step(self, batch) -> list[float]:
        self._params, loss = handkernel.sgd_step(self._params, *batch, self.learning_rate)
        return [float(loss)]

    def logits(self, images) -> np.ndarray:
        return handkernel.linear_forward(images, self._params["w"], self._params["b"])

    def params(self) -> dict[str, np.ndarray]:
        return dict(self._params)

    def loss_and_grad(self, params: dict, images: np.ndarray, labels: np.ndarray):
        loss, grads = handkernel.loss_and_grad(params, images, labels)
        return float(loss), grads


def make_engine(engine: str, device: str, program: CapturedProgram | None, learning_rate: float) -> Any:
    if engine == "xla":
        return XlaEngine(program, find_device(device))
    if engine == "interpreter":
        return InterpreterEngine(program)
    if engine == "handkernel":
        return HandKernelEngine(learning_rate)
    raise ValueError(f"unknown engine {engine!r}; choose one of xla, interpreter, handkernel")
