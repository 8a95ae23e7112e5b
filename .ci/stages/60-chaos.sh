#!/usr/bin/env bash
# rzk-chaos (chaos/README.md): the checker's self-tests, then a run of the whole
# instrument against a real 3-member ensemble with kill, pause and partition.
# Against rzk, any anomaly, acknowledged write lost or register the search
# cannot decide fails the stage and prints the seed (replay:
# CHAOS_SEED=N CHAOS_TARGET=rzk bash .ci/stages/60-chaos.sh).
# Against Apache ZooKeeper 3.8.0 (Debian's) anomalies are printed but do not
# fail the stage: under these faults it loses acknowledged writes (see
# RELIABILITY.md), which is ZooKeeper's bug, not this tree's; there the stage
# proves the instrument end to end and fails only if the run itself fails
# (exit 2).
#
# Target (CHAOS_TARGET): `rzk` (default): a 3-member rzk ensemble
# (chaos/configs/rzk.toml, the debug `rzk` binary) for 2 minutes, then 1 minute
# of disk-full faults on tmpfs data directories; before them, the single-fault
# scenarios of chaos/src/scenarios.rs (a few seconds once built);
# `zookeeper`: Apache ZooKeeper 3.8 from Debian's `zookeeper`, 60 s; `both`:
# rzk, then ZooKeeper. Time (2 cores, load average 20-30 from other builds):
# about 3 minutes for rzk after the build, 1.5 more for ZooKeeper.
# Installs what it needs; every member it starts is stopped by PID at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib.sh
source .ci/lib.sh
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
start=$(date +%s)
target="${CHAOS_TARGET:-rzk}"
case "$target" in
rzk) targets=(rzk) ;;
zookeeper) targets=(zookeeper) ;;
both) targets=(rzk zookeeper) ;;
*)
  echo "60-chaos: CHAOS_TARGET must be rzk, zookeeper or both, not $target" >&2
  exit 2
  ;;
esac

if [[ " ${targets[*]} " == *" zookeeper "* ]]; then
  need_file /usr/share/java/zookeeper.jar zookeeper
  need_cmd java default-jre-headless
  apt_install 60-chaos
fi

echo "60-chaos: checker self-tests"
cargo test -p rzk-chaos --lib

cargo build -p rzk-chaos --bin rzk-chaos
bin="${CARGO_TARGET_DIR:-target}/debug/rzk-chaos"
seed="${CHAOS_SEED:-$(( $(date +%s) % 100000 ))}"
faults="kill,kill-leader,pause,pause-leader,partition,partition-leader"

for t in "${targets[@]}"; do
  strict=()
  case "$t" in
  zookeeper)
    config=chaos/configs/zookeeper.toml
    duration=60
    ;;
  rzk)
    cargo build -p rzk-server --bin rzk
    RZK_BIN="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/debug/rzk"
    export RZK_BIN
    echo "60-chaos: single-fault scenarios against rzk (chaos/src/scenarios.rs)"
    cargo test -p rzk-chaos --bin rzk-chaos -- --ignored scenarios::
    config=chaos/configs/rzk.toml
    duration=120
    strict=(--fail-on-undecided)
    ;;
  esac
  echo "60-chaos: $config, seed $seed, ${duration}s of $faults"
  t0=$(date +%s)
  set +e
  "$bin" run --config "$config" --seed "$seed" --duration "$duration" --schedule "$faults" \
    "${strict[@]}"
  rc=$?
  set -e
  echo "60-chaos: $t took $(($(date +%s) - t0)) s"
  if [ "$rc" -eq 1 ] && [ "$t" = zookeeper ]; then
    echo "60-chaos: Apache ZooKeeper 3.8.0 showed anomalies with seed $seed (known; RELIABILITY.md); the instrument ran end to end"
    continue
  fi
  if [ "$rc" -ne 0 ]; then
    echo "60-chaos: FAILED against $t (exit $rc); replay with CHAOS_SEED=$seed CHAOS_TARGET=$t bash .ci/stages/60-chaos.sh"
    exit "$rc"
  fi
done

# A full disk on rzk members (RELIABILITY.md, "Disk full"): each member's data
# directory is a 256 MiB tmpfs (mounting needs root, which CI has; without it the
# tool fails with a clear message), and the fault fills one member's disk for
# 8-12 s at a time. A member whose log write finds the disk full stops serving
# and starts again from its directory once space is free; the run fails if a
# member never serves again, an acknowledged write is lost or the history is not
# linearizable. About 90 s.
if [[ " ${targets[*]} " == *" rzk "* ]]; then
  echo "60-chaos: chaos/configs/rzk.toml, seed $seed, 60s of disk-full (--disk-mb 256)"
  t0=$(date +%s)
  set +e
  "$bin" run --config chaos/configs/rzk.toml --seed "$seed" --duration 60 --schedule disk-full \
    --disk-mb 256 --fail-on-undecided
  rc=$?
  set -e
  echo "60-chaos: rzk disk-full took $(($(date +%s) - t0)) s"
  if [ "$rc" -ne 0 ]; then
    echo "60-chaos: FAILED against rzk with a full disk (exit $rc); replay with: $bin run --config chaos/configs/rzk.toml --seed $seed --duration 60 --schedule disk-full --disk-mb 256"
    exit "$rc"
  fi
fi
echo "60-chaos: took $(($(date +%s) - start)) s"
