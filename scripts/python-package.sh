#!/usr/bin/env bash
# Builds the Python package `tensorlift` (python/: a pyo3 extension built
# by maturin, abi3) into a virtual environment, target/python-venv (or
# $TENSORLIFT_VENV), with what its tests need (NumPy, ml_dtypes, pytest,
# cloudpickle and Dask for the pickling tests).
# `--test` then runs its pytest suite (python/tests); extra arguments go to
# pytest. `pip install ./python` installs the same package anywhere else.
set -euo pipefail
cd "$(dirname "$0")/.."

test=0
if [ "${1:-}" = "--test" ]; then
  test=1
  shift
fi
venv=${TENSORLIFT_VENV:-target/python-venv}
py=${PYO3_PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  echo "== creating $venv"
  "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "maturin>=1.9,<2" numpy ml_dtypes pytest cloudpickle "dask[array]" distributed
echo "== building the Python package (maturin develop --release, +${SECONDS}s)"
VIRTUAL_ENV="$PWD/$venv" "$venv/bin/maturin" develop --release --quiet -m python/Cargo.toml
if [ "$test" -eq 1 ]; then
  echo "== pytest python/tests (+${SECONDS}s)"
  "$venv/bin/python" -m pytest -q python/tests "$@"
fi
