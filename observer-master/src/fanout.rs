//! The sans-IO fan-out: a source's pending proposals, a bounded window of its
//! committed transactions, and one bounded relay queue per observer.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use rzk_zxid::Zxid;

use crate::error::{AttachError, FanoutError};
use crate::source::SourceSnapshot;
use crate::ObserverId;

/// One transaction as relayed: its zxid and the bytes the source logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    /// The transaction's zxid.
    pub zxid: Zxid,
    /// The transaction as the source's log holds it (opaque here).
    pub payload: Bytes,
}

impl Txn {
    /// A transaction of `zxid` carrying `payload`.
    pub fn new(zxid: Zxid, payload: impl Into<Bytes>) -> Txn {
        Txn {
            zxid,
            payload: payload.into(),
        }
    }

    /// What this transaction costs in a queue: its payload plus a fixed 32 bytes
    /// of bookkeeping, so a queue of empty payloads is bounded too.
    pub fn cost_bytes(&self) -> usize {
        self.payload.len() + 32
    }
}

/// One relayed transaction: the transaction and the committed zxid right
/// before it at its source. The link lets the observer check the stream against
/// its own history, not only zxid against zxid: [`Zxid::is_next`] alone cannot
/// see a gap that ends at an epoch boundary (a new epoch may start after any
/// counter), the link can.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inform {
    /// The source's last committed zxid before `txn`.
    pub prev: Zxid,
    /// The committed transaction.
    pub txn: Txn,
}

impl Inform {
    /// The transaction's zxid.
    pub fn zxid(&self) -> Zxid {
        self.txn.zxid
    }

    /// What it costs in a queue ([`Txn::cost_bytes`]).
    pub fn cost_bytes(&self) -> usize {
        self.txn.cost_bytes()
    }
}

/// The limits of a fan-out. Every queue is bounded (STYLE rule 5); what happens
/// at each limit is documented on its field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FanoutConfig {
    /// Transactions queued for one observer. Reached: that observer is
    /// disconnected ([`Disconnect::TooSlow`]) and resyncs; the source and the
    /// other observers are untouched.
    pub relay_queue_txns_max: usize,
    /// Bytes ([`Txn::cost_bytes`]) queued for one observer. Reached: as above.
    pub relay_queue_bytes_max: usize,
    /// Bytes of committed transactions kept for observers that attach after
    /// syncing to an older zxid (ZooKeeper's `zookeeper.observerMaster.sizeLimit`,
    /// 32 MiB). Reached: the oldest are dropped; an observer synced before them
    /// gets [`AttachError::TooFarBehind`].
    pub retained_bytes_max: usize,
    /// Proposals pending commit. Reached: [`FanoutError::TooManyPending`] (the
    /// fan-out is rebuilt).
    pub pending_proposals_max: usize,
    /// Regression switch for ZOOKEEPER-5088 (tests and the simulator only):
    /// the constructor drops the snapshot's pending proposals, keeping the
    /// committed zxid only, and a commit without a matching proposal is skipped
    /// silently as ZooKeeper's ObserverMaster does. The observers' contiguity
    /// check ([`crate::Contiguity`]) must catch what follows.
    pub regression_5088: bool,
}

impl Default for FanoutConfig {
    fn default() -> Self {
        FanoutConfig {
            relay_queue_txns_max: 10_000,
            relay_queue_bytes_max: 8 << 20,
            retained_bytes_max: 32 << 20,
            pending_proposals_max: 100_000,
            regression_5088: false,
        }
    }
}

/// Why the fan-out dropped an observer. The observer resyncs in every case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disconnect {
    /// Its relay queue reached a limit: it reads slower than the source commits.
    TooSlow,
    /// The fan-out lost its source (the follower stopped following, resynced, or
    /// the relay found its view of the source wrong) and is being rebuilt.
    SourceReset,
    /// Taken off by the caller ([`Fanout::detach`]).
    Detached,
}

/// One observer's relay: its bounded queue.
#[derive(Debug, Default)]
struct Relay {
    /// Committed transactions not yet taken by the observer's sender, in order.
    queue: VecDeque<Inform>,
    /// Sum of `cost_bytes` over `queue`, checked against the byte limit.
    queued_bytes: usize,
}

