//! How peers reach each other: the [`Transport`] trait and an in-memory
//! implementation for tests.
//!
//! The core tolerates loss, duplication and reordering (sessions number their
//! messages and a gap ends the session), so a transport only has to be
//! best-effort. It should be FIFO per destination, or sessions break needlessly.
//!
//! A transport also reports a lost connection ([`Inbound::Disconnected`]) as
//! soon as it sees it, so the core reacts to a dead leader or learner at once
//! instead of after its silence timeout.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::message::Message;
use crate::PeerId;

/// What a transport delivers to its peer's driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inbound {
    /// A message. The transport has checked that the sender is a configured
    /// peer.
    Message {
        /// The sender.
        from: PeerId,
        /// The message.
        msg: Message,
    },
    /// The connection to `peer` was closed or reset (or replaced by a new one):
    /// messages in flight on it may be lost, and none of it arrives after this.
    Disconnected {
        /// The peer.
        peer: PeerId,
    },
}

/// Where received messages and connection losses go, in the order they
/// happened on each connection.
pub type Inbox = mpsc::UnboundedReceiver<Inbound>;

/// Sends messages to peers.
///
/// # Correctness
/// Best effort, never blocking: a message may be dropped (a full queue, a
/// broken connection), but messages to one destination that are delivered are
/// delivered in the order sent.
pub trait Transport: Send + Sync + 'static {
    /// Queues a message for `to`.
    fn send(&self, to: PeerId, msg: Message);

    /// Stops listening and closes every connection; called once when the peer
    /// that owns the transport stops (gracefully or not), so that a server that
    /// stops inside a process does not leave its quorum port served.
    fn close(&self) {}
}

#[derive(Default)]
struct NetState {
    /// Peers cut off from everyone.
    isolated: BTreeSet<PeerId>,
    inboxes: Vec<(PeerId, mpsc::UnboundedSender<Inbound>)>,
}

impl NetState {
    fn tell(&self, to: PeerId, event: Inbound) {
        if let Some((_, tx)) = self.inboxes.iter().find(|(p, _)| *p == to) {
            let _ = tx.send(event);
        }
    }
}

/// An in-memory network of peers, with partitions (in the style of raft-rs's
/// test harness): `isolate(id)` (silent: nobody is told), `heal()`, and
/// `reset(id)` (every connection of `id` breaks, and both ends are told, as a
/// process kill or a connection reset tells them).
#[derive(Clone, Default)]
pub struct MemNetwork {
    state: Arc<Mutex<NetState>>,
}

impl MemNetwork {
    /// An empty network.
    pub fn new() -> MemNetwork {
        MemNetwork::default()
    }

    /// Adds (or re-adds, after a restart) a peer; returns its transport and inbox.
    /// A re-added peer's old connections are gone: the others are told.
    pub fn join(&self, id: PeerId) -> (MemTransport, Inbox) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut s = self.state.lock().expect("not poisoned");
        if s.inboxes.iter().any(|(p, _)| *p == id) {
            for (p, other) in &s.inboxes {
                if *p != id {
                    let _ = other.send(Inbound::Disconnected { peer: id });
                }
            }
        }
        s.inboxes.retain(|(p, _)| *p != id);
        s.inboxes.push((id, tx));
        (
            MemTransport {
                net: self.clone(),
                from: id,
            },
            rx,
        )
    }

    /// Cuts `id` off from every other peer.
    pub fn isolate(&self, id: PeerId) {
        self.state.lock().expect("not poisoned").isolated.insert(id);
    }

    /// Ends every partition.
    pub fn heal(&self) {
        self.state.lock().expect("not poisoned").isolated.clear();
    }

    /// Breaks every connection of `id` and tells both ends, as a killed process
    /// or a reset connection does. Later messages flow again (a reconnect).
    pub fn reset(&self, id: PeerId) {
        let s = self.state.lock().expect("not poisoned");
        let others: Vec<PeerId> = s
            .inboxes
            .iter()
            .map(|(p, _)| *p)
            .filter(|p| *p != id)
            .collect();
        for p in others {
            s.tell(p, Inbound::Disconnected { peer: id });
            s.tell(id, Inbound::Disconnected { peer: p });
        }
    }
}

/// One peer's end of a [`MemNetwork`].
#[derive(Clone)]
pub struct MemTransport {
    net: MemNetwork,
    from: PeerId,
}

impl Transport for MemTransport {
    fn send(&self, to: PeerId, msg: Message) {
        let s = self.net.state.lock().expect("not poisoned");
        if s.isolated.contains(&self.from) || s.isolated.contains(&to) {
            return;
        }
        s.tell(
            to,
            Inbound::Message {
                from: self.from,
                msg,
            },
        );
    }
}
