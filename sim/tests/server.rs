//! The server-level simulation in `cargo test`: rzk's server core on every
//! peer, simulated ZooKeeper clients on the members, seeded crashes,
//! partitions and restarts; and the proofs that it catches a re-introduced
//! server bug. CI runs many more seeds in release mode (`.ci/stages`).

use rzk_sim::{run, CoreBugs, Options, ServerOptions};

fn server_opts(bugs: CoreBugs) -> Options {
    let server = ServerOptions {
        bugs,
        ..ServerOptions::default()
    };
    server.apply_to(Options {
        // Shorter runs than the quorum simulation's: each one carries a
        // server core per peer and the clients' checks.
        fault_ms: 6_000,
        ..Options::default()
    })
}

/// Runs `count` seeds from `start`, alternating 3 and 5 peers.
fn run_seeds(start: u64, count: u64, base: &Options) -> rzk_sim::ServerReport {
    let mut total = rzk_sim::ServerReport::default();
    for seed in start..start + count {
        let mut o = base.clone();
        o.nodes = if seed % 2 == 0 { 3 } else { 5 };
        let r = run(seed, &o).unwrap_or_else(|f| panic!("{f}"));
        let s = r.server.expect("a server-level run reports on its servers");
        total.connects += s.connects;
        total.sessions += s.sessions;
        total.resumes += s.resumes;
        total.replies += s.replies;
        total.acks += s.acks;
        total.notifications += s.notifications;
        total.expired += s.expired;
        total.expirations += s.expirations;
        total.snapshots += s.snapshots;
        total.loads += s.loads;
    }
    total
}

#[test]
fn server_cores_under_faults_give_clients_what_zookeeper_promises() {
    let r = run_seeds(0, 60, &server_opts(CoreBugs::default()));
    eprintln!("60 server-level seeds: {r:?}");
    // The load must exercise what the checks are about.
    assert!(r.acks > 5_000, "writes acknowledged: {}", r.acks);
    assert!(r.replies > 20_000, "replies checked: {}", r.replies);
    assert!(
        r.resumes > 50,
        "sessions resumed on a member: {}",
        r.resumes
    );
    assert!(
        r.notifications > 500,
        "watch notifications: {}",
        r.notifications
    );
    assert!(r.snapshots > 50, "server snapshots saved: {}", r.snapshots);
    assert!(r.loads > 60, "snapshots loaded: {}", r.loads);
}

#[test]
fn a_server_run_replays_exactly() {
    let o = server_opts(CoreBugs::default());
    let a = run(7, &o).unwrap_or_else(|f| panic!("{f}"));
    let b = run(7, &o).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(a, b, "a seed is a pure function of its number");
}

/// Runs seeds with a bug switched on until one fails; returns the seed and
/// the violated property.
fn first_failure(bugs: CoreBugs, seeds: u64) -> Option<(u64, &'static str)> {
    let o = server_opts(bugs);
    (0..seeds).find_map(|seed| {
        let mut o = o.clone();
        o.nodes = if seed % 2 == 0 { 3 } else { 5 };
        run(seed, &o).err().map(|f| (seed, f.violation.property))
    })
}

/// I6b: a member that answers `sync` once the leader gave the barrier,
/// before it has applied up to it (as Apache ZooKeeper 3.8's leader does),
/// lets a read after the sync miss an acknowledged write.
#[test]
fn answering_sync_before_apply_is_caught() {
    let bugs = CoreBugs {
        answer_sync_before_apply: true,
        ..CoreBugs::default()
    };
    let found = first_failure(bugs, 300);
    eprintln!("sync before apply: {found:?}");
    let (_, property) = found.expect("caught within 300 seeds");
    assert_eq!(property, "ServerSyncLinearizable");
}

/// A member that applies a committed txn after the one that follows it
/// (without the check that each applied zxid follows the last) serves a tree
/// that is not the committed history's.
#[test]
fn applying_out_of_order_is_caught() {
    let bugs = CoreBugs {
        apply_out_of_order: true,
        ..CoreBugs::default()
    };
    let found = first_failure(bugs, 300);
    eprintln!("apply out of order: {found:?}");
    let (_, property) = found.expect("caught within 300 seeds");
    assert!(
        [
            "ServerSessionOrder",
            "ServerReadConsistent",
            "ServerWriteAcked",
            "ServerCoreStopped",
            "ServerTreesEqual",
            "ServerInvariant"
        ]
        .contains(&property),
        "caught as {property}"
    );
}
