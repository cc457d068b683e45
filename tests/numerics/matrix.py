"""`make test-numerics`: the numerics-sensitive tests and the CI-subset DAG under every kernel choice.

For each cell of `cells.all_cells()` this CPU can run (OpenBLAS core type x XLA ISA cap x threads),
in a fresh work folder: fingerprint the float32 product each library computes (so the report shows
how many different kernels were really exercised), run the tests marked `numerics`, and run the
CI-subset DAG through its agreement rule. Then write `results/checks/numerics.md` (and `.json`):
per cell, per check, the largest measured value as a fraction of its bound, and the SHA-256 of
every file the matrix measures (`sources.py`), so that a test can tell when it is out of date.
Exits non-zero if any cell failed; cells the CPU cannot run are listed with the reason.

Cells run side by side where their cores allow: each is pinned to cores of its own (two one-thread
cells on a two-core machine at once), so none shares a core with another while it computes.

`--cover` (`make test-numerics-ci`, CI): fingerprint every cell this CPU can run, then run only a
covering set (`cover.py`): every NumPy and XLA result computed here at least once, and every cell
whose result the committed record does not hold. Writes `.numerics/cover.md`; the record stays.
With `--default-tested` (CI, after `make test` passed) the results of this machine's default
kernels count as run: `make test` ran the same tests and the subset DAG's agreement under them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from cells import Cell, all_cells, cpu_flags, split_runnable
from cover import Cover, covering_cells
from sources import NUMERICS_TEST_FILES, combined_digest, source_digests

from gradlanes.layout import work

REPO = Path(__file__).resolve().parents[2]
PYTHON = Path(sys.executable)
SNAKEMAKE = PYTHON.parent / "snakemake"
SUBSET = REPO / ".test" / "config.yaml"
SUBSET_WORK = work("mnist")  # the CI subset's experiment (its dataset's name)
SHARED_MNIST = REPO.parent / "shared" / "datasets" / "mnist"

FINGERPRINT = """
import hashlib, numpy as np, jax, jax.numpy as jnp
rng = np.random.default_rng(0)
a = rng.standard_normal((256, 784), dtype=np.float32); b = rng.standard_normal((784, 128), dtype=np.float32)
n = hashlib.sha256((a @ b).tobytes()).hexdigest()[:12]
fused = jax.jit(lambda a, b: (a @ b, jnp.exp(a) * a + a))(a, b)  # a product; exp and a multiply-add
x = hashlib.sha256(b"".join(np.asarray(part).tobytes() for part in fused)).hexdigest()[:12]
print(n, x)
"""


def run(cell: Cell, cores: tuple[int, ...], argv: list[str], cwd: Path, log: Path, timeout: float = 900):
    with open(log, "a") as handle:
        handle.write(f"$ {' '.join(argv)}\n")
        handle.flush()
        process = subprocess.run(
            cell.command(argv, cores),
            cwd=cwd,
            env=cell.env(),
            stdout=handle,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
    return process.returncode


def _results(argv: list[str], env: dict[str, str]) -> tuple[str | None, str | None]:
    printed = subprocess.run(argv, env=env, capture_output=True, text=True).stdout.split()
    return (printed[0] if printed else None, printed[1] if len(printed) > 1 else None)


def fingerprint(cell: Cell, cores: tuple[int, ...]) -> tuple[str | None, str | None]:
    """The cell's NumPy and XLA results (`FINGERPRINT`), None where the probe failed."""
    return _results(cell.command([str(PYTHON), "-c", FINGERPRINT], cores), cell.env())


def default_fingerprint() -> tuple[str | None, str | None]:
    """The NumPy and XLA results under this machine's own kernels: no core type forced, no ISA
    cap, every core (what `make test` runs under)."""
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    flags = env.get("XLA_FLAGS", "").split()
    env["XLA_FLAGS"] = " ".join(flag for flag in flags if not flag.startswith("--xla_cpu_max_isa"))
    return _results([str(PYTHON), "-c", FINGERPRINT], env)


