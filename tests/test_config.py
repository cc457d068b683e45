"""Config validation: every mistake is named with its key and what is allowed."""

from __future__ import annotations

import copy

import pytest
import yaml

from gradlanes.config import ConfigError, check_config, select_lanes
from gradlanes.schemas import CONFIG, schema_path
from workflow import REPO, output_of, run_snakemake

SCHEMA = schema_path(CONFIG)
BASE = yaml.safe_load((REPO / "config.yaml").read_text())


def problems_of(edit) -> str:
    config = copy.deepcopy(BASE)
    edit(config)
    with pytest.raises(ConfigError) as caught:
        check_config(config, SCHEMA)
    return str(caught.value)


def test_committed_config_is_valid():
    check_config(copy.deepcopy(BASE), SCHEMA)


def test_unknown_key_is_named_with_the_allowed_keys():
    message = problems_of(lambda c: c["dataset"].update(mirror=["x"]))
    assert "unknown key 'dataset.mirror'" in message
    assert "allowed under 'dataset': classes, files, mirrors, name" in message


def test_a_lane_runs_some_of_the_experiments_seeds_and_pairs_share_one():
    config = copy.deepcopy(BASE)
    config["lanes"]["iree_cpu"]["seeds"] = config["seeds"][:2]
    check_config(config, SCHEMA)
    message = problems_of(lambda c: c["lanes"]["host"].update(seeds=[0, 99]))
    assert "'lanes.host.seeds' names seed(s) 99 that the experiment's 'seeds' (0, 1, 2, 3, 4)" in message
    message = problems_of(
        lambda c: (c["lanes"]["host"].update(seeds=[0]), c["lanes"]["xla_cpu"].update(seeds=[1]))
    )
    assert (
        "'agreement.pairs.host_vs_xla_cpu' compares lanes 'xla_cpu' and 'host' that share no seed" in message
    )
    message = problems_of(lambda c: c["lanes"]["host"].update(seeds=[]))
    assert "'lanes.host.seeds' must be a list with at least 1 item(s); got []" in message


def test_unknown_lane_key():
    message = problems_of(lambda c: c["lanes"]["host"].update(stepz=3))
    assert "unknown key 'lanes.host.stepz'" in message


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda c: c["lanes"]["host"].update(steps=-5),
            "'lanes.host.steps' must be an integer >= 1 <= 100000000; got -5",
        ),
        (
            lambda c: c["lanes"]["host"].update(steps=2.5),
            "'lanes.host.steps' must be an integer >= 1 <= 100000000; got 2.5",
        ),
        (
            lambda c: c["lanes"]["host"].update(batch_size=0),
            "'lanes.host.batch_size' must be an integer >= 1 or 'full'; got 0",
        ),
        (
            lambda c: c["lanes"]["host"].update(train_images=-1),
            "'lanes.host.train_images' must be an integer >= 1 or 'all'; got -1",
        ),
        (
            lambda c: c["download"].update(timeout_s=0),
            "'download.timeout_s' must be a number > 0 <= 3600; got 0",
        ),
        (
            lambda c: c["download"].update(min_rate_kib_s=0),
            "'download.min_rate_kib_s' must be a number > 0 <= 1048576; got 0",
        ),
        (
            lambda c: c["dataset"]["files"]["test_labels"].pop("bytes"),
            "missing key 'dataset.files.test_labels.bytes': size of the decompressed content in bytes, "
            "which bounds what a mirror may send (MNIST's are published beside its files; for another "
            "file, `gunzip -c FILE | wc -c`)",
        ),
        (
            lambda c: c["dataset"]["files"]["test_labels"].update(bytes=0),
            "'dataset.files.test_labels.bytes' must be an integer >= 1; got 0",
        ),
        (
            lambda c: c["lanes"]["host"].update(engine="gpu"),
            "'lanes.host.engine': no engine 'gpu' is installed (engines: handkernel, interpreter,",
        ),
        (
            lambda c: c["lanes"]["host"].update(engine="Bad-Name"),
            "'lanes.host.engine' must be a string matching ^[a-z][a-z0-9_]*$; got 'Bad-Name'",
        ),
        (
            lambda c: c["lanes"]["host"].update(model="resnet"),
            "'lanes.host.model' must be one of 'mlp', 'softmax', 'cnn'; got 'resnet'",
        ),
        (lambda c: c.update(seeds=[]), "'seeds' must be a list with at least 1 item(s); got []"),
        (
            lambda c: c["dataset"]["files"]["train_images"].update(sha256="abc"),
            "'dataset.files.train_images.sha256' must be a string matching",
        ),
        (lambda c: c["lanes"]["host"].pop("loss"), "missing key 'lanes.host.loss'"),
    ],
)
def test_bad_values_name_key_and_range(edit, expected):
    assert expected in problems_of(edit)


