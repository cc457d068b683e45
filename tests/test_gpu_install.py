"""The GPU install paths, checked on a machine without a GPU.

`make install GPU=cuda12|cuda13` (the CUDA plugin at the locked jax, plain `make install` as it
was), the one-shot GPU script's refusal where no GPU is visible, and the wheel set it carries to
the GPU machine (.whl/, filled by `bash tools/gpu/fetch_wheels.sh`): resolved for CPython 3.12 by
pip offline, complete against the machine's image, and small enough to travel with the checkout.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from prerequisites import require

from gradlanes.engines import gpu

REPO = Path(__file__).resolve().parents[1]
TOOLS = REPO / "tools" / "gpu"
FILL = "bash tools/gpu/fetch_wheels.sh"
DEVICE_LIMIT_MIB = 64  # what one device call may carry: the checkout and the carried folders


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"gpu_tools_{name}", TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wheelset = load("wheelset")
oneshot = load("oneshot")


def pins(path: Path) -> dict[str, str]:
    return {
        re.sub(r"[-_.]+", "-", name).lower(): version
        for name, _, version in (
            line.partition("==")
            for line in path.read_text().splitlines()
            if line and not line.startswith("#")
        )
    }


@pytest.fixture
def wheels() -> Path:
    require(
        any(wheelset.WHEELS.glob("*.whl")) and wheelset.MNIST.is_dir(),
        f"{wheelset.WHEELS} is not filled: run `{FILL}` (needs PyPI) to fill it",
    )
    return wheelset.WHEELS


# ---- make install GPU=... ------------------------------------------------------------------------


def make(*args: str) -> subprocess.CompletedProcess:
    command = ["make", "--no-print-directory", "-C", str(REPO), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_plain_install_is_what_it_was(tmp_path):
    venv = tmp_path / "venv"
    done = make("-n", "install", f"VENV={venv}")
    assert done.returncode == 0, done.stderr
    pip = f"{venv}/bin/python -m pip install --quiet --disable-pip-version-check"
    assert done.stdout.splitlines() == [
        f"test -x {venv}/bin/python || python3 -m venv {venv}",
        f"{pip} -r requirements.lock",
        f"{pip} --no-deps --no-build-isolation -e .",
        f"touch {venv}/.installed-stamp",
    ]


@pytest.mark.parametrize("flavour, other", [("cuda12", "cuda13"), ("cuda13", "cuda12")])
def test_gpu_install_adds_one_flavour_over_the_cpu_lock(tmp_path, flavour, other):
    venv = tmp_path / "venv"
    lines = make("-n", "install", f"GPU={flavour}", f"VENV={venv}").stdout.replace("\\\n\t", "")
    assert (
        f"pip uninstall --quiet --quiet --disable-pip-version-check -y jax-{other}-plugin jax-{other}-pjrt"
        in lines
    )
    assert f"-c requirements.lock -r requirements-gpu-{flavour}.lock" in lines
    assert lines.index("requirements.lock\n") < lines.index(f"requirements-gpu-{flavour}.lock")


def test_the_gpu_stamp_reinstalls_when_its_lock_changes(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed-stamp").touch()
    (venv / ".gpu-cuda12-stamp").touch()
    assert make("-q", "install", "GPU=cuda12", f"VENV={venv}").returncode == 0, "up to date"
    changed = ["-W", "requirements-gpu-cuda12.lock"]  # make's "what if this file were new"
    assert make("-q", *changed, "install", "GPU=cuda12", f"VENV={venv}").returncode == 1
    assert make("-q", *changed, "install", f"VENV={venv}").returncode == 0, "plain install ignores GPU locks"
    assert make("-q", "-W", "requirements.lock", "install", "GPU=cuda12", f"VENV={venv}").returncode == 1


def test_an_unknown_flavour_is_refused_by_name(tmp_path):
    done = make("-n", "install", "GPU=cuda11", f"VENV={tmp_path}")
    assert done.returncode != 0
    assert "GPU=cuda11 is not a CUDA flavour gradlanes pins: use GPU=cuda13" in done.stderr


@pytest.mark.parametrize("flavour", ["cuda12", "cuda13"])
def test_gpu_locks_pin_the_plugin_at_the_locked_jax(flavour):
    lock, cpu = REPO / f"requirements-gpu-{flavour}.lock", pins(REPO / "requirements.lock")
    gpu_pins = pins(lock)
    assert gpu_pins[f"jax-{flavour}-plugin"] == gpu_pins[f"jax-{flavour}-pjrt"] == cpu["jax"] == cpu["jaxlib"]
    assert not set(gpu_pins) & set(cpu), "a GPU lock adds packages; it never repins the CPU lock's"
    header = lock.read_text().split("\n" + next(iter(gpu_pins)))[0]
    assert f"make install GPU={flavour}" in header and f"'jax[{flavour}]=={cpu['jax']}'" in header


# ---- the one-shot GPU script ----------------------------------------------------------------------


def test_the_oneshot_script_refuses_at_once_without_a_gpu(tmp_path):
    if gpu.nvidia_gpu_evidence() is not None:
        pytest.skip("this machine shows an NVIDIA GPU: the refusal cannot be seen here")
    site = tmp_path / "scratch" / "site"
    done = subprocess.run(
        ["bash", str(TOOLS / "oneshot.sh"), str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin",
        "GRADLANES_ONESHOT_SITE": str(site), "PYTHON": sys.executable},
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "refused: no NVIDIA GPU is visible here" in done.stderr and "nothing was installed" in done.stderr
    assert not site.parent.exists(), "nothing is installed before the refusal"
    assert "no NVIDIA GPU" in (tmp_path / "out" / "oneshot.json").read_text()


def test_the_oneshot_script_refuses_where_jax_sees_no_gpu(monkeypatch):
    monkeypatch.setattr(oneshot.gpu, "nvidia_gpu_evidence", lambda: "/dev/nvidia0 exists")
    monkeypatch.setattr(oneshot, "jax_gpu", lambda python: (None, "RuntimeError: Unknown backend: 'gpu'"))
    why = oneshot.refusal(sys.executable, rehearse=False)
    assert "has an NVIDIA GPU (/dev/nvidia0 exists), but JAX" in why and "Unknown backend" in why


def test_the_oneshot_script_refuses_without_its_wheels(monkeypatch, tmp_path):
    monkeypatch.setattr(oneshot, "WHEELS", tmp_path / ".whl")
    monkeypatch.setattr(oneshot, "MNIST", tmp_path / ".whl" / "mnist")
    why = oneshot.refusal(sys.executable, rehearse=True)
    assert f"`{FILL}`" in why and "carry=['.whl']" in why


def test_gradlanes_is_registered_by_its_metadata_alone(tmp_path):
    oneshot.register_gradlanes(tmp_path)
    (dist,) = list(metadata.distributions(path=[str(tmp_path)]))
    engines = {point.name: point.value for point in dist.entry_points if point.group == "gradlanes.engines"}
    installed = {p.name: p.value for p in metadata.entry_points(group="gradlanes.engines")}
    assert dist.metadata["Name"] == "gradlanes" and engines == installed


def test_the_oneshot_targets_are_every_seed_of_every_gpu_lane():
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    experiment, lanes, targets = oneshot.gpu_lane_targets([REPO / "config.yaml"])
    expected = {lane for lane, settings in config["lanes"].items() if settings.get("device") == "gpu"}
    assert set(lanes) == expected and "xla_gpu" in lanes
    assert len(targets) == sum(len(seeds) for seeds in lanes.values())
    assert f"work/{experiment}/runs/xla_gpu/seed-0/record.json" in targets


def test_the_gpu_lanes_publish_an_experiment_of_their_own(tmp_path, monkeypatch):
    """The GPU machine's JAX traces another program text, so its lanes are their own experiment."""
    assert oneshot.experiment_name("mnist", "NVIDIA H200") == "mnist-nvidia-h200"
    assert oneshot.experiment_name("mnist", "NVIDIA GeForce RTX 4090 ") == "mnist-nvidia-geforce-rtx-4090"
    monkeypatch.setattr(oneshot, "SCRATCH", tmp_path)
    run = oneshot.Run(tmp_path, sys.executable)
    run.device_kind = "NVIDIA H200"
    try:
        override = yaml.safe_load(oneshot.override_file(run).read_text())
    finally:
        run.close()
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    assert override["only_lanes"] == [lane for lane, s in config["lanes"].items() if s.get("device") == "gpu"]
    assert override["experiment"] == "mnist-nvidia-h200" and override["replace_published"] is True
    experiment, lanes, _ = oneshot.gpu_lane_targets([REPO / "config.yaml", oneshot.override_file(run)])
    assert experiment == "mnist-nvidia-h200" and list(lanes) == override["only_lanes"]


