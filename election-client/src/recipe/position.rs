//! A protected position in a queue of ephemeral-sequential nodes, and the grant it can
//! earn: the part the candidacy machine (latch, selector, mutex) and the queue machine
//! (read-write lock, semaphore) share.
//!
//! A position is one child of a parent znode, created `EPHEMERAL_SEQUENTIAL` under a
//! protected name `_c_<nonce>-<attempt>-<name>` (the server appends the sequence
//! number). The prefix is unique to one attempt, which is what makes two things safe:
//! - a create whose reply was lost (connection loss) is found again by the next
//!   listing and adopted, instead of created twice;
//! - a create answered after its attempt was given up is recognised as ours and
//!   deleted, rather than left queued with nobody behind it (CURATOR-18).
//!
//! Missing parents are created as containers, so an abandoned election leaves nothing
//! behind.
//!
//! # Sessions
//! Authority dies with its session (ARCHITECTURE.md I5). Each attempt belongs to the
//! session it was made on. When that session is lost, the attempt is *retired*: it is
//! never adopted again, and its node (or, when its name was never learned, any node
//! carrying its prefix) is deleted once connected again, best effort: the server
//! deletes it anyway when it expires the session. The next attempt gets a new prefix,
//! so nothing from the dead session can be mistaken for the new one.
//!
//! [`Position`] only keeps this bookkeeping and builds the calls; the machine that
//! holds it decides when to make them.

use bytes::Bytes;
use rzk_wire::CreateMode;

use super::engine::Call;
use super::fence::FenceStep;
use super::ids::{join_path, name_of, OpId};
use crate::error::Result;
use crate::types::{FencingToken, SessionId, Stat};

/// What the holder of a position gets when it is granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The full path of the node that won.
    pub node: String,
    /// The session that owns the node.
    pub session: SessionId,
    /// The fencing token, when the grant is fenced.
    pub token: Option<FencingToken>,
}

/// Why a grant was revoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoked {
    /// The connection is suspended or read-only; the grant may come back on reconnect.
    Suspended,
    /// The session is lost; the participation is over.
    Lost,
    /// A re-evaluation no longer proves the grant (node gone, not first, not ours).
    NotProven,
    /// The holder released it.
    Released,
    /// The recipe was closed.
    Closed,
}

/// What to do when a backoff timer fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    /// Create the node of the current attempt (again).
    Create,
    /// List the parent and evaluate the position.
    List,
}

/// What a machine holding a [`Position`] waits for. Every variant but `Idle` and
/// `Ended` has something pending, which is what makes "idle while started and
/// connected" impossible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Not started, or waiting for a connection.
    Idle,
    /// Creating the node of the current attempt.
    Creating {
        /// The create.
        op: OpId,
    },
    /// Listing the parent to find our place.
    Listing {
        /// The listing.
        op: OpId,
    },
    /// Reading our own node to prove it is owned by the current session.
    Verifying {
        /// The read.
        op: OpId,
    },
    /// Not granted: waiting for a node before ours to go.
    Waiting {
        /// The call that arms the watch (a predecessor's getData, or a listing with a
        /// child watch).
        watch: OpId,
        /// The self-check, once the watch is armed.
        timer: Option<OpId>,
    },
    /// Proven first and ours: fencing before the grant.
    Fencing {
        /// The fencing call.
        op: OpId,
        /// Where the fencing stands.
        step: FenceStep,
    },
    /// Granted; watching our own node (CURATOR-171).
    Holding {
        /// The getData that arms the watch on our node.
        watch: OpId,
        /// The self-check, once the watch is armed.
        timer: Option<OpId>,
    },
    /// Waiting out a backoff after a failure.
    Backoff {
        /// The timer.
        timer: OpId,
        /// What to do when it fires.
        then: Then,
    },
    /// Over; nothing more happens.
    Ended,
}

impl Step {
    /// Whether `id` is the call this step waits for (any other answer is stale).
    pub(crate) fn waits_for(self, id: OpId) -> bool {
        match self {
            Step::Creating { op }
            | Step::Listing { op }
            | Step::Verifying { op }
            | Step::Fencing { op, .. } => op == id,
            Step::Waiting { watch, .. } | Step::Holding { watch, .. } => watch == id,
            Step::Idle | Step::Backoff { .. } | Step::Ended => false,
        }
    }

    /// False only when idle although started and connected: the "never idle" check.
    pub(crate) fn is_progressing(self, started: bool, connected: bool) -> bool {
        match self {
            Step::Idle => !started || !connected,
            Step::Creating { .. }
            | Step::Listing { .. }
            | Step::Verifying { .. }
            | Step::Waiting { .. }
            | Step::Fencing { .. }
            | Step::Holding { .. }
            | Step::Backoff { .. }
            | Step::Ended => true,
        }
    }

