"""The benchmark workloads and, for each, one runner per engine starting from identical data.

Engines named with `--engine` (config `bench.engines`, e.g. iree) get rows on the lanes' own
workloads (Tlaloc's step and the softmax steps) through their plugin, as a lane runs them.

1. `tlaloc`: Tlaloc's step, MLP 784-128-10, MSE, Adam, a full batch of 4,096 MNIST images, float32.
2. `rusty_<in>x<out>_<dtype>`: Rusty's shapes, loss mean((relu(x W + b) - t)^2) with SGD, on
   integer-derived data divided by 8 (so every engine starts from exactly the same numbers).
3. `softmax_b<B>`: the softmax-regression step, hand kernel against the captured gradient.
4. `lenet_b<B>`: the cnn lanes' LeNet-5 step (convolutions, exact GELU, average pooling, Adam).

Engines: `xla` (one dispatch per step, the loss read back each step as the lanes do), `xla_fused`
(K steps in one `lax.scan` dispatch, one compilation), `interpreter`, `numpy` (hand-written
forward/backward) and `torch` (PyTorch eager on the CPU, when installed).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np

from gradlanes.bench import numpy_models as nm
from gradlanes.data.description import DatasetDescription
from gradlanes.engines import handkernel
from gradlanes.engines.base import EngineUnavailable
from gradlanes.engines.registry import get_engine
from gradlanes.experiment.models import init_params
from gradlanes.experiment.spec import resolve
from gradlanes.program.capture import capture, count_equations
from gradlanes.program.interpreter import Interpreter
from gradlanes.program.jaxcompat import ClosedJaxpr, jaxpr_as_fun


def bench_dataset(images: np.ndarray) -> DatasetDescription:
    """The benchmark's synthetic data as a dataset: its images are the whole training split."""
    return DatasetDescription("bench", 10, (images.shape[1],), len(images), 10000, {})


@dataclass
class Workload:
    name: str
    description: str
    dtype: str
    steps: int  # steps per timed repetition
    runners: list = field(default_factory=list)
    flops_analytic: float = 0.0  # per step
    flops_xla: float | None = None  # per step, from XLA's cost analysis
    equations: int = 0  # of the captured step, counted recursively
    images_per_step: int = 0


def _cost_flops(compiled) -> float | None:
    analysis = compiled.cost_analysis()
    if isinstance(analysis, (list, tuple)):
        analysis = analysis[0] if analysis else {}
    return float(analysis["flops"]) if analysis and "flops" in analysis else None