/// The fan-out of one source to its observers, without IO.
///
/// Built only from a [`SourceSnapshot`] (I4): the source's pending proposals and
/// last committed zxid, taken atomically with the start of the live stream that
/// is then fed to [`Fanout::on_proposal`] and [`Fanout::on_commit`]. Each commit
/// must match the oldest pending proposal; anything else is a
/// [`FanoutError`] and the fan-out must be rebuilt, never patched.
#[derive(Debug)]
pub struct Fanout {
    /// The limits and the regression switch.
    config: FanoutConfig,
    /// The source's proposals not yet committed, oldest first, contiguous after
    /// `committed`: the same queue as the source's own (ZOOKEEPER-5088).
    pending: VecDeque<Txn>,
    /// The source's last committed zxid.
    committed: Zxid,
    /// The most recent committed transactions, contiguous and ending at
    /// `committed`, for observers that attach behind it.
    retained: VecDeque<Inform>,
    /// Sum of `cost_bytes` over `retained`.
    retained_bytes: usize,
    /// Relays by observer (ordered, so outputs are deterministic).
    relays: BTreeMap<ObserverId, Relay>,
    /// Observers dropped since the last [`Fanout::take_disconnected`].
    disconnected: Vec<(ObserverId, Disconnect)>,
}

impl Fanout {
    /// The fan-out of a source whose state was `snapshot`. The only constructor
    /// (I4): there is no way to build one that does not start from the source's
    /// pending proposals.
    pub fn new(snapshot: SourceSnapshot, config: FanoutConfig) -> Result<Fanout, FanoutError> {
        let SourceSnapshot { committed, pending } = snapshot;
        let pending: VecDeque<Txn> = if config.regression_5088 {
            // The incumbent's bug, on purpose: a relay started after sync with an
            // empty queue.
            VecDeque::new()
        } else {
            check_contiguous(committed, &pending)?;
            pending.into()
        };
        if pending.len() > config.pending_proposals_max {
            return Err(FanoutError::TooManyPending {
                max: config.pending_proposals_max,
            });
        }
        Ok(Fanout {
            config,
            pending,
            committed,
            retained: VecDeque::new(),
            retained_bytes: 0,
            relays: BTreeMap::new(),
            disconnected: Vec::new(),
        })
    }

    /// The source's last committed zxid, as this fan-out knows it.
    pub fn committed(&self) -> Zxid {
        self.committed
    }

