//! `rzk-zxid`: ZooKeeper transaction ids, their order, and the epoch rollover rule.
//!
//! A [`Zxid`] is the 64-bit transaction id of ZooKeeper: the high 32 bits are the
//! leader [`Epoch`], the low 32 bits a [`Counter`] that the leader of that epoch
//! increments for every transaction. Every state change in rzk gets the next zxid,
//! and every log and stream of transactions is ordered by it (invariant I3 in
//! ARCHITECTURE.md: zxids strictly increase and the counter never wraps).
//!
//! ```
//! use rzk_zxid::{CounterLimit, Epoch, Next, Zxid};
//!
//! let z = Zxid::new(Epoch(1), 4u32.into());
//! assert_eq!(z.to_string(), "0x100000004");
//! assert_eq!("0x100000004".parse::<Zxid>().unwrap(), z);
//!
//! // The counter never wraps: at the limit `next` says *rollover* instead.
//! let limit = CounterLimit::new(5);
//! assert_eq!(z.next_with(limit), Next::Zxid(Zxid::new(Epoch(1), 5u32.into())));
//! let last = Zxid::new(Epoch(1), 5u32.into());
//! assert_eq!(last.next_with(limit), Next::Rollover { exhausted: Epoch(1) });
//! ```
//!
//! This crate has no dependencies and does no IO. It is the only place in rzk that
//! does bit arithmetic on zxids.

#![deny(missing_docs)]

use std::fmt;
use std::str::FromStr;

/// The epoch of a leader: the high 32 bits of a [`Zxid`].
///
/// Each established leader owns exactly one epoch; a higher epoch always wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Epoch(pub u32);

impl Epoch {
    /// The epoch after this one, or `None` if this is the last representable epoch.
    ///
    /// There is no wrap-around: an exhausted epoch space is an error for the caller
    /// to report, never a silent jump back to epoch 0.
    pub fn next(self) -> Option<Epoch> {
        self.0.checked_add(1).map(Epoch)
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// The counter of a [`Zxid`]: its low 32 bits, incremented per transaction within
/// one epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Counter(pub u32);

impl From<u32> for Counter {
    fn from(value: u32) -> Self {
        Counter(value)
    }
}

impl fmt::Display for Counter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// The highest counter value a leader may assign in one epoch.
///
/// [`CounterLimit::DEFAULT`] is `u32::MAX`, the whole counter space. Tests set a
/// low limit so that the rollover path runs after a handful of writes instead of
/// four billion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CounterLimit(u32);

impl CounterLimit {
    /// The whole 32-bit counter space, as ZooKeeper uses it.
    pub const DEFAULT: CounterLimit = CounterLimit(u32::MAX);

    /// A limit of `max_counter`: the highest counter [`Zxid::next_with`] returns.
    ///
    /// A limit below 1 would leave an epoch with no usable zxid (counter 0 marks the
    /// start of an epoch, see [`Zxid::epoch_start`]), so it is raised to 1.
    pub const fn new(max_counter: u32) -> CounterLimit {
        if max_counter == 0 {
            CounterLimit(1)
        } else {
            CounterLimit(max_counter)
        }
    }

    /// The highest counter allowed.
    pub const fn max_counter(self) -> Counter {
        Counter(self.0)
    }
}

impl Default for CounterLimit {
    fn default() -> Self {
        CounterLimit::DEFAULT
    }
}

/// What comes after a zxid within its epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Next {
    /// The next zxid of the same epoch.
    Zxid(Zxid),
    /// The counter has reached its limit in epoch `exhausted`. There is no next zxid
    /// in this epoch; the leader must move to a later epoch through a rollover
    /// proposal (invariant I3). Nothing here wraps or picks the next epoch silently.
    Rollover {
        /// The epoch whose counter space is used up.
        exhausted: Epoch,
    },
}

/// A ZooKeeper transaction id: `epoch << 32 | counter`.
///
/// Ordering is numeric, which is the same as ordering by `(epoch, counter)`.
/// `Display` prints it the way ZooKeeper does (`0x100000004`, lower-case hex, no
/// padding); `FromStr` reads that form or a decimal number.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Zxid(u64);

impl Zxid {
    /// The zero zxid: epoch 0, counter 0. No transaction ever carries it; it stands
    /// for "no history yet".
    pub const ZERO: Zxid = Zxid(0);

