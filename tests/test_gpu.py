"""GPU lanes: why one is skipped, the flags that make it repeat, the GPU benchmark rows, and the rerun.

Most tests here run anywhere: the skip reasons (the machine's GPU evidence monkeypatched), the
XLA_FLAGS merge, and the GPU benchmark rows' arithmetic. Tests marked `gpu` need a GPU that JAX
sees: each trains a short gpu lane twice, each time in a fresh process as a train job runs, and
requires bit-identical losses, weights and predictions (XLA's deterministic GPU ops, which the lane
sets itself). `tools/gpu/oneshot.sh` runs them on the GPU machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from lanes import small_lane

from gradlanes.engines import gpu

FLAG = "--xla_gpu_deterministic_ops=true"
NO_GPU = "JAX sees no GPU here (platforms present: cpu); a gpu lane runs only where jaxlib has that backend"


@pytest.fixture
def h200_without_plugin(monkeypatch):
    """A machine with an NVIDIA GPU and driver 580, and no JAX CUDA plugin installed."""
    monkeypatch.setattr(gpu, "nvidia_gpu_evidence", lambda: "nvidia-smi lists GPU 0: NVIDIA H200")
    monkeypatch.setattr(gpu, "driver_version", lambda: "580.159.03")
    monkeypatch.setattr(gpu, "installed_cuda_plugins", lambda: [])


# ---- why a gpu lane is skipped ---------------------------------------------------------------


def test_without_a_gpu_the_reason_is_that_there_is_none(monkeypatch):
    monkeypatch.setattr(gpu, "nvidia_gpu_evidence", lambda: None)
    assert gpu.gpu_unavailable_reason({"cpu"}) == NO_GPU


def test_a_gpu_with_the_cpu_only_jaxlib_says_to_install_the_cuda_plugin(h200_without_plugin):
    reason = gpu.gpu_unavailable_reason({"cpu"})
    assert "NVIDIA H200" in reason and "driver 580.159.03" in reason and "CPU-only" in reason
    assert reason.index("`make install GPU=cuda13`") < reason.index("`make install GPU=cuda12`")


def test_an_older_driver_is_told_cuda12_first(h200_without_plugin, monkeypatch):
    monkeypatch.setattr(gpu, "driver_version", lambda: "535.104.05")
    reason = gpu.gpu_unavailable_reason({"cpu"})
    assert reason.index("`make install GPU=cuda12`") < reason.index("`make install GPU=cuda13`")


def test_an_installed_plugin_that_did_not_start_is_named(h200_without_plugin, monkeypatch):
    monkeypatch.setattr(gpu, "installed_cuda_plugins", lambda: ["jax-cuda13-pjrt 0.11.2"])
    reason = gpu.gpu_unavailable_reason({"cpu"})
    assert "jax-cuda13-pjrt 0.11.2" in reason and "did not start" in reason and "nvidia-smi" in reason
    assert "make install" not in reason


def test_the_xla_engine_skips_with_the_install_advice(h200_without_plugin):
    import jax

    from gradlanes.engines.base import EngineUnavailable
    from gradlanes.engines.xla_engine import find_device

    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees a GPU here: there is no CPU-only jaxlib to be skipped by")
    with pytest.raises(EngineUnavailable, match=r"make install GPU=cuda13"):
        find_device("gpu")


def test_a_skipped_gpu_lane_records_the_install_advice(h200_without_plugin, tmp_path, prepared_mnist):
    import jax

    from gradlanes.data.description import MNIST
    from gradlanes.experiment.models import save_initial_params
    from gradlanes.experiment.spec import resolve
    from gradlanes.run.lane import run_lane

    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees a GPU here: the lane would run, not be skipped")
    exp = resolve("probe_gpu", small_lane(device="gpu"), 0, MNIST)
    save_initial_params(exp.model, 0, tmp_path / "init.npz")
    paths = lane_paths(tmp_path / "run", prepared_mnist, tmp_path / "init.npz")
    record = run_lane(exp, paths).as_dict()
    assert record["status"] == "skipped" and "make install GPU=cuda13" in record["reason"]
    assert json.loads(paths.record.read_text())["reason"] == record["reason"]


def test_gpu_evidence_from_the_device_node_and_the_driver(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu, "NVIDIA_SMI", "no-such-nvidia-smi")
    monkeypatch.setattr(gpu, "NVIDIA_DEVICE", tmp_path / "nvidia0")
    monkeypatch.setattr(gpu, "NVIDIA_DRIVER", tmp_path / "driver")
    assert gpu.nvidia_gpu_evidence() is None and gpu.driver_version() is None
    (tmp_path / "driver").mkdir()
    (tmp_path / "driver" / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.03  Thu Oct  1 2026\n"
    )
    assert "NVIDIA driver is loaded" in gpu.nvidia_gpu_evidence()
    assert gpu.driver_version() == "580.159.03"
    (tmp_path / "nvidia0").touch()
    assert gpu.nvidia_gpu_evidence() == f"{tmp_path / 'nvidia0'} exists"


@pytest.mark.parametrize(
    "driver, flavour",
    [("580.159.03", "cuda13"), ("590.1", "cuda13"), ("535.104.05", "cuda12"), ("470.2", None), (None, None)],
)
def test_the_driver_decides_the_cuda_flavour(driver, flavour):
    assert gpu.flavour_for_driver(driver) == flavour


# ---- the flags that make a GPU run repeat ------------------------------------------------------


@pytest.mark.parametrize(
    "given, expected",
    [
        (None, FLAG),
        ("", FLAG),
        ("--xla_cpu_max_isa=AVX2", f"--xla_cpu_max_isa=AVX2 {FLAG}"),
        (f"--xla_cpu_max_isa=AVX2 {FLAG}", f"--xla_cpu_max_isa=AVX2 {FLAG}"),
        ("--xla_gpu_deterministic_ops", "--xla_gpu_deterministic_ops"),  # bare: already on
    ],
)
def test_the_deterministic_flag_joins_the_callers_flags(given, expected):
    assert gpu.with_deterministic_flags(given) == expected


def test_a_flag_that_turns_determinism_off_is_refused():
    with pytest.raises(ValueError, match=r"xla_gpu_deterministic_ops=false.*remove it from XLA_FLAGS"):
        gpu.with_deterministic_flags(f"{FLAG} --xla_gpu_deterministic_ops=false")


def test_flags_are_set_before_xla_starts_and_left_alone_after():
    environ = {"XLA_FLAGS": "--xla_cpu_max_isa=AVX2"}
    assert gpu.use_deterministic_gpu_flags(environ, started=frozenset) == f"--xla_cpu_max_isa=AVX2 {FLAG}"
    assert environ["XLA_FLAGS"] == f"--xla_cpu_max_isa=AVX2 {FLAG}"
    cpu_only = {}
    assert gpu.use_deterministic_gpu_flags(cpu_only, started=lambda: frozenset({"cpu"})) == ""
    assert cpu_only == {}, "a process with CPU backends only keeps its environment (the lane is skipped)"
    with pytest.raises(gpu.GpuFlagsTooLate, match="start the process with XLA_FLAGS="):
        gpu.use_deterministic_gpu_flags({}, started=lambda: frozenset({"cpu", "cuda"}))


def test_a_gpu_lane_sets_the_flag_only_where_the_machine_shows_a_gpu(monkeypatch):
    monkeypatch.setattr(gpu, "nvidia_gpu_evidence", lambda: None)
    environ = {}
    assert gpu.prepare_gpu_lane(environ, started=frozenset) is None and environ == {}, (
        "CPU records stay as they were"
    )
    monkeypatch.setattr(gpu, "nvidia_gpu_evidence", lambda: "/dev/nvidia0 exists")
    assert gpu.prepare_gpu_lane(environ, started=frozenset) == FLAG and environ == {"XLA_FLAGS": FLAG}


def test_this_jaxlib_knows_the_flag():
    """XLA aborts a process whose XLA_FLAGS names a flag it does not know: the flag must be real."""
    code = (
        "from gradlanes.engines.gpu import use_deterministic_gpu_flags; import os, jax; "
        "use_deterministic_gpu_flags(); print(jax.devices()[0].platform, os.environ['XLA_FLAGS'])"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == FLAG


# ---- the GPU benchmark rows' arithmetic --------------------------------------------------------


def test_the_limit_is_the_slower_of_arithmetic_and_traffic():
    from gradlanes.bench.gpu import fraction_of_limit, limit_for, per_dispatch_overhead_us, step_limit

    h200 = limit_for("NVIDIA H200")
    assert (h200.float32_flops, h200.bytes_per_s) == (67e12, 4.8e12)
    tlaloc = step_limit(1.676e9, 15e6, h200)  # Tlaloc's step: 1.68 GFLOP, about 15 MB of traffic
    # the same float64 quotient and product in the same order, each correctly rounded: the same bits
    assert tlaloc["bound"] == "compute" and tlaloc["limit_us"] == 1.676e9 / 67e12 * 1e6
    assert tlaloc["memory_us"] == 15e6 / 4.8e12 * 1e6
    assert step_limit(1e6, 48e6, h200)["bound"] == "memory"
    assert fraction_of_limit(50.0, 25.0) == 0.5
    assert per_dispatch_overhead_us(80.0, 30.0) == 50.0
    assert limit_for("NVIDIA H200 NVL") is None, "a GPU without a recorded datasheet figure gets no fraction"
    with pytest.raises(ValueError, match="must be > 0"):
        fraction_of_limit(0.0, 25.0)
    with pytest.raises(ValueError, match=">= 0"):
        step_limit(-1, 0, h200)


def test_a_programs_bytes_are_its_inputs_and_outputs():
    import jax

    from gradlanes.bench.gpu import program_bytes

    x, y = np.zeros((3, 4), np.float32), np.zeros((4, 5), np.float32)
    program = jax.make_jaxpr(lambda a, b: (a @ b, a.sum()))(x, y)
    assert program_bytes(program) == (12 + 20 + 15 + 1) * 4


def test_gpu_rows_run_on_any_device_and_render():
    """The GPU rows' code path on the CPU device (no limit for it), a few steps, and its table."""
    import jax

    from gradlanes.bench.gpu import measure
    from gradlanes.bench.report import gpu_section
    from gradlanes.engines.compiles import compile_window

    rng = np.random.default_rng(0)
    images = rng.random((4096, 784), dtype=np.float32)
    labels = rng.integers(0, 10, 4096).astype(np.int32)
    # A first call compiles what a process caches (the initial weights' program), whichever test
    # ran before this one; the second then compiles exactly its two rows.
    measure(images, labels, jax.devices("cpu")[0], steps=2, reps=1, flags="")
    with compile_window() as window:
        rows = measure(images, labels, jax.devices("cpu")[0], steps=2, reps=1, flags="")
    assert [r["engine"] for r in rows["rows"]] == ["xla_gpu", "xla_gpu_fused"]
    assert all(r["status"] == "ok" for r in rows["rows"])
    # each row's program compiled ahead of its timing: a fresh jax.jit(...).lower().compile() apiece
    assert window.count == 2
    assert rows["rows"][0]["final_loss"] == rows["rows"][1]["final_loss"], "fused or not, the same steps"
    assert rows["limit"] is None and "no published limit" in rows["limit_reason"]
    per_dispatch, fused = (r["step_us_median"] for r in rows["rows"])
    # the overhead is that one float64 difference of the two rows' medians
    assert (
        rows["bytes_per_step"] > 4096 * 784 * 4 and rows["per_dispatch_overhead_us"] == per_dispatch - fused
    )
    text = "\n".join(gpu_section(rows))
    assert "| xla_gpu |" in text and "| xla_gpu_fused |" in text and "No fraction of the limit" in text
    limit = {"name": "H200 SXM", "limit_us": 25.0, "bound": "compute", "compute_us": 25.0, "memory_us": 3.2}
    h200 = {**rows, "limit": {**limit, "float32_flops": 67e12, "bytes_per_s": 4.8e12, "source": "datasheet"}}
    assert "% of the H200 SXM limit (25.0 µs, compute-bound)" in "\n".join(gpu_section(h200))