def on_free_cores(cells: list[Cell], work: Callable[[Cell, tuple[int, ...]], object]) -> dict[Cell, object]:
    """`work(cell, cores)` for every cell, as many at once as this process's cores hold.

    Each cell gets `threads` cores no other running cell has; the cells start in the given order
    (a cell that does not fit yet waits, and so do the cells after it, so the order is kept).
    """
    free = sorted(os.sched_getaffinity(0))
    lock = threading.Condition()
    results: dict[Cell, object] = {}
    errors: list[BaseException] = []

    def run_one(cell: Cell, cores: tuple[int, ...]) -> None:
        try:
            results[cell] = work(cell, cores)
        except BaseException as error:  # re-raised in the caller
            errors.append(error)
        finally:
            with lock:
                free.extend(cores)
                free.sort()
                lock.notify_all()

    workers = []
    for cell in cells:
        with lock:
            if cell.threads > len(os.sched_getaffinity(0)):
                raise ValueError(f"cell {cell.name} needs {cell.threads} cores; this process has fewer")
            lock.wait_for(lambda cell=cell: len(free) >= cell.threads or errors)
            if errors:
                break
            cores = tuple(free[: cell.threads])
            del free[: cell.threads]
        worker = threading.Thread(target=run_one, args=(cell, cores))
        worker.start()
        workers.append(worker)
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]
    return results


def agreement_report(workdir: Path, experiment: str = "mnist") -> dict | None:
    """The report the agreement rule wrote, or the one it logged before failing."""
    path = workdir / work(experiment).agreement
    if path.is_file():
        return json.loads(path.read_text())
    log = workdir / "logs" / experiment / "agreement.log"
    if log.is_file():
        text = log.read_text()
        if "agreement report:\n" in text:
            body = text.split("agreement report:\n", 1)[1]
            return json.JSONDecoder().raw_decode(body)[0]
    return None


def lane_accuracies(workdir: Path, experiment: str = "mnist", seed: int = 0) -> dict[str, float | None]:
    """Each CI-subset lane's test accuracy (percent) on `seed` in this cell: the CI floors' data.

    None for a lane that did not run here (skipped, failed, or the DAG stopped before it).
    """
    import yaml

    lanes = yaml.safe_load(SUBSET.read_text())["lanes"]
    found = {}
    for lane in lanes:
        path = workdir / work(experiment).record(lane, seed)
        record = json.loads(path.read_text()) if path.is_file() else {}
        found[lane] = record.get("accuracy", {}).get("percent") if record.get("status") == "ok" else None
    return found


def worst_by_kind(report: dict) -> dict[str, dict]:
    """Per check kind (step0_grad, final_loss_rel, ...): the check that used most of its bound."""
    worst: dict[str, dict] = {}
    for check in report["checks"]:
        if check["fraction_of_bound"] is None:
            continue
        kind = check["name"].rsplit("/", 1)[-1]
        if kind not in worst or check["fraction_of_bound"] > worst[kind]["fraction_of_bound"]:
            worst[kind] = {k: check[k] for k in ("name", "measured", "bound", "fraction_of_bound", "status")}
    return worst


def prepare_data(workdir: Path, mirror: str, log: Path) -> Path:
    base = workdir / "base"
    base.mkdir(parents=True, exist_ok=True)
    argv = [
        str(SNAKEMAKE),
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(base),
        "--configfile",
        str(SUBSET),
        "--config",
        f'dataset={{"mirrors": ["{mirror}"]}}',
        "--cores",
        "1",
        "resources/mnist/mnist.npz",
    ]
    with open(log, "a") as handle:
        if subprocess.run(argv, cwd=base, stdout=handle, stderr=subprocess.STDOUT).returncode:
            raise SystemExit(f"preparing MNIST for the matrix failed; see {log}")
    return base / "resources" / "mnist"


