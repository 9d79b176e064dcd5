#!/usr/bin/env bash
# Issue 17's suite on the lent device machine (16 cores, no Rust toolchain,
# JAX preinstalled), ours then XLA, all cores, outputs under $OUT.
#
# Here, first:   bash scripts/device/suite.sh --prepare
#   (builds benches/suite.rs, strips it into .dev/suite: the device tool
#   carries `.dev`, which .git/info/exclude must ignore: `echo /.dev/ >>
#   .git/info/exclude`)
# Then the device tool's run, carry [".dev"], timeout about 570 s:
#   bash scripts/device/suite.sh
# and here: python3 scripts/suite_table.py DIR/jax.json CRIT/criterion CRIT/suite/checksums.json
# after unpacking DIR/criterion.tgz into CRIT. About 3.5 min each side on
# a 16-core Xeon with the shortened criterion times below.
set -u
if [ "${1:-}" = --prepare ]; then
  set -e
  cd "$(dirname "$0")/../.."
  bin=$(cargo bench --bench suite --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "suite" and m.get("executable"):
        print(m["executable"])')
  mkdir -p .dev
  strip -o .dev/suite "$bin"
  ls -la .dev/suite
  exit 0
fi
{ date -u; nproc; lscpu; grep -m1 '^flags' /proc/cpuinfo
  python3 -c 'import jax, numpy; print("jax", jax.__version__, "numpy", numpy.__version__)'; } > "$OUT/cpu.txt" 2>&1
head -20 "$OUT/cpu.txt"
export CARGO_TARGET_DIR=$PWD/.dev/t
mkdir -p .dev/t
s=$(date +%s)
.dev/suite --bench --warm-up-time=0.5 --measurement-time=1.5 --noplot 2>&1 |
  grep -v -E "^\s*$|Warning|Benchmarking .*: (Warming|Collecting|Analyzing)" > "$OUT/ours.txt"
echo "ours took $(( $(date +%s) - s )) s"
tar czf "$OUT/criterion.tgz" -C .dev/t criterion suite
s=$(date +%s)
JAX_PLATFORMS=cpu PYTHONUNBUFFERED=1 python3 scripts/peers/suite.py --json "$OUT/jax.json" > "$OUT/jax.txt" 2>&1
echo "jax took $(( $(date +%s) - s )) s"
tail -3 "$OUT/jax.txt"
