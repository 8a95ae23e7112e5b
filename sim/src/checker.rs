//! The safety checker: ZAB's properties by their specification names
//! (docs/zab.md, "Safety properties"), and the simulation's own, checked as
//! it runs. [`Checker`] keeps the global records (what was broadcast,
//! written, delivered, acknowledged); the functions below it check one
//! event against the disks.

use std::collections::BTreeMap;

use rzk_quorum::message::{Entry, Message, PeerState, SessionMsg};
use rzk_quorum::{PeerId, Role};
use rzk_zxid::{Epoch, Zxid};

use crate::disk::Disk;

/// A violated property: its name and what happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The property's name (PrefixConsistency, Integrity, ...).
    pub property: &'static str,
    /// What was seen.
    pub detail: String,
}

pub(crate) fn violation(property: &'static str, detail: String) -> Violation {
    Violation { property, detail }
}

/// Decodes the 8-byte payload id every simulated transaction carries.
pub(crate) fn payload_id(e: &Entry) -> u64 {
    payload_id_of(&e.payload)
}

/// The id of a payload: the 8-byte id the quorum simulation's clients
/// propose, or (a server's txn, any other length) a hash of the whole
/// payload with the top bit set, so the two never meet.
pub(crate) fn payload_id_of(payload: &[u8]) -> u64 {
    if payload.len() == 8 {
        return u64::from_le_bytes(payload.try_into().expect("8 bytes"));
    }
    let h = payload.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    h | (1 << 63)
}

/// The global records the properties are checked against.
#[derive(Default)]
pub(crate) struct Checker {
    /// Every proposal a leader made: zxid → [(payload id, leader)]. A zxid of an
    /// epoch after an uncommitted rollover proposal may be proposed by two
    /// leaders (the old leader's were never written: docs/zab.md, "Rollover
    /// without an election"); uniqueness is required of what reaches a disk
    /// (`written`).
    broadcast: BTreeMap<Zxid, Vec<(u64, PeerId)>>,
    /// Every txn ever written to any disk: zxid → payload id.
    pub(crate) written: BTreeMap<Zxid, u64>,
    /// The longest delivered sequence; every peer's delivered sequence must be a
    /// prefix of it.
    pub(crate) global: Vec<(Zxid, u64)>,
    /// Established leader of each epoch.
    leaders: BTreeMap<Epoch, PeerId>,
    /// Acknowledged (committed, applied on the proposing leader) transactions.
    pub(crate) acked: BTreeMap<Zxid, u64>,
    pub(crate) acked_max: Zxid,
}

impl Checker {
    /// A leader proposed `zxid` with payload `id`.
    pub(crate) fn on_broadcast(
        &mut self,
        leader: PeerId,
        zxid: Zxid,
        id: u64,
        leader_delivered: Option<usize>,
    ) -> Result<(), Violation> {
        let entry = self.broadcast.entry(zxid).or_default();
        entry.push((id, leader));
        // PrimaryIntegrity: every transaction anyone delivered with an epoch below
        // this proposal's is in the leader's delivered prefix.
        let Some(leader_delivered) = leader_delivered else {
            return Ok(());
        };
        let below = self
            .global
            .partition_point(|(z, _)| z.epoch() < zxid.epoch());
        if leader_delivered < below {
            return Err(violation(
                "PrimaryIntegrity",
                format!(
                    "{leader:?} broadcast {zxid} having delivered {leader_delivered} txns, \
                     but {below} txns of earlier epochs were delivered"
                ),
            ));
        }
        Ok(())
    }

    /// `peer` became the established leader of `epoch`.
    pub(crate) fn on_established(&mut self, peer: PeerId, epoch: Epoch) -> Result<(), Violation> {
        match self.leaders.get(&epoch) {
            Some(p) if *p != peer => Err(violation(
                "Leadership",
                format!("epoch {epoch} established by {p:?} and by {peer:?}"),
            )),
            _ => {
                self.leaders.insert(epoch, peer);
                Ok(())
            }
        }
    }