def test_semantic_rules():
    message = problems_of(lambda c: c["lanes"]["host"].update(epochs=3))
    assert "lane 'host' needs exactly one of 'steps' or 'epochs'" in message
    message = problems_of(lambda c: c["lanes"]["softmax_kernel"].update(optimizer="adam"))
    assert "engine 'handkernel' implements only optimizer 'sgd'" in message
    message = problems_of(lambda c: c["lanes"]["host"].update(steps=10))
    assert "'agreement.pairs.host_vs_xla_cpu' compares lanes that differ in steps" in message
    message = problems_of(lambda c: c["agreement"]["pairs"]["host_vs_xla_cpu"].update(reference="nope"))
    assert "names lane(s) 'nope' not under 'lanes'" in message
    message = problems_of(lambda c: c["lanes"]["host"].update(matmul_precision="tf32"))
    assert "'lanes.host.matmul_precision' tf32 is not offered by engine 'interpreter'" in message
    message = problems_of(lambda c: c["lanes"]["host"].update(device="gpu"))
    assert "'lanes.host.device' is 'gpu', but engine 'interpreter' runs on 'cpu'" in message
    message = problems_of(lambda c: c["lanes"]["softmax_kernel"].update(fuse_steps=2))
    expected = "'lanes.softmax_kernel.fuse_steps' needs an engine that fuses steps; 'handkernel' does not"
    assert expected in message
    message = problems_of(lambda c: c["lanes"]["xla_cpu"].update(matmul_precision="tf32"))
    assert "compares lanes that differ in matmul_precision" in message


def test_an_agreement_pair_in_the_old_layout_says_how_to_move_it():
    def old_layout(config):
        config["agreement"] = {
            "host_vs_xla_cpu": {"reference": "xla_cpu", "candidate": "host", "step0_grad_rel": 1e-5}
        }

    message = problems_of(old_layout)
    assert (
        "'agreement.host_vs_xla_cpu' is a pair in the old layout: move it under 'agreement.pairs'" in message
    )
    assert "drop step0_grad_rel" in message


@pytest.mark.slow
def test_snakemake_rejects_bad_config_before_any_job(tmp_path):
    process = run_snakemake(
        tmp_path, "-n", overrides={"dataset": {"mirrorz": ["x"]}, "lanes": {"host": {"steps": -5}}}
    )
    assert process.returncode != 0
    text = output_of(process)
    assert "unknown key 'dataset.mirrorz'" in text
    assert "'lanes.host.steps' must be an integer >= 1" in text
    assert not (tmp_path / "resources").exists()


def test_only_lanes_keeps_those_lanes_and_the_pairs_between_them():
    config = copy.deepcopy(BASE)
    config["only_lanes"] = ["host", "xla_cpu", "cnn_gpu"]
    select_lanes(config)
    check_config(config, SCHEMA)
    assert list(config["lanes"]) == ["xla_cpu", "host", "cnn_gpu"]  # config order, not the list's
    assert list(config["agreement"]["pairs"]) == ["host_vs_xla_cpu"]
    assert config["lanes"]["host"] == BASE["lanes"]["host"]