    /// Record the self-check timer of a waiting or holding step whose watch is armed.
    pub(crate) fn set_recheck(&mut self, recheck: OpId) {
        match self {
            Step::Waiting { timer, .. } | Step::Holding { timer, .. } => *timer = Some(recheck),
            Step::Idle
            | Step::Creating { .. }
            | Step::Listing { .. }
            | Step::Verifying { .. }
            | Step::Fencing { .. }
            | Step::Backoff { .. }
            | Step::Ended => {}
        }
    }
}

/// Retired prefixes kept for cleanup after a session loss; older ones are forgotten
/// (their nodes die with their session anyway).
pub(crate) const STALE_PREFIXES_MAX: usize = 16;

/// One attempt: one node, one session.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    /// The session the node was (or is being) created on.
    pub(crate) session: SessionId,
    /// `_c_<nonce>-<attempt>-`: finds the node after a lost create reply.
    pub(crate) prefix: String,
    /// The child name, once known.
    pub(crate) node: Option<String>,
}

/// What a listing of the parent says about our position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Listed {
    /// Our node `me` is among `children` (adopted by its prefix if the reply of its
    /// create was lost).
    Found {
        /// Our child name.
        me: String,
        /// Every child of the parent.
        children: Vec<String>,
    },
    /// Our create never happened: create it now (same attempt, same prefix).
    Missing,
    /// The parent is gone, and our node with it (CURATOR-724): a fresh node, parents
    /// created again.
    ParentGone,
    /// The listing failed: list again after a backoff.
    Failed,
    /// There is no attempt to look for.
    NoAttempt,
}

/// What a read of our own node proves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proof {
    /// The node exists and is owned by the session we are connected with.
    Owned,
    /// The node is gone.
    Gone,
    /// The node belongs to another session (a dead one of ours): sorting first proved
    /// nothing (CURATOR-696). The attempt is retired; make a fresh one.
    Foreign,
    /// The read failed; try again later.
    Retry,
}

/// A protected position; see the module docs.
#[derive(Debug)]
pub(crate) struct Position {
    /// The parent znode the nodes queue under.
    parent: String,
    /// The node name before the sequence number (`latch-`, `write-`).
    name: String,
    /// The node's data.
    data: Bytes,
    /// Makes prefixes unique to this position's owner.
    nonce: u64,
    /// Attempts so far; part of each prefix.
    attempt: u64,
    current: Option<Attempt>,
    /// Nodes of retired attempts, deleted once connected.
    stale_nodes: Vec<String>,
    /// Prefixes of retired attempts whose node name was never learned.
    stale_prefixes: Vec<String>,
}

impl Position {
    /// A position for nodes `name` under `parent`, holding `data`; no attempt yet.
    pub(crate) fn new(parent: String, name: String, data: Bytes, nonce: u64) -> Position {
        Position {
            parent,
            name,
            data,
            nonce,
            attempt: 0,
            current: None,
            stale_nodes: Vec::new(),
            stale_prefixes: Vec::new(),
        }
    }

    /// Begin a new attempt on `session`: a new prefix, no node yet. Nothing of an
    /// earlier attempt carries over.
    pub(crate) fn join(&mut self, session: SessionId) {
        self.attempt += 1;
        self.current = Some(Attempt {
            session,
            prefix: format!("_c_{:016x}-{:x}-", self.nonce, self.attempt),
            node: None,
        });
    }

    /// The node name before the sequence number.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The current attempt, if any.
    pub(crate) fn current(&self) -> Option<&Attempt> {
        self.current.as_ref()
    }

    /// The full path of the current node, once known.
    pub(crate) fn node_path(&self) -> Option<String> {
        let node = self.current.as_ref()?.node.as_ref()?;
        Some(join_path(&self.parent, node))
    }

    /// The full path of child `child` of the parent.
    pub(crate) fn child_path(&self, child: &str) -> String {
        join_path(&self.parent, child)
    }

    /// The create of the current attempt: protected, ephemeral-sequential, parents as
    /// containers. `None` without an attempt.
    pub(crate) fn create_call(&self) -> Option<Call> {
        let attempt = self.current.as_ref()?;
        Some(Call::Create {
            path: join_path(&self.parent, &format!("{}{}", attempt.prefix, self.name)),
            data: self.data.clone(),
            mode: CreateMode::EphemeralSequential,
            ttl_ms: None,
            parents: Some(CreateMode::Container),
        })
    }