    /// `peer` delivers `e` as its `index`-th transaction, after `prev`.
    pub(crate) fn on_deliver(
        &mut self,
        peer: PeerId,
        index: usize,
        prev: Zxid,
        zxid: Zxid,
        id: u64,
    ) -> Result<(), Violation> {
        // GlobalPrimaryOrder / TotalOrder: zxids strictly increase in delivery.
        if zxid <= prev {
            return Err(violation(
                "GlobalPrimaryOrder",
                format!("{peer:?} delivered {zxid} after {prev}"),
            ));
        }
        // LocalPrimaryOrder: within an epoch nothing the primary broadcast in
        // between is skipped (the counter goes up by one; a new epoch starts at 1).
        if !zxid.is_next(prev) {
            return Err(violation(
                "LocalPrimaryOrder",
                format!("{peer:?} delivered {zxid} right after {prev}: a gap"),
            ));
        }
        // Integrity: delivered only what some primary broadcast.
        match self.broadcast.get(&zxid) {
            Some(b) if b.iter().any(|(x, _)| *x == id) => {}
            other => {
                return Err(violation(
                    "Integrity",
                    format!("{peer:?} delivered {zxid}={id}, broadcast was {other:?}"),
                ))
            }
        }
        // PrefixConsistency / Agreement: every delivered sequence is a prefix of
        // one global sequence.
        if index < self.global.len() {
            let (gz, gid) = self.global[index];
            if (gz, gid) != (zxid, id) {
                return Err(violation(
                    "PrefixConsistency",
                    format!(
                        "{peer:?} delivered {zxid}={id} at position {index}, others delivered {gz}={gid}"
                    ),
                ));
            }
        } else if index == self.global.len() {
            self.global.push((zxid, id));
        } else {
            return Err(violation(
                "Agreement",
                format!(
                    "{peer:?} delivered position {index} beyond {}",
                    self.global.len()
                ),
            ));
        }
        Ok(())
    }

    /// A peer installed a state that is the delivered sequence `seq`.
    pub(crate) fn on_snapshot(&self, peer: PeerId, seq: &[(Zxid, u64)]) -> Result<(), Violation> {
        if seq.len() > self.global.len() || self.global[..seq.len()] != *seq {
            return Err(violation(
                "PrefixConsistency",
                format!(
                    "{peer:?} installed a snapshot of {} txns (last {:?}) that is not a prefix of the delivered history",
                    seq.len(),
                    seq.last()
                ),
            ));
        }
        Ok(())
    }

    /// A txn reaches a disk: no two different txns with one zxid, anywhere.
    pub(crate) fn on_write(&mut self, peer: PeerId, zxid: Zxid, id: u64) -> Result<(), Violation> {
        match self.written.get(&zxid) {
            Some(old) if *old != id => Err(violation(
                "ZxidUniqueness",
                format!("{peer:?} wrote {zxid}={id}, another disk holds {zxid}={old}"),
            )),
            Some(_) => Ok(()),
            None => {
                self.written.insert(zxid, id);
                Ok(())
            }
        }
    }

    /// A leader acknowledged `zxid` to its client.
    pub(crate) fn on_ack(&mut self, zxid: Zxid, id: u64) {
        self.acked.insert(zxid, id);
        self.acked_max = self.acked_max.max(zxid);
    }
}

impl Checker {
    /// Every acknowledged txn is on at least one of `disks` (at all times;
    /// on a quorum of them when it is acknowledged: [`durable_on_quorum`]).
    pub(crate) fn acked_on_some_disk<'a>(
        &self,
        disks: impl Iterator<Item = &'a Disk> + Clone,
    ) -> Result<(), Violation> {
        for (z, id) in &self.acked {
            if !disks.clone().any(|d| d.holds(*z, *id)) {
                return Err(violation(
                    "AckedNotLost",
                    format!("acknowledged {z}={id} is on no disk"),
                ));
            }
        }
        Ok(())
    }

    /// LeaderLogCompleteness: an established leader's durable history holds
    /// every acknowledged transaction.
    pub(crate) fn leader_log_complete(
        &self,
        id: PeerId,
        epoch: Epoch,
        disk: &Disk,
    ) -> Result<(), Violation> {
        let Some((z, v)) = self.acked.iter().find(|(z, v)| !disk.holds(**z, **v)) else {
            return Ok(());
        };
        Err(violation(
            "LeaderLogCompleteness",
            format!(
                "{id:?} established epoch {epoch} without acknowledged {z}={v} (disk ends at {})",
                disk.last()
            ),
        ))
    }

    /// At the end, with the peers converged: everyone delivered the same
    /// sequence (Agreement), and it holds every acknowledged transaction (no
    /// acknowledged proposal is lost). `delivered` is each peer's sequence.
    pub(crate) fn converged_history(
        &self,
        delivered: &[(PeerId, &[(Zxid, u64)])],
    ) -> Result<(), Violation> {
        let (first_id, first) = delivered[0];
        for (id, sm) in delivered {
            if *sm != first {
                return Err(violation(
                    "Agreement",
                    format!(
                        "{id:?} delivered {} txns, {first_id:?} {}",
                        sm.len(),
                        first.len()
                    ),
                ));
            }
        }
        let history: BTreeMap<Zxid, u64> = first.iter().copied().collect();
        for (z, id) in &self.acked {
            if history.get(z) != Some(id) {
                return Err(violation(
                    "AckedNotLost",
                    format!("acknowledged {z}={id} is not in the converged history"),
                ));
            }
        }
        Ok(())
    }
}