def test_without_a_gpu_the_benchmark_has_no_gpu_rows(capfd):
    import jax

    from gradlanes.bench.__main__ import gpu_rows

    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees a GPU here: the benchmark has GPU rows")
    result = gpu_rows("no-arrays-needed.npz", quick=True)
    # The workload's record is still written (and published): skipped, with the reason.
    assert result["workload"] == "tlaloc_gpu" and result["status"] == "skipped" and "rows" not in result
    assert result["reason"].startswith("JAX sees no GPU here")
    assert "GPU rows skipped: JAX sees no GPU here" in capfd.readouterr().err


# ---- on a GPU: a rerun is bit-identical --------------------------------------------------------


def jax_sees_a_gpu() -> str | None:
    """The device kind of the GPU JAX sees, asked in a fresh process (this one keeps its GPU memory)."""
    if gpu.nvidia_gpu_evidence() is None:
        return None
    probe = "import jax; print(jax.devices('gpu')[0].device_kind)"
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    return done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else None


@pytest.fixture(scope="module")
def gpu_kind() -> str:
    kind = jax_sees_a_gpu()
    if kind is None:
        pytest.skip(
            "JAX sees no GPU here: the gpu tests run where one is (on the GPU machine: tools/gpu/oneshot.sh)"
        )
    return kind