    /// The listing of the parent, with a child watch if `watch`.
    pub(crate) fn list_call(&self, watch: bool) -> Call {
        Call::Children {
            path: self.parent.clone(),
            watch,
        }
    }

    /// The create of the current attempt made `path`.
    fn created(&mut self, path: &str) {
        if let Some(attempt) = self.current.as_mut() {
            attempt.node = Some(name_of(path).to_owned());
        }
    }

    /// Our node in a listing: the one already known, or the one our create made
    /// although its reply was lost (found by prefix, and adopted). `None` when the
    /// create never happened, or there is no attempt.
    fn adopt(&mut self, children: &[String]) -> Option<String> {
        let attempt = self.current.as_mut()?;
        if attempt.node.is_none() {
            attempt.node = children
                .iter()
                .find(|c| c.starts_with(&attempt.prefix))
                .cloned();
        }
        attempt.node.clone()
    }

    /// The answer to the create of the current attempt: `Ok` when its node is known
    /// (list next), else what to do after a backoff. A lost reply may hide a create
    /// that happened, so it is looked for by listing; any other failure (NONODE: the
    /// parent was collected between its creation and ours) creates again, never gives
    /// up (CURATOR-724).
    pub(crate) fn on_created(
        &mut self,
        r: Result<(String, Stat)>,
    ) -> std::result::Result<(), Then> {
        match r {
            Ok((path, _)) => {
                self.created(&path);
                Ok(())
            }
            Err(e) if e.is_connection_loss() => Err(Then::List),
            Err(_) => Err(Then::Create),
        }
    }

    /// What the listing `r` of the parent says about our position, and the nodes of
    /// retired attempts it shows, as full paths to delete.
    pub(crate) fn on_listed(&mut self, r: Result<Vec<String>>) -> (Listed, Vec<String>) {
        let children = match r {
            Ok(children) => children,
            Err(crate::Error::NoNode { .. }) => return (Listed::ParentGone, Vec::new()),
            Err(_) => return (Listed::Failed, Vec::new()),
        };
        let stale = self.stale_children(&children);
        let listed = if self.current.is_none() {
            Listed::NoAttempt
        } else {
            match self.adopt(&children) {
                Some(me) => Listed::Found { me, children },
                None => Listed::Missing,
            }
        };
        (listed, stale)
    }

    /// A create answered after its attempt was given up made `path`: true if it
    /// belongs to the current attempt on the session we are connected with (the next
    /// listing adopts it), false if nobody owns it (delete it).
    pub(crate) fn owns_late_create(&self, path: &str, conn: Option<SessionId>) -> bool {
        self.current
            .as_ref()
            .is_some_and(|a| Some(a.session) == conn && name_of(path).starts_with(&a.prefix))
    }

    /// What the read `r` of our node, made while connected on `conn`, proves. A node
    /// of another session is retired at once: it is never led through (I5).
    pub(crate) fn prove(&mut self, conn: Option<SessionId>, r: &Result<(Bytes, Stat)>) -> Proof {
        let stat = match r {
            Ok((_, stat)) => stat,
            Err(crate::Error::NoNode { .. }) => return Proof::Gone,
            Err(_) => return Proof::Retry,
        };
        let (Some(session), Some(attempt)) = (conn, self.current.as_ref()) else {
            return Proof::Retry;
        };
        if stat.ephemeral_owner != session || attempt.session != session {
            self.retire();
            return Proof::Foreign;
        }
        Proof::Owned
    }

    /// The session of the current attempt is gone (I5): retire the attempt. Its node is
    /// deleted once connected; if its name was never learned, the next listing deletes
    /// any child with its prefix.
    pub(crate) fn retire(&mut self) {
        let Some(attempt) = self.current.take() else {
            return;
        };
        match attempt.node {
            Some(node) => self.stale_nodes.push(join_path(&self.parent, &node)),
            None => {
                if self.stale_prefixes.len() == STALE_PREFIXES_MAX {
                    self.stale_prefixes.remove(0);
                }
                self.stale_prefixes.push(attempt.prefix);
            }
        }
    }

    /// Give the current attempt up and hand it to the caller (who deletes its node).
    pub(crate) fn take(&mut self) -> Option<Attempt> {
        self.current.take()
    }

    /// Forget the current attempt: its node is gone, nothing to clean up.
    pub(crate) fn forget(&mut self) {
        self.current = None;
    }

