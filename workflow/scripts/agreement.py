"""Snakemake glue for rule agreement; the logic lives in gradlanes.run.agreement."""

import json

from gradlanes.atomic import write_json
from gradlanes.data.dataset import load
from gradlanes.data.description import DatasetDescription
from gradlanes.engines.gpu import prepare_gpu_lane
from gradlanes.experiment.spec import resolve
from gradlanes.joblog import UserFacingError, job_logging
from gradlanes.run.agreement import LaneFiles, pair_checks, reference_checks, summarize
from gradlanes.run.modelfile import load_initial_params

smk = snakemake  # noqa: F821 - injected by Snakemake


class AgreementFailed(UserFacingError):
    pass


def describe(check) -> str:
    measured = "—" if check.measured is None else f"{check.measured:.4g}"
    bound = "—" if check.bound is None else f"{check.relation} {check.bound:.4g}"
    used = "" if check.fraction_of_bound is None else f" ({check.fraction_of_bound:.1%} of bound)"
    return f"{check.name} measured {measured}, bound {bound} {check.unit}{used}"


with job_logging(smk.log[0]) as log:
    if any(settings.get("device") == "gpu" for settings in smk.params.lanes.values()):
        prepare_gpu_lane()  # GPU engines built here compute as the gpu lanes did: deterministically
    dataset = DatasetDescription.read(smk.input.manifest)
    settings = smk.params.agreement
    datasets = {}
    checks = []

    def experiment(lane, seed):
        return resolve(lane, smk.params.lanes[lane], seed, dataset)

    def files(lane, seed):
        return LaneFiles(*(smk.input[f"{lane}/{seed}/{kind}"] for kind in ("record", "curve", "model")))

    lane_seeds = smk.params.seeds  # lane -> the seeds it ran
    for seed in sorted({seed for seeds in lane_seeds.values() for seed in seeds}):
        for lane in (lane for lane in smk.params.lanes if seed in lane_seeds[lane]):
            exp = experiment(lane, seed)
            sizes = (exp.train_images, exp.test_images)
            if sizes not in datasets:  # every lane and seed of one size shares one loaded copy
                datasets[sizes] = load(smk.input.arrays, *sizes)
            initial = load_initial_params(smk.input[f"{lane}/{seed}/init"])
            checks += reference_checks(
                exp,
                files(lane, seed),
                initial,
                datasets[sizes],
                settings["early_steps"],
                settings.get("early_loss_u"),
            )
        for name, pair in settings["pairs"].items():
            if seed not in lane_seeds[pair["reference"]] or seed not in lane_seeds[pair["candidate"]]:
                continue  # a pair is compared on the seeds both lanes ran
            checks += pair_checks(
                name,
                pair,
                experiment(pair["reference"], seed),
                experiment(pair["candidate"], seed),
                lambda lane, seed=seed: files(lane, seed),
            )
    for check in checks:
        log.info("%-9s %s", check.status, describe(check))
    report = summarize(checks)
    if not report["passed"]:
        failed = [c for c in checks if c.status == "failed"]
        log.error("agreement report:\n%s", json.dumps(report, indent=2))
        raise AgreementFailed("agreement checks failed: " + "; ".join(describe(c) for c in failed))
    write_json(smk.output[0], report)
