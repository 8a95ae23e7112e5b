#!/usr/bin/env bash
# Two or more rzk binaries side by side (the one-voter ZAB path
# against the QuorumOfOne it replaced, or any before/after pair). Each binary
# is started once, standalone, with compare.sh's settings, on its own data dir
# under /var/tmp; then, round by round, every workload runs on each of them in
# turn (the order reversed in even rounds), `rzk-bench run` with 32 sessions,
# --inflight requests in flight per session and 128 B values.
#
# Printed per run: ops/s, the server's CPU µs per op (rzk-bench --server-pid,
# /proc/<pid>/stat over the timed phase), and from `perf stat -p` over 2 s of
# the run: the server's task-clock, context switches and syscalls per op. On a
# shared machine the CPU and switch figures per op are what to compare; ops/s
# follows the load. The load average is printed at the start and the end.
#
#   benches/run ab-binaries --rounds 3 --seconds 4 --workloads create,set,get \
#       old=/path/to/old/rzk new=target/release/rzk
#   FORCE_SYNC=no benches/run ab-binaries ...     # the code path without the disk
#
# Environment: RZK_BENCH_BIN (default target/release/rzk-bench), FORCE_SYNC
# (yes), INFLIGHT (1). Needs perf for the per-op switch and syscall columns
# (printed as 0 without it).
set -euo pipefail

ROUNDS=3
SECS=4
WORKLOADS=create,set,get
while [ $# -gt 0 ]; do
  case $1 in
  --rounds) ROUNDS=$2; shift 2 ;;
  --seconds) SECS=$2; shift 2 ;;
  --workloads) WORKLOADS=$2; shift 2 ;;
  -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
  *=*) break ;;
  *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ $# -ge 1 ] || { echo "give at least one NAME=BINARY" >&2; exit 2; }
# shellcheck source=../scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
RZK_BENCH_BIN=${RZK_BENCH_BIN:-$REPO_ROOT/target/release/rzk-bench}
BENCH=$RZK_BENCH_BIN
INFLIGHT=${INFLIGHT:-1}
FORCE_SYNC=${FORCE_SYNC:-yes}
[ -x "$BENCH" ] || { echo "RZK_BENCH_BIN=$BENCH is not an executable" >&2; exit 2; }
export RZK_BENCH_BIN
HAVE_PERF=0
command -v perf >/dev/null && HAVE_PERF=1
# compare.sh's settings (lib.sh's prepare_rzk), the servers logging warnings only.
SNAP_COUNT=100000 RZK_LOG=warn

work_dir /var/tmp/rzk-ab
WORK=$WORK_DIR
declare -A PID PORT
NAMES=()

for pair in "$@"; do
  n=${pair%%=*}
  bin=${pair#*=}
  [ -x "$bin" ] || { echo "$n: $bin is not an executable" >&2; exit 2; }
  NAMES+=("$n")
  prepare_rzk "$n" "$WORK/$n" "forceSync=$FORCE_SYNC"
  SRV_BIN[$n]=$bin
  start_server "$n"
  PID[$n]=${SRV_PID[$n]} PORT[$n]=${SRV_PORT[$n]}
  echo "# $n: pid ${PID[$n]}, port ${PORT[$n]}, $bin"
done
echo "# $(date -u +%FT%TZ) forceSync=$FORCE_SYNC inflight=$INFLIGHT load average: $(cut -d' ' -f1-3 /proc/loadavg)"

for ((r = 1; r <= ROUNDS; r++)); do
  order=("${NAMES[@]}")
  if ((r % 2 == 0)); then
    mapfile -t order < <(printf '%s\n' "${NAMES[@]}" | tac)
  fi
  for w in ${WORKLOADS//,/ }; do
    for n in "${order[@]}"; do
      p=${PID[$n]}
      : >"$WORK/perf"
      sp=""
      if [ $HAVE_PERF = 1 ]; then
        (sleep 1.5; perf stat -x, -e task-clock,context-switches,raw_syscalls:sys_enter \
          -p "$p" -- sleep 2 2>"$WORK/perf" >/dev/null || true) &
        sp=$!
      fi
      out=$("$BENCH" run --server "127.0.0.1:${PORT[$n]}" --workload "$w" --sessions 32 \
        --inflight "$INFLIGHT" --value-bytes 128 --seconds "$SECS" --seed "$r" \
        --server-pid "$p" --json 2>"$WORK/err") || { cat "$WORK/err" >&2; exit 1; }
      [ -z "$sp" ] || wait "$sp"
      python3 - "$r" "$w" "$n" "$out" "$WORK/perf" <<'PY'
import json, sys
r, w, n, out, perf = sys.argv[1:]
j = json.loads(out.strip().splitlines()[-1])
ops = j["ops_per_sec"]
v = {}
for line in open(perf):
    f = line.strip().split(",")
    if len(f) > 3 and f[0][:1].isdigit():
        v[f[2]] = float(f[0])
window_ops = ops * 2.0  # perf counts over 2 s of the timed phase
per = lambda k, scale=1.0: v.get(k, 0.0) * scale / window_ops if window_ops else 0.0
print(f"r{r} {w:8s} {n:8s} ops/s {ops:9.0f}  cpu_us/op {j.get('server_cpu_us_per_op', 0):6.1f}"
      f"  task_clock_us/op {per('task-clock', 1000.0):6.1f}  cs/op {per('context-switches'):5.2f}"
      f"  syscalls/op {per('raw_syscalls:sys_enter'):5.2f}  p99_ms {j['p99_us'] / 1000:.2f}")
PY
    done
  done
done
echo "# $(date -u +%FT%TZ) load average: $(cut -d' ' -f1-3 /proc/loadavg)"
