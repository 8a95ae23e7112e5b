#!/usr/bin/env bash
# Observers, server side:
# - server/tests/observers_kill9.rs: three voters and two observers as real rzk
#   processes; a write load (sessions on every member, the observers' forwarded)
#   while an observer and then a follower are killed with SIGKILL and restarted;
#   readers on both observers check that the chain of writes they see is always a
#   prefix (no gap, no reordering); each observer's tree equals the leader's at the
#   end; and with two voters dead the observers serve nothing (they never make a
#   quorum) until a voter returns.
# - the same file, observerMasterPort (the issue's layout): three voters serving
#   observers on their observer-master ports, one observer with the ports in its
#   zoo.cfg following a follower's relay, one without them following the leader
#   (mntr zk_observer_master_id checked for both); the follower that serves the
#   first is killed with SIGKILL and started again under load, the observer moves
#   on, readers see only prefixes, both end equal to the leader (5 s); and a
#   follower stopped with SIGSTOP loses its observer to another member (5 s).
# - the interop suite (kazoo, zkCli.sh, Curator) with its connect string pointing at
#   the observer of a 3+1 ensemble only, Apache ZooKeeper 3.8 first (the reference,
#   its observer on the leader), then rzk (interop/run --mode observer), whose
#   observer follows a follower's observer-master relay (checked from its mntr
#   before the suite runs).
# Time on the shared 2-core machine: 2 min 39 s for the whole stage at a load
# average of 1-4 (the release build 1 min 27 s after the debug tests were built; the
# process tests 15 s; pytest 27 s against ZooKeeper's 3+1 and 26 s against rzk's, the
# rest starting four JVMs and four rzk members); about 7 min at a load of 10-12.
# Through rzk's observer: 175 passed, as through ZooKeeper's.
# Installs what it needs on a fresh Debian machine; a no-op when it is there.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib.sh
source .ci/lib.sh

cargo test -p rzk-server --test observers_kill9 --test observer_config

need_zookeeper
need_cmd javac default-jdk-headless
need_pkgs libcurator-framework-java libcurator-recipes-java
need_python_venv
apt_install 43-observers

exec interop/run --mode observer
