#!/usr/bin/env bash
# Builds tensorlift and runs the bundled row-softmax example through the
# CLI, writing out/probs.npy, then prints the program's dataflow graph.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-python.sh
cargo build --release --quiet --bin tensorlift
./target/release/tensorlift run examples/softmax.tlir \
  --input x=examples/data/softmax_x.npy --output-dir out --mode interp
echo "wrote out/probs.npy"
./target/release/tensorlift graph examples/softmax.tlir
