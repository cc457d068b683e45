"""The engine benchmark: every engine on the same workloads, timed side by side in one run.

Absolute times on a shared 2-core machine drift; ratios measured pair by pair inside one run, and
the fraction of the machine's measured matmul limit, are the durable claims. See `protocol` for the
method, `workloads` for what is timed, `report` for `results/bench.md`.
"""
