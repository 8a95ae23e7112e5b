#!/usr/bin/env bash
# Every citation resolves to a file in the repository (about two seconds; needs only
# python3 and git): code and documents cite `docs/<file>.md, "<heading>"`,
# ARCHITECTURE.md and the invariants I1-I7 it defines, and public ZooKeeper and
# Curator issue ids; never documents that are not in the repository, and never the
# project's tracker by issue number (docs/README.md says how to cite). Runs the
# checker's self-test first, so a checker that no longer catches anything fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 .ci/references.py --self-test
python3 .ci/references.py
