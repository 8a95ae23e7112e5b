//! Observers in the simulation: relays on the leader and every follower fed by
//! their own cores, simulated observers reading them through the contiguity
//! check, and the ZOOKEEPER-5088 regression switch.
//! (`thousand_seeds_hold_every_zab_property` in `seeds.rs` runs with the
//! default two observers, so the default run checks them on 1,000 seeds.)

use rzk_sim::{run, Options};

fn opts(seed: u64) -> Options {
    Options {
        nodes: if seed % 2 == 0 { 3 } else { 5 },
        ..Options::default()
    }
}

/// Observers are passive and draw from their own RNG: a seed's peers behave
/// exactly as without them.
#[test]
fn observers_do_not_change_a_seed() {
    for seed in [3, 4, 77] {
        let with = run(seed, &opts(seed)).unwrap_or_else(|f| panic!("{f}"));
        let without = run(
            seed,
            &Options {
                observers: 0,
                ..opts(seed)
            },
        )
        .unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(with.trace_hash, without.trace_hash, "seed {seed}");
        assert!(
            with.observers.applied > 0,
            "seed {seed}: {:?}",
            with.observers
        );
    }
}

/// Over many seeds, the observers apply through their relays, resync after
/// crashes and role changes, and some are dropped as too slow; every run
/// passes (ObserverPrefix, ObserverContiguity, and catching up once faults
/// stop are checked inside `run`).
#[test]
fn observers_follow_relays_through_faults() {
    let mut total = rzk_sim::ObserverReport::default();
    for seed in 20_000..20_100 {
        let r = run(seed, &opts(seed)).unwrap_or_else(|f| panic!("{f}"));
        total.applied += r.observers.applied;
        total.attaches += r.observers.attaches;
        total.relays_built += r.observers.relays_built;
        total.too_slow += r.observers.too_slow;
    }
    eprintln!("100 seeds: {total:?}");
    assert!(total.applied > 10_000, "{total:?}");
    assert!(total.attaches > 200, "{total:?}");
    assert!(total.too_slow > 0, "{total:?}");
}

/// ZOOKEEPER-5088 re-introduced behind its switch (relays start without the
/// proposals in flight): the observers' contiguity check must catch it within
/// the default seeds, and the same seed must pass without the switch.
#[test]
fn observer_master_pending_proposals_bug_is_caught() {
    let caught = (0..1000u64).find_map(|seed| {
        let o = Options {
            bug_5088: true,
            ..opts(seed)
        };
        run(seed, &o).err()
    });
    let f = caught.expect("the re-introduced ZOOKEEPER-5088 must be caught within 1000 seeds");
    eprintln!(
        "ZOOKEEPER-5088 re-introduced: caught by seed {} ({})",
        f.seed, f.violation.property
    );
    assert_eq!(f.violation.property, "ObserverContiguity", "{f}");
    run(f.seed, &opts(f.seed)).unwrap_or_else(|f| panic!("{f}"));
}

/// Relays across epoch rollovers (counter limit 5): the stream crosses epochs
/// without an election and the observers follow it.
#[test]
fn observers_follow_epoch_rollovers() {
    let mut applied = 0;
    for seed in 30_000..30_040 {
        let o = Options {
            counter_limit: Some(5),
            ..opts(seed)
        };
        let r = run(seed, &o).unwrap_or_else(|f| panic!("{f}"));
        assert!(r.rollovers > 0 || r.acked < 5, "seed {seed}: {r:?}");
        applied += r.observers.applied;
    }
    assert!(applied > 1_000, "observers applied {applied}");
}
