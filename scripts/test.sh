#!/usr/bin/env bash
# Runs every test of the workspace: formatting, lints, unit, integration,
# property and doc tests, and the JIT's test files again with its code
# capped at AVX2 and at SSE4.2 (TENSORLIFT_MAX_ISA, docs/compiler.md).
# `--long` runs the property tests with many more
# cases (minutes); CI runs the default, which is sized for a 2-core machine.
# `--long` also checks the JIT's f32 approximations on all 2^32 inputs, and
# runs the soak tests (tests/soak.rs: resident memory flat over a million
# callbacks and ten thousand compile/drop cycles).
# Then the fuzz targets (docs/reliability.md): a seeded smoke run of each
# (seconds), or with `--long` 1M text cases, 100k .npy files and 100k
# random graphs (about 30 min on 2 cores; FUZZ_TLIR_CASES, FUZZ_NPY_CASES,
# FUZZ_GRAPH_CASES and FUZZ_SEED change them).
# Then the Python package: built into target/python-venv by
# scripts/python-package.sh (the dev profile, reusing the dependencies the
# tests compiled), its pytest suite run.
# The last line is a total over every test binary and pytest: "tests: N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."
# Each section's header says when it began (bash's SECONDS: since the start).
section() { echo "== $* (+${SECONDS}s)"; }

cases=256
long=0
fuzz_tlir=${FUZZ_TLIR_CASES:-3000}
fuzz_npy=${FUZZ_NPY_CASES:-3000}
fuzz_graph=${FUZZ_GRAPH_CASES:-1000}
for arg in "$@"; do
  case "$arg" in
    --long)
      cases=20000; long=1; export TENSORLIFT_EXHAUSTIVE=1
      fuzz_tlir=${FUZZ_TLIR_CASES:-1000000}
      fuzz_npy=${FUZZ_NPY_CASES:-100000}
      fuzz_graph=${FUZZ_GRAPH_CASES:-100000} ;;
    *) echo "usage: $0 [--long]" >&2; exit 2 ;;
  esac
done

# The embedded Python (pyo3 links the python3 on PATH) needs NumPy, and
# ml_dtypes for bfloat16 arrays.
bash scripts/setup-python.sh

# A run of every target builds ~40 binaries; incremental caches would double
# the disk it takes (a CI machine ran out once). Set CARGO_INCREMENTAL=1 to
# keep them when iterating.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

section "cargo fmt --check"
cargo fmt --all -- --check
cargo fmt --manifest-path python/Cargo.toml -- --check
section "cargo clippy (workspace lints, warnings are errors)"
cargo clippy --workspace --all-targets --quiet -- -D warnings
# The Python package's extension crate is its own workspace (python/);
# checked in the main target directory, where its dependencies (the same
# features: python/Cargo.toml) are the ones just checked.
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" cargo clippy --manifest-path python/Cargo.toml --quiet -- -D warnings

section "cargo check without the python feature"
cargo check --workspace --all-targets --no-default-features --quiet

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
section "cargo test (PROPTEST_CASES=$cases)"
PROPTEST_CASES=$cases cargo test --workspace --all-targets 2>&1 | tee -a "$log" || status=1
section "doc tests"
cargo test --workspace --doc 2>&1 | tee -a "$log" || status=1
# What an AVX2-only and an SSE4.2-only host compile (Cranelift's flags and
# legacy SSE encodings, the wide routines' module, vector legality),
# checked on whatever this host is (the SSE4.2 run found an unaligned
# memory operand Cranelift folds into `cmpps`: codegen's `fcmp`). On a
# host without AVX-512 the AVX2 cap is the host's own level, which the
# run above has covered.
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  isas="avx2 sse4.2"
else
  isas="sse4.2"
fi
section "the JIT's code for narrower hosts (TENSORLIFT_MAX_ISA=${isas// /, then })"
for isa in $isas; do
  TENSORLIFT_MAX_ISA=$isa PROPTEST_CASES=$cases cargo test --test jit_wide --test jit_math \
    --test jit_differential --test op_fixtures --test jit_api 2>&1 | tee -a "$log" || status=1
done
if [ "$long" -eq 1 ]; then
  section "soak tests (1M callbacks, 10k compile/drop cycles; resident memory flat)"
  cargo test --test soak -- --ignored --test-threads=1 --nocapture 2>&1 | tee -a "$log" || status=1
fi

section "fuzz (seed ${FUZZ_SEED:-1}; findings in target/fuzz/findings)"
# The fuzzer binary as `cargo test` built it: `--tests` resolves the
# features the tests' build has (dev-dependencies included), so this finds
# it fresh; a plain `cargo run` would compile cranelift and gemm again with
# the other feature set (~2 minutes).
cargo build --quiet --tests --bin tensorlift-fuzz || status=1
fuzzer="${CARGO_TARGET_DIR:-target}/debug/tensorlift-fuzz"
# Graphs three ways: the property tests' values; signalling and payload
# NaNs (bits compared through bitcast_convert); loops and branches.
for t in "tlir $fuzz_tlir" "npy $fuzz_npy" "graph $fuzz_graph" \
  "graph $fuzz_graph --nan-payloads" "graph $fuzz_graph --control-flow"; do
  set -- $t
  target=$1 cases=$2
  shift 2
  "$fuzzer" --target "$target" --cases "$cases" \
    --seed "${FUZZ_SEED:-1}" "$@" || status=1
done
# The graph target again with the JIT's code capped as on narrower hosts
# (legacy SSE encodings fold memory operands that VEX ones do not).
for isa in $isas; do
  for flags in "" "--control-flow"; do
    TENSORLIFT_MAX_ISA=$isa "$fuzzer" --target graph \
      --cases "$fuzz_graph" --seed "${FUZZ_SEED:-1}" $flags || status=1
  done
done

section "the Python package (scripts/python-package.sh --dev --test)"
pylog=$(mktemp)
trap 'rm -f "$log" "$pylog"' EXIT
bash scripts/python-package.sh --dev --test -rfE 2>&1 | tee "$pylog" || status=1

passed=$(grep -Eo 'test result: [A-Za-z]+\. [0-9]+ passed' "$log" | grep -Eo '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '; [0-9]+ failed' "$log" | grep -Eo '[0-9]+' | awk '{s+=$1} END {print s+0}')
# pytest's summary: "N passed, M failed in 1.2s".
pypassed=$(grep -Eo '(^|, )[0-9]+ passed' "$pylog" | grep -Eo '[0-9]+' | tail -1 || true)
pyfailed=$(grep -Eo '(^|, )[0-9]+ failed' "$pylog" | grep -Eo '[0-9]+' | tail -1 || true)
passed=$((passed + ${pypassed:-0}))
failed=$((failed + ${pyfailed:-0}))
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
echo "== done (+${SECONDS}s)"
echo "tests: $passed passed, $failed failed"
[ "$status" -eq 0 ] && [ "$failed" -eq 0 ]
