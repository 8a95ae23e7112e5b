//! The observer's side: every transaction it applies must directly follow the
//! last one it applied.

use rzk_zxid::Zxid;

use crate::error::StreamError;

/// The contiguity check of an observer's committed stream (I4).
///
/// Built from the zxid the observer's history ends at after a sync; each
/// transaction that arrives is checked with [`Contiguity::accept`] *before* it is
/// applied. A refusal means: drop the connection, sync again, and build a new
/// `Contiguity` from the synced zxid. Nothing is skipped, nothing is applied out
/// of order, and no task dies (ZooKeeper's observer throws
/// `IllegalStateException` here and its CommitProcessor thread ends).
///
/// The rule: the relay says which committed zxid precedes each transaction at
/// its source, and that must be the last one applied here; and the transaction
/// must be able to follow it ([`Zxid::is_next`]: within an epoch the counter goes
/// up by one; a later epoch, after a rollover proposal or a new leader, starts
/// at counter 1). `is_next` alone would accept `(e, 2)` then `(e+1, 1)` with the
/// rest of epoch `e` missing; the link refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contiguity {
    /// The last zxid applied (or synced to).
    last_applied: Zxid,
}

impl Contiguity {
    /// The check for a history that ends at `synced_to`.
    pub fn after_sync(synced_to: Zxid) -> Contiguity {
        Contiguity {
            last_applied: synced_to,
        }
    }

    /// The last zxid accepted (or synced to).
    pub fn last_applied(&self) -> Zxid {
        self.last_applied
    }

    /// Accepts `zxid`, relayed as following `prev` at the source, if `prev` is
    /// the last zxid applied here and `zxid` may follow it ([`Zxid::is_next`]),
    /// and moves on to it. Refused: the state is unchanged, so a caller that
    /// ignored the error still could not skip ahead with this checker.
    pub fn accept(&mut self, prev: Zxid, zxid: Zxid) -> Result<(), StreamError> {
        let last_applied = self.last_applied;
        if zxid <= last_applied {
            return Err(StreamError::Reordered {
                last_applied,
                got: zxid,
            });
        }
        if prev != last_applied {
            return Err(StreamError::Gap {
                last_applied,
                prev,
                got: zxid,
            });
        }
        if !zxid.is_next(prev) {
            return Err(StreamError::BrokenLink { prev, got: zxid });
        }
        self.last_applied = zxid;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rzk_zxid::{Counter, Epoch};

    fn z(epoch: u32, counter: u32) -> Zxid {
        Zxid::new(Epoch(epoch), Counter(counter))
    }

    /// The seed's history: Z2 then Z4 is a gap, refused, and the checker stays
    /// at Z2 (it does not skip ahead).
    #[test]
    fn gap_of_zookeeper_5088_is_refused_and_not_skipped() {
        let mut c = Contiguity::after_sync(z(1, 2));
        assert_eq!(
            c.accept(z(1, 3), z(1, 4)),
            Err(StreamError::Gap {
                last_applied: z(1, 2),
                prev: z(1, 3),
                got: z(1, 4)
            })
        );
        assert_eq!(
            c.accept(z(1, 2), z(1, 4)),
            Err(StreamError::BrokenLink {
                prev: z(1, 2),
                got: z(1, 4)
            }),
            "a relay that lies about the link is still refused"
        );
        assert_eq!(c.last_applied(), z(1, 2));
        assert_eq!(c.accept(z(1, 2), z(1, 3)), Ok(()));
        assert_eq!(c.accept(z(1, 3), z(1, 4)), Ok(()));
    }

    #[test]
    fn duplicates_and_reorderings_are_refused() {
        let mut c = Contiguity::after_sync(z(1, 5));
        assert!(matches!(
            c.accept(z(1, 4), z(1, 5)),
            Err(StreamError::Reordered { .. })
        ));
        assert!(matches!(
            c.accept(z(1, 2), z(1, 3)),
            Err(StreamError::Reordered { .. })
        ));
        assert!(matches!(
            c.accept(z(0, 8), z(0, 9)),
            Err(StreamError::Reordered { .. })
        ));
        assert_eq!(c.last_applied(), z(1, 5));
    }

    /// The rollover rule: the proposal after the last counter of an epoch is
    /// counter 1 of the next; counter 2 there is a gap, counter 0 is no txn.
    #[test]
    fn rollover_continues_at_counter_one_of_the_next_epoch() {
        let last = z(3, u32::MAX);
        let mut c = Contiguity::after_sync(z(3, u32::MAX - 1));
        assert_eq!(c.accept(z(3, u32::MAX - 1), last), Ok(()));
        assert!(matches!(
            c.accept(last, z(4, 0)),
            Err(StreamError::BrokenLink { .. })
        ));
        assert!(matches!(
            c.accept(last, z(4, 2)),
            Err(StreamError::BrokenLink { .. })
        ));
        assert_eq!(c.accept(last, z(4, 1)), Ok(()));
        assert_eq!(c.last_applied(), z(4, 1));
    }

    /// What `is_next` alone cannot see: the rest of an epoch missing right
    /// before a rollover. The link catches it.
    #[test]
    fn gap_ending_at_an_epoch_boundary_is_refused() {
        assert!(z(2, 1).is_next(z(1, 2)), "is_next alone accepts this");
        let mut c = Contiguity::after_sync(z(1, 2));
        assert_eq!(
            c.accept(z(1, 5), z(2, 1)),
            Err(StreamError::Gap {
                last_applied: z(1, 2),
                prev: z(1, 5),
                got: z(2, 1)
            })
        );
    }

    #[test]
    fn a_new_epoch_after_a_snapshot_start() {
        let start = Zxid::epoch_start(Epoch(7));
        let mut c = Contiguity::after_sync(start);
        assert_eq!(c.accept(start, z(7, 1)), Ok(()));
    }
}
