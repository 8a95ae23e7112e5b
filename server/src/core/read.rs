//! Reads: served from this member's tree, in order with the session's writes
//! (the connection's queue holds a read until the writes before it are
//! applied), with the watches they set; setWatches catch-up after a reconnect.

use rzk_wire::multi::MultiResult;
use rzk_wire::{
    ErrorCode, EventType, GetAclResponse, GetAllChildrenNumberResponse, GetChildren2Response,
    GetChildrenResponse, GetDataResponse, GetEphemeralsResponse, MultiReadOp, MultiResponse,
    OpCode, Perms, Reply, Request, RequestFrame, Response, SetSaslResponse, WhoAmIResponse,
};
use rzk_zxid::Zxid;

use crate::acl::{self, AuthInfo};
use crate::core::conns::{notify, Conn};
use crate::core::data::Data;
use crate::watch::{ConnId, WatchKind};

/// Answers a read of connection `id` from this member's tree, at the zxid it
/// has applied, setting the watches it asks for.
pub(crate) fn serve(data: &mut Data, id: ConnId, conn: &Conn, frame: &RequestFrame) -> Reply {
    Reader { data, id, conn }.serve(frame)
}

/// One read: the tree and watches it works on, and the connection it is for.
struct Reader<'a> {
    data: &'a mut Data,
    id: ConnId,
    conn: &'a Conn,
}

