"""The XLA engine: the captured step compiled ahead of time, once, for one device.

The eval forward and the optimizer-init programs are compiled in `prepare`, before training, so
that the training window holds exactly one compilation (the step, or K fused steps); carry buffers
are donated so weights and optimizer state stay in device memory between dispatches.
"""

from __future__ import annotations

import jax
import numpy as np

from gradlanes.engines.base import EngineUnavailable
from gradlanes.engines.gpu import gpu_unavailable_reason
from gradlanes.program.capture import CapturedProgram
from gradlanes.program.jaxcompat import ClosedJaxpr, jaxpr_as_fun


def find_device(kind: str) -> jax.Device:
    try:
        return jax.devices(kind)[0]
    except RuntimeError as error:
        present = {d.platform for d in jax.devices()}
        if kind == "gpu":  # the reason says whether the machine has a GPU and what to install
            raise EngineUnavailable(gpu_unavailable_reason(present)) from error
        raise EngineUnavailable(
            f"JAX sees no {kind.upper()} here (platforms present: {', '.join(sorted(present))}); a "
            f"{kind} lane runs only where jaxlib has that backend"
        ) from error


class XlaEngine:
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
        self._forward = self._compile(self.program.forward)
        leaves = [jax.device_put(p, self.device) for p in self.program.flatten_params(params)]
        state = self._compile(self.program.init_state)(*leaves)
        self._carry = leaves + list(state)

    def compile_step(self) -> None:
        carried = self.program.n_params + self.program.n_state
        program = self.program.fused if self.program.fused is not None else self.program.step
        self._step = self._compile(program, donate=tuple(range(carried)))

    def stage(self, images: np.ndarray, labels: np.ndarray) -> tuple[jax.Array, jax.Array]:
        return jax.device_put(images, self.device), jax.device_put(labels, self.device)

    def step(self, batch) -> list[float]:
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
