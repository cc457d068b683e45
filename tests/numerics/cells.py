"""The kernel choices a machine can be made to take: the cells of the numerics matrix.

NumPy's OpenBLAS picks its kernels by CPU and `OPENBLAS_CORETYPE` forces one; XLA:CPU picks its
vector ISA by CPU and `--xla_cpu_max_isa` caps it; the thread count changes how products are split.
Each choice sums in another order, so each cell reproduces, on this one machine, the float32
rounding of another machine. A cell whose kernel needs an instruction set this CPU lacks is skipped
with the reason (running it would crash or silently fall back, and prove nothing).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: OpenBLAS core types and the CPU flags each kernel needs.
CORETYPES = {
    "Nehalem": {"sse4_2"},
    "Sandybridge": {"avx"},
    "Haswell": {"avx2", "fma"},
    "SkylakeX": {"avx512f"},
}
#: XLA:CPU ISA caps (None: XLA's own choice for this CPU) and the flags each needs.
XLA_ISAS = {"AVX": {"avx"}, "AVX2": {"avx2"}, None: set()}
THREADS = (1, 2)


def cpu_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@dataclass(frozen=True)
class Cell:
    coretype: str
    isa: str | None
    threads: int

    @property
    def name(self) -> str:
        return f"{self.coretype}-{self.isa or 'xla_default'}-{self.threads}t"

    def missing(self, flags: set[str]) -> set[str]:
        return (CORETYPES[self.coretype] | XLA_ISAS[self.isa]) - flags

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env["OPENBLAS_CORETYPE"] = self.coretype
        env.pop("OPENBLAS_L2_SIZE", None)  # set by some images for the default core type only
        flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_cpu_max_isa")]
        if self.isa:
            flags.append(f"--xla_cpu_max_isa={self.isa}")
        env["XLA_FLAGS"] = " ".join(flags)
        for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
            env[variable] = str(self.threads)
        return env

    def command(self, argv: list[str], cores: tuple[int, ...] | None = None) -> list[str]:
        """`argv` pinned to `threads` cores (`cores`, or the first this process may use): affinity
        binds XLA's pool too, which ignores flags."""
        if cores is None:
            cores = tuple(sorted(os.sched_getaffinity(0))[: self.threads])
        if len(cores) != self.threads:
            raise ValueError(f"cell {self.name} runs on {self.threads} core(s), given {cores}")
        return ["taskset", "-c", ",".join(map(str, cores)), *argv]


def all_cells() -> list[Cell]:
    return [Cell(c, i, t) for c in CORETYPES for i in XLA_ISAS for t in THREADS]


def split_runnable(cells: list[Cell]) -> tuple[list[Cell], dict[Cell, str]]:
    flags = cpu_flags()
    runnable, skipped = [], {}
    for cell in cells:
        missing = cell.missing(flags)
        cores = len(os.sched_getaffinity(0))
        if missing:
            skipped[cell] = f"this CPU lacks {', '.join(sorted(missing))}"
        elif cell.threads > cores:
            skipped[cell] = f"only {cores} core(s) here"
        else:
            runnable.append(cell)
    return runnable, skipped
