#!/usr/bin/env bash
# The one-shot GPU run (docs/gpu.md): on a GPU machine that reaches no package registry, install the
# carried wheels, run the gpu lanes through snakemake, the benchmark's GPU rows and the GPU tests,
# and write records, logs and the benchmark JSON to OUTDIR. Stops at once where no GPU is visible.
#
#   bash tools/gpu/oneshot.sh OUTDIR              # on the GPU machine (python3 there has JAX)
#   bash tools/gpu/oneshot.sh --rehearse OUTDIR   # a dress rehearsal on a machine without a GPU
#
# Fill .whl/ first, where PyPI is reachable: bash tools/gpu/fetch_wheels.sh. The stages and their
# outputs are described in tools/gpu/oneshot.py.
set -uo pipefail
if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    [ $# -lt 1 ] && exit 2 || exit 0
fi
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
exec "${PYTHON:-python3}" "$repo/tools/gpu/oneshot.py" "$@"
