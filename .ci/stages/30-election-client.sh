#!/usr/bin/env bash
# rzk-election-client against real servers:
#   1. the #[ignore = "needs Apache ZooKeeper"] tests (the client, the seed scenario,
#      suspension, 2 and 5 contenders with seeded kills and drops, selector, mutex),
#      each on a throwaway Apache ZooKeeper 3.8 started by the test harness (or on
#      RZK_TEST_ZK=host:port when set);
#   2. the same tests against the rzk server built from this tree, standalone;
#   3. the client and election tests (client_zk, election_zk) against a 3-member rzk
#      ensemble started here (three processes, zoo.cfg server lines, myid): they get the
#      connect string of all three and their proxies spread connections over the
#      members; every member must still be running at the end (the recipe tests run on
#      ensembles in 33-recipes-ensemble.sh);
#   4. the same election scenarios against Apache Curator 5.4's LeaderLatch: each
#      property is checked against what interop/curator/README.md documents for
#      Curator (the seed bug and Curator's other documented defects as expected
#      failures, everything else as passes); the stage fails if an outcome differs or
#      if the Curator run cannot start.
# The contenders scenarios run 20 seeds each (all at once, against one server),
# sampling every latch's leadership flag every 5 ms.
# Installs what it needs on a fresh Debian machine; fast when already installed.
# RZK_STAGE30_PASSES (default "zk curator rzk ensemble") picks passes, to run one by hand.
# Duration (2 cores, warm build): see the closing line it prints.
set -euo pipefail
cd "$(dirname "$0")/../.."

need=()
for p in zookeeper zookeeper-bin libcurator-framework-java libcurator-recipes-java libcurator-test-java; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
passes=" ${RZK_STAGE30_PASSES:-zk curator rzk ensemble} "
stage_start=$(date +%s)
work=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# run_tests <what> <test selection> [VAR=value...]: the ignored tests with that
# environment; exits the stage on a failure, after printing the end of the log.
run_tests() {
  local what=$1 tests=$2 log status=0
  shift 2
  echo "--- rzk-election-client against $what"
  log=$(mktemp)
  # shellcheck disable=SC2086 # $tests is a list of cargo options
  env "$@" cargo test -p rzk-election-client $tests -- --ignored --test-threads=2 --nocapture >"$log" 2>&1 || status=$?
  grep -E '^(test |seed scenario|RESULT|server: )|test result|panicked' "$log" || true
  if [ "$status" -ne 0 ]; then
    tail -120 "$log"
    rm -f "$log"
    echo "30-election-client: the tests against $what failed"
    exit "$status"
  fi
  rm -f "$log"
}

free_ports() { # free_ports N: N distinct free loopback ports
  python3 -c 'import socket,sys
ss=[socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1",0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
}

four() { # four <port> <word>: a four-letter word's answer, or nothing
  python3 - "$1" "$2" <<'PY' 2>/dev/null || true
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)
s.settimeout(1)
s.sendall(sys.argv[2].encode())
out = b""
while True:
    b = s.recv(4096)
    if not b:
        break
    out += b
print(out.decode())
PY
}

# start_rzk <name> <clientPort> <myid, 0 for none> [server lines...]: one rzk process in
# $work/<name>
start_rzk() {
  local name=$1 port=$2 id=$3 dir="$work/$1"
  shift 3
  mkdir -p "$dir/data"
  [ "$id" = 0 ] || echo "$id" >"$dir/data/myid"
  {
    printf 'tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir=%s/data\nclientPort=%s\n' "$dir" "$port"
    printf 'clientPortAddress=127.0.0.1\nmaxClientCnxns=0\n4lw.commands.whitelist=*\nadmin.enableServer=false\n'
    for l in "$@"; do echo "$l"; done
  } >"$dir/zoo.cfg"
  "$rzk_bin" "$dir/zoo.cfg" >"$dir/rzk.log" 2>&1 &
  pids+=($!)
  echo "$name: pid $!, clients on 127.0.0.1:$port"
}

# wait_serving <seconds> <port>...: until every port's srvr says Mode leader, follower
# or standalone, and at most one says leader
wait_serving() {
  local limit=$1 p modes leaders ok
  shift
  for _ in $(seq 1 $((limit * 10))); do
    ok=yes
    leaders=0
    for p in "$@"; do
      modes=$(four "$p" srvr | sed -n 's/^Mode: //p')
      case "$modes" in
        leader) leaders=$((leaders + 1)) ;;
        follower | standalone) ;;
        *) ok=no ;;
      esac
    done
    [ "$ok" = yes ] && [ "$leaders" -le 1 ] && return 0
    python3 -c 'import time; time.sleep(0.1)'
  done
  echo "30-election-client: not serving within $limit s (ports $*)"
  for d in "$work"/*/; do echo "--- $d"; tail -30 "$d/rzk.log"; done
  exit 1
}

# all_alive: every rzk started here is still running (a panic or exit is a failure)
all_alive() {
  local p
  for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null && continue
    echo "30-election-client: rzk pid $p exited during the tests"
    for d in "$work"/*/; do echo "--- $d"; tail -40 "$d/rzk.log"; done
    exit 1
  done
}

case "$passes" in *" zk "*)
  run_tests "Apache ZooKeeper 3.8${RZK_TEST_ZK:+ (RZK_TEST_ZK=$RZK_TEST_ZK)}" --tests
esac

case "$passes" in *" curator "*)
  echo "--- the same scenarios against Apache Curator 5.4 (outcomes checked against interop/curator/README.md)"
  log=$(mktemp)
  status=0
  bash interop/curator/run.sh >"$log" 2>&1 || status=$?
  grep -E '^(---|RESULT|CHECK|Apache|curator interop)' "$log" || true
  if [ "$status" -ne 0 ]; then
    echo "30-election-client: the Curator run failed (status $status: 1 = an outcome differs from the documented one, 2 = it could not start)"
    tail -40 "$log"
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
esac

case "$passes" in *" rzk "* | *" ensemble "*)
  cargo build --release -p rzk-server
  rzk_bin="${CARGO_TARGET_DIR:-target}/release/rzk"
esac

# The same tests against the rzk server built from this tree (the issue asks for both
# servers). One rzk serves every test, with the harness's ZooKeeper settings.
case "$passes" in *" rzk "*)
  read -r port < <(free_ports 1)
  start_rzk standalone "$port" 0
  wait_serving 30 "$port"
  run_tests "rzk (standalone)" --tests RZK_TEST_ZK="127.0.0.1:$port"
  all_alive
esac

# Issue 11: the same tests against a 3-member rzk ensemble.
case "$passes" in *" ensemble "*)
  read -r c1 c2 c3 q1 q2 q3 e1 e2 e3 < <(free_ports 9)
  lines=("server.1=127.0.0.1:$q1:$e1" "server.2=127.0.0.1:$q2:$e2" "server.3=127.0.0.1:$q3:$e3")
  start_rzk m1 "$c1" 1 "${lines[@]}"
  start_rzk m2 "$c2" 2 "${lines[@]}"
  start_rzk m3 "$c3" 3 "${lines[@]}"
  wait_serving 60 "$c1" "$c2" "$c3"
  for p in "$c1" "$c2" "$c3"; do echo "127.0.0.1:$p: $(four "$p" srvr | grep '^Mode')"; done
  run_tests "a 3-member rzk ensemble" "--test client_zk --test election_zk" \
    RZK_TEST_ZK="127.0.0.1:$c1,127.0.0.1:$c2,127.0.0.1:$c3"
  all_alive
esac
echo "30-election-client: $(( $(date +%s) - stage_start )) s"
