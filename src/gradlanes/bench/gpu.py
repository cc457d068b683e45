"""The benchmark's GPU rows: Tlaloc's step on a GPU, per dispatch and fused, against the GPU's limit.

`python -m gradlanes.bench.gpu --arrays ... --json ...` runs in a process of its own, as the CPU
workers do, because XLA reads its flags once per process: the rows run with the gpu lanes' own
deterministic flags (`gradlanes.engines.gpu`) and Tlaloc's pinned matmul precision (`highest`:
float32 products computed in float32). Where JAX sees no GPU the JSON says `skipped`, with the
reason, and `python -m gradlanes.bench` leaves the CPU benchmark's files and tables as they are.

Rows: `xla_gpu` (one dispatch per step, the loss read back each step as a lane does) and
`xla_gpu_fused` (all of a repetition's steps in one `lax.scan` dispatch), interleaved after an
excluded warm-up (`gradlanes.bench.protocol`). Each row gives compile seconds, step time, the
fraction of the GPU's limit and XLA's memory analysis of its program; the workload gives the
per-dispatch overhead (per-dispatch step time minus fused step time) and the process's peak
device memory over both rows (`memory_stats()['peak_bytes_in_use']`).

A step's limit is the slower of its arithmetic at the GPU's dense float32 rate and its traffic at
the GPU's memory bandwidth, the traffic being the least a step must move: every input of the step
program read once and every output written once (weights, Adam moments, the 4,096 images).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from gradlanes.bench.report import H200_BYTES_PER_S, H200_FP32_FLOPS

WORKLOAD = "tlaloc_gpu"
STEPS = 200  # per repetition: a fused dispatch of 200 steps runs for milliseconds, well past launch cost
REPS = 10


@dataclass(frozen=True)
class GpuLimit:
    """A GPU's published ceilings: what a step's time is set against."""

    name: str
    float32_flops: float  # dense float32 without tensor cores: the rate at matmul precision `highest`
    bytes_per_s: float  # memory bandwidth
    source: str


#: By `device_kind` as JAX reports it. Only datasheet figures; a GPU not listed gets no fraction.
GPU_LIMITS = {
    "NVIDIA H200": GpuLimit(
        "H200 SXM",
        H200_FP32_FLOPS,
        H200_BYTES_PER_S,
        "NVIDIA H200 datasheet (SXM): 67 TFLOP/s dense FP32, 4.8 TB/s HBM3e",
    ),
}


def limit_for(device_kind: str) -> GpuLimit | None:
    return GPU_LIMITS.get(device_kind)


def program_bytes(program) -> int:
    """Bytes a program must move at the least: each input read once, each output written once."""
    avals = [v.aval for v in (*program.jaxpr.invars, *program.jaxpr.outvars)]
    return sum(math.prod(aval.shape) * np.dtype(aval.dtype).itemsize for aval in avals)


def step_limit(flops: float, bytes_moved: float, limit: GpuLimit) -> dict:
    """The fastest a step can run on `limit`'s GPU, and which ceiling sets it."""
    if flops < 0 or bytes_moved < 0:
        raise ValueError(f"a step's FLOPs and bytes must be >= 0; got {flops} FLOPs and {bytes_moved} bytes")
    compute_us = flops / limit.float32_flops * 1e6
    memory_us = bytes_moved / limit.bytes_per_s * 1e6
    return {
        "compute_us": compute_us,
        "memory_us": memory_us,
        "limit_us": max(compute_us, memory_us),
        "bound": "compute" if compute_us >= memory_us else "memory",
    }


def fraction_of_limit(step_us: float, limit_us: float) -> float:
    """How close a measured step comes to the limit: 1 is the limit itself, 0.1 is ten times slower."""
    if not step_us > 0:
        raise ValueError(f"a measured step time must be > 0 µs; got {step_us}")
    return limit_us / step_us


def per_dispatch_overhead_us(per_dispatch_step_us: float, fused_step_us: float) -> float:
    """What one dispatch (launch, and reading the loss back) adds to a step that runs fused."""
    return per_dispatch_step_us - fused_step_us


def _memory_analysis(compiled) -> dict | None:
    """XLA's own account of a compiled program's device memory (arguments, outputs, temporaries)."""
    try:
        stats = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - a backend without the analysis reports none
        return None
    if stats is None:
        return None
    names = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "alias_size_in_bytes")
    return {name: int(getattr(stats, name)) for name in names if hasattr(stats, name)}