class XlaRunner:
    """The captured step compiled once; one dispatch per step, loss read back every step."""

    def __init__(
        self,
        name: str,
        step: ClosedJaxpr,
        carry: list,
        data: list,
        fused: ClosedJaxpr | None = None,
        fused_steps: int = 1,
    ):
        self.name, self._program, self._initial, self._data = name, fused or step, carry, data
        self._per_dispatch = fused_steps if fused is not None else 1
        self._carry_count = len(carry)
        self.compiled = None

    def prepare(self) -> None:
        donate = tuple(range(self._carry_count))
        self.compiled = (
            jax.jit(jaxpr_as_fun(self._program), donate_argnums=donate)
            .lower(*self._initial, *self._data)
            .compile()
        )
        self._data_on_device = [jax.device_put(d) for d in self._data]

    def reset(self) -> None:
        self._carry = [jax.device_put(np.array(c)) for c in self._initial]

    def run(self, steps: int) -> float:
        loss = None
        for _ in range(steps // self._per_dispatch):
            *self._carry, loss = self.compiled(*self._carry, *self._data_on_device)
            loss = np.asarray(loss)  # waits for the dispatch, as a training loop reading its loss must
        return float(np.atleast_1d(loss)[-1])


class InterpreterRunner:
    def __init__(self, step: ClosedJaxpr, carry: list, data: list):
        self.name, self._step, self._initial, self._data = "interpreter", step, carry, data

    def prepare(self) -> None:
        self._interpreter = Interpreter(self._step, "benchmark step")

    def reset(self) -> None:
        self._carry = [np.array(c) for c in self._initial]

    def run(self, steps: int) -> float:
        for _ in range(steps):
            *self._carry, loss = self._interpreter(*self._carry, *self._data)
        return float(loss)


class EngineRunner:
    """An installed engine (`gradlanes.engines`) driven through the `Engine` interface, as a lane drives it.

    Every step reuses one staged batch. With `fused`, the experiment's `fuse_steps` steps run per
    dispatch. An engine that cannot run here gives an 'unavailable' row with its reason.
    """

    def __init__(self, exp, params: dict, images: np.ndarray, labels: np.ndarray, suffix: str = ""):
        self.name = f"{exp.engine}{suffix}"
        self._exp, self._params, self._arrays = exp, params, (images, labels)
        self.unavailable = None
        try:
            self._engine = get_engine(exp.engine).create(exp, capture(exp))
        except EngineUnavailable as reason:
            self.unavailable = str(reason)

    def prepare(self) -> None:
        self._engine.prepare(self._params)
        self._engine.compile_step()
        self._batch = self._engine.stage(*self._arrays)

    def reset(self) -> None:
        self._engine.prepare(self._params)

    def run(self, steps: int) -> float:
        losses = [math.nan]
        for _ in range(steps // self._exp.fuse_steps):
            losses = self._engine.step(self._batch)
        return losses[-1]


def engine_runners(engines: list[str], settings: dict, images, labels, steps: int) -> list[EngineRunner]:
    """Per extra engine, a row stepping one batch (`images`, `labels`) per dispatch and a fused row."""
    return engine_runners_on(engines, settings, bench_dataset(images), images, labels, steps)


def engine_runners_on(engines: list[str], settings: dict, dataset, images, labels, steps: int) -> list:
    """`engine_runners` for a dataset description of its own (the conv net needs the image shape)."""
    same_batch = {**settings, "batch_size": "full", "train_images": len(images), "steps": steps}
    runners = []
    for engine in engines:
        for fuse, suffix in ((1, ""), (steps, "_fused")):
            exp = resolve("bench", {**same_batch, "engine": engine, "fuse_steps": fuse}, 0, dataset)
            runners.append(EngineRunner(exp, init_params(exp.model, 0), images, labels, suffix))
    return runners


class FunctionRunner:
    """A hand-written step function over a mutable state dict (NumPy or PyTorch)."""

    def __init__(self, name: str, make_state, step, unavailable: str | None = None):
        self.name, self._make_state, self._step, self.unavailable = name, make_state, step, unavailable

    def prepare(self) -> None:
        pass

    def reset(self) -> None:
        self._state = self._make_state()

    def run(self, steps: int) -> float:
        for _ in range(steps):
            loss = self._step(self._state)
        return float(loss)


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


TORCH_MISSING = "PyTorch is not installed (pip install -e '.[bench]' or pip install torch==2.13.0)"


def _torch_peer(build):
    """A PyTorch runner builder, called with the torch module; an 'unavailable' row without it."""

    @functools.wraps(build)
    def wrapper(*args):
        torch = _torch()
        if torch is None:
            return FunctionRunner("torch", None, None, unavailable=TORCH_MISSING)
        return build(torch, *args)

    return wrapper


def _xla_pair(program, carry, data, steps) -> tuple[XlaRunner, XlaRunner]:
    return (
        XlaRunner("xla", program.step, carry, data),
        XlaRunner("xla_fused", program.step, carry, data, fused=program.fused, fused_steps=steps),
    )


#: Tlaloc's experiment as the benchmark runs it (one full batch of 4,096 images); the CPU rows and
#: the GPU rows (`gradlanes.bench.gpu`) add `steps` and `fuse_steps`.
TLALOC_SETTINGS = {
    "engine": "xla",
    "model": "mlp",
    "hidden": 128,
    "init": "lecun_normal",
    "loss": "mse",
    "optimizer": "adam",
    "learning_rate": 5e-4,
    "batch_size": "full",
    "train_images": 4096,
}


def tlaloc_flops(batch: int, inputs: int, hidden: int, classes: int) -> int:
    """The MLP step's matmul FLOPs: forward, then the backward products (weight and hidden gradients)."""
    return 2 * batch * (inputs * hidden + hidden * classes) + 2 * batch * (
        hidden * classes + classes * hidden + inputs * hidden
    )


def tlaloc(
    images: np.ndarray, labels: np.ndarray, steps: int = 20, engines: tuple[str, ...] = ()
) -> Workload:
    settings = {**TLALOC_SETTINGS, "steps": steps, "fuse_steps": steps}
    exp = resolve("bench", settings, 0, bench_dataset(images))
    program = capture(exp)
    params = init_params(exp.model, 0)
    x, y = images[:4096], labels[:4096].astype(np.int32)
    leaves = program.flatten_params(params)
    state = Interpreter(program.init_state)(*leaves)
    carry, data = [*leaves, *state], [x, y]
    work = Workload(
        "tlaloc",
        "Tlaloc's step: MLP 784-128-10, MSE, Adam 5e-4, full batch of 4,096 images",
        "float32",
        steps,
        images_per_step=4096,
    )
    work.flops_analytic = tlaloc_flops(4096, images.shape[1], 128, 10)
    work.equations = count_equations(program.step.jaxpr)
    targets = nm.onehot(y, 10, np.float32)

    def numpy_state():
        fresh = {k: np.array(v) for k, v in params.items()}
        return {"params": fresh, "adam": nm.Adam(fresh, 5e-4)}

    def numpy_step(state):
        state["params"], loss = nm.mlp_mse_step(state["params"], state["adam"], x, targets)
        return loss

    work.runners = [
        *_xla_pair(program, carry, data, steps),
        InterpreterRunner(program.step, carry, data),
        FunctionRunner("numpy", numpy_state, numpy_step),
        _torch_mlp(params, x, targets),
        *engine_runners(list(engines), settings, x, y, steps),
    ]
    return work


@_torch_peer
def _torch_mlp(torch, params, x, targets):
    tx, tt = torch.from_numpy(x), torch.from_numpy(targets)

    def make_state():
        tensors = {k: torch.tensor(np.array(v), requires_grad=True) for k, v in params.items()}
        return {"p": tensors, "opt": torch.optim.Adam(tensors.values(), lr=5e-4, eps=1e-8)}

    def step(state):
        p, opt = state["p"], state["opt"]
        opt.zero_grad(set_to_none=True)
        out = torch.relu(tx @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
        loss = torch.mean((out - tt) ** 2)
        loss.backward()
        opt.step()
        return loss.item()

    return FunctionRunner("torch", make_state, step)


def rusty_data(batch: int, inputs: int, outputs: int, dtype: str) -> dict[str, np.ndarray]:
    """Integer-derived inputs, divided by 8: every engine starts from exactly these numbers."""
    i, j = np.indices((batch, inputs))
    x = (((i * 7 + j * 3) % 17) - 8) / 8
    k, m = np.indices((inputs, outputs))
    w = (((k * 5 + m * 11) % 13) - 6) / 8 / inputs
    b = ((np.arange(outputs) % 5) - 2) / 8
    r, s = np.indices((batch, outputs))
    t = (((r * 3 + s * 5) % 9) - 4) / 8
    return {name: value.astype(dtype) for name, value in {"x": x, "w": w, "b": b, "t": t}.items()}


def rusty(batch: int, inputs: int, outputs: int, steps: int, dtype: str, lr: float = 0.05) -> Workload:
    data = rusty_data(batch, inputs, outputs, dtype)
    x, t = data["x"], data["t"]

    def loss_of(w, b, x_, t_):
        return jnp.mean((jax.nn.relu(x_ @ w + b) - t_) ** 2)

    def step(w, b, x_, t_):
        loss, (gw, gb) = jax.value_and_grad(loss_of, argnums=(0, 1))(w, b, x_, t_)
        return w - lr * gw, b - lr * gb, loss

    def fused(w, b, x_, t_):
        def body(carry, _):
            w_, b_, loss = step(*carry, x_, t_)
            return (w_, b_), loss

        (w, b), losses = jax.lax.scan(body, (w, b), None, length=steps)
        return w, b, losses

    args = (data["w"], data["b"], x, t)
    step_program = jax.make_jaxpr(step)(*args)
    fused_program = jax.make_jaxpr(fused)(*args)
    carry, arrays = [data["w"], data["b"]], [x, t]
    work = Workload(
        f"rusty_{inputs}x{batch}_{dtype}",
        f"Rusty's shape {batch}x{inputs}->{outputs}: mean((relu(xW+b)-t)^2), SGD {lr}, {dtype}",
        dtype,
        steps,
        images_per_step=batch,
    )
    work.flops_analytic = 2 * batch * inputs * outputs * 2  # forward xW and backward x^T dz
    work.equations = count_equations(step_program.jaxpr)

    def numpy_state():
        return {"w": data["w"].copy(), "b": data["b"].copy()}

    def numpy_step(state):
        state["w"], state["b"], loss = nm.relu_mse_sgd_step(state["w"], state["b"], x, t, lr)
        return loss

    program = SimpleNamespace(step=step_program, fused=fused_program)
    work.runners = [
        *_xla_pair(program, carry, arrays, steps),
        InterpreterRunner(step_program, carry, arrays),
        FunctionRunner("numpy", numpy_state, numpy_step),
        _torch_rusty(data, lr),
    ]
    return work


@_torch_peer
def _torch_rusty(torch, data, lr):
    tx, tt = torch.from_numpy(data["x"]), torch.from_numpy(data["t"])

    def make_state():
        return {
            "w": torch.tensor(data["w"].copy(), requires_grad=True),
            "b": torch.tensor(data["b"].copy(), requires_grad=True),
        }

    def step(state):
        w, b = state["w"], state["b"]
        loss = torch.mean((torch.relu(tx @ w + b) - tt) ** 2)
        loss.backward()
        with torch.no_grad():
            w -= lr * w.grad
            b -= lr * b.grad
        w.grad = None
        b.grad = None
        return loss.item()

    return FunctionRunner("torch", make_state, step)


def softmax(
    images: np.ndarray, labels: np.ndarray, batch: int, steps: int, engines: tuple[str, ...] = ()
) -> Workload:
    settings = {
        "engine": "xla",
        "model": "softmax",
        "init": "zeros",
        "loss": "xent",
        "optimizer": "sgd",
        "learning_rate": 0.1,
        "batch_size": batch,
        "steps": steps,
        "fuse_steps": steps,
        "train_images": max(batch, 4096),
    }
    exp = resolve("bench", settings, 0, bench_dataset(images))
    program = capture(exp)
    # Every step reuses one batch, so that no engine pays for gathering or staging data.
    x, y = images[:batch], labels[:batch].astype(np.int32)
    params = init_params(exp.model, 0)
    carry, data = program.flatten_params(params), [x, y]
    fused_same_batch = capture(
        resolve(
            "bench",
            {**settings, "batch_size": "full", "train_images": batch},
            0,
            bench_dataset(images),
        )
    ).fused
    work = Workload(
        f"softmax_b{batch}",
        f"softmax regression step, xent, SGD 0.1, batch {batch}",
        "float32",
        steps,
        images_per_step=batch,
    )
    work.flops_analytic = 2 * batch * images.shape[1] * 10 * 2
    work.equations = count_equations(program.step.jaxpr)

    def kernel_state():
        return {"p": {k: np.array(v) for k, v in params.items()}}

    def kernel_step(state):
        state["p"], loss = handkernel.sgd_step(state["p"], x, y, 0.1)
        return loss

    same_batch = SimpleNamespace(step=program.step, fused=fused_same_batch)
    work.runners = [
        *_xla_pair(same_batch, carry, data, steps),
        InterpreterRunner(program.step, carry, data),
        FunctionRunner("numpy", kernel_state, kernel_step),
        _torch_softmax(params, x, y),
        *engine_runners(list(engines), settings, x, y, steps),
    ]
    return work


@_torch_peer
def _torch_softmax(torch, params, x, y):
    tx, ty = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))

    def make_state():
        return {k: torch.tensor(np.array(v), requires_grad=True) for k, v in params.items()}

    def step(state):
        loss = torch.nn.functional.cross_entropy(tx @ state["w"] + state["b"], ty)
        loss.backward()
        with torch.no_grad():
            for p in state.values():
                p -= 0.1 * p.grad
                p.grad = None
        return loss.item()

    return FunctionRunner("torch", make_state, step)


def lenet_flops(spec, batch: int) -> float:
    """Multiply-adds x 2 of LeNet-5's convolutions and dense layers, forward and backward.

    Forward, each layer's products; backward, its weight gradient and (but for C1, whose input is
    the data) its input gradient, each as many products as the forward.
    """
    shapes = spec.shapes()
    height, width = spec.image_shape
    kernel = shapes["w1"][0] * shapes["w1"][1]
    c1 = height * width * kernel * shapes["w1"][3]  # SAME: every pixel
    side = (height // 2 - shapes["w2"][0] + 1, width // 2 - shapes["w2"][1] + 1)
    c3 = side[0] * side[1] * kernel * shapes["w2"][2] * shapes["w2"][3]
    dense = [math.prod(shapes[name]) for name in ("w3", "w4", "w5")]
    forward = c1 + c3 + sum(dense)
    return 2 * batch * (forward + forward + (forward - c1))


def lenet(images: np.ndarray, labels: np.ndarray, batch: int, steps: int, engines: tuple[str, ...] = ()):
    """LeNet-5's step (the cnn lanes' program): conv, GELU, average pooling, Adam, on one batch."""
    settings = {
        "engine": "xla",
        "model": "cnn",
        "init": "lecun_normal",
        "loss": "xent",
        "optimizer": "adam",
        "learning_rate": 2e-3,
        "batch_size": "full",
        "steps": steps,
        "fuse_steps": steps,
        "train_images": batch,
    }
    side = math.isqrt(images.shape[1])
    dataset = DatasetDescription("bench", 10, (side, side), len(images), 10000, {})
    exp = resolve("bench", settings, 0, dataset)
    program = capture(exp)
    params = init_params(exp.model, 0)
    x, y = images[:batch], labels[:batch].astype(np.int32)
    leaves = program.flatten_params(params)
    carry, data = [*leaves, *Interpreter(program.init_state)(*leaves)], [x, y]
    work = Workload(
        f"lenet_b{batch}",
        f"LeNet-5 step (the cnn lanes): 5x5 convs, exact GELU, average pooling, xent, Adam, batch {batch}",
        "float32",
        steps,
        images_per_step=batch,
    )
    work.flops_analytic = lenet_flops(exp.model, batch)
    work.equations = count_equations(program.step.jaxpr)
    work.runners = [
        *_xla_pair(program, carry, data, steps),
        InterpreterRunner(program.step, carry, data),
        _torch_lenet(params, x, y, side),
        *engine_runners_on(list(engines), settings, dataset, x, y, steps),
    ]
    return work


@_torch_peer
def _torch_lenet(torch, params, x, y, side):
    """The same LeNet-5 in PyTorch eager (NCHW; kernels transposed from HWIO), Adam 2e-3."""
    functional = torch.nn.functional
    tx, ty = torch.from_numpy(x).reshape(-1, 1, side, side), torch.from_numpy(y.astype(np.int64))

    def make_state():
        tensors = {}
        for name, value in params.items():
            value = np.array(value)
            if value.ndim == 4:  # HWIO -> OIHW
                value = value.transpose(3, 2, 0, 1).copy()
            tensors[name] = torch.tensor(value, requires_grad=True)
        return {"p": tensors, "opt": torch.optim.Adam(tensors.values(), lr=2e-3, eps=1e-8)}

    def step(state):
        p, opt = state["p"], state["opt"]
        opt.zero_grad(set_to_none=True)
        h = functional.avg_pool2d(functional.gelu(functional.conv2d(tx, p["w1"], p["b1"], padding=2)), 2)
        h = functional.avg_pool2d(functional.gelu(functional.conv2d(h, p["w2"], p["b2"])), 2)
        h = h.permute(0, 2, 3, 1).reshape(h.shape[0], -1)  # NHWC flattening, as the captured model
        h = functional.gelu(functional.gelu(h @ p["w3"] + p["b3"]) @ p["w4"] + p["b4"])
        loss = functional.cross_entropy(h @ p["w5"] + p["b5"], ty)
        loss.backward()
        opt.step()
        return loss.item()

    return FunctionRunner("torch", make_state, step)


def xla_flops(work: Workload) -> None:
    """XLA's own count of the per-step program's FLOPs, next to the analytic count."""
    runner = next(r for r in work.runners if r.name == "xla")
    if runner.compiled is not None:
        work.flops_xla = _cost_flops(runner.compiled)
