#!/usr/bin/env bash
# RSS per znode of rzk alone, A/B (goal: <= 150 B per znode beyond its path
# and data). For each round and each binary in turn (alternating, so both see
# the same minutes of the machine): a fresh rzk with compare.sh's settings on a
# free loopback port, VmRSS once it serves, `rzk-bench populate` of --znodes
# znodes of 128 B as compare.sh --footprint does it (parents of at most 100,000
# children, 32 sessions x 8 in flight), VmRSS again. Printed per run: the RSS
# at start and after, and the RSS added per znode less its path and data (the
# same figure as compare.sh's footprint row); with --settle S, the RSS read S
# seconds after the populate instead (allocators that return freed memory
# late). With --malloc-info, glibc's
# malloc_info() of the populated server is written beside the results (gdb
# attaches and calls it; for a binary on glibc's malloc only).
#
#   benches/run znode-rss --bins /work/ab/a/rzk,/work/ab/b/rzk --rounds 2
#   benches/run znode-rss --znodes 1000000 --set rzk.log.windowEntriesMax=2
#
# Environment: RZK_BENCH_BIN (default: built from this repository); RZK_BIN when
# --bins is not given.
set -euo pipefail

# shellcheck source=../scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

ZNODES=200000
ROUNDS=1
BINS=""
SETS=()
MALLOC_INFO=0
SETTLE=0
KEEP=0
CHUNK=100000
while [ $# -gt 0 ]; do
  case $1 in
  --znodes) ZNODES=$2; shift ;;
  --rounds) ROUNDS=$2; shift ;;
  --bins) BINS=$2; shift ;;
  --set) SETS+=("$2"); shift ;;
  --malloc-info) MALLOC_INFO=1 ;;
  --settle) SETTLE=$2; shift ;;
  --keep) KEEP=1 ;;
  -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
  *) die "unknown argument $1" ;;
  esac
  shift
done

trap cleanup_started EXIT
resolve_bins
[ -n "$BINS" ] || BINS=$RZK_BIN
IFS=, read -r -a BIN_LIST <<<"$BINS"
WORK_DIR=$(mktemp -d /var/tmp/rzk-znode-rss.XXXXXX)
[ $KEEP = 1 ] || trap 'cleanup_started; rm -rf "$WORK_DIR"' EXIT

# Mean path length of the populated znodes (report.py's populate_path_bytes).
mean_path() {
  python3 - "$ZNODES" "$CHUNK" <<'PY'
import sys
n, chunk = int(sys.argv[1]), int(sys.argv[2])
total, left, c = 0, n, 0
while left > 0:
    k = min(left, chunk)
    total += k * len(f"/rzk-populate-{c}/n") + sum(len(str(i)) for i in range(k))
    left -= k
    c += 1
print(total / n)
PY
}
MEAN_PATH=$(mean_path)

one_run() {
  local bin=$1 round=$2 b=$3 name="z$2-$3" left=$ZNODES k=0 here before after
  RZK_BIN=$bin prepare_rzk "$name" "$WORK_DIR/$name" "${SETS[@]}"
  RZK_BIN=$bin start_server "$name"
  local pid=${SRV_PID[$name]}
  before=$(rss_kib "$pid")
  while [ "$left" -gt 0 ]; do
    here=$((left < CHUNK ? left : CHUNK))
    "$RZK_BENCH_BIN" populate --server "127.0.0.1:${SRV_PORT[$name]}" --znodes "$here" \
      --value-bytes 128 --path "/rzk-populate-$k" --sessions 32 --inflight 8 --json \
      >"$WORK_DIR/$name.pop.json" 2>"$WORK_DIR/$name.pop.err" ||
      { tail -20 "$WORK_DIR/$name.pop.err" >&2; die "populate failed"; }
    left=$((left - here)) k=$((k + 1))
  done
  after=$(rss_kib "$pid")
  if [ "$SETTLE" != 0 ]; then
    sleep "$SETTLE"
    log "VmRSS $((after / 1024)) MiB after the populate, $(($(rss_kib "$pid") / 1024)) MiB $SETTLE s later"
    after=$(rss_kib "$pid")
  fi
  if [ $MALLOC_INFO = 1 ]; then
    gdb -q -batch -p "$pid" -ex 'call (int) malloc_info(0, stderr)' >/dev/null 2>&1 || true
    awk '/<malloc version/,/<\/malloc>/' "${SRV_LOG[$name]}" >"$WORK_DIR/$name.malloc_info.xml"
    cp "$WORK_DIR/$name.malloc_info.xml" "/var/tmp/znode-rss-$name.malloc_info.xml"
    log "malloc_info: /var/tmp/znode-rss-$name.malloc_info.xml"
  fi
  RZK_BIN=$bin stop_server "$name"
  python3 - "$bin" "$round" "$before" "$after" "$ZNODES" "$MEAN_PATH" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import sys
bin_, rnd, before, after, n, path, load = sys.argv[1:]
before, after, n, path = int(before), int(after), int(n), float(path)
per = (after - before) * 1024 / n
print(f"round {rnd} {bin_}: VmRSS {before/1024:.1f} -> {after/1024:.1f} MiB, "
      f"{per:.1f} B per znode, {per - path - 128:.1f} B beyond path ({path:.1f} B) and data; load {load}")
PY
  rm -rf "${WORK_DIR:?}/$name"
}

for ((r = 1; r <= ROUNDS; r++)); do
  for i in "${!BIN_LIST[@]}"; do one_run "${BIN_LIST[$i]}" "$r" "$i"; done
done
