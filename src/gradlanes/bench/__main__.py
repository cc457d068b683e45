"""`python -m gradlanes.bench`: run the workers at each thread count, write the records and bench.md."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gradlanes.atomic import write_json, write_text
from gradlanes.bench.report import markdown
from gradlanes.bench.worker import thread_env
from gradlanes.environment import environment, usable_cores


def snakemake_timing(directory: Path) -> dict:
    """How long snakemake takes to plan when everything is up to date (the bench itself excluded)."""
    binary = str(Path(sys.executable).parent / "snakemake")
    timings = {}
    for key, args in (("dry_run_s", ["-n"]), ("up_to_date_s", ["--cores", "all"])):
        started = time.perf_counter()
        done = subprocess.run([binary, *args, "--nolock"], cwd=directory, capture_output=True, text=True)
        timings[key] = time.perf_counter() - started
        timings[key.replace("_s", "_nothing_to_do")] = "Nothing to be done" in done.stdout + done.stderr
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gradlanes.bench")
    parser.add_argument("--arrays", required=True, help="the prepared MNIST array file")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--markdown", required=True)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--snakemake-dir", help="time snakemake's planning in this folder")
    parser.add_argument("--engine", action="append", default=[], help="an installed engine to add rows for")
    args = parser.parse_args(argv)

    by_threads = {}
    for threads in sorted({1, usable_cores()}):
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "worker.json"
            command = [
                sys.executable,
                "-m",
                "gradlanes.bench.worker",
                "--threads",
                str(threads),
                "--arrays",
                args.arrays,
                "--reps",
                str(args.reps),
                "--json",
                str(out),
            ]
            if args.quick:
                command.append("--quick")
            for engine in args.engine:
                command += ["--engine", engine]
            # JAX_PLATFORMS=cpu: on a machine with a GPU the CPU rows must still run on the CPU.
            env = {**os.environ, **thread_env(threads), "JAX_PLATFORMS": "cpu"}
            subprocess.run(command, env=env, check=True)
            by_threads[threads] = json.loads(out.read_text())
    snakemake = snakemake_timing(Path(args.snakemake_dir)) if args.snakemake_dir else None
    env = environment()
    names = [w["name"] for w in by_threads[min(by_threads)]["workloads"]]
    for name in names:
        write_json(
            Path(args.out_dir) / f"{name}.json",
            {
                "workload": name,
                "environment": env,
                "by_threads": {
                    str(t): {
                        "limits": run["limits"],
                        "tlaloc_shape_limit": run["tlaloc_shape_limit"],
                        "cores": run["cores"],
                        "torch": run["torch"],
                        **next(w for w in run["workloads"] if w["name"] == name),
                    }
                    for t, run in by_threads.items()
                },
            },
        )
    if snakemake:
        write_json(Path(args.out_dir) / "snakemake.json", {"environment": env, **snakemake})
    gpu = gpu_rows(args.arrays, args.quick)
    # Written either way, as a skipped lane writes its record: without a GPU it says why.
    write_json(Path(args.out_dir) / f"{gpu['workload']}.json", {"environment": env, **gpu})
    write_text(args.markdown, markdown(by_threads, env, snakemake, gpu if gpu["status"] == "ok" else None))
    return 0


def gpu_rows(arrays: str, quick: bool) -> dict:
    """The GPU rows, run in their own process (`gradlanes.bench.gpu`); status `skipped` and the
    reason without a GPU."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "gpu.json"
        command = [sys.executable, "-m", "gradlanes.bench.gpu", "--arrays", arrays, "--json", str(out)]
        if quick:
            command += ["--steps", "20", "--reps", "2"]
        subprocess.run(command, check=True)
        result = json.loads(out.read_text())
    if result["status"] != "ok":
        print(f"GPU rows skipped: {result['reason']}", file=sys.stderr)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
