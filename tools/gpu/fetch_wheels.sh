#!/usr/bin/env bash
# Fill .whl/ (git-ignored) with what the one-shot GPU run carries to a machine without a package
# registry: a wheel for CPython 3.12 on x86-64 Linux of each package in tools/gpu/h200-wheels.txt,
# at its pinned version, and the four MNIST archives in .whl/mnist/. Needs PyPI (here, not there).
#
#   bash tools/gpu/fetch_wheels.sh     # MNIST from ../shared/datasets/mnist, or $GRADLANES_SHARED/datasets/mnist
#
# The folder is rebuilt beside itself and swapped in only once complete and checked
# (tools/gpu/wheelset.py), so a failed fetch leaves the previous .whl/ as it was.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
shared=${GRADLANES_SHARED:-$repo/../shared}
mnist=$shared/datasets/mnist
list=$repo/tools/gpu/h200-wheels.txt
partial=$repo/.whl.partial

if [ ! -x "$python" ]; then
    echo "fetch_wheels: no Python at $python; run 'make install' first, or set PYTHON" >&2
    exit 2
fi
archives=$("$python" -c 'import sys, yaml; print(" ".join(f["name"] for f in yaml.safe_load(open(sys.argv[1]))["dataset"]["files"].values()))' "$repo/config.yaml")
for name in $archives; do
    if [ ! -f "$mnist/$name" ]; then
        echo "fetch_wheels: $mnist/$name not found; set GRADLANES_SHARED to a folder holding datasets/mnist/" >&2
        exit 2
    fi
done

platforms=()
for minor in $(seq 39 -1 5); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)

rm -rf "$partial"
mkdir -p "$partial/mnist"
# --isolated: this machine's own pip settings (extra indexes, find-links) play no part.
pip=("$python" -m pip --isolated --disable-pip-version-check)
grep -v '^\s*#' "$list" | grep -v '^\s*$' | while read -r pin; do
    if ! "${pip[@]}" download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --abi cp312 "${platforms[@]}" -d "$partial" "$pin" 2>/dev/null; then
        # No wheel on PyPI (connection_pool publishes only its source): build one here; it must
        # come out pure Python (py3-none-any), or it would not run on the other machine.
        echo "fetch_wheels: $pin has no wheel for CPython 3.12; building it from its source" >&2
        "${pip[@]}" wheel --quiet --no-deps --no-binary=:all: -w "$partial" "$pin"
    fi
done
if ls "$partial"/*.whl | grep -v -e '-py3-none-any\.whl$' -e '-py2\.py3-none-any\.whl$' -e '-cp312-' >&2; then
    echo "fetch_wheels: the wheels above are neither pure Python nor for CPython 3.12" >&2
    exit 1
fi
for name in $archives; do cp "$mnist/$name" "$partial/mnist/"; done
"$python" "$repo/tools/gpu/wheelset.py" --wheels "$partial"
rm -rf "$repo/.whl"
mv "$partial" "$repo/.whl"
echo "fetch_wheels: $repo/.whl is ready ($(du -sh "$repo/.whl" | cut -f1)); carry it: run(carry=['.whl'])"
