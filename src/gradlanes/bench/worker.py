"""One benchmark process at one thread count: every workload, every engine, interleaved.

Thread counts must be fixed before NumPy, XLA or PyTorch start their pools, so the orchestrator
starts this module in a fresh process with the environment already set (see `thread_env`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys


def thread_env(threads: int) -> dict[str, str]:
    """Environment pinning BLAS, OpenMP and XLA:CPU to `threads` threads."""
    env = {name: str(threads) for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    flags = os.environ.get("XLA_FLAGS", "")
    if threads == 1:
        flags += " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    env["XLA_FLAGS"] = flags.strip()
    return env


def pair_ratios(rows: list) -> list[dict]:
    """A/B for every pair of engines, from repetitions that ran back to back (median of per-rep ratios)."""
    import numpy as np

    ok = [r for r in rows if not r.error]
    ratios = []
    for a, b in itertools.permutations(ok, 2):
        per_rep = np.asarray(a.times_s) / np.asarray(b.times_s)
        ratios.append(
            {
                "a": a.engine,
                "b": b.engine,
                "ratio_median": float(np.median(per_rep)),
                "ratio_min": float(per_rep.min()),
                "ratio_max": float(per_rep.max()),
            }
        )
    return ratios


def run_workload(work, reps: int, threads: int) -> dict:
    """Time one workload's runners, interleaved; its JSON entry, and a line on stderr."""
    import numpy as np

    from gradlanes.bench import workloads as w
    from gradlanes.bench.protocol import interleaved

    rows = interleaved(work.runners, work.steps, reps)
    w.xla_flops(work)
    print(
        f"threads={threads} {work.name}: "
        + ", ".join(
            f"{r.engine} {np.median(r.times_s) / work.steps * 1e6:.1f} us" for r in rows if not r.error
        ),
        file=sys.stderr,
        flush=True,
    )
    return {
        "name": work.name,
        "description": work.description,
        "dtype": work.dtype,
        "steps_per_rep": work.steps,
        "images_per_step": work.images_per_step,
        "flops_analytic": work.flops_analytic,
        "flops_xla": work.flops_xla,
        "equations": work.equations,
        "rows": [row.summary(work.steps) for row in rows],
        "ratios": pair_ratios(rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--arrays", required=True)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="few steps per rep (tests)")
    parser.add_argument("--json", required=True)
    parser.add_argument("--engine", action="append", default=[], help="an installed engine to add rows for")
    args = parser.parse_args(argv)
    engines = tuple(args.engine)

    from gradlanes.bench.protocol import pin_to_cores

    cores = pin_to_cores(args.threads)  # before any library starts a thread pool
    import jax

    jax.config.update("jax_enable_x64", True)  # float64 rows; float32 data stays float32

    from gradlanes.bench import workloads as w
    from gradlanes.bench.protocol import matmul_limit
    from gradlanes.data.dataset import load

    torch = w._torch()
    if torch is not None:
        torch.set_num_threads(args.threads)
    data = load(args.arrays, 4096, 1)
    images, labels = data.train_images, data.train_labels
    scale = 10 if args.quick else 1
    builders = [
        lambda: w.tlaloc(images, labels, steps=max(2, 20 // scale), engines=engines),
        lambda: w.rusty(8, 16, 8, 1000 // scale, "float64"),
        lambda: w.rusty(8, 16, 8, 1000 // scale, "float32"),
        lambda: w.rusty(64, 256, 64, 100 // scale, "float64"),
        lambda: w.rusty(64, 256, 64, 100 // scale, "float32"),
        lambda: w.softmax(images, labels, 32, 1000 // scale, engines=engines),
        lambda: w.softmax(images, labels, 4096, 20 // scale, engines=engines),
        lambda: w.lenet(images, labels, 128, max(2, 20 // scale), engines=engines),
    ]
    result = {
        "threads": args.threads,
        "torch": None if torch is None else torch.__version__,
        "cores": cores,
        "limits": {
            dtype: matmul_limit(dtype, size=1024 if args.quick else 2048) for dtype in ("float32", "float64")
        },
        # NumPy on Tlaloc's own product (4,096x784 by 784x128): what a BLAS reaches on that shape.
        "tlaloc_shape_limit": matmul_limit("float32", shape=(4096, 784, 128)),
        "workloads": [],
    }
    for build in builders:
        result["workloads"].append(run_workload(build(), args.reps, args.threads))
    with open(args.json, "w") as handle:
        json.dump(result, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
