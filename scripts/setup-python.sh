#!/usr/bin/env bash
# Installs what the embedded CPython needs (NumPy; ml_dtypes for bfloat16)
# into the python3 that pyo3 builds against, unless already there.
set -euo pipefail
py=${PYO3_PYTHON:-python3}
if ! "$py" -c "import numpy, ml_dtypes" >/dev/null 2>&1; then
  echo "== installing numpy and ml_dtypes for $("$py" -c 'import sys; print(sys.executable)')"
  "$py" -m pip install --quiet --disable-pip-version-check numpy ml_dtypes
fi