def run_cell(
    cell: Cell, cores: tuple[int, ...], workdir: Path, data: Path, results: tuple[str | None, str | None]
) -> dict:
    folder = workdir / cell.name
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "resources").mkdir(parents=True)
    (folder / "resources" / "mnist").symlink_to(data.resolve())
    log = folder / "matrix.log"
    started = time.time()
    test_files = [str(REPO / name) for name in NUMERICS_TEST_FILES]
    tests = run(
        cell,
        cores,
        [str(PYTHON), "-m", "pytest", "-m", "numerics", "-q", "-p", "no:cacheprovider", *test_files],
        REPO,
        log,
    )
    dag = run(
        cell,
        cores,
        [
            str(SNAKEMAKE),
            "-s",
            str(REPO / "Snakefile"),
            "--directory",
            str(folder),
            "--configfile",
            str(SUBSET),
            "--config",
            f'dataset={{"mirrors": ["{data}"]}}',
            "--cores",
            str(cell.threads),
            SUBSET_WORK.agreement,
        ],
        folder,
        log,
    )
    report = agreement_report(folder)
    return {
        "cell": cell.name,
        "coretype": cell.coretype,
        "xla_isa": cell.isa or "default",
        "threads": cell.threads,
        "numpy_product": results[0],
        "xla_product": results[1],
        "tests_rc": tests,
        "dag_rc": dag,
        "passed": tests == 0 and dag == 0 and bool(report and report["passed"]),
        "worst": worst_by_kind(report) if report else {},
        "accuracy": lane_accuracies(folder),
        "seconds": round(time.time() - started, 1),
        "log": str(log),
    }


def run_cells(cells: list[Cell], workdir: Path, data: Path, results: dict[Cell, tuple]) -> list[dict]:
    """Run each cell on cores of its own, printing each as it ends; results in the cells' order.

    The cells start by thread count, fewest first: one-thread cells then fill every core at once,
    where in the matrix's order each would wait for the two-thread cell before it.
    """

    def work(cell: Cell, cores: tuple[int, ...]) -> dict:
        result = run_cell(cell, cores, workdir, data, results[cell])
        worst = max((w["fraction_of_bound"] for w in result["worst"].values()), default=float("nan"))
        print(
            f"{cell.name:28s} {'pass' if result['passed'] else 'FAIL'}  worst {worst:.3f} of a bound  "
            f"({result['seconds']:.0f} s on core(s) {','.join(map(str, cores))}; log {result['log']})",
            flush=True,
        )
        return result

    done = on_free_cores(sorted(cells, key=lambda cell: cell.threads), work)
    return [done[cell] for cell in cells]


KIND_ORDER = (
    "step0_loss",
    "step0_grad",
    "trained_loss",
    "trained_grad",
    "early_loss",
    "final_loss_rel",
    "predictions_equal",
    "accuracy_points",
)


