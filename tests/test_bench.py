"""The benchmark's machinery on a quick run: rows, paired ratios, equal final losses, the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from shared_work import SharedWork, SharedWorkFailed, session_root

from gradlanes.bench import numpy_models as nm
from gradlanes.bench.report import markdown
from gradlanes.bench.worker import thread_env
from gradlanes.environment import environment

RNG_SEED = 3  # reseeded for every test (conftest: _order_free_draws)
rng = np.random.default_rng(RNG_SEED)
U32 = 2.0**-24


def gamma(k: int) -> float:
    """Any evaluation of a +/x expression with at most k roundings on each input-to-output path, in
    any order, errs by at most gamma(k) times the expression evaluated on absolute values (Higham,
    Accuracy and Stability, 3.1 and 3.5): a bound for whatever order NumPy's BLAS or XLA picks."""
    return k * U32 / (1 - k * U32)


def relu_mse_magnitudes(x, layers, targets):
    """|·|-evaluations (float64) of relu-MLP MSE forward and backward, and each pre-activation's bound.

    `layers` is [(w, b), ...], ReLU after all but the last. Returns the loss's |·|-value, each
    parameter's gradient |·|-value (same keys w0, b0, w1, ...), and, per hidden layer, the
    pre-activations with their gamma-scaled |·|-values (ReLU decisions must be clear of rounding).
    """
    x64 = np.abs(x.astype(np.float64))
    value, magnitude, masks, clear = x.astype(np.float64), x64, [], []
    inputs = []
    for i, (w, b) in enumerate(layers):
        w64, b64 = w.astype(np.float64), b.astype(np.float64)
        inputs.append(magnitude)
        value, magnitude = value @ w64 + b64, magnitude @ np.abs(w64) + np.abs(b64)
        if i < len(layers) - 1:
            masks.append(value > 0)
            clear.append((value, gamma(x.shape[1] + 1) * magnitude))
            value, magnitude = value * masks[-1], magnitude * masks[-1]
    diff = magnitude + np.abs(targets.astype(np.float64))
    loss = np.mean(diff**2)
    cotangent = 2 * diff / diff.size
    grads = {}
    for i in reversed(range(len(layers))):
        grads[f"w{i}"], grads[f"b{i}"] = inputs[i].T @ cotangent, cotangent.sum(0)
        if i:
            cotangent = (cotangent @ np.abs(layers[i][0].astype(np.float64)).T) * masks[i - 1]
    return loss, grads, clear


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
    layers = [(params["w1"], params["b1"]), (params["w2"], params["b2"])]
    loss_size, grad_size, clear = relu_mse_magnitudes(x, layers, targets)
    for z, bound in clear:  # both sides take the same ReLU branch only if no decision is in reach
        assert np.all(np.abs(z) > 2 * bound)
    # Roundings on the longest path, a product counting both factors' paths and its own rounding
    # (Higham 3.5): d = out - t has 21 (dot of 20, bias) + 17 (dot of 16, bias) + 1 = 39, so d^2
    # 79, and the mean 319 additions and /N (2 if taken as x fl(1/N)): 400. The cotangent 2d/N has
    # 42, and dW2 = h^T cot adds h's 21 and the batch sum's 32 (its product and 31 additions): 95,
    # 96 with the reciprocal; dW1's path (cot, 10 back through w2, x exact, 32) is shorter.
    # Either side is within gamma(k) * |.|-value of the exact.
    np.testing.assert_allclose(value, loss(params), rtol=0, atol=2 * gamma(400) * loss_size)
    lr, eps = 1e-3, 1e-8
    for name, key in zip(params, ("w0", "b0", "w1", "b1"), strict=True):
        g = np.asarray(grads[name], np.float64)
        g_err = 2 * gamma(96) * grad_size[key]  # the kernel's gradient against autodiff's
        # Adam's first step moves a weight by lr * q(g), q(g) = g / (|g| + eps) (its moments divide
        # out): q's slope eps / (|g| + eps)^2 carries the gradients' gap; each side's q rounds at
        # most 8 times (moments 2 + 3, sqrt, + eps, /, eps's own float32 rounding), lr * q 2 more;
        # the expected side's lr * g / (|g| + eps) 5: 15 < 16; then each side's p - step once.
        slope = eps / (np.maximum(np.abs(g) - g_err, 0) + eps) ** 2
        bound = lr * (g_err * slope + 16 * U32) + 2 * U32 * (np.abs(params[name]) + lr)
        expected = params[name] - lr * np.asarray(grads[name]) / (np.abs(grads[name]) + eps)
        np.testing.assert_array_less(np.abs(stepped[name] - expected.astype(np.float64)), bound)


