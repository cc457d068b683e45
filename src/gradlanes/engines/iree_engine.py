"""The IREE engine: the captured program, as exported StableHLO, on a second and independent compiler.

IREE (`iree-base-compiler`, `iree-base-runtime`) compiles the `jax.export` StableHLO of each
program, the very bytes committed under `results/<experiment>/programs/`, for the host CPU (`llvm-cpu`,
`--iree-llvmcpu-target-cpu=host`) and runs it with its own runtime: no XLA anywhere in training.
Weights and optimizer state stay in IREE buffers between steps. Every IREE compilation is counted
with XLA's (`engines.compiles.count_compile`), so the record's compile count means the same thing.
Where IREE is not installed, the lane is skipped with the command that installs it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradlanes.engines.base import EngineUnavailable
from gradlanes.engines.compiles import count_compile
from gradlanes.environment import cpu_model
from gradlanes.program.artifact import ProgramArtifact, deserialize
from gradlanes.program.capture import CapturedProgram

BACKEND = "llvm-cpu"
COMPILE_FLAGS = ["--iree-llvmcpu-target-cpu=host"]


def _iree():
    try:
        import iree.compiler
        import iree.runtime
    except ImportError as missing:
        raise EngineUnavailable(
            f"IREE is not installed here ({missing}); `make install` installs iree-base-compiler and "
            "iree-base-runtime from requirements.lock"
        ) from missing
    return iree.compiler, iree.runtime


def _results(value: Any) -> list:
    """IREE returns a function's results as a tuple, one result bare, and no result as None."""
    if value is None:  # e.g. plain SGD's optimizer init, whose state is empty
        return []
    return list(value) if isinstance(value, (tuple, list)) else [value]


class IreeEngine:
    platform = "iree-llvm-cpu"

    def __init__(self, program: CapturedProgram):
        self._compiler, self._runtime = _iree()
        self.program = program
        self.artifact = program.artifact or ProgramArtifact.build(program, "unnamed")
        self.device_kind = cpu_model()
        self.dispatches = 0
        self._config = self._runtime.Config("local-task")
        self._context = self._runtime.SystemContext(config=self._config)
        self._functions: dict[str, Any] = {}
        self._step: Any = None
        self._carry: list = []

    def _function(self, name: str):
        """Program `name` compiled by IREE from its exported StableHLO (module `jit_<name>`)."""
        if name not in self._functions:
            module = deserialize(self.artifact.export(name)).mlir_module()
            binary = self._compiler.compile_str(
                module, target_backends=[BACKEND], input_type="stablehlo", extra_args=COMPILE_FLAGS
            )
            count_compile()
            vm_module = self._runtime.VmModule.copy_buffer(self._context.instance, binary)
            self._context.add_vm_module(vm_module)
            self._functions[name] = self._context.modules[f"jit_{name}"]["main"]
        return self._functions[name]

    def _put(self, array: np.ndarray):
        return self._runtime.asdevicearray(self._config.device, np.ascontiguousarray(array))

    def prepare(self, params: dict) -> None:
        self._function("forward")
        leaves = [self._put(np.asarray(p, np.float32)) for p in self.program.flatten_params(params)]
        self._carry = leaves + _results(self._function("init_state")(*leaves))

    def compile_step(self) -> None:
        self._step = self._function("fused" if self.program.fused is not None else "step")

    def stage(self, images: np.ndarray, labels: np.ndarray):
        return self._put(images), self._put(labels)

    def step(self, batch) -> list[float]:
        *carry, loss = _results(self._step(*self._carry, *batch))
        self._carry = carry
        self.dispatches += 1
        return np.atleast_1d(loss.to_host()).astype(float).tolist()

    def logits(self, images) -> np.ndarray:
        self.dispatches += 1
        (logits,) = _results(self._function("forward")(*self._carry[: self.program.n_params], images))
        return np.asarray(logits.to_host())

    def params(self) -> dict[str, np.ndarray]:
        leaves = [np.array(leaf.to_host()) for leaf in self._carry[: self.program.n_params]]
        return self.program.unflatten_params(leaves)

    def loss_and_grad(self, params: dict, images: np.ndarray, labels: np.ndarray):
        args = [self._put(np.asarray(a)) for a in (*self.program.flatten_params(params), images, labels)]
        loss, *grads = _results(self._function("gradient")(*args))
        return float(loss.to_host()), self.program.unflatten_params([np.array(g.to_host()) for g in grads])
