#!/usr/bin/env bash
# Builds the Python package `tensorlift` (python/: a pyo3 extension built
# by maturin, abi3) into a virtual environment, target/python-venv (or
# $TENSORLIFT_VENV), with what its tests need (NumPy, ml_dtypes, pytest,
# cloudpickle and Dask for the pickling tests).
# `--test` then runs its pytest suite (python/tests); extra arguments go to
# pytest. `pip install ./python` installs the same package anywhere else.
# `--dev` builds the dev profile into the tests' target directory ($CARGO_TARGET_DIR, else target/) instead of
# a release build: with the workspace's profile (python/Cargo.toml) it
# reuses every dependency `cargo test` compiled, so only pyo3's abi3 build
# and tensorlift's crates compile again (scripts/test.sh: ~7 minutes of
# release build on 2 cores saved), and the package runs with debug
# assertions, as the workspace's tests do.
set -euo pipefail
cd "$(dirname "$0")/.."

test=0
profile=(--release)
while [ $# -gt 0 ]; do
  case "$1" in
    --test) test=1 ;;
    --dev) profile=(); export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" ;;
    *) break ;;
  esac
  shift
done
venv=${TENSORLIFT_VENV:-target/python-venv}
# (Absolute from here on: maturin is told the venv by its path.)
case $venv in /*) ;; *) venv=$PWD/$venv ;; esac
py=${PYO3_PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  echo "== creating $venv"
  "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "maturin>=1.9,<2" numpy ml_dtypes pytest cloudpickle "dask[array]" distributed
echo "== building the Python package (maturin develop ${profile[*]:---dev profile}, +${SECONDS}s)"
VIRTUAL_ENV="$venv" "$venv/bin/maturin" develop "${profile[@]}" --quiet -m python/Cargo.toml
if [ "$test" -eq 1 ]; then
  echo "== pytest python/tests (+${SECONDS}s)"
  "$venv/bin/python" -m pytest -q python/tests "$@"
fi
