"""The interpreter's rule tables: one NumPy rule per primitive, and builders for control flow.

A rule takes the equation's operands (NumPy arrays) and its params and returns the result (a list
of results for primitives with several). A structured builder is for primitives that run nested
jaxprs with their own control flow (scan, while, cond, ...): it gets the equation and a function
that turns a nested jaxpr into a runnable plan, once, when the program is planned, and returns the
rule to run. Modules of this package register into both tables when imported.

They register with a call after the definition (`rule("x")(_x)`), not as a decorator, and a body
shared by several primitives is one module function bound per primitive with functools.partial,
not a closure made at import: mutmut mutates neither decorated functions nor closures made at
import, so either would leave a rule's body out of its mutation score (tools/mutation.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

Rule = Callable[..., Any]
RULES: dict[str, Rule] = {}
#: Primitives defined by the bits of their operands' own format (bitcast_convert_type, nextafter,
#: random bits): the float64 reference (`widen`) runs them at the program's dtypes, operands cast
#: back and dtype params left alone, and widens only their results.
EXACT_DTYPES: set[str] = set()


def rule(*names: str, exact_dtypes: bool = False):
    def register(fn: Rule) -> Rule:
        for name in names:
            RULES[name] = fn
            if exact_dtypes:
                EXACT_DTYPES.add(name)
        return fn

    return register


class PlanMaker(Protocol):
    """Plans a nested jaxpr once: (jaxpr, consts) -> a function of its inputs returning a list.

    `dtype_of` maps a jaxpr dtype to the one the plan holds (float64 for floats under widen), for
    builders that allocate results themselves (a zero-length scan's stacked outputs).
    """

    dtype_of: Callable[[Any], Any]

    def __call__(self, jaxpr: Any, consts: list) -> Callable[..., list]: ...


#: name -> builder(eqn, make_plan) -> (rule, params): control flow that plans its nested jaxprs.
STRUCTURED: dict[str, Callable[[Any, PlanMaker], tuple[Rule, dict]]] = {}


def structured(*names: str):
    def register(fn):
        for name in names:
            STRUCTURED[name] = fn
        return fn

    return register