def _device_runner(base):
    """`XlaRunner` placed on one device explicitly, so the rows never depend on JAX's default device."""
    import jax

    from gradlanes.program.jaxcompat import jaxpr_as_fun

    class DeviceXlaRunner(base):
        def __init__(self, device, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.device = device

        def prepare(self) -> None:
            donate = tuple(range(self._carry_count))
            self._data_on_device = [jax.device_put(d, self.device) for d in self._data]
            carry = [jax.device_put(c, self.device) for c in self._initial]
            self.compiled = (
                jax.jit(jaxpr_as_fun(self._program), donate_argnums=donate)
                .lower(*carry, *self._data_on_device)
                .compile()
            )

        def reset(self) -> None:
            self._carry = [jax.device_put(np.array(c), self.device) for c in self._initial]

    return DeviceXlaRunner


def measure(images: np.ndarray, labels: np.ndarray, device, steps: int, reps: int, flags: str) -> dict:
    """Tlaloc's step on `device`, per dispatch and fused; the workload's JSON entry."""
    from gradlanes.bench import workloads as w
    from gradlanes.bench.protocol import interleaved
    from gradlanes.bench.worker import pair_ratios
    from gradlanes.experiment.models import init_params
    from gradlanes.experiment.spec import resolve
    from gradlanes.program.capture import capture, count_equations
    from gradlanes.program.interpreter import Interpreter

    exp = resolve(
        "bench", {**w.TLALOC_SETTINGS, "steps": steps, "fuse_steps": steps}, 0, w.bench_dataset(images)
    )
    program = capture(exp)
    leaves = program.flatten_params(init_params(exp.model, 0))
    carry = [*leaves, *Interpreter(program.init_state)(*leaves)]
    data = [images[:4096], labels[:4096].astype(np.int32)]
    runner = _device_runner(w.XlaRunner)
    runners = [
        runner(device, "xla_gpu", program.step, carry, data),
        runner(device, "xla_gpu_fused", program.step, carry, data, fused=program.fused, fused_steps=steps),
    ]
    rows = interleaved(runners, steps, reps)
    flops_analytic = w.tlaloc_flops(4096, images.shape[1], exp.model.hidden, 10)
    flops_xla = w._cost_flops(runners[0].compiled)
    bytes_per_step = program_bytes(program.step)
    limit = limit_for(device.device_kind)
    bound = step_limit(flops_xla or flops_analytic, bytes_per_step, limit) if limit else None
    summaries = []
    for row, run in zip(rows, runners, strict=True):
        summary = row.summary(steps)
        if summary["status"] == "ok":
            summary["fraction_of_limit"] = (
                fraction_of_limit(summary["step_us_median"], bound["limit_us"]) if bound else None
            )
            summary["device_memory"] = _memory_analysis(run.compiled)
        summaries.append(summary)
    per_step = {s["engine"]: s["step_us_median"] for s in summaries if s["status"] == "ok"}
    memory = device.memory_stats() or {}
    return {
        "workload": WORKLOAD,
        "status": "ok",
        "description": "Tlaloc's step on the GPU: MLP 784-128-10, MSE, Adam 5e-4, full batch of 4,096 images",
        "device": {
            "platform": device.platform,
            "device_kind": device.device_kind,
            "xla_flags": flags,
            "matmul_precision": exp.matmul_precision,
        },
        "dtype": "float32",
        "steps_per_rep": steps,
        "reps": reps,
        "images_per_step": 4096,
        "equations": count_equations(program.step.jaxpr),
        "flops_analytic": flops_analytic,
        "flops_xla": flops_xla,
        "bytes_per_step": bytes_per_step,
        "limit": {**asdict(limit), **bound} if limit else None,
        "limit_reason": None if limit else f"no published limit is recorded for {device.device_kind!r}",
        "rows": summaries,
        "ratios": pair_ratios(rows),
        "per_dispatch_overhead_us": (
            per_dispatch_overhead_us(per_step["xla_gpu"], per_step["xla_gpu_fused"])
            if len(per_step) == 2
            else None
        ),
        "device_memory": {
            key: int(memory[key])
            for key in ("peak_bytes_in_use", "bytes_in_use", "bytes_limit")
            if key in memory
        },
    }


def skipped(reason: str) -> dict:
    return {"workload": WORKLOAD, "status": "skipped", "reason": reason}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gradlanes.bench.gpu",
        description="The benchmark's GPU rows: Tlaloc's step per dispatch and fused (skipped without one).",
    )
    parser.add_argument("--arrays", required=True, help="the prepared MNIST array file")
    parser.add_argument("--json", required=True, help="where to write the rows")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"steps per repetition (default {STEPS})")
    parser.add_argument("--reps", type=int, default=REPS, help=f"timed repetitions (default {REPS})")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.reps < 1:
        parser.error(f"--steps and --reps must be >= 1; got {args.steps} and {args.reps}")

    from gradlanes.engines.gpu import gpu_unavailable_reason, use_deterministic_gpu_flags

    flags = use_deterministic_gpu_flags()  # before JAX starts XLA, as a gpu lane does
    import jax

    from gradlanes.data.dataset import load
    from gradlanes.environment import environment

    try:
        device = jax.devices("gpu")[0]
    except RuntimeError:
        result = skipped(gpu_unavailable_reason({d.platform for d in jax.devices()}))
    else:
        data = load(args.arrays, 4096, 1)
        result = measure(data.train_images, data.train_labels, device, args.steps, args.reps, flags)
        result["environment"] = environment()
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{WORKLOAD}: {result['status']}" + (f" ({result['reason']})" if "reason" in result else ""),
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
