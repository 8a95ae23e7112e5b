#!/usr/bin/env bash
# The memory of a watch on rzk (goal: <= 48 B; ZooKeeper's old watch
# manager needed about 133 B).
#
# A fresh rzk (the settings of compare.sh) on a free loopback port;
# `rzk-bench populate` creates --znodes children of /rzk-watch (128-byte
# values); VmRSS is read. Then `rzk-bench idle-sessions --watch-parent` opens
# --sessions sessions, each leaving exists(watch=true) on its share of the
# children (--watches in all, every child watched by watches/znodes sessions),
# holds them, and VmRSS is read again once the server's `wchs` reports every
# watch. Printed: RSS added per watch (it includes the sessions themselves,
# about 5 KiB each before the sessions were made smaller: 0.5 B per watch at 100
# sessions and 1M watches).
#
#   benches/run watch-rss                         # 1,000,000 watches, 100,000 znodes, 100 sessions
#   RZK_BIN=... RZK_BENCH_BIN=... benches/run watch-rss --sessions 1000
set -euo pipefail

# shellcheck source=../scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

ZNODES=100000
WATCHES=1000000
SESSIONS=100
while [ $# -gt 0 ]; do
  case $1 in
  --znodes) ZNODES=$2; shift ;;
  --watches) WATCHES=$2; shift ;;
  --sessions) SESSIONS=$2; shift ;;
  -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
  *) die "unknown argument $1" ;;
  esac
  shift
done
[ $((WATCHES % SESSIONS)) = 0 ] || die "--watches must be a multiple of --sessions"

# wchs NAME: the server's watch summary (four-letter word), one line.
wchs() {
  (
    exec 3<>"/dev/tcp/127.0.0.1/$1"
    printf wchs >&3
    tr '\n' ' ' <&3
  ) 2>/dev/null
}

trap cleanup_started EXIT
resolve_bins
WORK_DIR=$(mktemp -d /tmp/rzk-watch-rss.XXXXXX)
raise_nofile "$SESSIONS"
name=watch
prepare_rzk "$name" "$WORK_DIR/$name"
start_server "$name"
pid=${SRV_PID[$name]}
port=${SRV_PORT[$name]}
"$RZK_BENCH_BIN" populate --server "127.0.0.1:$port" --znodes "$ZNODES" --path /rzk-watch >/dev/null
base=$(rss_kib "$pid")
out="$WORK_DIR/idle.out" fifo="$WORK_DIR/idle.fifo"
mkfifo "$fifo"
"$RZK_BENCH_BIN" idle-sessions --server "127.0.0.1:$port" --sessions "$SESSIONS" \
  --watch-parent /rzk-watch --watch-znodes "$ZNODES" \
  --watches-per-session $((WATCHES / SESSIONS)) --hold-seconds 1800 <"$fifo" >"$out" 2>"$out.err" &
ipid=$!
STARTED_PIDS+=("$ipid")
exec 4>"$fifo"
deadline=$(($(date +%s) + 1200))
until grep -q '^READY' "$out"; do
  kill -0 "$ipid" 2>/dev/null || { tail -20 "$out.err" >&2; die "idle-sessions exited before READY"; }
  [ "$(date +%s)" -lt $deadline ] || die "no READY within 1200 s"
  sleep 0.2
done
summary=$(wchs "$port")
case $summary in
*"Total watches:$WATCHES"*) ;;
*) die "the server reports '$summary', expected $WATCHES watches" ;;
esac
held=$(rss_kib "$pid")
exec 4>&-
wait "$ipid" || { tail -20 "$out.err" >&2; die "idle-sessions failed"; }
stop_server "$name"
log "wchs: $summary"
awk -v w="$WATCHES" -v z="$ZNODES" -v s="$SESSIONS" -v b="$base" -v h="$held" 'BEGIN {
  printf "%d watches on %d znodes from %d sessions: VmRSS %d -> %d KiB, %.1f B per watch\n",
    w, z, s, b, h, (h - b) * 1024 / w }'
rm -rf "$WORK_DIR"
