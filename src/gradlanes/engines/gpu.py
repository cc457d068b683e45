"""What a GPU lane settles before JAX starts: why no GPU is usable, and the flags that make it repeat.

Two facts belong to no engine's numerics but decide what a `device: gpu` lane records:

- When `jax.devices("gpu")` fails, the reason a person can act on differs: a machine with no
  NVIDIA GPU simply skips the lane; a machine with one but the CPU-only jaxlib needs JAX's CUDA
  plugin (`make install GPU=cuda13` or `GPU=cuda12`); a machine whose plugin is installed but did
  not start has a driver or library problem. `gpu_unavailable_reason` tells them apart.
- XLA picks GPU kernels that may differ from run to run (atomics in reductions, autotuned
  algorithms) unless `--xla_gpu_deterministic_ops=true` is set. XLA reads `XLA_FLAGS` once per
  process, when the first backend starts, so the flag must be in the environment before that;
  `use_deterministic_gpu_flags` puts it there and refuses where it is too late to take effect;
  `prepare_gpu_lane` does so for a gpu lane wherever the machine shows a GPU.

The flag's name is the one jaxlib 0.10.2 and 0.11.2 and jax-cuda13-pjrt 0.11.2 register (read
from their shared libraries); an unknown name would abort the process when XLA parses it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, MutableMapping
from importlib import metadata
from pathlib import Path

DETERMINISTIC_FLAG = "xla_gpu_deterministic_ops"
#: What a GPU lane adds to XLA_FLAGS: "Guarantees run-to-run determinism on GPU" (XLA's own help).
DETERMINISTIC_FLAGS = (f"--{DETERMINISTIC_FLAG}=true",)

# Where a machine shows an NVIDIA GPU without asking JAX (paths are module-level so tests can
# point them elsewhere).
NVIDIA_DEVICE = Path("/dev/nvidia0")
NVIDIA_DRIVER = Path("/proc/driver/nvidia")
NVIDIA_SMI = "nvidia-smi"

#: JAX's CUDA plugin distributions, per flavour `make install GPU=...` installs.
CUDA_PLUGINS = {
    "cuda12": ("jax-cuda12-plugin", "jax-cuda12-pjrt"),
    "cuda13": ("jax-cuda13-plugin", "jax-cuda13-pjrt"),
}
#: The oldest Linux driver each flavour runs on (JAX's installation guide, "NVIDIA GPU").
MIN_DRIVER = {"cuda13": 580, "cuda12": 525}
#: XLA backend names that are a GPU (jax.devices("gpu") means either).
GPU_BACKENDS = frozenset({"cuda", "rocm", "gpu"})


class GpuFlagsTooLate(RuntimeError):
    """XLA already started in this process without the deterministic flag; a GPU run would not repeat."""


# ---- why there is no GPU ---------------------------------------------------------------------


def _nvidia_smi(*args: str) -> str | None:
    binary = shutil.which(NVIDIA_SMI)
    if binary is None:
        return None
    try:
        done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def nvidia_gpu_evidence() -> str | None:
    """How this machine shows an NVIDIA GPU (nvidia-smi, the device node, the driver), or None."""
    listed = _nvidia_smi("-L")
    if listed:
        return f"nvidia-smi lists {listed.splitlines()[0].split(' (UUID')[0]}"
    if NVIDIA_DEVICE.exists():
        return f"{NVIDIA_DEVICE} exists"
    if NVIDIA_DRIVER.exists():
        return f"the NVIDIA driver is loaded ({NVIDIA_DRIVER} exists)"
    return None


def driver_version() -> str | None:
    """The NVIDIA driver's version (e.g. '580.159.03'), from nvidia-smi or the kernel module."""
    answer = _nvidia_smi("--query-gpu=driver_version", "--format=csv,noheader")
    if answer:
        return answer.splitlines()[0].strip()
    try:
        words = (NVIDIA_DRIVER / "version").read_text().split()
    except OSError:
        return None
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.03  ..."
    return next((w for w in words if w[:1].isdigit() and "." in w), None)


def flavour_for_driver(version: str | None) -> str | None:
    """The newest CUDA flavour this driver runs, or None where it is too old (or unknown)."""
    try:
        major = int(str(version).split(".")[0])
    except ValueError:
        return None
    return next((flavour for flavour, needed in MIN_DRIVER.items() if major >= needed), None)


def installed_cuda_plugins() -> list[str]:
    """JAX CUDA plugin distributions installed here, as 'name version'."""
    found = []
    for names in CUDA_PLUGINS.values():
        for name in names:
            try:
                found.append(f"{name} {metadata.version(name)}")
            except metadata.PackageNotFoundError:
                continue
    return found


