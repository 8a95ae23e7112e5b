#!/usr/bin/env bash
# The memory of an idle session on rzk (goal: <= 1 KiB of RSS).
#
# For each count N in --sessions: a fresh rzk (the settings of compare.sh) on a
# free loopback port; its VmRSS once it serves; then `rzk-bench idle-sessions`
# opens N sessions (one TCP connection each, 64 connects at a time, kept alive
# by pings), holds them --settle seconds after all are open (every session has
# pinged by then), and the server's VmRSS is read again. Printed per N: the
# RSS added per session. The last line is the slope between the smallest and
# the largest N, which leaves out what the first sessions cost once (the
# allocator's arenas, tokio's first slab pages).
#
#   benches/run session-rss                          # 200,2000,10000
#   RZK_BIN=... RZK_BENCH_BIN=... benches/run session-rss --sessions 500,5000
set -euo pipefail

# shellcheck source=../scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

COUNTS=200,2000,10000
SETTLE=4
while [ $# -gt 0 ]; do
  case $1 in
  --sessions) COUNTS=$2; shift ;;
  --settle) SETTLE=$2; shift ;;
  -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
  *) die "unknown argument $1" ;;
  esac
  shift
done

trap cleanup_started EXIT
resolve_bins
WORK_DIR=$(mktemp -d /tmp/rzk-session-rss.XXXXXX)
IFS=, read -r -a NS <<<"$COUNTS"
max=0
for n in "${NS[@]}"; do [ "$n" -gt $max ] && max=$n; done
raise_nofile "$max"

declare -A ADDED
for n in "${NS[@]}"; do
  name="rss-$n"
  prepare_rzk "$name" "$WORK_DIR/$name"
  start_server "$name"
  pid=${SRV_PID[$name]}
  base=$(rss_kib "$pid")
  out="$WORK_DIR/$name.out" fifo="$WORK_DIR/$name.fifo"
  mkfifo "$fifo"
  # Session timeout 4 s: a ping every 4/3 s, so all have pinged within SETTLE.
  "$RZK_BENCH_BIN" idle-sessions --server "127.0.0.1:${SRV_PORT[$name]}" --sessions "$n" \
    --session-timeout-ms 4000 --hold-seconds 900 <"$fifo" >"$out" 2>"$out.err" &
  ipid=$!
  STARTED_PIDS+=("$ipid")
  exec 4>"$fifo"
  deadline=$(($(date +%s) + 600))
  until grep -q '^READY' "$out"; do
    kill -0 "$ipid" 2>/dev/null || { tail -20 "$out.err" >&2; die "idle-sessions exited before READY"; }
    [ "$(date +%s)" -lt $deadline ] || die "no READY within 600 s"
    sleep 0.1
  done
  sleep "$SETTLE"
  held=$(rss_kib "$pid")
  exec 4>&-
  wait "$ipid" || { tail -20 "$out.err" >&2; die "idle-sessions failed"; }
  stop_server "$name"
  ADDED[$n]=$((held - base))
  awk -v n="$n" -v b="$base" -v h="$held" 'BEGIN {
    printf "%6d sessions: VmRSS %d -> %d KiB, %.0f B per session\n", n, b, h, (h - b) * 1024 / n }'
done
lo=${NS[0]} hi=${NS[0]}
for n in "${NS[@]}"; do
  [ "$n" -lt "$lo" ] && lo=$n
  [ "$n" -gt "$hi" ] && hi=$n
done
if [ "$hi" -gt "$lo" ]; then
  awk -v lo="$lo" -v hi="$hi" -v a="${ADDED[$lo]}" -v b="${ADDED[$hi]}" 'BEGIN {
    printf "slope %d -> %d sessions: %.0f B per session\n", lo, hi, (b - a) * 1024 / (hi - lo) }'
fi
rm -rf "$WORK_DIR"
