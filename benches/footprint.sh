#!/usr/bin/env bash
# Memory, restart and snapshot footprint of rzk vs Apache ZooKeeper 3.8:
# the same as `benches/compare.sh --footprint-only` (see its --help for options).
exec "$(dirname "$0")/compare.sh" --footprint-only "$@"
