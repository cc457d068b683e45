#!/usr/bin/env bash
# `make test-cluster`: start a single-node SLURM, run tests/cluster against it, stop what we started.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=$(pwd)
trap 'bash "$here/tests/cluster/slurm-down.sh"' EXIT
started=$(date +%s)
# Assign first: `eval "$(...)"` would hide slurm-up.sh failing behind eval's own status.
setup=$(bash tests/cluster/slurm-up.sh)
eval "$setup"
export GRADLANES_SLURM_CONF=$SLURM_CONF
sinfo
status=0
.venv/bin/python -m pytest tests/cluster -p no:randomly -ra || status=$?
echo "--- jobs SLURM ran (scontrol, finished jobs are kept for MinJobAge) ---"
squeue --states=all --format='%.6i %.40j %.10T %.10M %R' | head -40 || true
echo "cluster test: $(( $(date +%s) - started )) s"
exit $status
