"""Snakemake glue for rule agreement; the logic lives in gradlanes.agreement."""

import json
from pathlib import Path

import numpy as np

from gradlanes.agreement import check_pair, summarize
from gradlanes.atomic import write_json
from gradlanes.dataset import load
from gradlanes.experiment import resolve
from gradlanes.joblog import UserFacingError, job_logging
from gradlanes.lane import load_initial_params

smk = snakemake  # noqa: F821 - injected by Snakemake


class AgreementFailed(UserFacingError):
    pass


with job_logging(smk.log[0]) as log:
    manifest = json.loads(Path(smk.input.manifest).read_text())
    inputs = int(np.prod(manifest["image_shape"]))
    checks = []
    datasets = {}
    for seed in smk.params.seeds:
        for name, bounds in smk.params.checks.items():
            experiments = {
                role: resolve(
                    bounds[role],
                    smk.params.lanes[bounds[role]],
                    seed,
                    inputs,
                    manifest["classes"],
                    manifest["counts"]["train"],
                    manifest["counts"]["test"],
                )
                for role in ("reference", "candidate")
            }
            reference = experiments["reference"]
            sizes = (reference.train_images, reference.test_images)
            if sizes not in datasets:  # every seed and check of one size shares one loaded copy
                datasets[sizes] = load(smk.input.arrays, *sizes)
            data = datasets[sizes]
            params = load_initial_params(smk.input[f"{reference.lane}/{seed}/init"])

            def outputs(lane, seed=seed):
                return {kind: smk.input[f"{lane}/{seed}/{kind}"] for kind in ("record", "curve", "model")}

            checks += check_pair(name, bounds, reference, experiments["candidate"], outputs, params, data)
    report = summarize(checks)
    for check in checks:
        log.info(
            "%-45s %-8s measured %s bound %s",
            check["name"],
            check["status"],
            check["measured"],
            check["bound"],
        )
    if not report["passed"]:
        failed = [c for c in checks if c["status"] == "failed"]
        log.error("agreement report:\n%s", json.dumps(report, indent=2))
        raise AgreementFailed(
            "agreement checks failed: "
            + "; ".join(
                f"{c['name']} measured {c['measured']:.3g}, bound {c['relation']} {c['bound']}"
                for c in failed
            )
        )
    write_json(smk.output[0], report)
