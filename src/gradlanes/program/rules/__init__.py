"""The interpreter's rules, one module per kind of primitive; importing this package registers them.

To add a primitive: one rule in the module of its kind (or a new module imported below), and one
generated test case in that kind's tests/test_rules_<kind>.py (named in its COVERED set).
"""

from gradlanes.program.rules import (  # noqa: F401  (they register)
    control,
    elementwise,
    indexing,
    linalg,
    prng,
    shapes,
    sorting,
    special,
    windows,
)
from gradlanes.program.rules.registry import (
    EXACT_DTYPES,
    RULES,
    STRUCTURED,
    PlanMaker,
    Rule,
    rule,
    structured,
)

__all__ = ["EXACT_DTYPES", "RULES", "STRUCTURED", "PlanMaker", "Rule", "rule", "structured"]
