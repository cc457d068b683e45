"""How much of tests/special_budgets.betainc_budget's continued-fraction allowance the rule uses.

The allowance (steps * eps / 4 of the term the fraction multiplies) is a margin, not a derived
bound: this script measures whether the rule needs it. For random small arrays it compares the rule with
XLA and prints the largest allowance any element needed beyond the rest of the budget (negative:
the rest covered it) and the largest share of the whole budget used. Subnormal results are left
out, as oracle.check flushes them.
Run: `.venv/bin/python tools/measurements/betainc_fraction_allowance.py SEED`.
"""

import contextlib
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests"))
import jax  # noqa: E402
import numpy as np  # noqa: E402
import special_budgets as sb  # noqa: E402
from jax import lax  # noqa: E402
from oracle import x64  # noqa: E402

from gradlanes.program.rules import special  # noqa: E402

rng = np.random.default_rng(int(sys.argv[1]))
for dtype in (np.float32, np.float64):
    dt = np.dtype(dtype)
    eps = float(sb.EPS[dt])
    steps = 200 if dt == np.float32 else 600
    need, n, used = -np.inf, 0, 0.0
    with x64() if dt == np.float64 else contextlib.nullcontext():
        f = jax.jit(lax.betainc)
        for _trial in range(2000):
            size = int(rng.integers(1, 9))
            scale = rng.choice([40.0, 5.0, 1.0])
            a, b = ((rng.random(size) * scale).astype(dt) for _ in "ab")
            x = rng.random(size).astype(dt)
            want = np.asarray(f(a, b, x)).astype(np.float64)
            with np.errstate(all="ignore"):
                got = special._regularized_incomplete_beta(a, b, x).astype(np.float64)
                w64 = [v.astype(np.float64) for v in (a, b, x)]
                budget = sb.betainc_budget(w64, want, dt)
                rapid = w64[2] < (w64[0] + 1) / (w64[0] + w64[1] + 2)
                term = np.where(rapid, np.abs(want), np.abs(1 - want))
                rest = budget - steps * eps / 4 * term
                ok = np.isfinite(want) & (np.abs(want) >= np.finfo(dt).tiny) & (term > 0)
                needed = np.where(ok, (np.abs(got - want) - rest) / (term * eps), -np.inf)
                frac = np.where(ok, np.abs(got - want) / budget, 0)
            need = max(need, float(needed.max()))
            used = max(used, float(frac.max()))
            n += size
    print(
        f"{dt}: {n} elements; allowance needed {need:.2f} eps of the term (allowed {steps / 4:.0f});"
        f" largest share of the whole budget {used:.3f}"
    )
