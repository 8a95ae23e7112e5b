//! Property tests of `rzk-zxid`: ordering, round trips and strict monotonicity.

use proptest::prelude::*;
use rzk_zxid::{Counter, CounterLimit, Epoch, Next, Zxid};

fn zxid() -> impl Strategy<Value = Zxid> {
    (any::<u32>(), any::<u32>()).prop_map(|(e, c)| Zxid::new(Epoch(e), Counter(c)))
}

proptest! {
    #[test]
    fn order_is_epoch_then_counter(a in zxid(), b in zxid()) {
        prop_assert_eq!(a.cmp(&b), (a.epoch(), a.counter()).cmp(&(b.epoch(), b.counter())));
    }

    #[test]
    fn parts_round_trip(e in any::<u32>(), c in any::<u32>()) {
        let z = Zxid::new(Epoch(e), Counter(c));
        prop_assert_eq!(z.epoch(), Epoch(e));
        prop_assert_eq!(z.counter(), Counter(c));
    }

    #[test]
    fn signed_wire_form_round_trips(v in any::<i64>()) {
        let z = Zxid::from_i64(v);
        prop_assert_eq!(z.as_i64(), v);
        prop_assert_eq!(Zxid::from_u64(z.as_u64()), z);
    }

    #[test]
    fn display_and_parse_round_trip(z in zxid()) {
        let shown = z.to_string();
        prop_assert!(shown.starts_with("0x"));
        prop_assert_eq!(shown.parse::<Zxid>().unwrap(), z);
        prop_assert_eq!(z.as_u64().to_string().parse::<Zxid>().unwrap(), z);
    }

    #[test]
    fn next_is_strictly_greater_and_contiguous(z in zxid(), max in 1u32..) {
        let limit = CounterLimit::new(max);
        match z.next_with(limit) {
            Next::Zxid(n) => {
                prop_assert!(n > z);
                prop_assert_eq!(n.epoch(), z.epoch());
                prop_assert!(n.is_next(z));
                prop_assert!(n.counter() <= limit.max_counter());
            }
            Next::Rollover { exhausted } => {
                prop_assert_eq!(exhausted, z.epoch());
                prop_assert!(z.counter() >= limit.max_counter());
            }
        }
    }

    #[test]
    fn a_chain_of_next_strictly_increases_until_rollover(e in any::<u32>(), start in 0u32..50, max in 1u32..60) {
        let limit = CounterLimit::new(max);
        let mut z = Zxid::new(Epoch(e), Counter(start));
        let mut steps = 0;
        while let Next::Zxid(n) = z.next_with(limit) {
            prop_assert!(n > z && n.is_next(z));
            z = n;
            steps += 1;
            prop_assert!(steps <= 60);
        }
        prop_assert_eq!(z.counter(), Counter(start.max(limit.max_counter().0)));
    }

    /// Successors built by construction (the next counter of the epoch, or counter 1
    /// of a later epoch): `is_next` holds and the successor is greater, every case.
    #[test]
    fn constructed_successors_are_next_and_greater(a in zxid(), later in 1u32..4, same_epoch in any::<bool>()) {
        let b = if same_epoch {
            prop_assume!(a.counter().0 < u32::MAX);
            Zxid::new(a.epoch(), Counter(a.counter().0 + 1))
        } else {
            prop_assume!(a.epoch().0 <= u32::MAX - later);
            Zxid::new(Epoch(a.epoch().0 + later), Counter(1))
        };
        prop_assert!(b.is_next(a), "{} after {}", b, a);
        prop_assert!(b > a);
    }

    /// Near pairs (epochs one apart or equal, counters at and around the successor's):
    /// whenever `is_next` holds, the later zxid is greater; and it holds for exactly
    /// the two successor shapes. Random pairs almost never meet the condition, so the
    /// pairs are built near each other.
    #[test]
    fn is_next_implies_greater((a, b) in near_pair()) {
        let successor = (b.epoch() == a.epoch() && a.counter().0.checked_add(1) == Some(b.counter().0))
            || (b.epoch() > a.epoch() && b.counter() == Counter(1));
        prop_assert_eq!(b.is_next(a), successor, "{} after {}", b, a);
        if b.is_next(a) {
            prop_assert!(b > a);
        }
    }
}

fn near_pair() -> impl Strategy<Value = (Zxid, Zxid)> {
    let epoch_delta = prop_oneof![
        Just(0i64),
        Just(1),
        Just(-1),
        Just(2),
        any::<u32>().prop_map(i64::from)
    ];
    let counter = prop_oneof![
        Just(None), // the successor's counter within the epoch
        Just(Some(0u32)),
        Just(Some(1)),
        Just(Some(2)),
        Just(Some(u32::MAX)),
        any::<u32>().prop_map(Some),
    ];
    (zxid(), epoch_delta, counter).prop_map(|(a, d, c)| {
        let e = (i64::from(a.epoch().0) + d).clamp(0, i64::from(u32::MAX)) as u32;
        let c = c.unwrap_or(a.counter().0.wrapping_add(1));
        (a, Zxid::new(Epoch(e), Counter(c)))
    })
}

/// The near pairs reach the condition often: the property above runs its assertion.
#[test]
fn near_pairs_are_often_successors() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = near_pair();
    let hits = (0..1000)
        .filter(|_| {
            let (a, b) = strategy.new_tree(&mut runner).expect("a pair").current();
            b.is_next(a)
        })
        .count();
    assert!(hits >= 100, "only {hits} of 1000 near pairs are successors");
}