impl Reader<'_> {
    fn serve(&mut self, frame: &RequestFrame) -> Reply {
        let xid = frame.xid;
        let zxid = self.data.applied();
        let result = self.read_result(&frame.request);
        // A sasl reply carries zxid 0 (docs/client-protocol.md, "The zxid in
        // replies").
        let zxid = if frame.request.opcode() == OpCode::Sasl {
            Zxid::ZERO
        } else {
            zxid
        };
        Reply { xid, zxid, result }
    }

    fn read_result(&mut self, request: &Request) -> Result<Response, ErrorCode> {
        let (id, conn) = (self.id, self.conn);
        let auth = &conn.auth;
        match request {
            Request::Ping => Ok(Response::Empty),
            Request::Exists(r) => {
                if r.path.contains('\0') {
                    return Err(ErrorCode::BadArguments);
                }
                let stat = self.data.tree.get(&r.path).map(|n| n.stat());
                if r.watch {
                    self.data.watches.add(id, &r.path, WatchKind::Data);
                }
                stat.map(Response::Stat).ok_or(ErrorCode::NoNode)
            }
            Request::GetData(r) => {
                let node = self.data.tree.get(&r.path).ok_or(ErrorCode::NoNode)?;
                acl::check(&node.acl, auth, Perms::READ)?;
                let resp = GetDataResponse {
                    data: node.data(),
                    stat: node.stat(),
                };
                if r.watch {
                    self.data.watches.add(id, &r.path, WatchKind::Data);
                }
                Ok(Response::GetData(resp))
            }
            Request::GetChildren(r) => {
                let node = self.data.tree.get(&r.path).ok_or(ErrorCode::NoNode)?;
                acl::check(&node.acl, auth, Perms::READ)?;
                let children = self.data.tree.child_names(node);
                if r.watch {
                    self.data.watches.add(id, &r.path, WatchKind::Child);
                }
                Ok(Response::GetChildren(GetChildrenResponse { children }))
            }
            Request::GetChildren2(r) => {
                let node = self.data.tree.get(&r.path).ok_or(ErrorCode::NoNode)?;
                acl::check(&node.acl, auth, Perms::READ)?;
                let resp = GetChildren2Response {
                    children: self.data.tree.child_names(node),
                    stat: node.stat(),
                };
                if r.watch {
                    self.data.watches.add(id, &r.path, WatchKind::Child);
                }
                Ok(Response::GetChildren2(resp))
            }
            Request::GetAcl(r) => {
                let node = self.data.tree.get(&r.path).ok_or(ErrorCode::NoNode)?;
                acl::check(&node.acl, auth, Perms(Perms::READ.0 | Perms::ADMIN.0))?;
                let list = if acl::allowed(&node.acl, auth, Perms::ADMIN) {
                    node.acl.to_vec()
                } else {
                    acl::masked(&node.acl)
                };
                Ok(Response::GetAcl(GetAclResponse {
                    acl: list,
                    stat: node.stat(),
                }))
            }
            Request::GetAllChildrenNumber(r) => {
                let idx = self.data.tree.lookup(&r.path).ok_or(ErrorCode::NoNode)?;
                let node = self.data.tree.get(&r.path).ok_or(ErrorCode::NoNode)?;
                acl::check(&node.acl, auth, Perms::READ)?;
                let n = self.data.tree.descendant_count(idx);
                Ok(Response::GetAllChildrenNumber(
                    GetAllChildrenNumberResponse {
                        total_number: n.min(i64::from(i32::MAX)) as i32,
                    },
                ))
            }
            Request::GetEphemerals(r) => {
                let sid = conn.session().map_or(0, |s| s.0);
                let ephemerals = self
                    .data
                    .tree
                    .ephemerals_of(sid)
                    .map(|set| {
                        set.iter()
                            .filter(|p| p.starts_with(&*r.prefix_path))
                            .map(|p| rzk_wire::ByteString::from(p.as_str()))
                            .collect()
                    })
                    .unwrap_or_default();
                Ok(Response::GetEphemerals(GetEphemeralsResponse {
                    ephemerals,
                }))
            }
            Request::WhoAmI => Ok(Response::WhoAmI(WhoAmIResponse {
                client_info: auth.client_infos(),
            })),
            Request::AddWatch(r) => {
                let kind = match r.mode {
                    rzk_wire::AddWatchMode::Persistent => WatchKind::Persistent,
                    rzk_wire::AddWatchMode::PersistentRecursive => WatchKind::Recursive,
                };
                self.data.watches.add(id, &r.path, kind);
                Ok(Response::AddWatch)
            }
            Request::CheckWatches(r) => {
                if self.data.watches.has(id, &r.path, r.watcher_type) {
                    Ok(Response::Empty)
                } else {
                    Err(ErrorCode::NoWatcher)
                }
            }
            Request::RemoveWatches(r) => {
                if self.data.watches.remove(id, &r.path, r.watcher_type) {
                    Ok(Response::Empty)
                } else {
                    Err(ErrorCode::NoWatcher)
                }
            }
            Request::MultiRead(m) => {
                let results = m
                    .ops
                    .iter()
                    .map(|op| self.multi_read_op(auth, op))
                    .collect();
                Ok(Response::Multi(MultiResponse { results }))
            }
            Request::SetWatches(w) => {
                self.set_watches(
                    w.relative_zxid,
                    &w.data_watches,
                    &w.exist_watches,
                    &w.child_watches,
                    &[],
                    &[],
                );
                Ok(Response::Empty)
            }
            Request::SetWatches2(w) => {
                self.set_watches(
                    w.relative_zxid,
                    &w.data_watches,
                    &w.exist_watches,
                    &w.child_watches,
                    &w.persistent_watches,
                    &w.persistent_recursive_watches,
                );
                Ok(Response::Empty)
            }
            // Without SASL configured, OK with a null token
            // (docs/client-protocol.md, "sasl").
            Request::Sasl(_) => Ok(Response::Sasl(SetSaslResponse { token: None })),
            // Reconfig is disabled (docs/client-protocol.md, "reconfig").
            Request::Reconfig(_) => Err(ErrorCode::ReconfigDisabled),
            Request::Create(_)
            | Request::Create2(_)
            | Request::CreateContainer(_)
            | Request::CreateTtl(_)
            | Request::Delete(_)
            | Request::SetData(_)
            | Request::SetAcl(_)
            | Request::Check(_)
            | Request::Multi(_)
            | Request::Sync(_)
            | Request::Auth(_)
            | Request::CloseSession => Err(ErrorCode::SystemError),
        }
    }

    fn multi_read_op(&mut self, auth: &AuthInfo, op: &MultiReadOp) -> MultiResult {
        let id = self.id;
        let result = match op {
            MultiReadOp::GetData(r) => self
                .data
                .tree
                .get(&r.path)
                .ok_or(ErrorCode::NoNode)
                .and_then(|n| {
                    acl::check(&n.acl, auth, Perms::READ)?;
                    Ok(MultiResult::GetData(GetDataResponse {
                        data: n.data(),
                        stat: n.stat(),
                    }))
                }),
            MultiReadOp::GetChildren(r) => self
                .data
                .tree
                .get(&r.path)
                .ok_or(ErrorCode::NoNode)
                .and_then(|n| {
                    acl::check(&n.acl, auth, Perms::READ)?;
                    Ok(MultiResult::GetChildren(GetChildrenResponse {
                        children: self.data.tree.child_names(n),
                    }))
                }),
        };
        let watch = match op {
            MultiReadOp::GetData(r) => r.watch.then_some((&r.path, WatchKind::Data)),
            MultiReadOp::GetChildren(r) => r.watch.then_some((&r.path, WatchKind::Child)),
        };
        if let (Ok(_), Some((p, kind))) = (&result, watch) {
            self.data.watches.add(id, p, kind);
        }
        result.unwrap_or_else(MultiResult::Error)
    }

    /// Re-arms watches after a reconnect, firing at once what changed since the
    /// client's `relative` zxid (docs/client-protocol.md, "Restoring watches
    /// after a reconnect").
    fn set_watches(
        &mut self,
        relative: Zxid,
        data: &[rzk_wire::ByteString],
        exist: &[rzk_wire::ByteString],
        child: &[rzk_wire::ByteString],
        persistent: &[rzk_wire::ByteString],
        recursive: &[rzk_wire::ByteString],
    ) {
        let id = self.id;
        let rel = relative.as_u64();
        let mut fire: Vec<(EventType, &str)> = Vec::new();
        for p in data {
            match self.data.tree.get(p) {
                None => fire.push((EventType::NodeDeleted, p)),
                Some(n) if n.mzxid > rel => fire.push((EventType::NodeDataChanged, p)),
                Some(_) => self.data.watches.add(id, p, WatchKind::Data),
            }
        }
        for p in exist {
            match self.data.tree.get(p) {
                Some(_) => fire.push((EventType::NodeCreated, p)),
                None => self.data.watches.add(id, p, WatchKind::Data),
            }
        }
        for p in child {
            match self.data.tree.get(p) {
                None => fire.push((EventType::NodeDeleted, p)),
                Some(n) if n.pzxid > rel => fire.push((EventType::NodeChildrenChanged, p)),
                Some(_) => self.data.watches.add(id, p, WatchKind::Child),
            }
        }
        for p in persistent {
            self.data.watches.add(id, p, WatchKind::Persistent);
        }
        for p in recursive {
            self.data.watches.add(id, p, WatchKind::Recursive);
        }
        for (kind, p) in fire {
            notify(&self.conn.outbox, kind, p);
        }
    }
}