    /// The zxids of the proposals pending commit, oldest first.
    pub fn pending(&self) -> impl Iterator<Item = Zxid> + '_ {
        self.pending.iter().map(|t| t.zxid)
    }

    /// The last zxid this fan-out knows of: the newest pending proposal, or the
    /// committed zxid when none is pending.
    fn last_known(&self) -> Zxid {
        self.pending.back().map_or(self.committed, |t| t.zxid)
    }

    /// The source logged a proposal. It must directly follow the last one known.
    pub fn on_proposal(&mut self, txn: Txn) -> Result<(), FanoutError> {
        let after = self.last_known();
        if !self.config.regression_5088 && !txn.zxid.is_next(after) {
            return Err(FanoutError::ProposalOutOfOrder {
                after,
                zxid: txn.zxid,
            });
        }
        if self.pending.len() >= self.config.pending_proposals_max {
            return Err(FanoutError::TooManyPending {
                max: self.config.pending_proposals_max,
            });
        }
        self.pending.push_back(txn);
        Ok(())
    }

    /// The source committed `zxid`: it must be the oldest pending proposal. The
    /// transaction is retained and queued for every observer; an observer whose
    /// queue is then over a limit is disconnected ([`Disconnect::TooSlow`]).
    /// Never blocks and never waits for an observer.
    pub fn on_commit(&mut self, zxid: Zxid) -> Result<(), FanoutError> {
        let head = self.pending.front().map(|t| t.zxid);
        if head != Some(zxid) {
            if self.config.regression_5088 {
                // ZooKeeper's ObserverMaster.proposalCommitted: no matching packet,
                // no INFORM, no error (ZOOKEEPER-5088).
                self.skip_commit_like_zookeeper(zxid);
                return Ok(());
            }
            return Err(FanoutError::CommitWithoutProposal { zxid, head });
        }
        let txn = self.pending.pop_front().expect("head checked above");
        let inform = Inform {
            prev: self.committed,
            txn,
        };
        self.committed = zxid;
        self.retain(inform.clone());
        self.relay(inform);
        Ok(())
    }

    /// The regression switch's commit path: drop the proposals up to `zxid`
    /// without relaying `zxid` itself, and move the committed mark.
    fn skip_commit_like_zookeeper(&mut self, zxid: Zxid) {
        while self.pending.front().is_some_and(|t| t.zxid < zxid) {
            self.pending.pop_front();
        }
        self.committed = self.committed.max(zxid);
    }

    /// Keeps `txn` in the retention window, trimming the oldest past the limit.
    fn retain(&mut self, txn: Inform) {
        self.retained_bytes += txn.cost_bytes();
        self.retained.push_back(txn);
        while self.retained_bytes > self.config.retained_bytes_max {
            let old = self
                .retained
                .pop_front()
                .expect("bytes > 0 means non-empty");
            self.retained_bytes -= old.cost_bytes();
        }
    }

    /// Queues `txn` for every observer; drops those over a limit.
    fn relay(&mut self, txn: Inform) {
        let (txns_max, bytes_max) = (
            self.config.relay_queue_txns_max,
            self.config.relay_queue_bytes_max,
        );
        let mut slow = Vec::new();
        for (&id, relay) in &mut self.relays {
            if relay.queue.len() >= txns_max || relay.queued_bytes + txn.cost_bytes() > bytes_max {
                slow.push(id);
                continue;
            }
            relay.queued_bytes += txn.cost_bytes();
            relay.queue.push_back(txn.clone());
        }
        for id in slow {
            self.relays.remove(&id);
            self.disconnected.push((id, Disconnect::TooSlow));
        }
    }

    /// Attaches `observer`, whose history (after its sync) ends at `synced_to`.
    /// Its relay starts with the retained committed transactions after
    /// `synced_to`, so its stream continues its history with no gap.
    pub fn attach(&mut self, observer: ObserverId, synced_to: Zxid) -> Result<(), AttachError> {
        if self.relays.contains_key(&observer) {
            return Err(AttachError::AlreadyAttached(observer));
        }
        if synced_to > self.committed {
            return Err(AttachError::AheadOfSource {
                observer,
                synced_to,
                committed: self.committed,
            });
        }
        let too_far = || AttachError::TooFarBehind {
            observer,
            synced_to,
            oldest_retained: self.retained.front().map(Inform::zxid),
            committed: self.committed,
        };
        let start = self.retained.partition_point(|t| t.zxid() <= synced_to);
        let replay = self.retained.range(start..);
        if let Some(first) = self.retained.get(start) {
            if first.prev != synced_to {
                return Err(too_far());
            }
        } else if synced_to != self.committed {
            return Err(too_far());
        }
        let mut relay = Relay::default();
        for txn in replay {
            relay.queued_bytes += txn.cost_bytes();
            relay.queue.push_back(txn.clone());
        }
        if relay.queue.len() > self.config.relay_queue_txns_max
            || relay.queued_bytes > self.config.relay_queue_bytes_max
        {
            return Err(too_far());
        }
        self.relays.insert(observer, relay);
        Ok(())
    }

    /// Takes `observer` off; its queue is dropped.
    pub fn detach(&mut self, observer: ObserverId) {
        if self.relays.remove(&observer).is_some() {
            self.disconnected.push((observer, Disconnect::Detached));
        }
    }

    /// Whether `observer` is attached.
    pub fn is_attached(&self, observer: ObserverId) -> bool {
        self.relays.contains_key(&observer)
    }

    /// The observers attached, in id order.
    pub fn observers(&self) -> impl Iterator<Item = ObserverId> + '_ {
        self.relays.keys().copied()
    }

    /// Transactions queued for `observer` (0 when it is not attached).
    pub fn queued(&self, observer: ObserverId) -> usize {
        self.relays.get(&observer).map_or(0, |r| r.queue.len())
    }

    /// Takes up to `max` queued transactions of `observer`, oldest first.
    pub fn pop(&mut self, observer: ObserverId, max: usize) -> Vec<Inform> {
        let Some(relay) = self.relays.get_mut(&observer) else {
            return Vec::new();
        };
        let n = max.min(relay.queue.len());
        let out: Vec<Inform> = relay.queue.drain(..n).collect();
        relay.queued_bytes -= out.iter().map(Inform::cost_bytes).sum::<usize>();
        out
    }

    /// The observers dropped since the last call, with why.
    pub fn take_disconnected(&mut self) -> Vec<(ObserverId, Disconnect)> {
        std::mem::take(&mut self.disconnected)
    }

    /// Ends this fan-out: every attached observer is reported as
    /// [`Disconnect::SourceReset`]. Used when the source is lost or a
    /// [`FanoutError`] says this view of it is wrong.
    pub fn reset(mut self) -> Vec<(ObserverId, Disconnect)> {
        let mut gone = std::mem::take(&mut self.disconnected);
        gone.extend(self.relays.keys().map(|&id| (id, Disconnect::SourceReset)));
        gone
    }
}

