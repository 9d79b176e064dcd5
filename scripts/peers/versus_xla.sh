#!/usr/bin/env bash
# Issue 17's suite against XLA in one process, turn by turn
# (benches/versus_xla.rs): puts the peers' venv (JAX) on the embedded
# interpreter's path and runs the benchmark. The venv is PEERS_VENV
# (default /tmp/peers); it is made if missing:
#   python3 -m venv /tmp/peers && /tmp/peers/bin/pip install numpy jax==0.10.2 jaxlib==0.10.2
# Usage: scripts/peers/versus_xla.sh [--rounds N] [--first] [--json PATH] [FILTER ...]
set -euo pipefail
venv=${PEERS_VENV:-/tmp/peers}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check numpy "jax==0.10.2" "jaxlib==0.10.2"
fi
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cd "$(dirname "$0")/../.."
PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" exec cargo bench --bench versus_xla -- "$@"