    /// The zxid of `counter` in `epoch`.
    pub const fn new(epoch: Epoch, counter: Counter) -> Zxid {
        Zxid(((epoch.0 as u64) << 32) | counter.0 as u64)
    }

    /// Counter 0 of `epoch`: the position a new leader of `epoch` starts from.
    /// ZooKeeper's NEWLEADER carries it; no transaction has it.
    pub const fn epoch_start(epoch: Epoch) -> Zxid {
        Zxid::new(epoch, Counter(0))
    }

    /// The first transaction zxid of `epoch` (counter 1).
    pub const fn first_of(epoch: Epoch) -> Zxid {
        Zxid::new(epoch, Counter(1))
    }

    /// The epoch part (high 32 bits).
    pub const fn epoch(self) -> Epoch {
        Epoch((self.0 >> 32) as u32)
    }

    /// The counter part (low 32 bits).
    pub const fn counter(self) -> Counter {
        Counter(self.0 as u32)
    }

    /// The zxid as the unsigned 64-bit number it is.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// The zxid from its unsigned 64-bit form.
    pub const fn from_u64(value: u64) -> Zxid {
        Zxid(value)
    }

    /// The signed 64-bit form the wire carries (jute `long`). Lossless: it is the
    /// same bits, so [`Zxid::from_i64`] gives the zxid back.
    pub const fn as_i64(self) -> i64 {
        self.0 as i64
    }

    /// The zxid from the signed 64-bit form the wire carries. Lossless for every
    /// value, including negative ones (the wire uses -1 for "no zxid").
    pub const fn from_i64(value: i64) -> Zxid {
        Zxid(value as u64)
    }

    /// The next zxid of the same epoch under the default limit (`u32::MAX`).
    pub fn next(self) -> Next {
        self.next_with(CounterLimit::DEFAULT)
    }

    /// The next zxid of the same epoch, or [`Next::Rollover`] once the counter has
    /// reached `limit`. Never wraps, never changes the epoch.
    pub fn next_with(self, limit: CounterLimit) -> Next {
        let counter = self.counter().0;
        if counter >= limit.0 {
            return Next::Rollover {
                exhausted: self.epoch(),
            };
        }
        Next::Zxid(Zxid::new(self.epoch(), Counter(counter + 1)))
    }

    /// Whether this zxid is the last one `limit` allows in its epoch: the proposal
    /// that carries it is the epoch's rollover proposal.
    pub fn is_last_with(self, limit: CounterLimit) -> bool {
        self.counter().0 >= limit.0
    }

    /// Whether `self` may directly follow `prev` in a contiguous history.
    ///
    /// The rule: within one epoch the counter goes up by exactly one; a later epoch
    /// starts at counter 1 (any later epoch, since epochs whose leader committed
    /// nothing leave no trace in a log). `prev` may be [`Zxid::ZERO`] or an epoch
    /// start (counter 0), for an empty history or one that begins at a snapshot.
    ///
    /// ZooKeeper's own check (`ZKDatabase.addCommittedProposal`) accepts *any*
    /// counter once the epoch goes up, because its leaders start each epoch at
    /// counter 1 anyway (NEWLEADER carries counter 0, the first proposal counter 1).
    /// We state that as the rule, so a history that skipped the first transactions of
    /// an epoch is refused instead of accepted.
    pub fn is_next(self, prev: Zxid) -> bool {
        let (epoch, counter) = (self.epoch(), self.counter().0);
        let (prev_epoch, prev_counter) = (prev.epoch(), prev.counter().0);
        if epoch == prev_epoch {
            return prev_counter.checked_add(1) == Some(counter);
        }
        epoch > prev_epoch && counter == 1
    }
}

impl fmt::Display for Zxid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::Debug for Zxid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Zxid({:#x})", self.0)
    }
}

impl fmt::LowerHex for Zxid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

/// Why a string is not a zxid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseZxidError {
    input: String,
}

impl fmt::Display for ParseZxidError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid zxid {:?}: expected hex (0x100000004) or a decimal number",
            self.input
        )
    }
}

impl std::error::Error for ParseZxidError {}

impl FromStr for Zxid {
    type Err = ParseZxidError;