def install_advice(driver: str | None) -> str:
    """Which `make install GPU=...` to run, the driver's own flavour first."""
    choices = [f"`make install GPU={flavour}` (driver >= {needed})" for flavour, needed in MIN_DRIVER.items()]
    if flavour_for_driver(driver) == "cuda12":
        choices.reverse()
    return " or ".join(choices)


def gpu_unavailable_reason(platforms: Iterable[str]) -> str:
    """Why a gpu lane cannot run where JAX's backends are `platforms`, and what to do about it."""
    present = ", ".join(sorted(set(platforms))) or "none"
    evidence = nvidia_gpu_evidence()
    if evidence is None:
        return (
            f"JAX sees no GPU here (platforms present: {present}); a gpu lane runs only where jaxlib "
            "has that backend"
        )
    driver = driver_version()
    machine = f"this machine has an NVIDIA GPU ({evidence}; driver {driver or 'version unknown'})"
    plugins = installed_cuda_plugins()
    if not plugins:
        return (
            f"{machine}, but the installed jaxlib is CPU-only (platforms present: {present}): run "
            f"{install_advice(driver)} to add JAX's CUDA plugin at the pinned jax version (README: GPU)"
        )
    return (
        f"{machine} and JAX's CUDA plugin is installed ({', '.join(plugins)}), but JAX did not start it "
        f"(platforms present: {present}); JAX logged why when it started. CUDA 13 needs driver >= "
        f"{MIN_DRIVER['cuda13']}, CUDA 12 >= {MIN_DRIVER['cuda12']}; check `nvidia-smi` and "
        "`python -c 'import jax; print(jax.devices())'` (README: GPU)"
    )


# ---- deterministic GPU runs ------------------------------------------------------------------


def flag_value(flags: str | None, name: str) -> str | None:
    """The value XLA will read for `--name` in an XLA_FLAGS string (the last one wins; bare = true)."""
    value = None
    for token in (flags or "").split():
        key, _, given = token.removeprefix("--").partition("=")
        if key == name:
            value = given if given else "true"
    return value


def with_deterministic_flags(flags: str | None) -> str:
    """XLA_FLAGS with the deterministic GPU flag added; the caller's own flags are kept as they are."""
    value = flag_value(flags, DETERMINISTIC_FLAG)
    if value is not None and value.lower() in ("false", "0"):
        raise ValueError(
            f"XLA_FLAGS sets --{DETERMINISTIC_FLAG}={value}, but a gpu lane must repeat bit for bit: "
            f"remove it from XLA_FLAGS (gradlanes adds --{DETERMINISTIC_FLAG}=true itself)"
        )
    if value is not None:
        return flags or ""
    return " ".join([*(flags or "").split(), *DETERMINISTIC_FLAGS])


def started_backends() -> frozenset[str] | None:
    """The XLA backends this process started (`jaxcompat`; imported late: this module itself needs
    only the standard library, so tools/gpu/oneshot.py can ask about the GPU before installing)."""
    from gradlanes.program.jaxcompat import started_backends as started

    return started()


def use_deterministic_gpu_flags(
    environ: MutableMapping[str, str] = os.environ, started=started_backends
) -> str:
    """Make this process's GPU runs deterministic before XLA starts; return the XLA_FLAGS in force.

    Where XLA already started with a GPU backend and without the flag, it can no longer take
    effect: that is refused (`GpuFlagsTooLate`). Where only CPU backends started (a test process
    on a machine without a GPU), the lane will be skipped anyway, and the environment is left
    alone so that later CPU runs in the process record what they really ran with.
    """
    current = environ.get("XLA_FLAGS")
    wanted = with_deterministic_flags(current)
    if wanted == (current or ""):
        return wanted
    running = started()
    if running is not None and running & GPU_BACKENDS:
        raise GpuFlagsTooLate(
            f"XLA's GPU backend already started in this process without {' '.join(DETERMINISTIC_FLAGS)}, "
            f"so a GPU run here would not repeat bit for bit: start the process with XLA_FLAGS='{wanted}'"
        )
    if running:
        return current or ""
    environ["XLA_FLAGS"] = wanted
    return wanted


def prepare_gpu_lane(environ: MutableMapping[str, str] = os.environ, started=started_backends) -> str | None:
    """For a gpu lane's process, before XLA starts: the deterministic flags, where there is a GPU.

    Where the machine shows no NVIDIA GPU the lane is skipped before anything compiles, and its
    record keeps the environment it really ran in (so a CPU machine's records do not change).
    """
    if nvidia_gpu_evidence() is None:
        return environ.get("XLA_FLAGS")
    return use_deterministic_gpu_flags(environ, started)
