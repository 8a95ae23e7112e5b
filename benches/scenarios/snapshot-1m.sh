#!/usr/bin/env bash
# benches/run snapshot-1m: the cost of one snapshot of a large tree on an idle
# server, and the restart after it, for one or more binaries in turn.
#
#   [N=1000000] [RZK_BENCH_BIN=...] benches/run snapshot-1m label=/path/to/rzk ...
#
# Per binary: populate N znodes of 128 B (10 parents of N/10, 32 sessions x 8 in
# flight, snapCount=1000000000 so nothing is snapshotted), SIGTERM; start again
# with snapCount=2, so the first txn once serving begins a snapshot of the whole
# tree (the replayed log counts), and a populate of 10 znodes in one session
# (13 txns, no more after them: exactly one snapshot). Prints the snapshot's
# "started" -> "written; saving" -> core's "saved" times from the server's log
# and the server's CPU (utime + stime, /proc/<pid>/stat) from "serving" to
# "saved"; then SIGTERM, exec, and the time until the last parent reads with
# all its children (the snapshot just written is loaded; footprint.sh's shape),
# with the preload's own line. Data under /var/tmp, removed afterwards.
set -u
# shellcheck source=../scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
N=${N:-1000000}
B=${RZK_BENCH_BIN:-$REPO_ROOT/target/release/rzk-bench}
D=""
trap 'cleanup_started; [ -z "$D" ] || rm -rf "$D"' EXIT
for lb in "$@"; do
LABEL=${lb%%=*}; BIN=${lb#*=}
D=$(mktemp -d /var/tmp/rzk-snapshot-1m.XXXXXX)
# lib.sh's record srv: this binary, a fresh port, data in $D/data, the log $D/log.
prepare_rzk srv "$D"
SRV_BIN[srv]=$BIN SRV_LOG[srv]=$D/log
port=${SRV_PORT[srv]}
start() { launch srv "$D/t0" "$@"; PID=${SRV_PID[srv]}; }
start --set snapCount=1000000000
$B wait-serving --server 127.0.0.1:$port >/dev/null
for i in $(seq 0 9); do $B populate --server 127.0.0.1:$port --znodes $((N/10)) --path /p-$i --sessions 32 --inflight 8 >/dev/null; done
stop_server srv
from=$(wc -l < $D/log)
start --set snapCount=2
until grep -q "serving role" <(tail -n +$((from+1)) $D/log); do sleep 0.01; done
c0=$(awk '{print $14+$15}' /proc/$PID/stat)
$B populate --server 127.0.0.1:$port --znodes 10 --path /trigger --sessions 1 --inflight 1 >/dev/null 2>&1
until tail -n +$((from+1)) $D/log | grep -q "rzk_server::core: snapshot saved"; do sleep 0.05; done
c1=$(awk '{print $14+$15}' /proc/$PID/stat)
python3 - "$D/log" "$from" "$((c1-c0))" "$LABEL" <<'PY'
import sys, datetime, os
lines = open(sys.argv[1]).read().splitlines()[int(sys.argv[2]):]
ts = lambda l: datetime.datetime.strptime(l[:26], "%Y-%m-%dT%H:%M:%S.%f")
st = [l for l in lines if "snapshot started" in l][0]
sv = [l for l in lines if "rzk_server::core: snapshot saved" in l][0]
wr = [l for l in lines if "snapshot written; saving" in l][0]
print("%s snapshot nodes=%s: started->written %.0f ms, ->saved %.0f ms, server CPU %.2f s" % (sys.argv[4], st.split("nodes=")[1], (ts(wr)-ts(st)).total_seconds()*1000, (ts(sv)-ts(st)).total_seconds()*1000, int(sys.argv[3])/os.sysconf("SC_CLK_TCK")))
PY
stop_server srv
start --set snapCount=100000
$B wait-serving --server 127.0.0.1:$port --timeout-seconds 300 --check-path /p-9 --expect-children $((N/10)) >/dev/null
t1=$(date +%s%N) t0=$(cat $D/t0) # t0: just before exec (lib.sh's launch)
echo "$LABEL restart: $(( (t1-t0)/1000000 )) ms  load $(cut -d' ' -f1 /proc/loadavg)  $(grep -a 'snapshot read, checked and loaded' $D/log | tail -1 | grep -o 'bytes=.*')"
stop_server srv
rm -rf $D
D=""
done
