//! The commit stream, in its one total order: snapshots to load, committed txns
//! to apply (watches fire, this member's requests are answered), role changes,
//! and on the leader the records other members forwarded.

use rzk_quorum::{Committed, Role};
use rzk_wire::{EventType, MultiResponse, Perms, Reply, Response};
use rzk_zxid::Zxid;

use crate::acl;
use crate::apply::{self, Applied, Event, OpOutcome};
use crate::core::{notify, ConnState, Core, CoreError, InFlight, Pending, ReplyAs, Session};
use crate::read_ahead::ReadAhead;
use crate::tree::DataTree;
use crate::txn::Txn;
use crate::watch::ConnId;

impl Core {
    pub(crate) fn on_committed(&mut self, item: Committed) -> Result<(), CoreError> {
        match item {
            Committed::Snapshot { zxid, source } => {
                // Only the first snapshot may have been preloaded.
                let preloaded = self.preloaded.take();
                // Zxid 0 with no bytes is the empty state of a new data directory.
                let (tree, sessions, at) = if zxid == Zxid::ZERO && source.is_empty() {
                    (DataTree::new(), Vec::new(), Zxid::ZERO)
                } else if let Some(loaded) =
                    preloaded.and_then(|p| p.take(zxid, source.len_bytes()))
                {
                    // The replicator chose this snapshot with the verdict of
                    // the very pass that loaded it: its checksum matched.
                    loaded.map_err(|e| CoreError::Corrupt(format!("snapshot at {zxid}: {e}")))?
                } else {
                    // The tree loads while the source streams the file (a
                    // bounded window, never the whole state in one buffer);
                    // the loader reads to the end, where the source checks
                    // the file's checksum, and a failure changes nothing.
                    // The file is read and its checksum computed on another
                    // thread while this one decodes (crate::read_ahead).
                    let started = std::time::Instant::now();
                    let mut reader = source
                        .reader()
                        .and_then(ReadAhead::new)
                        .map_err(|e| CoreError::Corrupt(format!("snapshot at {zxid}: {e}")))?;
                    let loaded = DataTree::load_snapshot_from(&mut reader)
                        .map_err(|e| CoreError::Corrupt(format!("snapshot at {zxid}: {e}")))?;
                    tracing::info!(
                        %zxid,
                        bytes = source.len_bytes(),
                        ms = started.elapsed().as_millis() as u64,
                        "snapshot read, checked and loaded"
                    );
                    loaded
                };
                self.reset_from_snapshot(tree, sessions, at);
                Ok(())
            }
            Committed::Txn { zxid, payload } => self.apply_committed(zxid, &payload),
            Committed::Role {
                role,
                leader,
                epoch,
                ..
            } => {
                match (role, leader) {
                    (Role::Leader | Role::Follower | Role::Observer, Some(l)) => {
                        self.on_serving(role, l, epoch)
                    }
                    (Role::Looking, _) | (_, None) => {
                        self.stop_serving("the member is electing a leader")
                    }
                }
                Ok(())
            }
            Committed::Forwarded { from, payload } => {
                self.on_forwarded(from, payload);
                Ok(())
            }
        }
    }

    /// An ensemble member shows the membership in `/zookeeper/config`, as
    /// ZooKeeper's do (zkCli's `config` and Curator's ensemble tracker read
    /// it). A local value, not a txn: set on every tree this member loads
    /// (the replay at start-up begins with a snapshot, an empty one on a new
    /// member, so every tree passes here).
    pub(crate) fn show_membership(&mut self) {
        let membership = self.cfg.server.membership_text();
        if !membership.is_empty() {
            self.tree
                .set_config_node(membership.as_bytes(), crate::core::now_ms());
        }
    }