def test_relu_mse_sgd_kernel_matches_autodiff():
    import jax.numpy as jnp

    x, w = rng.random((8, 16), dtype=np.float32), rng.normal(0, 0.3, (16, 8)).astype(np.float32)
    b, t = rng.normal(0, 0.1, 8).astype(np.float32), rng.random((8, 8), dtype=np.float32)
    gw, gb = jax.grad(lambda w_, b_: jnp.mean((jax.nn.relu(x @ w_ + b_) - t) ** 2), argnums=(0, 1))(w, b)
    new_w, new_b, _ = nm.relu_mse_sgd_step(w, b, x, t, 0.1)
    _, grad_size, clear = relu_mse_magnitudes(x, [(w, b), (np.eye(8, dtype=np.float32), np.zeros(8))], t)
    for z, bound in clear:
        assert np.all(np.abs(z) > 2 * bound)
    # Longest paths: 17 (dot of 16, bias) + 1 (- t) + 3 (x 2/N) + 8 (the batch sum), for either side.
    # Then 0.1 * g (the same float32 0.1 on both sides) and p - step round once per side. (The eye
    # above only puts the ReLU last; its own gradient is not compared.)
    for new, old, g, key in ((new_w, w, gw, "w0"), (new_b, b, gb, "b0")):
        g_err = 2 * gamma(29) * grad_size[key]
        step = 0.1 * (np.abs(np.asarray(g, np.float64)) + g_err)
        bound = 0.1 * g_err * (1 + U32) + 2 * U32 * step + 2 * U32 * (np.abs(old) + step)
        expected = (old - 0.1 * np.asarray(g)).astype(np.float64)
        np.testing.assert_array_less(np.abs(new - expected), bound)


@pytest.fixture(scope="session")
def quick_run(prepared_mnist, request):
    """One quick benchmark worker run (1 thread, 2 reps) for the session, shared by its workers."""

    def measure(folder):
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
            str(folder / "worker.json"),
        ]
        done = subprocess.run(command, env={**os.environ, **thread_env(1)}, capture_output=True, text=True)
        if done.returncode != 0:
            raise SharedWorkFailed(f"the benchmark worker exited with {done.returncode}:\n{done.stderr}")

    folder = SharedWork(session_root(request.config), "bench-quick", measure).get()
    return json.loads((folder / "worker.json").read_text())


@pytest.mark.slow
def test_every_engine_lands_on_the_same_final_loss(quick_run):
    for work in quick_run["workloads"]:
        ok = {row["engine"]: row["final_loss"] for row in work["rows"] if row["status"] == "ok"}
        # Every workload runs the captured program on these; numpy (where a workload has a NumPy
        # twin) and torch (if installed) must land on the same loss whenever they ran.
        assert {"xla", "xla_fused", "interpreter"} <= set(ok), (work["name"], sorted(ok))
        losses = list(ok.values())
        # Measured, not derived (training steps compound rounding): the quick run (1 thread) spread
        # by at most 2.7e-7 relative in float32 (softmax_b32) and 2.2e-16 in float64 (rusty_16x8)
        # at default kernels, and by at most 2.7e-7 and 1.5e-16 under the OpenBLAS/XLA cells
        # Haswell-default, Sandybridge-AVX, Nehalem-AVX2 and Haswell-AVX (2026-12-07); 2e-5 and
        # 1e-12 leave margins of 75 and 4,500. Every final loss is above 0.08: no absolute floor.
        tolerance = 1e-12 if work["dtype"] == "float64" else 2e-5
        assert np.ptp(losses) <= tolerance * abs(np.mean(losses)), (work["name"], losses)


@pytest.mark.slow
def test_rows_ratios_and_flops(quick_run):
    tlaloc = next(w for w in quick_run["workloads"] if w["name"] == "tlaloc")
    # XLA counts each dot's 2mkn, as the analytic count does, plus the elementwise work on top.
    # That extra is measured, not derived (XLA's per-op counts): 0.29 % of 1.676e9 on this run.
    assert tlaloc["flops_analytic"] == 8192 * (101632 + 102912)  # 784x128 + 128x10, twice back + 784x128
    assert tlaloc["flops_analytic"] <= tlaloc["flops_xla"] <= 1.01 * tlaloc["flops_analytic"]
    # the record's fields against the command line: --reps 2, --quick (20 // 10 steps)
    assert tlaloc["steps_per_rep"] == 2 and tlaloc["images_per_step"] == 4096
    engines = {row["engine"] for row in tlaloc["rows"]}
    assert {"xla", "xla_fused", "interpreter", "numpy", "torch"} == engines
    pairs = {(r["a"], r["b"]) for r in tlaloc["ratios"]}
    assert ("interpreter", "xla") in pairs and ("xla", "interpreter") in pairs
    for row in tlaloc["rows"]:
        if row["status"] == "ok":
            assert row["reps"] == 2, row
            assert row["step_us_min"] <= row["step_us_median"] <= row["step_us_max"]
            assert row["peak_rss_mb"] > 0
            # measured, not bounded: how busy an engine keeps its core depends on the machine; the
            # pinning itself is what the run asserts (one core, below)
            assert row["cores_busy"] > 0, (row["engine"], row["cores_busy"])
    assert quick_run["cores"] == [quick_run["cores"][0]]
    assert quick_run["tlaloc_shape_limit"]["shape"] == [4096, 784, 128]


@pytest.mark.slow
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


@pytest.mark.slow
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
            # The same program on another compiler. Measured, not derived (two Adam steps compound
            # reassociation): iree's tlaloc loss was 6.2e-6 relative from XLA's and softmax's equal,
            # the same under OpenBLAS/XLA cells Haswell-default, Sandybridge-AVX, Nehalem-AVX2 and
            # Haswell-AVX (2026-12-07); 2e-5 leaves a margin of 3.
            assert rows[name].final_loss == pytest.approx(rows["xla"].final_loss, rel=2e-5), work.name
