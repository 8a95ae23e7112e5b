//! The quorum simulation's clients: while faults are on they propose
//! batches of writes to every established leader and ask random peers for
//! `sync` barriers. A write's answer is its apply on the leader that
//! proposed it (`World::apply`); a barrier's answer is checked here
//! (SyncLinearizable: it covers every write acknowledged before it was
//! asked, and its peer has applied that far).
//!
//! Every proposal carries a unique 8-byte payload id, which the checker
//! follows through logs, disks and state machines. (The server-level
//! simulation has clients of its own: ZooKeeper sessions on the server
//! cores.)

use std::collections::BTreeMap;

use bytes::Bytes;
use rand::Rng;
use rzk_quorum::core::Input;
use rzk_quorum::Role;
use rzk_zxid::Zxid;

use crate::checker::{violation, Violation};
use crate::{Event, World};

/// The clients' own state.
pub(crate) struct Clients {
    /// The next payload id.
    next_payload: u64,
    /// Per node: the syncs asked of it and not yet answered, by request id,
    /// each with the highest zxid acknowledged when it was asked.
    syncs: Vec<BTreeMap<u64, Zxid>>,
}

impl Clients {
    /// Clients of a world of `nodes` nodes.
    pub(crate) fn new(nodes: usize) -> Clients {
        Clients {
            next_payload: 1,
            syncs: vec![BTreeMap::new(); nodes],
        }
    }

    /// Node `node` restarted: nothing asked of it before is answered.
    pub(crate) fn restart(&mut self, node: usize) {
        self.syncs[node].clear();
    }

    /// A sync asked of `node` failed (the peer left its leader).
    pub(crate) fn sync_failed(&mut self, node: usize, id: u64) {
        self.syncs[node].remove(&id);
    }
}

impl World {
    /// Clients write: every established leader gets a batch of 1 to 3
    /// proposals. The next batch follows in 2 to 24 ms.
    pub(crate) fn client(&mut self) -> Result<(), Violation> {
        if !self.faults_on {
            return Ok(());
        }
        let at = self.now + self.rng.random_range(2..25);
        self.schedule(at, Event::Client);
        let leaders: Vec<usize> = (0..self.nodes.len())
            .filter(|i| {
                self.nodes[*i]
                    .peer
                    .as_ref()
                    .is_some_and(|p| p.role() == Role::Leader)
            })
            .collect();
        for i in leaders {
            let k = self.rng.random_range(1..4);
            let mut batch = Vec::new();
            for _ in 0..k {
                let pid = self.clients.next_payload;
                self.clients.next_payload += 1;
                let rid = self.next_request;
                self.next_request += 1;
                self.nodes[i].proposed.insert(rid, pid);
                batch.push((rid, Bytes::copy_from_slice(&pid.to_le_bytes())));
            }
            self.step(i, Input::Propose(batch))?;
        }
        Ok(())
    }

    /// A client asks a random peer for a `sync` barrier. The next asks in
    /// 20 to 199 ms.
    pub(crate) fn client_sync(&mut self) -> Result<(), Violation> {
        if !self.faults_on {
            return Ok(());
        }
        let at = self.now + self.rng.random_range(20..200);
        self.schedule(at, Event::ClientSync);
        let i = self.rng.random_range(0..self.nodes.len());
        if self.nodes[i].peer.is_none() {
            return Ok(());
        }
        let rid = self.next_request;
        self.next_request += 1;
        let before = self.checker.acked_max;
        self.clients.syncs[i].insert(rid, before);
        self.step(i, Input::Sync { id: rid })
    }

    /// A sync barrier is passed at `zxid` on node `i` (SyncLinearizable, I6b).
    pub(crate) fn on_sync_done(&mut self, i: usize, id: u64, zxid: Zxid) -> Result<(), Violation> {
        let Some(before) = self.clients.syncs[i].remove(&id) else {
            return Ok(());
        };
        let applied = self.nodes[i].sm.last().map(|s| s.0).unwrap_or(Zxid::ZERO);
        if zxid < before || applied < zxid {
            return Err(violation(
                "SyncLinearizable",
                format!(
                    "{:?} sync barrier {zxid}, applied {applied}, but {before} was acknowledged before the sync",
                    self.nodes[i].id
                ),
            ));
        }
        self.report.sync_barriers += 1;
        Ok(())
    }
}