/// DurableBeforeAck: a leader acknowledges `zxid` only once a quorum of the
/// voters' disks hold it. Only voters' disks count: an observer's copy is no
/// part of a quorum (ObserversNotCounted).
pub(crate) fn durable_on_quorum<'a>(
    leader: PeerId,
    zxid: Zxid,
    payload: u64,
    voter_disks: impl Iterator<Item = &'a Disk>,
) -> Result<(), Violation> {
    let (mut voters, mut holders) = (0, 0);
    for d in voter_disks {
        voters += 1;
        holders += usize::from(d.holds(zxid, payload));
    }
    if holders < voters / 2 + 1 {
        return Err(violation(
            "DurableBeforeAck",
            format!("{leader:?} acknowledged {zxid} with {holders} durable copies"),
        ));
    }
    Ok(())
}

/// A leader is established only with a quorum of *voters* behind its
/// epoch: at a fresh establishment a quorum of voters' disks hold
/// currentEpoch >= epoch (their NEWLEADER acks); at a rollover, acceptedEpoch
/// >= epoch (the fence). Observers' disks never count (ObserversNotCounted).
pub(crate) fn voter_quorum_behind<'a>(
    leader: PeerId,
    epoch: Epoch,
    fresh: bool,
    voter_disks: impl Iterator<Item = &'a Disk>,
) -> Result<(), Violation> {
    let (mut voters, mut behind) = (0, 0);
    for d in voter_disks {
        voters += 1;
        let ep = d.epochs;
        let at = if fresh { ep.current } else { ep.accepted };
        behind += usize::from(at >= epoch);
    }
    if behind < voters / 2 + 1 {
        return Err(violation(
            "ObserversNotCounted",
            format!(
                "{leader:?} established epoch {epoch} with {behind} of {voters} voters behind it"
            ),
        ));
    }
    Ok(())
}

/// ObserverRole: an observer member is only ever an observer (or looking), a
/// voter never one.
pub(crate) fn role_fits(id: PeerId, observer: bool, role: Role) -> Result<(), Violation> {
    let fits = match role {
        Role::Looking => true,
        Role::Observer => observer,
        Role::Leader | Role::Follower => !observer,
    };
    if !fits {
        return Err(violation(
            "ObserverRole",
            format!("{id:?} (observer member: {observer}) became {role:?}"),
        ));
    }
    Ok(())
}

/// I1 (AdvertisedDurable): what a message of peer `id` claims about its
/// history is on its disk.
pub(crate) fn claims_on_disk(id: PeerId, disk: &Disk, msg: &Message) -> Result<(), Violation> {
    let disk_last = disk.last();
    let ep = disk.epochs;
    let bad = |what: String| Err(violation("AdvertisedDurable", format!("{id:?} {what}")));
    match msg {
        Message::Notification(nt) => {
            if nt.state == PeerState::Looking
                && nt.vote.leader == id
                && (nt.vote.zxid > disk_last || nt.vote.peer_epoch > ep.current)
            {
                return bad(format!(
                    "voted for itself with {} / epoch {} but its disk ends at {disk_last} / epoch {}",
                    nt.vote.zxid, nt.vote.peer_epoch, ep.current
                ));
            }
            Ok(())
        }
        Message::Session { msg, .. } => match msg {
            SessionMsg::FollowerInfo { accepted_epoch, .. } if *accepted_epoch > ep.accepted => {
                bad(format!("FOLLOWERINFO with acceptedEpoch {accepted_epoch} > disk {}", ep.accepted))
            }
            SessionMsg::AckEpoch {
                current_epoch,
                last_zxid,
                ..
            } if *last_zxid != disk_last || *current_epoch > ep.current => bad(format!(
                "ACKEPOCH claims {last_zxid} / epoch {current_epoch}, disk has {disk_last} / epoch {}",
                ep.current
            )),
            SessionMsg::Ack { upto } if *upto > disk_last => {
                bad(format!("ACK {upto} beyond its disk {disk_last}"))
            }
            SessionMsg::AckNewLeader { epoch } if *epoch > ep.current => bad(format!(
                "NEWLEADER ACK for epoch {epoch} with currentEpoch {} on disk",
                ep.current
            )),
            // The claims above hold, or the message claims nothing about the
            // sender's durable history.
            SessionMsg::FollowerInfo { .. }
            | SessionMsg::AckEpoch { .. }
            | SessionMsg::Ack { .. }
            | SessionMsg::AckNewLeader { .. }
            | SessionMsg::LeaderInfo { .. }
            | SessionMsg::Diff { .. }
            | SessionMsg::Trunc { .. }
            | SessionMsg::Snap { .. }
            | SessionMsg::SnapChunk { .. }
            | SessionMsg::SnapAck { .. }
            | SessionMsg::Proposal { .. }
            | SessionMsg::Commit { .. }
            | SessionMsg::NewLeader { .. }
            | SessionMsg::UpToDate { .. }
            | SessionMsg::Inform { .. }
            | SessionMsg::Ping { .. }
            | SessionMsg::Pong { .. }
            | SessionMsg::SyncRequest { .. }
            | SessionMsg::SyncReply { .. }
            | SessionMsg::Forward { .. }
            | SessionMsg::Relayed
            | SessionMsg::Reject { .. } => Ok(()),
        },
    }
}