def lane_paths(out: Path, prepared: dict, init: Path):
    from gradlanes.run.lane import LanePaths

    files = [out / name for name in ("record.json", "curve.parquet", "digits.txt", "model.npz")]
    return LanePaths(prepared["arrays"], prepared["manifest"], init, *files, failure=out / "failed.json")


SHORT_GPU_LANES = {
    # Tlaloc's experiment cut short: the full batch of 4,096 images, MSE, Adam.
    "mlp_full_batch": small_lane(
        device="gpu",
        hidden=128,
        loss="mse",
        learning_rate=5e-4,
        batch_size="full",
        train_images=4096,
        steps=20,
        eval_every=10,
        test_images=1000,
    ),  # fmt: skip
    # The conv net, streamed: convolutions are where GPU libraries pick algorithms run by run.
    "cnn_streamed": small_lane(device="gpu", model="cnn", learning_rate=3e-3, batch_size=64, steps=16),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(SHORT_GPU_LANES))
def test_a_gpu_lane_rerun_is_bit_identical(name, gpu_kind, tmp_path, prepared_mnist):
    runs = []
    for attempt in ("first", "second"):
        job = {
            "lane": name,
            "settings": SHORT_GPU_LANES[name],
            "out": str(tmp_path / attempt),
            "init": str(tmp_path / "init.npz"),
            "prepared": {k: str(v) for k, v in prepared_mnist.items()},
        }
        env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # the lane sets its own
        done = subprocess.run([sys.executable, __file__, json.dumps(job)], capture_output=True, text=True,
                              timeout=300, env=env)  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        out = tmp_path / attempt
        runs.append(
            {
                "record": json.loads((out / "record.json").read_text()),
                "losses": pd.read_parquet(out / "curve.parquet").query("kind == 'train'")["loss"].to_numpy(),
                "model": dict(np.load(out / "model.npz")),
            }
        )
    first, second = runs
    record = first["record"]
    assert record["status"] == "ok" and record["platform"] == "gpu" and record["device_kind"] == gpu_kind
    assert FLAG in record["numerics"]["xla_flags"] and record["numerics"]["matmul_precision"] == "highest"
    assert first["losses"].tobytes() == second["losses"].tobytes(), "the training losses differ between runs"
    assert sorted(first["model"]) == sorted(second["model"])
    for key in first["model"]:
        assert first["model"][key].tobytes() == second["model"][key].tobytes(), f"{key} differs between runs"


def run_one(job: dict) -> None:
    """One short gpu lane in this fresh process, as a train job runs it (the child of the rerun test)."""
    gpu.use_deterministic_gpu_flags()  # before the initial weights below start XLA
    from gradlanes.data.description import MNIST
    from gradlanes.experiment.models import save_initial_params
    from gradlanes.experiment.spec import resolve
    from gradlanes.run.lane import run_lane

    exp = resolve(job["lane"], job["settings"], 0, MNIST)
    init = Path(job["init"])
    if not init.exists():  # the first run writes it; the second starts from the same file
        save_initial_params(exp.model, 0, init)
    prepared = {k: Path(v) for k, v in job["prepared"].items()}
    run_lane(exp, lane_paths(Path(job["out"]), prepared, init))


if __name__ == "__main__":
    run_one(json.loads(sys.argv[1]))
