#!/usr/bin/env bash
# rzk-election-client against real servers:
#   1. the #[ignore = "needs Apache ZooKeeper"] tests (the client, the seed scenario,
#      suspension, 2 and 5 contenders with seeded kills and drops, selector, mutex),
#      each on a throwaway Apache ZooKeeper 3.8 started by the test harness (or on
#      RZK_TEST_ZK=host:port when set);
#   2. the same tests against the rzk server built from this tree, standalone;
#   3. the client and election tests (client_zk, election_zk) against a 3-member rzk
#      ensemble started here (three processes, zoo.cfg server lines, myid; rzk-ensemble,
#      testkit/README.md): they get the connect string of all three and their proxies
#      spread connections over the members; every member must still be running at the
#      end (the recipe tests run on ensembles in 33-recipes-ensemble.sh);
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
# shellcheck source=../lib.sh
source .ci/lib.sh

need_pkgs zookeeper zookeeper-bin libcurator-framework-java libcurator-recipes-java libcurator-test-java
need_cmd javac default-jdk-headless
need_cmd python3 python3
apt_install 30-election-client

export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
passes=" ${RZK_STAGE30_PASSES:-zk curator rzk ensemble} "
stage_start=$(date +%s)
work=$(mktemp -d)
ensembles=()
cleanup() {
  local d
  for d in "${ensembles[@]}"; do "$RZK_ENSEMBLE" stop --dir "$d" --grace 20 2>/dev/null || true; done
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

# start_rzk <name> <rzk-ensemble start options...>: rzk in $work/<name> with the
# harness's ZooKeeper settings (tickTime 500, initLimit 10, syncLimit 5,
# maxClientCnxns=0, every four-letter word, no AdminServer), started and waited for
# (the members settled) by rzk-ensemble; sets CONNECT.
start_rzk() {
  local name=$1
  shift
  ensembles+=("$work/$name")
  CONNECT=$("$RZK_ENSEMBLE" start --dir "$work/$name" --rzk "$rzk_bin" --tick-ms 500 \
    --init-limit 10 --sync-limit 5 --set maxClientCnxns=0 "$@") || {
    echo "30-election-client: $name did not start"
    exit 1
  }
  "$RZK_ENSEMBLE" status --dir "$work/$name"
}

# all_alive <name>: every rzk member of <name> is still running (a panic or exit is a
# failure)
all_alive() {
  "$RZK_ENSEMBLE" status --dir "$work/$1" --require-running >/dev/null && return 0
  echo "30-election-client: an rzk member of $1 exited during the tests"
  "$RZK_ENSEMBLE" status --dir "$work/$1"
  for d in "$work/$1"/ "$work/$1"/m*/; do [ -f "$d/server.log" ] && { echo "--- $d"; tail -40 "$d/server.log"; }; done
  exit 1
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
  ensemble_cli
esac

# The same tests against the rzk server built from this tree (the issue asks for both
# servers). One rzk serves every test, with the harness's ZooKeeper settings.
case "$passes" in *" rzk "*)
  start_rzk standalone --standalone --timeout 30
  run_tests "rzk (standalone)" --tests RZK_TEST_ZK="$CONNECT"
  all_alive standalone
esac

# The same tests against a 3-member rzk ensemble.
case "$passes" in *" ensemble "*)
  start_rzk ensemble --voters 3 --no-client-on-server-lines --timeout 60
  run_tests "a 3-member rzk ensemble" "--test client_zk --test election_zk" RZK_TEST_ZK="$CONNECT"
  all_alive ensemble
esac
echo "30-election-client: $(( $(date +%s) - stage_start )) s"
