#!/usr/bin/env bash
# Counts the fsyncs per step of the workflow benchmark (`benches/workflow_syncs.rs`: sequential
# workflows of 10 `safe_to_retry` steps on the embedded SQLite kernel) as `strace -c` counts
# them: every `fsync` and `fdatasync` of every thread, SQLite's own (checkpoints) included.
#
# For each of the benchmark's two agents (`each`: every step's result sent on its own;
# `batched`: with the next submission), the benchmark runs twice under `strace -f -c`, with
# SMALL and LARGE workflows of that agent alone and no warm-up; the difference, less the one
# floor sample the benchmark takes per workflow, divided by the LARGE - SMALL extra workflows,
# is the count per workflow (opening the store, migrating and registering cancel out). Needs
# strace.
#
#   bash rebuno/benches/fsyncs.sh            # SMALL=50 LARGE=350
#   SMALL=100 LARGE=1100 bash rebuno/benches/fsyncs.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
small="${SMALL:-50}"
large="${LARGE:-350}"
bin="$(cargo bench -p rebuno --bench workflow_syncs --no-run 2>&1 |
  grep -o 'target/release/deps/workflow_syncs-[0-9a-f]*' | tail -1)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
count() {
  REBUNO_BENCH_AGENTS="$1" REBUNO_BENCH_RUNS="$2" REBUNO_BENCH_WARMUP=0 \
    strace -f -c -e trace=fsync,fdatasync -o "$tmp/strace" "$bin" >"$tmp/out"
  awk '$NF == "total" { print $4 }' "$tmp/strace"
}
for agent in each batched; do
  a="$(count "$agent" "$small")"
  b="$(count "$agent" "$large")"
  cat "$tmp/out"
  awk -v agent="$agent" -v a="$a" -v b="$b" -v s="$small" -v l="$large" 'BEGIN {
    n = l - s
    per = (b - a - n) / n
    printf "%s: fsync + fdatasync (strace -f -c): %d at %d workflows, %d at %d: %.2f per workflow, %.3f per step\n", agent, a, s, b, l, per, per / 10
  }'
done
