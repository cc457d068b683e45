"""The benchmark's machinery on a quick run: rows, paired ratios, equal final losses, the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from gradlanes.bench import numpy_models as nm
from gradlanes.bench.report import markdown
from gradlanes.bench.worker import thread_env
from gradlanes.environment import environment

RNG_SEED = 3  # reseeded for every test (conftest: _order_free_draws)
rng = np.random.default_rng(RNG_SEED)


def test_mlp_step_kernels_match_autodiff():
    import jax.numpy as jnp

    x = rng.random((32, 20), dtype=np.float32)
    targets = nm.onehot(rng.integers(0, 10, 32), 10, np.float32)
    params = {
        "w1": rng.normal(0, 0.2, (20, 16)).astype(np.float32),
        "b1": np.zeros(16, np.float32),
        "w2": rng.normal(0, 0.2, (16, 10)).astype(np.float32),
        "b2": np.zeros(10, np.float32),
    }

    def loss(p):
        return jnp.mean((jax.nn.relu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"] - targets) ** 2)

    grads = jax.grad(loss)(params)
    stepped, value = nm.mlp_mse_step(dict(params), nm.Adam(params, 1e-3), x, targets)
    np.testing.assert_allclose(value, loss(params), rtol=1e-6)
    for name in params:  # Adam's first step moves every weight by lr * sign(gradient)
        expected = params[name] - 1e-3 * np.asarray(grads[name]) / (np.abs(grads[name]) + 1e-8)
        np.testing.assert_allclose(stepped[name], expected, rtol=1e-4, atol=1e-6)


def test_relu_mse_sgd_kernel_matches_autodiff():
    import jax.numpy as jnp

    x, w = rng.random((8, 16), dtype=np.float32), rng.normal(0, 0.3, (16, 8)).astype(np.float32)
    b, t = rng.normal(0, 0.1, 8).astype(np.float32), rng.random((8, 8), dtype=np.float32)
    gw, gb = jax.grad(lambda w_, b_: jnp.mean((jax.nn.relu(x @ w_ + b_) - t) ** 2), argnums=(0, 1))(w, b)
    new_w, new_b, _ = nm.relu_mse_sgd_step(w, b, x, t, 0.1)
    np.testing.assert_allclose(new_w, w - 0.1 * np.asarray(gw), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(new_b, b - 0.1 * np.asarray(gb), rtol=1e-5, atol=1e-7)


@pytest.fixture(scope="module")
def quick_run(prepared_mnist, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "worker.json"
    command = [
        sys.executable,
        "-m",
        "gradlanes.bench.worker",
        "--threads",
        "1",
        "--arrays",
        str(prepared_mnist["arrays"]),
        "--reps",
        "2",
        "--quick",
        "--json",
        str(out),
    ]
    subprocess.run(command, env={**os.environ, **thread_env(1)}, check=True, timeout=600)
    return json.loads(out.read_text())


def test_every_engine_lands_on_the_same_final_loss(quick_run):
    for work in quick_run["workloads"]:
        ok = {row["engine"]: row["final_loss"] for row in work["rows"] if row["status"] == "ok"}
        # Every workload runs the captured program on these; numpy (where a workload has a NumPy
        # twin) and torch (if installed) must land on the same loss whenever they ran.
        assert {"xla", "xla_fused", "interpreter"} <= set(ok), (work["name"], sorted(ok))
        losses = list(ok.values())
        tolerance = 1e-12 if work["dtype"] == "float64" else 2e-5
        assert np.ptp(losses) <= tolerance * abs(np.mean(losses)) + 1e-7, (work["name"], losses)


def test_rows_ratios_and_flops(quick_run):
    tlaloc = next(w for w in quick_run["workloads"] if w["name"] == "tlaloc")
    assert tlaloc["flops_xla"] == pytest.approx(tlaloc["flops_analytic"], rel=0.01)
    engines = {row["engine"] for row in tlaloc["rows"]}
    assert {"xla", "xla_fused", "interpreter", "numpy", "torch"} == engines
    pairs = {(r["a"], r["b"]) for r in tlaloc["ratios"]}
    assert ("interpreter", "xla") in pairs and ("xla", "interpreter") in pairs
    for row in tlaloc["rows"]:
        if row["status"] == "ok":
            assert row["step_us_min"] <= row["step_us_median"] <= row["step_us_max"]
            assert row["peak_rss_mb"] > 0
            # measured, not bounded: how busy an engine keeps its core depends on the machine; the
            # pinning itself is what the run asserts (one core, below)
            assert row["cores_busy"] > 0, (row["engine"], row["cores_busy"])
    assert quick_run["cores"] == [quick_run["cores"][0]]
    assert quick_run["tlaloc_shape_limit"]["shape"] == [4096, 784, 128]


def test_report_names_every_floor(quick_run):
    text = markdown({1: quick_run}, environment(), {"dry_run_s": 1.0, "up_to_date_s": 2.0})
    for floor in (
        "≥ 80 % of the matmul limit",
        "≤ 1.3× XLA CPU",
        "≤ 5 µs/step on 8×16→8",
        "µs/equation",
        "`snakemake -n` ≤ 5 s",
        "on an H200, on paper",
    ):
        assert floor in text


def test_configured_engines_get_rows_through_their_plugin(prepared_mnist):
    """`bench.engines` (here iree) adds a per-dispatch and a fused row on the lanes' workloads."""
    from gradlanes.bench import workloads as w
    from gradlanes.bench.protocol import interleaved
    from gradlanes.data.dataset import load

    data = load(prepared_mnist["arrays"], 4096, 1)
    images, labels = data.train_images, data.train_labels
    # Adam (state carried between steps) and plain SGD (an empty optimizer state)
    for work in (w.tlaloc(images, labels, 2, ("iree",)), w.softmax(images, labels, 32, 4, ("iree",))):
        rows = {row.engine: row for row in interleaved(work.runners, work.steps, 1)}
        assert {"iree", "iree_fused"} <= set(rows)
        for name in ("iree", "iree_fused"):
            assert rows[name].error is None and rows[name].compile_s > 0
            # The same program on another compiler: equal to XLA's loss within float32 reassociation.
            assert rows[name].final_loss == pytest.approx(rows["xla"].final_loss, rel=2e-5), work.name