    /// I2: everything derived from the state is rebuilt from the snapshot (a
    /// start-up recovery or a learner's SNAP sync). A member loads a snapshot
    /// only while it is not serving, so it has no clients to keep.
    fn reset_from_snapshot(
        &mut self,
        tree: DataTree,
        sessions: Vec<crate::tree::SessionRecord>,
        at: Zxid,
    ) {
        self.stop_serving("a snapshot is loaded");
        // A snapshot of the old tree in progress is abandoned (its writer
        // aborts when its stream ends unfinished).
        self.snapshot_out = None;
        self.tree = tree;
        self.show_membership();
        self.sessions.clear();
        for s in sessions {
            self.sessions.insert(
                s.id,
                Session {
                    timeout_ms: s.timeout_ms,
                    password: s.password,
                    conn: None,
                },
            );
        }
        self.applied = at;
        tracing::info!(zxid = %at, nodes = self.tree.node_count(), "snapshot loaded");
    }

    fn apply_committed(&mut self, zxid: Zxid, payload: &[u8]) -> Result<(), CoreError> {
        let txn =
            Txn::decode(payload).map_err(|e| CoreError::Corrupt(format!("txn {zxid}: {e}")))?;
        let mut events = Vec::new();
        let applied = apply::apply(&mut self.tree, zxid, &txn, &mut events);
        self.applied = zxid;
        let sid = txn.header.session;
        if let Applied::SessionCreated {
            timeout_ms,
            password,
        } = &applied
        {
            self.sessions.insert(
                sid,
                Session {
                    timeout_ms: *timeout_ms,
                    password: *password,
                    conn: None,
                },
            );
            if sid >= self.next_session_id && (sid >> 56) == (self.next_session_id >> 56) {
                self.next_session_id = sid + 1;
            }
        }
        if let Some(leader) = self.leader.as_mut() {
            leader.on_applied(&txn.header, &applied);
        }
        self.fire(&events);
        if txn.header.origin == self.cfg.server_id {
            match self.in_flight.remove(&txn.header.request) {
                Some(InFlight::Write(id)) => {
                    self.reply_write(id, txn.header.request, zxid, &applied)
                }
                Some(InFlight::Connect(id)) => self.connected(id, sid),
                None => {}
            }
        }
        if let Applied::SessionClosed = applied {
            if let Some(s) = self.sessions.remove(&sid) {
                if let Some(cid) = s.conn {
                    if let Some(c) = self.conns.get_mut(&cid.get()) {
                        c.state = ConnState::Closing;
                        c.outbox.close_after_flush();
                    }
                }
            }
        }
        self.after_apply();
        self.revalidations_ready();
        Ok(())
    }

    fn fire(&mut self, events: &[Event]) {
        for ev in events {
            let conns = match ev.kind {
                EventType::NodeChildrenChanged => self.watches.trigger_children(&ev.path),
                EventType::NodeDeleted => self.watches.trigger_node(&ev.path, true),
                EventType::NodeCreated | EventType::NodeDataChanged => {
                    self.watches.trigger_node(&ev.path, false)
                }
                // Apply never produces these; they are client-side events.
                EventType::None
                | EventType::DataWatchRemoved
                | EventType::ChildWatchRemoved
                | EventType::PersistentWatchRemoved => continue,
            };
            for cid in conns {
                let Some(conn) = self.conns.get(&cid) else {
                    continue;
                };
                // 3.8.4+/3.9.2+ (CVE-2024-23944): only to those who may READ.
                if !acl::allowed(&ev.acl, &conn.auth, Perms::READ) {
                    continue;
                }
                self.stats.packets_sent += 1;
                notify(&conn.outbox, ev.kind, &ev.path);
            }
        }
    }