def test_fetch_wheels_says_where_mnist_is_missing(tmp_path):
    done = subprocess.run(
        ["bash", str(TOOLS / "fetch_wheels.sh")], capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "GRADLANES_SHARED": str(tmp_path), "PYTHON": sys.executable},
    )  # fmt: skip
    assert done.returncode == 2 and "set GRADLANES_SHARED to a folder holding datasets/mnist/" in done.stderr


# ---- the wheel set the one-shot run carries ---------------------------------------------------------


def test_the_wheel_list_follows_the_lock():
    locked = pins(REPO / "requirements.lock")
    listed = pins(wheelset.PINS)
    assert {name: locked.get(name) for name in listed} == listed


def test_the_wheel_set_resolves_offline_for_python_312(wheels, tmp_path):
    done = subprocess.run(wheelset.pip_dry_run(tmp_path / "site", wheels), capture_output=True, text=True,
                          timeout=300, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    would = next(line for line in done.stdout.splitlines() if line.startswith("Would install"))
    resolved = {re.sub(r"[-_.]+", "-", item.rsplit("-", 1)[0]).lower() for item in would.split()[2:]}
    assert resolved == set(pins(wheelset.PINS))
    assert not (tmp_path / "site").exists(), "a dry run installs nothing"


def test_the_wheel_set_is_complete_for_the_gpu_image(wheels):
    assert wheelset.problems(wheels) == []


def test_a_missing_wheel_is_named_with_the_fill_command(wheels, tmp_path):
    for path in wheels.glob("*.whl"):
        if not path.name.startswith("referencing-"):
            (tmp_path / path.name).symlink_to(path)
    found = wheelset.problems(tmp_path)
    assert (
        f"referencing==0.37.0 is listed in h200-wheels.txt but has no wheel in {tmp_path}: run {FILL}"
        in found
    )
    assert any(line.startswith("jsonschema needs referencing") for line in found)


def test_the_carried_mnist_is_the_pinned_content(wheels):
    files = yaml.safe_load((REPO / "config.yaml").read_text())["dataset"]["files"]
    for spec in files.values():
        content = gzip.decompress((wheelset.MNIST / spec["name"]).read_bytes())
        assert hashlib.sha256(content).hexdigest() == spec["sha256"], spec["name"]


def test_what_a_device_call_carries_fits(wheels):
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.split(b"\0")  # fmt: skip
    checkout = sum(
        (REPO / name.decode()).stat().st_size for name in listed if name and (REPO / name.decode()).is_file()
    )
    carried = wheelset.size_bytes(wheels)
    total_mib = (checkout + carried) / 2**20
    print(f"checkout {checkout / 2**20:.1f} MiB + .whl {carried / 2**20:.1f} MiB = {total_mib:.1f} MiB")
    assert total_mib < DEVICE_LIMIT_MIB - 8, "leave room: the checkout grows with every committed result"