    /// Reads `0x…`/`0X…` hex (up to 16 digits) or a decimal number. A negative
    /// decimal is read as the signed wire form (`-1` is `0xffffffffffffffff`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseZxidError {
            input: s.to_owned(),
        };
        let trimmed = s.trim();
        if let Some(hex) = trimmed
            .strip_prefix("0x")
            .or_else(|| trimmed.strip_prefix("0X"))
        {
            // from_str_radix accepts a leading '+', which is not a hex zxid.
            if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err());
            }
            return u64::from_str_radix(hex, 16).map(Zxid).map_err(|_| err());
        }
        if let Some(rest) = trimmed.strip_prefix('-') {
            if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err());
            }
            return trimmed
                .parse::<i64>()
                .map(Zxid::from_i64)
                .map_err(|_| err());
        }
        if trimmed.is_empty() || !trimmed.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err());
        }
        trimmed.parse::<u64>().map(Zxid).map_err(|_| err())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn z(epoch: u32, counter: u32) -> Zxid {
        Zxid::new(Epoch(epoch), Counter(counter))
    }

    #[test]
    fn displays_like_zookeeper() {
        assert_eq!(z(1, 4).to_string(), "0x100000004");
        assert_eq!(Zxid::ZERO.to_string(), "0x0");
        assert_eq!(z(0, 0xa7).to_string(), "0xa7");
        assert_eq!(
            Zxid::from_i64(-1).to_string(),
            "0xffffffffffffffff",
            "the wire's -1 prints as Java's Long.toHexString(-1)"
        );
    }

    #[test]
    fn parses_hex_and_decimal() {
        assert_eq!("0x100000004".parse::<Zxid>(), Ok(z(1, 4)));
        assert_eq!("0X10".parse::<Zxid>(), Ok(z(0, 16)));
        assert_eq!("4294967300".parse::<Zxid>(), Ok(z(1, 4)));
        assert_eq!("-1".parse::<Zxid>(), Ok(Zxid::from_i64(-1)));
        for bad in [
            "",
            "0x",
            "0x+1",
            "+1",
            "-",
            "x10",
            "0x1g",
            "0x10000000000000000",
            "18446744073709551616",
            "1.5",
            "--1",
        ] {
            let err = bad.parse::<Zxid>().expect_err(bad);
            assert!(err.to_string().contains("invalid zxid"), "{err}");
        }
    }

    #[test]
    fn next_counts_up_then_says_rollover() {
        let limit = CounterLimit::new(3);
        assert_eq!(z(2, 1).next_with(limit), Next::Zxid(z(2, 2)));
        assert_eq!(z(2, 2).next_with(limit), Next::Zxid(z(2, 3)));
        assert!(z(2, 3).is_last_with(limit));
        assert_eq!(
            z(2, 3).next_with(limit),
            Next::Rollover {
                exhausted: Epoch(2)
            }
        );
        assert_eq!(
            z(7, u32::MAX).next(),
            Next::Rollover {
                exhausted: Epoch(7)
            },
            "the default limit is the whole counter space and never wraps"
        );
        assert_eq!(z(7, u32::MAX - 1).next(), Next::Zxid(z(7, u32::MAX)));
    }

    #[test]
    fn counter_limit_zero_is_raised_to_one() {
        assert_eq!(CounterLimit::new(0).max_counter(), Counter(1));
        assert_eq!(z(1, 0).next_with(CounterLimit::new(0)), Next::Zxid(z(1, 1)));
    }

    #[test]
    fn is_next_within_and_across_epochs() {
        assert!(z(1, 5).is_next(z(1, 4)));
        assert!(!z(1, 6).is_next(z(1, 4)), "a gap inside an epoch");
        assert!(!z(1, 4).is_next(z(1, 4)));
        assert!(z(2, 1).is_next(z(1, 4)), "a new epoch starts at counter 1");
        assert!(
            z(5, 1).is_next(z(1, 4)),
            "epochs without txns leave no trace"
        );
        assert!(!z(2, 2).is_next(z(1, 4)), "a new epoch must start at 1");
        assert!(!z(2, 0).is_next(z(1, 4)), "counter 0 is no transaction");
        assert!(!z(1, 1).is_next(z(2, 3)), "epochs never go back");
        assert!(z(0, 1).is_next(Zxid::ZERO), "an empty history");
        assert!(z(3, 1).is_next(Zxid::epoch_start(Epoch(3))));
        assert!(!z(1, 0).is_next(z(0, u32::MAX)));
        assert!(!Zxid::ZERO.is_next(Zxid::from_u64(u64::MAX)));
    }

    #[test]
    fn epoch_next_never_wraps() {
        assert_eq!(Epoch(3).next(), Some(Epoch(4)));
        assert_eq!(Epoch(u32::MAX).next(), None);
    }
}