def test_only_lanes_names_what_is_not_a_lane():
    config = copy.deepcopy(BASE)
    config["only_lanes"] = ["host", "hots"]
    with pytest.raises(
        ConfigError, match=r"'only_lanes' names lane\(s\) 'hots' not under 'lanes' \(lanes: xla_gpu,"
    ):
        select_lanes(config)
    message = problems_of(lambda c: c.update(only_lanes="host"))  # not a list: the schema names it
    assert "'only_lanes' must be" in message


@pytest.mark.slow
def test_snakemake_runs_only_the_lanes_named(tmp_path):
    process = run_snakemake(
        tmp_path, "-n", "--quiet", "rules", overrides={"only_lanes": ["softmax_kernel", "softmax_xla"]}
    )
    text = output_of(process)
    assert process.returncode == 0, text
    trained = sorted({line.split()[0] for line in text.splitlines() if line.startswith("train_")})
    assert trained == ["train_softmax_kernel", "train_softmax_xla"]


def test_schema_defaults_are_filled():
    from snakemake.utils import validate

    config = copy.deepcopy(BASE)
    del config["download"]
    del config["lanes"]["mlp_stream"]["init"]
    validate(config, str(SCHEMA))
    assert config["download"] == {"timeout_s": 30, "retries": 3, "backoff_s": 1.0, "min_rate_kib_s": 64}
    assert config["lanes"]["mlp_stream"]["init"] == "lecun_normal"
    assert config["lanes"]["mlp_stream"]["train_images"] == "all"
    assert config["lanes"]["host"]["log_rows"] == 12


@pytest.mark.parametrize(
    "lane, settings, expected",
    [
        ("host", {"fuse_steps": 7}, "'lanes.host.fuse_steps' is 7, which does not divide its 600 steps"),
        # epochs x (train_images // batch_size), known without the data: 2 x (1000 // 100) = 20
        (
            "mlp_stream",
            {"train_images": 1000, "epochs": 2, "batch_size": 100, "fuse_steps": 3},
            "'lanes.mlp_stream.fuse_steps' is 3, which does not divide its 20 steps",
        ),  # fmt: skip
    ],
)
def test_fuse_steps_that_cannot_divide_the_steps_are_refused_up_front(lane, settings, expected):
    message = problems_of(lambda c: c["lanes"][lane].update(settings))
    assert expected in message


def test_sizes_that_need_the_data_are_checked_against_a_prepared_dataset():
    from gradlanes.data.description import MNIST

    def oversized(config):
        config["lanes"]["xla_gpu"]["train_images"] = 60_001
        config["lanes"]["mlp_stream"]["fuse_steps"] = 7  # 20 epochs x 468 batches: not a multiple of 7

    config = copy.deepcopy(BASE)
    oversized(config)
    check_config(config, SCHEMA)  # without the data these cannot be known
    with pytest.raises(ConfigError) as caught:
        check_config(config, SCHEMA, dataset=MNIST)
    message = str(caught.value)
    assert "lane 'xla_gpu' on dataset 'mnist'" in message and "60001" in message.replace(",", "")
    assert "lane 'mlp_stream' on dataset 'mnist'" in message and "fuse_steps 7" in message
    check_config(copy.deepcopy(BASE), SCHEMA, dataset=MNIST)


@pytest.mark.parametrize(
    "name, expected",
    [("checks", "may not be 'checks'"), ("Big Run", "'experiment' must be a string matching")],
)
def test_experiment_names_are_checked(name, expected):
    assert expected in problems_of(lambda c: c.update(experiment=name))


@pytest.mark.parametrize("given, expected", [("true", True), ("True", True), ("no", False), ("ture", "ture")])
def test_command_line_switches_become_booleans_and_typos_stay_for_the_schema(given, expected):
    from gradlanes.config import coerce_switches

    config = {"replace_published": given}
    coerce_switches(config)
    assert config["replace_published"] == expected
    if expected == "ture":
        assert "'replace_published' must be true/false; got 'ture'" in problems_of(lambda c: c.update(config))
