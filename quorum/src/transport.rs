//! How peers reach each other: the [`Transport`] trait and an in-memory
//! implementation for tests.
//!
//! The core tolerates loss, duplication and reordering (sessions number their
//! messages and a gap ends the session), so a transport only has to be
//! best-effort. It should be FIFO per destination, or sessions break needlessly.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::message::Message;
use crate::PeerId;

/// Where received messages go: (sender, message). The transport has checked that
/// the sender is a configured peer.
pub type Inbox = mpsc::UnboundedReceiver<(PeerId, Message)>;

/// Sends messages to peers.
///
/// # Correctness
/// Best effort, never blocking: a message may be dropped (a full queue, a
/// broken connection), but messages to one destination that are delivered are
/// delivered in the order sent.
pub trait Transport: Send + Sync + 'static {
    /// Queues a message for `to`.
    fn send(&self, to: PeerId, msg: Message);
}

#[derive(Default)]
struct NetState {
    /// Peers cut off from everyone.
    isolated: BTreeSet<PeerId>,
    inboxes: Vec<(PeerId, mpsc::UnboundedSender<(PeerId, Message)>)>,
}

/// An in-memory network of peers, with partitions (in the style of raft-rs's
/// test harness): `isolate(id)`, `heal()`.
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
    pub fn join(&self, id: PeerId) -> (MemTransport, Inbox) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut s = self.state.lock().expect("not poisoned");
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
        if let Some((_, tx)) = s.inboxes.iter().find(|(p, _)| *p == to) {
            let _ = tx.send((self.from, msg));
        }
    }
}
