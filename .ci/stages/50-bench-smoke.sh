#!/usr/bin/env bash
# Smoke run of the rzk vs Apache ZooKeeper 3.8 comparison (benches/run compare):
# proves on a fresh machine that both servers start with the same settings, that
# rzk-bench drives both, and that the connection storm and the footprint
# measurements (RSS, idle sessions, snapshot, restart) run end to end. Quick
# figures only (1 round of 1 s at 1 and 8 in flight, a storm of 500 sessions,
# small footprint numbers); they are printed, never written to BENCHMARKS.md.
# Fails if any rzk-bench run fails or reports errors. About 2 minutes on 2 cores
# after the build (the scenarios build rzk-bench, rzk and rzk-ensemble unless
# RZK_BENCH_BIN, RZK_BIN and RZK_ENSEMBLE are set). Installs Debian's zookeeper
# packages if missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
start=$(date +%s)
# The modes this stage does not run (ensemble, observers: benchmarks, not tests;
# several ensembles at once) are at least parsed, with their report scripts.
for f in benches/run benches/scenarios/*.sh benches/scripts/*.sh; do bash -n "$f"; done
benches/run --help >/dev/null
python3 -c 'import ast, sys; [ast.parse(open(f).read(), f) for f in sys.argv[1:]]' benches/scripts/*.py
benches/run compare --quick --footprint
echo "50-bench-smoke: benches/run compare --quick --footprint took $(($(date +%s) - start)) s"
# The open-loop comparison end to end, standalone and with ensembles of three
# (both servers, one short paced run each; about 30 s per mode): fails if
# rzk-bench fails or a line reports errors.
for mode in standalone ensemble; do
  t0=$(date +%s)
  ol=$(benches/run open-loop --mode "$mode" --rates get:2000 --seconds 1 --warmup-seconds 1)
  printf '%s\n' "$ol"
  if [ "$(printf '%s\n' "$ol" | grep -c '^| 1 | get | 2000 | ')" -ne 2 ] ||
    printf '%s\n' "$ol" | grep '^| 1 ' | grep -vq '| 0 |$'; then
    echo "50-bench-smoke: benches/run open-loop --mode $mode: expected one clean line per server" >&2
    exit 1
  fi
  echo "50-bench-smoke: benches/run open-loop --mode $mode took $(($(date +%s) - t0)) s"
done
