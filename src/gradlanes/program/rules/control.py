"""Control flow: scan, while and cond, each running nested plans built once when the program is planned.

A fused train step (`fuse_steps: K`) is a `scan` of the step, `lax.fori_loop` becomes a scan or a
while, and `jax.grad` of a `lax.cond` is a cond of the branch gradients. Each body is planned once
(`PlanMaker`), so a scan of K steps costs K runs of one flat plan, not K re-plans; only the loop
over iterations is Python, as it must be. `empty2` belongs here too: it is the placeholder a cond's
gradient fills for branches that produce no residual.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradlanes.program.jaxcompat import is_extended, key_impl
from gradlanes.program.rules.prng import KeyArray
from gradlanes.program.rules.registry import PlanMaker, rule, structured


def _plan_closed(make_plan: PlanMaker, closed) -> Any:
    return make_plan(closed.jaxpr, list(closed.consts))


def _row(value: Any, index: int) -> Any:
    """Element `index` of a scanned operand along its leading axis (a view, keys included)."""
    return KeyArray(value.data[index], value.dtype) if isinstance(value, KeyArray) else value[index]


def _stacked(rows: list[Any], var, make_plan: PlanMaker) -> Any:
    """The per-iteration outputs of a scan stacked on a new leading axis, as the scan declares."""
    if not rows:  # a zero-length scan still returns [0, ...]-shaped outputs of the declared dtype
        if is_extended(var.aval.dtype):  # keys: no words, as many as each key has
            words = (*var.aval.shape, *key_impl(var.aval.dtype).key_shape)
            return KeyArray(np.zeros(words, np.uint32), var.aval.dtype)
        return np.zeros(var.aval.shape, make_plan.dtype_of(var.aval.dtype))
    if isinstance(rows[0], KeyArray):
        return KeyArray(np.stack([row.data for row in rows]), rows[0].dtype)
    return np.stack([np.asarray(row) for row in rows])


def _scan(eqn, make_plan: PlanMaker):
    params = eqn.params
    body = _plan_closed(make_plan, params["jaxpr"])
    num_consts, num_carry, length = params["num_consts"], params["num_carry"], params["length"]
    order = range(length - 1, -1, -1) if params["reverse"] else range(length)
    stacked_vars = eqn.outvars[num_carry:]

    def run(*operands):
        consts = operands[:num_consts]
        carry = list(operands[num_consts : num_consts + num_carry])
        scanned = operands[num_consts + num_carry :]
        rows: list[list[Any]] = [[] for _ in stacked_vars]
        for index in order:
            results = body(*consts, *carry, *[_row(x, index) for x in scanned])
            carry = results[:num_carry]
            for collected, value in zip(rows, results[num_carry:], strict=True):
                collected.append(value)
        if params["reverse"]:  # rows were collected last index first
            rows = [collected[::-1] for collected in rows]
        return [*carry, *(_stacked(r, v, make_plan) for r, v in zip(rows, stacked_vars, strict=True))]

    return run, {}


structured("scan")(_scan)


def _while(eqn, make_plan: PlanMaker):
    params = eqn.params
    condition = _plan_closed(make_plan, params["cond_jaxpr"])
    body = _plan_closed(make_plan, params["body_jaxpr"])
    cond_consts, body_consts = params["cond_nconsts"], params["body_nconsts"]

    def run(*operands):
        condition_args = operands[:cond_consts]
        body_args = operands[cond_consts : cond_consts + body_consts]
        carry = list(operands[cond_consts + body_consts :])
        while bool(condition(*condition_args, *carry)[0]):
            carry = body(*body_args, *carry)
        return carry

    return run, {}


structured("while")(_while)


def _cond(eqn, make_plan: PlanMaker):
    branches = [_plan_closed(make_plan, branch) for branch in eqn.params["branches"]]
    count = len(branches)

    def run(index, *operands):
        # XLA's Conditional runs the last branch for any index outside [0, count), negative ones
        # too (lax.switch clamps its index first; a cond bound by hand need not).
        index = int(index)
        return branches[index if 0 <= index < count else count - 1](*operands)

    return run, {}


structured("cond")(_cond)


def _empty2(*, dtype, **_):
    """A scalar whose value no result depends on (XLA lowers it to a zero constant)."""
    return np.zeros((), dtype)


rule("empty2")(_empty2)
