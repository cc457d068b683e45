"""Which cells of the numerics matrix CI runs: a covering set of the kernels the full matrix found.

Why: the full matrix (every OpenBLAS core type x XLA ISA x thread count) is half an hour or more,
but most of its cells compute what another cell computes: the committed matrix found 7 different
NumPy products and 2 different XLA results over 24 cells. CI runs a set of cells in which every
result this CPU can compute appears at least once, so every kernel the matrix exercised is
exercised again on each push, plus every cell whose result on this CPU is not in the record at
all (a new CPU can bring new kernels). Results are the products `matrix.FINGERPRINT` hashes; a
recorded result that no cell computes here is reported as out of this CPU's reach.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: A cell's two results: the NumPy product's and the XLA computation's fingerprints.
Results = tuple[str | None, str | None]
KINDS = ("NumPy", "XLA")


def _tagged(results: Results) -> set[tuple[str, str]]:
    return {(kind, value) for kind, value in zip(KINDS, results, strict=True) if value is not None}


@dataclass
class Cover:
    """The cells to run, in the order they were chosen, each with the reason it was chosen."""

    cells: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    #: Recorded results that no cell computes on this CPU, as "NumPy `abc`".
    out_of_reach: list[str] = field(default_factory=list)

    def add(self, cell: str, reason: str) -> None:
        self.cells.append(cell)
        self.reasons[cell] = reason


def covering_cells(
    recorded: dict[str, Results],
    here: dict[str, Results],
    threads: dict[str, int],
    tested: Results = (None, None),
) -> Cover:
    """Cells (of `here`, in its order) whose results together include every result computed here.

    `recorded`: each cell's results in the committed matrix. `here`: each runnable cell's results
    on this CPU. `threads`: each cell's thread count; among cells that add as many results, the
    one with fewer threads is taken (it holds fewer cores, so more cells run side by side).
    `tested`: results already exercised by the same tests and DAG (CI's `make test`, under this
    machine's default kernels), which no cell needs to compute again.
    """
    known = set().union(*map(_tagged, recorded.values())) if recorded else set()
    cover = Cover()
    for cell, results in here.items():
        new = sorted(_tagged(results) - known)
        if new:
            names = ", ".join(f"{kind} `{value}`" for kind, value in new)
            cover.add(cell, f"computes {names}, which the record does not hold")
    wanted = set().union(*map(_tagged, here.values())) if here else set()
    left = wanted - set().union(*(_tagged(here[cell]) for cell in cover.cells)) - _tagged(tested)
    order = {cell: index for index, cell in enumerate(here)}
    while left:
        best = max(
            (cell for cell in here if cell not in cover.reasons),
            key=lambda cell: (len(_tagged(here[cell]) & left), -threads[cell], -order[cell]),
        )
        gained = sorted(_tagged(here[best]) & left)
        cover.add(best, "the first to compute " + ", ".join(f"{kind} `{value}`" for kind, value in gained))
        left -= set(gained)
    cover.out_of_reach = [f"{kind} `{value}`" for kind, value in sorted(known - wanted)]
    return cover