    /// The nodes of retired attempts, to delete now.
    pub(crate) fn take_stale_nodes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.stale_nodes)
    }

    /// The children of a listing made by retired attempts whose node name was never
    /// learned, as full paths to delete; each prefix is forgotten once found.
    fn stale_children(&mut self, children: &[String]) -> Vec<String> {
        if self.stale_prefixes.is_empty() {
            return Vec::new();
        }
        let stale: Vec<String> = children
            .iter()
            .filter(|c| {
                self.stale_prefixes
                    .iter()
                    .any(|p| c.starts_with(p.as_str()))
            })
            .cloned()
            .collect();
        stale
            .into_iter()
            .map(|child| {
                self.stale_prefixes
                    .retain(|p| !child.starts_with(p.as_str()));
                join_path(&self.parent, &child)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    const S1: SessionId = SessionId(1);
    const S2: SessionId = SessionId(2);

    fn position() -> Position {
        Position::new(
            "/e".into(),
            "latch-".into(),
            Bytes::from_static(b"me"),
            0xab,
        )
    }

    fn create_path(p: &Position) -> String {
        match p.create_call() {
            Some(Call::Create { path, .. }) => path,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_attempt_gets_its_own_prefix_and_a_protected_container_create() {
        let mut p = position();
        assert_eq!(p.create_call(), None);
        p.join(S1);
        assert_eq!(
            p.create_call(),
            Some(Call::Create {
                path: "/e/_c_00000000000000ab-1-latch-".into(),
                data: Bytes::from_static(b"me"),
                mode: CreateMode::EphemeralSequential,
                ttl_ms: None,
                parents: Some(CreateMode::Container),
            })
        );
        p.join(S1);
        assert_eq!(create_path(&p), "/e/_c_00000000000000ab-2-latch-");
    }

    #[test]
    fn a_lost_create_reply_is_adopted_by_prefix_and_only_ours() {
        let mut p = position();
        p.join(S1);
        let children = vec![
            "_c_other-1-latch-0000000000".to_owned(),
            "_c_00000000000000ab-1-latch-0000000001".to_owned(),
        ];
        assert_eq!(p.adopt(&children[..1]), None);
        assert_eq!(
            p.adopt(&children),
            Some("_c_00000000000000ab-1-latch-0000000001".to_owned())
        );
        assert_eq!(
            p.node_path().as_deref(),
            Some("/e/_c_00000000000000ab-1-latch-0000000001")
        );
    }

    #[test]
    fn a_late_create_is_ours_only_for_the_current_attempt_and_session() {
        let mut p = position();
        p.join(S1);
        let ours = format!("{}0000000003", create_path(&p));
        assert!(p.owns_late_create(&ours, Some(S1)));
        assert!(!p.owns_late_create(&ours, Some(S2)));
        assert!(!p.owns_late_create(&ours, None));
        p.join(S1);
        assert!(!p.owns_late_create(&ours, Some(S1)), "an earlier attempt");
    }

    #[test]
    fn ownership_needs_the_current_session_on_the_node_and_the_attempt() {
        let mut p = position();
        p.join(S1);
        let owned = |s| {
            Ok((
                Bytes::new(),
                Stat {
                    ephemeral_owner: s,
                    ..Stat::default()
                },
            ))
        };
        assert_eq!(p.prove(Some(S1), &owned(S1)), Proof::Owned);
        let gone = Err(Error::NoNode {
            path: "/e/x".into(),
        });
        assert_eq!(p.prove(Some(S1), &gone), Proof::Gone);
        assert_eq!(p.prove(Some(S1), &Err(Error::ConnectionLoss)), Proof::Retry);
        assert_eq!(p.prove(Some(S1), &owned(S2)), Proof::Foreign);
        assert!(p.current().is_none(), "a foreign node's attempt is retired");
        p.join(S1);
        assert_eq!(
            p.prove(Some(S2), &owned(S2)),
            Proof::Foreign,
            "attempt of S1"
        );
    }

    #[test]
    fn retired_attempts_are_cleaned_up_by_node_or_by_prefix_within_a_limit() {
        let mut p = position();
        p.join(S1);
        p.created("/e/_c_00000000000000ab-1-latch-0000000000");
        p.retire();
        assert_eq!(p.current().map(|a| a.session), None);
        assert_eq!(
            p.take_stale_nodes(),
            vec!["/e/_c_00000000000000ab-1-latch-0000000000".to_owned()]
        );
        assert!(p.take_stale_nodes().is_empty());
        let mut names = Vec::new();
        for i in 0..(STALE_PREFIXES_MAX + 2) {
            p.join(S2);
            names.push(format!("{}{i:010}", name_of(&create_path(&p))));
            p.retire();
        }
        let deleted = p.stale_children(&names);
        let expected: Vec<String> = names[2..].iter().map(|n| p.child_path(n)).collect();
        assert_eq!(deleted, expected);
        assert!(p.stale_children(&names).is_empty(), "each prefix once");
    }
}