def markdown(results: list[dict], skipped: dict[Cell, str], flags_note: str) -> str:
    kinds = [k for k in KIND_ORDER if any(k in r["worst"] for r in results)]
    header = [
        "cell (OpenBLAS / XLA ISA / threads)",
        "NumPy result",
        "XLA result",
        "tests",
        "DAG + agreement",
        *kinds,
        "worst",
        "s",
    ]
    rows = []
    for r in results:
        fractions = [r["worst"][k]["fraction_of_bound"] for k in kinds if k in r["worst"]]
        rows.append(
            [
                f"{r['coretype']} / {r['xla_isa']} / {r['threads']}",
                f"`{r['numpy_product']}`",
                f"`{r['xla_product']}`",
                "pass" if r["tests_rc"] == 0 else f"**FAIL ({r['tests_rc']})**",
                "pass" if r["dag_rc"] == 0 and r["passed"] else "**FAIL**",
                *[f"{r['worst'][k]['fraction_of_bound']:.3f}" if k in r["worst"] else "—" for k in kinds],
                f"{max(fractions):.3f}" if fractions else "—",
                f"{r['seconds']:.0f}",
            ]
        )
    table = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    table += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    numpy_kernels = len({r["numpy_product"] for r in results})
    xla_kernels = len({r["xla_product"] for r in results})
    lines = [
        "# Numerics matrix",
        "",
        "Written by `make test-numerics` (`tests/numerics/matrix.py`). Each cell runs the tests marked "
        "`numerics` and the CI-subset DAG (`.test/config.yaml`) through its agreement rule with NumPy's "
        "OpenBLAS forced to one core type (`OPENBLAS_CORETYPE`), XLA:CPU capped at one ISA "
        "(`--xla_cpu_max_isa`) and the run pinned to that many cores. Each number is the largest "
        "measured value of that check in the cell as a fraction of its bound (1 is the edge; for "
        "`predictions_equal`, of the allowed share of differing predictions). The NumPy column "
        "fingerprints a 256x784 by 784x128 float32 product, the XLA column the same product with a "
        "fused exp and multiply-add (XLA's ISA cap changes its generated elementwise code, not its "
        "matrix-product kernel): "
        f"{numpy_kernels} different NumPy results and {xla_kernels} different XLA results across the "
        "cells run.",
        "",
        f"Machine: {flags_note}.",
        "",
        *table,
        "",
    ]
    if skipped:
        lines += ["Cells not run here:", ""]
        lines += [f"- {c.coretype} / {c.isa or 'default'} / {c.threads}: {why}" for c, why in skipped.items()]
        lines.append("")
    verdict = all(r["passed"] for r in results)
    headline = "Every cell passed" if verdict else "Some cells FAILED"
    lines.append(f"**{headline}** ({len(results)} run, {len(skipped)} skipped).")
    return "\n".join(lines) + "\n"


def without_default_isa_twins(runnable: list[Cell], skipped: dict[Cell, str]):
    """Without AVX-512, XLA's default ISA is AVX2: those cells would repeat the AVX2 cells' code.

    (The XLA fingerprints agreed on every core type and thread count measured here.) Skipping
    them keeps the matrix inside CI's time; `--cells` still runs one when named.
    """
    if "avx512f" in cpu_flags():
        return runnable, skipped
    twins = {c for c in runnable if c.isa is None and Cell(c.coretype, "AVX2", c.threads) in runnable}
    reason = "XLA's default ISA is AVX2 on a CPU without AVX-512: the AVX2 cell runs the same code"
    return [c for c in runnable if c not in twins], {**skipped, **dict.fromkeys(twins, reason)}


def committed_results(record_path: Path) -> dict[str, tuple[str | None, str | None]]:
    """Each cell's NumPy and XLA results in the committed record (empty when there is none)."""
    if not record_path.is_file():
        return {}
    cells = json.loads(record_path.read_text())["cells"]
    return {c["cell"]: (c["numpy_product"], c["xla_product"]) for c in cells}


