"""The interpreter on a corpus of training programs nobody here wrote, measured as agreement measures lanes.

Each program of `corpus.py` (every optax optimizer alias, dropout, LeNet-5, a transformer block,
gradlanes' fused steps, cond, while and checkpoint) runs one train step on XLA, on the interpreter
and on the float64 reference. Every output must have XLA's dtype and shape; integers and keys must
be equal; each float output's distance from the float64 reference, in float32 units of its own
size (u * ||reference||, u = 2^-24), must be within the probabilistic bound of its reduction chain
(`gradlanes.run.numerics`: lambda * sqrt(chain), the bound the agreement checks use), or within
lambda times XLA's own distance where cancellation makes the output small against its terms: XLA
rounds the same program in another order, so its error is a draw from the same distribution, and
over the many components of a weight or moment leaf the two norms agree closely (their squared
ratio is F-distributed; above lambda^2 = 16 it has probability below 1e-4 from 10 components on).
The corpus' inputs keep every decision exact (see `corpus.py`), so the program is smooth there.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from corpus import (
    NEEDS_VALUE_FUNCTION,
    corpus,
    exact_affine,
    leaves,
    lenet_inputs,
    lenet_layers,
    mlp_logits,
    note,
    optax_aliases,
    positive_mlp,
    traced,
)
from jax import lax
from oracle import x64

from gradlanes.program.interpreter import Interpreter, find_unsupported
from gradlanes.program.jaxcompat import is_extended, key_data
from gradlanes.program.rules.prng import KeyArray
from gradlanes.run.numerics import CONFIDENCE, FLOAT32_U, probabilistic_bound, reduction_chain

CORPUS = corpus()


def _host(value) -> np.ndarray:
    if isinstance(value, KeyArray):
        return value.data
    if is_extended(getattr(value, "dtype", None)):
        return key_data(value)
    return np.asarray(value)


def units(candidate: np.ndarray, reference: np.ndarray) -> float:
    """||candidate - reference|| / (u ||reference||): float32 units of the output's own size."""
    diff = float(np.linalg.norm((candidate.astype(np.float64) - reference).ravel()))
    size = float(np.linalg.norm(reference.ravel()))
    if size == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / (FLOAT32_U * size)


def test_the_corpus_holds_every_optax_alias_but_those_that_need_a_value_function():
    names = {program.name for program in CORPUS}
    aliases = optax_aliases()
    assert set(NEEDS_VALUE_FUNCTION) <= set(aliases), "an excluded optimizer is no longer an optax alias"
    assert {f"optax.{name}" for name in aliases if name not in NEEDS_VALUE_FUNCTION} <= names
    assert len(aliases) >= 31  # the pinned optax 0.2.8 exports 31; a rename would silently shrink this


@pytest.mark.parametrize("entry", CORPUS, ids=lambda entry: entry.name)
def test_the_interpreter_supports_every_primitive_of_the_program(entry):
    _, _, closed = traced(entry)
    missing = find_unsupported(closed.jaxpr)
    note(entry.name, "unsupported: " + ", ".join(sorted(missing)) if missing else "supported")
    assert not missing, f"{entry.name} uses primitive(s) with no rule: {sorted(missing)}"


# Not marked `numerics`: under each of the matrix's 18 cells the 40 programs cost ~90 s at one
# thread (27 min of CI); `make test` runs them once, and their criterion already scales with
# XLA's own distance from the float64 reference on the machine that runs them.
@pytest.mark.parametrize("entry", CORPUS, ids=lambda entry: entry.name)
def test_one_train_step_matches_xla_under_the_float64_reference_measure(entry):
    step, args, closed = traced(entry)
    flat = leaves(args)
    xla = [_host(x) for x in leaves(jax.jit(step)(*args))]
    got = [_host(x) for x in Interpreter(closed, entry.name)(*flat)]
    reference = [_host(x) for x in Interpreter(closed, entry.name, widen=True)(*flat)]
    chains = reduction_chain(closed.jaxpr)
    assert len(got) == len(xla) == len(reference) == len(chains)
    worst = 0.0
    for index, (want, have, exact, chain) in enumerate(zip(xla, got, reference, chains, strict=True)):
        label = f"{entry.name} output {index}"
        assert have.dtype == want.dtype and have.shape == want.shape, label
        if want.dtype.kind != "f":
            np.testing.assert_array_equal(have, want, err_msg=label)
            continue
        measured, xla_units = units(have, exact), units(want, exact)
        bound = max(probabilistic_bound(chain), CONFIDENCE * xla_units)
        assert measured <= bound, (
            f"{label}: {measured:.3g} float32 units from the reference, bound {bound:.3g}"
        )
        worst = max(worst, measured / bound)
    note(entry.name, f"ran: worst {worst:.2f} of its bound")


def test_optimizer_corpus_makes_its_decisions_on_exact_values():
    params, images, labels = positive_mlp()
    first = lambda a, b: a @ b  # noqa: E731
    assert exact_affine(images, params["w1"], params["b1"], first), "the ReLU pre-activations round"
    # No cancellation in the gradient: logits above their targets, a positive second layer, x >= 0.
    assert np.all(np.asarray(mlp_logits(params, images)) > 1) and np.all(params["w2"] > 0)
    assert np.all(images >= 0)


def test_lenet_corpus_makes_its_decisions_on_exact_values():
    params, images, _ = lenet_inputs()
    (x, pooled, flat), _, _ = lenet_layers(params, images)
    dimensions = ("NHWC", "HWIO", "NHWC")

    def conv(a, w):
        with x64():
            return np.asarray(
                lax.conv_general_dilated(
                    jnp.asarray(a), jnp.asarray(w), (1, 1), "VALID", dimension_numbers=dimensions
                )
            )

    dense = lambda a, b: a @ b  # noqa: E731
    layers = [
        (np.asarray(x), params["c1"], params["b1"], conv),
        (np.asarray(pooled), params["c2"], params["b2"], conv),
        (np.asarray(flat), params["d1"], params["e1"], dense),
    ]
    for index, (inputs, weights, bias, contract) in enumerate(layers):
        assert exact_affine(inputs, weights, bias, contract), f"layer {index + 1}'s pre-activations round"
