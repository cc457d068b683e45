"""How many generated cases the property tests run: a Hypothesis profile per purpose.

Each property test states its count of cases as `examples(n)`, where n is what CI runs. The
count scales with the loaded profile's `max_examples` against Hypothesis' default of 100:

    ci      (the default; `make test`, CI, the mutation runs)  n cases, derandomized where the test
            says so: the same cases on every machine, the ones the mutation records measured
    quick   (`make check`, the editing loop)                    n / 10, at least 1; conftest also
            keeps a tenth of each parametrized test's cases (the first, the eleventh, ...)
    deep    (`make test-deep`)                                  10 n: cases CI never reaches

Pick one with `pytest --hypothesis-profile NAME`; conftest loads `ci` when none is named.
"""

from __future__ import annotations

import math

from hypothesis import settings

BASE = 100  # Hypothesis' own max_examples, which the counts in the tests are relative to
PROFILES = {"quick": BASE // 10, "ci": BASE, "deep": 10 * BASE}

for name, max_examples in PROFILES.items():
    settings.register_profile(name, max_examples=max_examples)


def examples(count: int) -> int:
    """`count` cases (CI's number) scaled to the loaded profile; never fewer than one."""
    return max(1, math.ceil(count * settings.default.max_examples / BASE))
