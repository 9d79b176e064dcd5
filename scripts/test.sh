#!/usr/bin/env bash
# Runs every test of the workspace: formatting, lints, unit, integration,
# property and doc tests. `--long` runs the property tests with many more
# cases (minutes); CI runs the default, which is sized for a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."

cases=256
for arg in "$@"; do
  case "$arg" in
    --long) cases=20000 ;;
    *) echo "usage: $0 [--long]" >&2; exit 2 ;;
  esac
done

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy (workspace lints, warnings are errors)"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo test (PROPTEST_CASES=$cases)"
PROPTEST_CASES=$cases cargo test --workspace --all-targets
cargo test --workspace --doc