/// Checks that `pending` continues `committed` without a gap.
fn check_contiguous(committed: Zxid, pending: &[Txn]) -> Result<(), FanoutError> {
    let mut after = committed;
    for txn in pending {
        if !txn.zxid.is_next(after) {
            return Err(FanoutError::SnapshotNotContiguous {
                after,
                zxid: txn.zxid,
            });
        }
        after = txn.zxid;
    }
    Ok(())
}

impl Fanout {
    /// One event of the source's live stream: [`Fanout::on_proposal`] or
    /// [`Fanout::on_commit`].
    pub fn apply(&mut self, event: crate::SourceEvent) -> Result<(), FanoutError> {
        match event {
            crate::SourceEvent::Proposed(txn) => self.on_proposal(txn),
            crate::SourceEvent::Committed(zxid) => self.on_commit(zxid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::StreamError;
    use crate::receiver::Contiguity;
    use crate::source::{RelayHub, RelaySource};
    use rzk_zxid::{Counter, Epoch};

    fn z(counter: u32) -> Zxid {
        Zxid::new(Epoch(1), Counter(counter))
    }

    fn txn(zxid: Zxid) -> Txn {
        Txn::new(zxid, format!("txn {zxid}"))
    }

    /// Feeds everything the subscription's stream holds into `fanout`.
    fn drain(live: &mut crate::LiveEvents, fanout: &mut Fanout) -> Result<(), FanoutError> {
        while let Some(ev) = live.try_next().expect("stream open") {
            fanout.apply(ev)?;
        }
        Ok(())
    }

    /// Runs the seed's history (ZOOKEEPER-5088) and returns what the observer
    /// received and what its contiguity check said of each.
    fn seed_history(config: FanoutConfig) -> Vec<(Zxid, Result<(), StreamError>)> {
        // The follower has committed Z2; Z3 arrived during its sync and is pending.
        let hub = RelayHub::new(z(2), 64);
        hub.proposed(txn(z(3))).unwrap();
        // The observer master starts now, after the follower's sync.
        let mut sub = hub.subscribe();
        let mut fanout = Fanout::new(sub.snapshot, config).unwrap();
        fanout.attach(ObserverId(4), z(2)).unwrap();
        hub.proposed(txn(z(4))).unwrap();
        hub.committed(z(3)).unwrap();
        hub.committed(z(4)).unwrap();
        drain(&mut sub.live, &mut fanout).unwrap();
        let mut check = Contiguity::after_sync(z(2));
        fanout
            .pop(ObserverId(4), 16)
            .into_iter()
            .map(|i| (i.zxid(), check.accept(i.prev, i.zxid())))
            .collect()
    }

    /// ZOOKEEPER-5088: the proposal in flight during the follower's sync reaches
    /// the observer, before the next one. Checked by hand to fail when
    /// `Fanout::new` drops the snapshot's pending proposals unconditionally.
    #[test]
    fn observer_master_starts_with_pending_proposals() {
        assert_eq!(
            seed_history(FanoutConfig::default()),
            vec![(z(3), Ok(())), (z(4), Ok(()))]
        );
    }

    /// The regression switch reproduces the seed, and the observer's check
    /// refuses Z4 after Z2 (ZooKeeper's observer died here).
    #[test]
    fn regression_switch_5088_is_caught_by_the_contiguity_check() {
        let config = FanoutConfig {
            regression_5088: true,
            ..FanoutConfig::default()
        };
        assert_eq!(
            seed_history(config),
            vec![(
                z(4),
                Err(StreamError::Gap {
                    last_applied: z(2),
                    prev: z(3),
                    got: z(4)
                })
            )]
        );
    }

    #[test]
    fn commit_without_matching_proposal_is_an_error_not_a_skip() {
        let snapshot = SourceSnapshot {
            committed: z(2),
            pending: vec![],
        };
        let mut fanout = Fanout::new(snapshot, FanoutConfig::default()).unwrap();
        assert_eq!(
            fanout.on_commit(z(3)),
            Err(FanoutError::CommitWithoutProposal {
                zxid: z(3),
                head: None
            })
        );
        fanout.on_proposal(txn(z(3))).unwrap();
        fanout.on_proposal(txn(z(4))).unwrap();
        assert_eq!(
            fanout.on_commit(z(4)),
            Err(FanoutError::CommitWithoutProposal {
                zxid: z(4),
                head: Some(z(3))
            })
        );
        assert_eq!(fanout.committed(), z(2), "a refused commit changes nothing");
    }

    #[test]
    fn proposals_must_be_contiguous_including_rollover() {
        let snapshot = SourceSnapshot {
            committed: Zxid::new(Epoch(1), Counter(u32::MAX - 1)),
            pending: vec![],
        };
        let mut fanout = Fanout::new(snapshot, FanoutConfig::default()).unwrap();
        let last = Zxid::new(Epoch(1), Counter(u32::MAX));
        fanout.on_proposal(txn(last)).unwrap();
        assert_eq!(
            fanout.on_proposal(txn(Zxid::new(Epoch(2), Counter(2)))),
            Err(FanoutError::ProposalOutOfOrder {
                after: last,
                zxid: Zxid::new(Epoch(2), Counter(2))
            })
        );
        fanout
            .on_proposal(txn(Zxid::new(Epoch(2), Counter(1))))
            .expect("the rollover proposal is followed by counter 1 of the next epoch");
    }

    #[test]
    fn a_snapshot_with_a_gap_is_refused() {
        let snapshot = SourceSnapshot {
            committed: z(2),
            pending: vec![txn(z(3)), txn(z(5))],
        };
        assert_eq!(
            Fanout::new(snapshot, FanoutConfig::default()).unwrap_err(),
            FanoutError::SnapshotNotContiguous {
                after: z(3),
                zxid: z(5)
            }
        );
    }

    /// STYLE rule 5: the relay queue limit in transactions, reached.
    #[test]
    fn slow_observer_is_disconnected_and_others_keep_everything() {
        let config = FanoutConfig {
            relay_queue_txns_max: 3,
            ..FanoutConfig::default()
        };
        let mut fanout = Fanout::new(SourceSnapshot::default(), config).unwrap();
        let (slow, fast) = (ObserverId(1), ObserverId(2));
        fanout.attach(slow, Zxid::ZERO).unwrap();
        fanout.attach(fast, Zxid::ZERO).unwrap();
        let mut got = Vec::new();
        for c in 1..=10 {
            fanout.on_proposal(txn(z(c))).unwrap();
            fanout.on_commit(z(c)).unwrap();
            got.extend(fanout.pop(fast, 100).into_iter().map(|i| i.zxid()));
        }
        assert_eq!(got, (1..=10).map(z).collect::<Vec<_>>());
        assert!(!fanout.is_attached(slow));
        assert_eq!(
            fanout.take_disconnected(),
            vec![(slow, Disconnect::TooSlow)]
        );
        assert_eq!(fanout.committed(), z(10), "the source was never held back");
    }

    /// STYLE rule 5: the relay queue limit in bytes, reached.
    #[test]
    fn relay_queue_bytes_max_disconnects() {
        let config = FanoutConfig {
            relay_queue_bytes_max: 100,
            ..FanoutConfig::default()
        };
        let mut fanout = Fanout::new(SourceSnapshot::default(), config).unwrap();
        fanout.attach(ObserverId(1), Zxid::ZERO).unwrap();
        fanout.on_proposal(Txn::new(z(1), vec![0u8; 60])).unwrap();
        fanout.on_commit(z(1)).unwrap();
        assert!(fanout.is_attached(ObserverId(1)), "92 bytes fit in 100");
        fanout.on_proposal(Txn::new(z(2), vec![0u8; 1])).unwrap();
        fanout.on_commit(z(2)).unwrap();
        assert_eq!(
            fanout.take_disconnected(),
            vec![(ObserverId(1), Disconnect::TooSlow)]
        );
    }

    /// STYLE rule 5: the pending limit, reached.
    #[test]
    fn pending_proposals_max_is_an_error() {
        let config = FanoutConfig {
            pending_proposals_max: 2,
            ..FanoutConfig::default()
        };
        let mut fanout = Fanout::new(SourceSnapshot::default(), config.clone()).unwrap();
        fanout.on_proposal(txn(z(1))).unwrap();
        fanout.on_proposal(txn(z(2))).unwrap();
        assert_eq!(
            fanout.on_proposal(txn(z(3))),
            Err(FanoutError::TooManyPending { max: 2 })
        );
        let snapshot = SourceSnapshot {
            committed: Zxid::ZERO,
            pending: vec![txn(z(1)), txn(z(2)), txn(z(3))],
        };
        assert_eq!(
            Fanout::new(snapshot, config).unwrap_err(),
            FanoutError::TooManyPending { max: 2 }
        );
    }

    /// An observer synced behind the committed zxid is served from the retained
    /// window, from the transaction right after its own; one synced before the
    /// window (STYLE rule 5: the retention limit, reached) or ahead of the
    /// source is refused.
    #[test]
    fn attach_behind_replays_retained_or_refuses() {
        let config = FanoutConfig {
            retained_bytes_max: 3 * txn(z(1)).cost_bytes(),
            ..FanoutConfig::default()
        };
        let mut fanout = Fanout::new(SourceSnapshot::default(), config).unwrap();
        for c in 1..=6 {
            fanout.on_proposal(txn(z(c))).unwrap();
            fanout.on_commit(z(c)).unwrap();
        }
        // Retained: Z4..Z6.
        fanout.attach(ObserverId(1), z(3)).unwrap();
        let replayed: Vec<Zxid> = fanout
            .pop(ObserverId(1), 10)
            .into_iter()
            .map(|i| i.zxid())
            .collect();
        assert_eq!(replayed, vec![z(4), z(5), z(6)]);
        fanout.attach(ObserverId(2), z(6)).unwrap();
        assert_eq!(fanout.queued(ObserverId(2)), 0);
        assert_eq!(
            fanout.attach(ObserverId(3), z(2)),
            Err(AttachError::TooFarBehind {
                observer: ObserverId(3),
                synced_to: z(2),
                oldest_retained: Some(z(4)),
                committed: z(6)
            })
        );
        assert!(matches!(
            fanout.attach(ObserverId(4), z(7)),
            Err(AttachError::AheadOfSource { .. })
        ));
        assert_eq!(
            fanout.attach(ObserverId(1), z(6)),
            Err(AttachError::AlreadyAttached(ObserverId(1)))
        );
    }

    #[test]
    fn reset_disconnects_everyone() {
        let mut fanout = Fanout::new(SourceSnapshot::default(), FanoutConfig::default()).unwrap();
        fanout.attach(ObserverId(1), Zxid::ZERO).unwrap();
        fanout.attach(ObserverId(2), Zxid::ZERO).unwrap();
        fanout.detach(ObserverId(2));
        assert_eq!(
            fanout.reset(),
            vec![
                (ObserverId(2), Disconnect::Detached),
                (ObserverId(1), Disconnect::SourceReset)
            ]
        );
    }

    #[test]
    fn hub_refuses_what_would_make_its_queue_disagree() {
        let hub = RelayHub::new(z(2), 4);
        assert!(hub.proposed(txn(z(4))).is_err());
        assert!(hub.committed(z(3)).is_err());
        hub.proposed(txn(z(3))).unwrap();
        hub.committed(z(3)).unwrap();
        assert_eq!(
            hub.snapshot(),
            SourceSnapshot {
                committed: z(3),
                pending: vec![]
            }
        );
    }

    /// A live stream ends when the hub resets, and when its reader lags beyond
    /// the bound (the hub never waits for it).
    #[test]
    fn hub_stream_ends_on_reset_and_on_lag() {
        let hub = RelayHub::new(Zxid::ZERO, 2);
        let mut sub = hub.subscribe();
        for c in 1..=3 {
            hub.proposed(txn(z(c))).unwrap();
        }
        assert_eq!(sub.live.try_next(), Err(crate::LiveEnd::Lagged(1)));
        let mut sub = hub.subscribe();
        assert_eq!(sub.snapshot.pending.len(), 3);
        hub.reset(SourceSnapshot::default());
        assert_eq!(sub.live.try_next(), Err(crate::LiveEnd::Closed));
    }
}