def cover_markdown(
    results: list[dict], cover: Cover, tested: tuple[str | None, str | None], note: str
) -> str:
    reasons, out_of_reach = cover.reasons, cover.out_of_reach
    lines = [
        "# Numerics matrix, covering set",
        "",
        "Written by `make test-numerics-ci` (`tests/numerics/matrix.py --cover`): the cells below compute "
        "every NumPy and XLA result that any cell computes on this CPU, and every result the committed "
        "record (`results/checks/numerics.json`) does not hold. The full matrix is `make test-numerics`.",
        "",
        f"Machine: {note}.",
        "",
        *(f"- `{cell}`: {why}" for cell, why in reasons.items()),
        "",
    ]
    if tested != (None, None):
        lines += [
            f"Already run by `make test` (the default kernels): NumPy `{tested[0]}`, XLA `{tested[1]}`.",
            "",
        ]
    if out_of_reach:
        lines += [f"Recorded results no cell computes on this CPU: {', '.join(out_of_reach)}.", ""]
    table = markdown(results, {}, note).split("\n\n")
    lines += [block for block in table if block.startswith("| ")]
    verdict = all(r["passed"] for r in results)
    lines += ["", f"**{'Every cell passed' if verdict else 'Some cells FAILED'}** ({len(results)} run)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=str(REPO / ".numerics"), help="scratch folder (ignored by git)")
    parser.add_argument("--out", default=str(REPO / "results" / "checks" / "numerics.md"))
    parser.add_argument("--cells", help="comma-separated cell names to run (default: all this CPU can)")
    parser.add_argument(
        "--mirror", default=str(SHARED_MNIST), help="MNIST folder or URL (default: ../shared)"
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="with --cells: rerun those cells and replace them in the existing report, keeping the rest",
    )
    parser.add_argument(
        "--cover",
        action="store_true",
        help="run a covering set of the committed record's results (CI); writes WORKDIR/cover.md only",
    )
    parser.add_argument(
        "--default-tested",
        action="store_true",
        help="with --cover: count this machine's default kernels' results as run (after make test passed)",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from gradlanes.atomic import write_json, write_text
    from gradlanes.environment import cpu_model

    record_path = Path(args.out).with_suffix(".json")
    cells = all_cells()
    if args.cells:
        wanted = set(args.cells.split(","))
        cells = [c for c in cells if c.name in wanted]
    runnable, skipped = split_runnable(cells)
    if not args.cells and not args.cover:
        runnable, skipped = without_default_isa_twins(runnable, skipped)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    note = f"{cpu_model()}, {len(os.sched_getaffinity(0))} cores"
    digests = source_digests()  # what this run measures: the files as they are when it starts
    fingerprints = on_free_cores(runnable, fingerprint)
    if args.cover:
        tested = default_fingerprint() if args.default_tested else (None, None)
        if args.default_tested:
            print(
                f"make test ran under this machine's default kernels: NumPy `{tested[0]}`, XLA `{tested[1]}`"
            )
        cover = covering_cells(
            committed_results(record_path),
            {cell.name: fingerprints[cell] for cell in runnable},
            {cell.name: cell.threads for cell in runnable},
            tested,
        )
        for name, why in cover.reasons.items():
            print(f"{name:28s} chosen: {why}")
        for result in cover.out_of_reach:
            print(f"{result} is recorded but no cell computes it on this CPU")
        runnable = [cell for name in cover.cells for cell in runnable if cell.name == name]
    data = prepare_data(workdir, args.mirror, workdir / "prepare.log")
    results = run_cells(runnable, workdir, data, fingerprints)
    passed = sum(r["passed"] for r in results)
    if args.cover:
        write_text(workdir / "cover.md", cover_markdown(results, cover, tested, note))
        failed = len(results) - passed
        print(f"numerics (covering set): {passed} passed, {failed} failed; report {workdir / 'cover.md'}")
        return 0 if passed == len(results) else 1
    for cell, why in skipped.items():
        print(f"{cell.name:28s} skipped: {why}")
    for result in results:
        result["sources_sha256"] = combined_digest(digests)
    if args.merge and record_path.is_file():
        previous = json.loads(record_path.read_text())
        rerun = {r["cell"]: r for r in results}
        order = [c.name for c in all_cells()]
        kept = [r for r in previous["cells"] if r["cell"] not in rerun]
        results = sorted([*kept, *rerun.values()], key=lambda r: order.index(r["cell"]))
        skipped = {c: why for c in all_cells() for name, why in previous["skipped"].items() if c.name == name}
    write_text(args.out, markdown(results, skipped, note))
    write_json(
        record_path,
        {
            "cells": results,
            "skipped": {c.name: why for c, why in skipped.items()},
            "machine": note,
            "sources": digests,
        },
    )
    print(f"numerics: {passed} passed, {len(results) - passed} failed, {len(skipped)} skipped")
    return 0 if all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
