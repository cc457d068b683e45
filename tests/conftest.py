"""The session's setup: fixtures over the real MNIST in ../shared (a local HTTP mirror of it, the
arrays prepared once, the CI-subset DAG run once), the Hypothesis profile, one XLA compilation
cache, and the order in which pytest-xdist hands the tests out (docs/testing.md)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import Phase, settings
from hypothesis_profiles import PROFILES  # registers the profiles on import
from mirror import MirrorServer
from prerequisites import require
from shared_work import SharedWork, SharedWorkFailed, private_copy, session_root

REPO = Path(__file__).resolve().parents[1]

if os.environ.get("GRADLANES_MUTATION"):
    # tools/mutation.py: each mutant only needs pass or fail. A failing property test would shrink
    # its example (an XLA compile per try) until mutmut's CPU limit and count as a timeout; without
    # shrinking or the example database it fails at the same first example, in seconds. CI's count
    # of cases (`ci`), the one the mutation records measure.
    settings.register_profile(
        "mutation", parent=settings.get_profile("ci"), phases=[Phase.explicit, Phase.generate], database=None
    )
    settings.load_profile("mutation")
else:
    settings.load_profile("ci")  # `--hypothesis-profile NAME` loads another after this
SHARED_MNIST = Path(os.environ.get("GRADLANES_SHARED", REPO.parent / "shared")) / "datasets/mnist"
CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())
SUBSET = REPO / ".test" / "config.yaml"


@pytest.hookimpl(trylast=True)  # after pytest's tmp_path plugin has set up the basetemp
def pytest_configure(config: pytest.Config) -> None:
    """One XLA compilation cache for the whole test session: its workers and the snakemake jobs
    its tests start (they inherit the environment).

    The suite compiles the same programs many times over: the same train step in the capture,
    lane and benchmark tests, and in every DAG a test runs again (a rerun lane, another dataset
    with the same shapes, an agreement check). JAX's persistent cache keys each executable on
    the exact module, the compile options and XLA_FLAGS, so a hit runs what XLA would have built.
    It is honest here because nothing the tests assert depends on where an executable came from:
    a hit still counts as a compilation (JAX reports the backend compile event around the lookup,
    which `gradlanes.engines.compiles` counts), and no test reads a compile time beyond its being
    measured. The folder is new each session (pytest's basetemp) unless the caller names one
    (`make check` keeps its own between runs); `make run` and the published results never use it.
    """
    if os.environ.get("GRADLANES_MUTATION") or hasattr(config, "workerinput"):
        return  # a mutant's run is a session of its own; an xdist worker inherits the controller's
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # one the caller set (`make check`) is kept
        cache = config._tmp_path_factory.getbasetemp() / "xla-cache"
        cache.mkdir(exist_ok=True)
        os.environ["JAX_COMPILATION_CACHE_DIR"] = str(cache)
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"


@pytest.fixture(scope="session")
def shared_mnist() -> Path:
    require(
        (SHARED_MNIST / "train-images-idx3-ubyte.gz").is_file(),
        f"real MNIST not found at {SHARED_MNIST}: clone gradlanes beside a shared/ folder "
        "(as CI does) or set GRADLANES_SHARED to a folder holding datasets/mnist/",
    )
    return SHARED_MNIST


@pytest.fixture(scope="session")
def mirror_server(shared_mnist):
    with MirrorServer(shared_mnist) as server:
        yield server


@pytest.fixture
def dataset_config() -> dict:
    return {**CONFIG["dataset"]}


def _prepare_mnist(folder: Path) -> None:
    import json

    from gradlanes.data.prepare import ROLES, prepare_dataset

    files = CONFIG["dataset"]["files"]
    (folder / "download.json").write_text(json.dumps({"files": [{"role": r} for r in ROLES]}))
    for role in ROLES:
        (folder / files[role]["name"]).symlink_to(SHARED_MNIST / files[role]["name"])
    prepare_dataset(
        "mnist", files, 10, folder, folder / "download.json", folder / "mnist.npz", folder / "manifest.json"
    )


@pytest.fixture(scope="session")
def prepared_mnist(shared_mnist, request) -> dict:
    """The real MNIST prepared once per session (for every worker): paths of the arrays and manifest."""
    folder = SharedWork(session_root(request.config), "mnist", _prepare_mnist).get()
    return {"arrays": folder / "mnist.npz", "manifest": folder / "manifest.json"}


def _run_subset(folder: Path) -> None:
    """The CI subset's whole DAG through the real snakemake, from a mirror of its own."""
    from workflow import output_of, run_snakemake

    with MirrorServer(SHARED_MNIST) as server:
        process = run_snakemake(folder, configfile=SUBSET, overrides=_mirror_overrides(server))
    if process.returncode != 0:
        raise SharedWorkFailed(f"snakemake exited with {process.returncode}:\n{output_of(process)}")


def _mirror_overrides(server: MirrorServer) -> dict:
    return {"dataset": {"mirrors": [server.mirror("good")]}}


def _subset_work(config: pytest.Config) -> SharedWork:
    return SharedWork(session_root(config), "subset-run", _run_subset)


@pytest.fixture(scope="session")
def subset_run(shared_mnist, mirror_server, request):
    """The CI subset's finished DAG run, shared by the whole session: read it, never change it
    (`subset_copy` gives a test its own). Returns the folder and the config overrides that point
    a rerun at this process's mirror."""
    return _subset_work(request.config).get(), _mirror_overrides(mirror_server)


@pytest.fixture
def subset_copy(subset_run, tmp_path):
    """A private copy of the finished subset run, for tests that rerun, fail or kill parts of it,
    so that no test depends on what another test did to the shared one."""
    workdir, mirror = subset_run
    return private_copy(workdir, tmp_path / "subset"), mirror


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the subset run as soon as a collected test needs it, so that it runs beside the
    unit tests instead of before the first test that reads it."""
    needed = any("subset_run" in getattr(item, "fixturenames", ()) for item in session.items)
    if needed and (SHARED_MNIST / "train-images-idx3-ubyte.gz").is_file():
        _subset_work(session.config).start_in_background()


@pytest.fixture(autouse=True)
def _order_free_draws(request, monkeypatch):
    """A module's shared generator (`rng`, seeded by its `RNG_SEED`) starts afresh for each test.

    Without it a test's inputs were the draws the tests before it left, so a new order
    (pytest-randomly) gave it new data; each test now sees the same draws whatever ran first.
    """
    seed = getattr(request.module, "RNG_SEED", None)
    if seed is not None:
        monkeypatch.setattr(request.module, "rng", np.random.default_rng(seed))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under the `quick` profile (`make check`), a tenth of each parametrized test's cases; then
    the order for pytest-xdist, which hands tests out in this order: the slow tests that need no
    subset run first, then the quick ones while the subset run (started in the background at
    collection) finishes, then the tests that rerun parts of it in copies, and the tests that
    only read it last, to even out the workers at the end.

    A stable sort: within each group the order stays as collected (or as pytest-randomly drew it).
    """
    if settings.get_current_profile_name() == "quick":
        kept = quick_share(items)
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = [item for item in items if item in kept]

    def group(item: pytest.Item) -> int:
        fixtures = getattr(item, "fixturenames", ())
        if "subset_copy" in fixtures:
            return 2
        if "subset_run" in fixtures:
            return 3
        return 0 if item.get_closest_marker("slow") else 1

    items.sort(key=group)


def quick_share(items: list[pytest.Item]) -> set[pytest.Item]:
    """Every test function once, and every tenth case of a parametrized one (the first included),
    as the `quick` profile takes a tenth of each property test's generated cases."""
    seen: dict[tuple[str, str], int] = {}
    kept = set()
    for item in items:
        key = (item.nodeid.split("::")[0], getattr(item, "originalname", item.name))
        index = seen.get(key, 0)
        seen[key] = index + 1
        if index % (PROFILES["ci"] // PROFILES["quick"]) == 0:
            kept.add(item)
    return kept


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands its tallies (below) to the controller, which prints the summary."""
    from corpus import RESULTS
    from oracle import CASES_RUN

    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["gradlanes_tallies"] = {"cases": dict(CASES_RUN), "corpus": dict(RESULTS)}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    from corpus import note
    from oracle import CASES_RUN

    tallies = getattr(node, "workeroutput", {}).get("gradlanes_tallies", {})
    CASES_RUN.update(tallies.get("cases", {}))
    for name, result in tallies.get("corpus", {}).items():
        note(name, result)


def pytest_terminal_summary(terminalreporter):
    """Generated interpreter-vs-XLA cases per rule, and the interpreter's coverage of the corpus."""
    from corpus import RESULTS, corpus
    from oracle import CASES_RUN

    from gradlanes.program.interpreter import RULES, STRUCTURED
    from gradlanes.program.jaxcompat import CALL_JAXPR_PARAM

    if RESULTS:
        programs = corpus()
        ran = [p.name for p in programs if RESULTS.get(p.name, "").startswith("ran")]
        supported = [p.name for p in programs if RESULTS.get(p.name) == "supported" or p.name in ran]
        terminalreporter.write_sep("-", "interpreter coverage of the training-program corpus")
        terminalreporter.write_line(
            f"corpus: {len(ran)} / {len(programs)} programs ran and matched XLA under the float64-reference "
            f"measure; {len(supported)} / {len(RESULTS)} of those this run checked are fully supported; "
            f"{len(RULES) + len(STRUCTURED) + len(CALL_JAXPR_PARAM)} primitives supported"
        )
        for name in sorted(RESULTS):
            if not RESULTS[name].startswith(("ran", "supported")):
                terminalreporter.write_line(f"  {name}: {RESULTS[name]}")
    if CASES_RUN:
        per_rule = ", ".join(f"{name} {count}" for name, count in sorted(CASES_RUN.items()))
        terminalreporter.write_sep("-", "interpreter rules checked against XLA")
        terminalreporter.write_line(
            f"{sum(CASES_RUN.values())} generated cases over {len(CASES_RUN)} primitives: {per_rule}"
        )
