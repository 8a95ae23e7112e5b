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

    #[test]
    fn is_next_implies_greater(a in zxid(), b in zxid()) {
        if b.is_next(a) {
            prop_assert!(b > a);
        }
    }
}
