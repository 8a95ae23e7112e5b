#!/usr/bin/env bash
# rzk-sim's long runs: 20000 seeds with the default fault mix (3 and 5 peers)
# and 5000 with a zxid counter limit of 4 (epoch rollover every few writes).
# Then a single voter (standalone rzk is an ensemble of one): 2000 seeds alone
# and 2000 with 2 observer members. The latter gets a 60 s settle bound: a
# single voter commits about 5 times what 3 voters do, so its state (~35 KB)
# sent as SNAP in the seed's smallest chunks (16 B, one in flight) takes up to
# ~30 simulated seconds, past the default 20 s (3 of these 2000 seeds, all
# converging by 60 s). Measured on the shared 2-core machine (release build):
# 3 min 40 s in all, of it about 35 s the single voter. Then the server-level
# simulation (rzk-server's core on every peer, simulated ZooKeeper clients
# checking what they see; sim/src/server/): 2000 seeds of 6 s of faults (its
# two bug switches are proven caught by `cargo test -p rzk-sim --test server`).
# Needs nothing but cargo.
set -euo pipefail
cargo run -p rzk-sim --release -- --seeds 20000 --start 1000000
cargo run -p rzk-sim --release -- --seeds 5000 --start 2000000 --limit 4
cargo run -p rzk-sim --release -- --nodes 1 --observer-members 0 --seeds 2000 --start 5000000
cargo run -p rzk-sim --release -- --nodes 1 --observer-members 2 --seeds 2000 --start 5000000 --settle-ms 60000
cargo run -p rzk-sim --release -- --server --seeds 2000 --start 3000000 --fault-ms 6000
