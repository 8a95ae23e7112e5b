#!/usr/bin/env bash
# Runs rzk-chaos N times against one ensemble kind and appends each run's JSON
# report line to OUT; prints the summary table (RELIABILITY.md).
#   chaos/reliability.sh CONFIG RUNS SECONDS OUT [rzk-chaos run options...]
# Seeds are 1..RUNS (a run is replayed with --seed); each run's report and
# history are kept beside OUT. Needs the release binary
# (cargo build --release -p rzk-chaos) or RZK_CHAOS_BIN.
set -euo pipefail
config=$1 runs=$2 seconds=$3 out=$4
shift 4
bin=${RZK_CHAOS_BIN:-$(dirname "$0")/../target/release/rzk-chaos}
for seed in $(seq 1 "$runs"); do
  echo "reliability: $config seed $seed (${seconds}s) $*" >&2
  "$bin" run --config "$config" --seed "$seed" --duration "$seconds" --json-out "$out" \
    --history "$out.seed$seed.history.jsonl" "$@" \
    >"$out.seed$seed.txt" 2>&1 || echo "reliability: seed $seed exit $?" >&2
done
"$bin" summarize "$out"
