#!/usr/bin/env bash
# Builds tensorlift and runs the bundled row-softmax example through the
# CLI, interpreted and compiled on the same input: prints both times
# (medians), checks the results agree within the JIT's tolerance
# (docs/compiler.md; exits non-zero if not) and writes the compiled
# result to out/probs.npy; then prints the program's dataflow graph.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-python.sh
cargo build --release --quiet --bin tensorlift
./target/release/tensorlift bench examples/softmax.tlir \
  --input x=examples/data/softmax_x.npy --output-dir out
echo "wrote out/probs.npy"
./target/release/tensorlift graph examples/softmax.tlir
