#!/usr/bin/env bash
# The interop suite (kazoo, zkCli.sh, Curator) in ensemble mode: an Apache ZooKeeper 3.8
# ensemble of three (QuorumPeerMain, zoo.cfg + myid per member) and then three rzk
# processes started the same way, all on loopback; the suite gets a connect string of
# all three members. Everything that passes against the ZooKeeper ensemble must pass
# against rzk's (interop/runner.py --mode ensemble). Tests that are standalone-only by
# nature: none are skipped. 2 to 4 minutes on 2 cores with the release build that
# 40-interop.sh already made (measured at a load average of about 24: 2 min 08 s, the
# ZooKeeper ensemble's pytest 45 s and rzk's 34 s; 4 min in an earlier run).
# Installs what it needs on a fresh Debian machine; a no-op when it is already there.
set -euo pipefail
cd "$(dirname "$0")/../.."

# shellcheck source=../lib.sh
source .ci/lib.sh

need_zookeeper
# tests/test_curator.py: Curator 5.4's jars, compiled against with javac.
need_cmd javac default-jdk-headless
need_pkgs libcurator-framework-java libcurator-recipes-java
need_python_venv
apt_install 42-interop-ensemble

exec interop/run --mode ensemble