    /// Answers this member's write `request` on connection `id`. Per session,
    /// writes are forwarded in order and committed in order, so it is the head
    /// of the connection's queue; anything else is a bug, and the connection is
    /// closed rather than left waiting.
    fn reply_write(&mut self, id: ConnId, request: u64, zxid: Zxid, applied: &Applied) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let head = match conn.queue.front() {
            Some(Pending::Write { request: r, .. }) => Some(*r),
            _ => None,
        };
        if head != Some(request) {
            tracing::error!(
                request,
                ?head,
                "an applied write is not its connection's next: closing the connection"
            );
            self.fail_conn(id);
            return;
        }
        let Some(Pending::Write {
            xid,
            reply_as,
            started,
            ..
        }) = conn.queue.pop_front()
        else {
            return;
        };
        if let Applied::Error(rzk_wire::ErrorCode::SessionMoved) = applied {
            // ZOOKEEPER-710: SESSIONMOVED is a connection-level error. The
            // leader thinks another member holds the session (a client that
            // gave up on a member whose Attach reached the leader late, after
            // the client's Attach through this member): answering the error
            // on an open connection would fail every write of a live client
            // until it happens to reconnect. Closing it, as ZooKeeper does,
            // makes the client reconnect, and its Attach makes this member the
            // owner again. The write was not applied.
            tracing::info!(
                request,
                "a write of a session another member owns: closing the connection (SESSIONMOVED)"
            );
            self.fail_conn(id);
            return;
        }
        let result = write_result(&reply_as, applied);
        let reply = Reply { xid, zxid, result };
        self.send_reply(id, &reply, started);
        self.stats.update_latency.record_since(started);
        if let ReplyAs::CloseSession = reply_as {
            if let Some(conn) = self.conns.get_mut(&id) {
                conn.state = ConnState::Closing;
                conn.outbox.close_after_flush();
            }
            return;
        }
        self.drain(id);
    }
}

/// The reply body of an applied write.
fn write_result(reply_as: &ReplyAs, applied: &Applied) -> Result<Response, rzk_wire::ErrorCode> {
    use rzk_wire::multi::MultiResult;
    use rzk_wire::{Create2Response, CreateResponse, OpCode};
    let single = |op: OpCode, o: &OpOutcome| match o {
        // Op 1 answers with the path alone; 15, 19 and 21 with path and Stat.
        OpOutcome::Created { path, stat } if op != OpCode::Create => {
            Response::Create2(Create2Response {
                path: path.as_str().into(),
                stat: *stat,
            })
        }
        OpOutcome::Created { path, .. } => Response::Create(CreateResponse {
            path: path.as_str().into(),
        }),
        OpOutcome::Deleted | OpOutcome::Check => Response::Empty,
        OpOutcome::SetData(stat) | OpOutcome::SetAcl(stat) => Response::Stat(*stat),
    };
    // doc §11.3: create and create2 answer as type 1, containers and TTL nodes
    // as type 15.
    let in_multi = |op: OpCode, o: &OpOutcome| match o {
        OpOutcome::Created { path, stat }
            if op == OpCode::CreateContainer || op == OpCode::CreateTtl =>
        {
            MultiResult::Create2(Create2Response {
                path: path.as_str().into(),
                stat: *stat,
            })
        }
        OpOutcome::Created { path, .. } => MultiResult::Create(CreateResponse {
            path: path.as_str().into(),
        }),
        OpOutcome::Deleted => MultiResult::Delete,
        OpOutcome::SetData(stat) | OpOutcome::SetAcl(stat) => MultiResult::SetData(*stat),
        OpOutcome::Check => MultiResult::Check,
    };
    match (reply_as, applied) {
        (_, Applied::Error(code)) => Err(*code),
        (
            ReplyAs::Multi(_),
            Applied::MultiError {
                op_count,
                failed_index,
                code,
            },
        ) => Ok(Response::Multi(MultiResponse::failed(
            *op_count as usize,
            *failed_index as usize,
            *code,
        ))),
        (ReplyAs::Multi(ops), Applied::Multi(outcomes)) => Ok(Response::Multi(MultiResponse {
            results: ops
                .iter()
                .zip(outcomes)
                .map(|(op, o)| in_multi(*op, o))
                .collect(),
        })),
        (ReplyAs::Op(op), Applied::Op(o)) => Ok(single(*op, o)),
        (ReplyAs::CloseSession, Applied::SessionClosed) => Ok(Response::Empty),
        _ => Err(rzk_wire::ErrorCode::SystemError),
    }
}
