//! Where a client request goes: the server's one classification of the
//! opcodes. [`route`] takes a decoded request by value and hands each stage
//! the payload it works on; [`is_write`] classifies the opcode of a request
//! whose record could not be decoded. Both are exhaustive: a new opcode does
//! not compile until it is routed here, and nothing downstream classifies
//! again (the leader's prep works on [`WriteOp`], which holds only writes).

use rzk_wire::{
    AuthPacket, CheckVersionRequest, CreateRequest, CreateTtlRequest, DeleteRequest, MultiRequest,
    OpCode, Request, RequestFrame, SetAclRequest, SetDataRequest, Xid,
};

/// A change a client asked for: the requests the leader's prep turns into
/// txns. Owned, so it travels from the connection to the leader (a local call
/// or a forward) without being re-parsed.
#[derive(Clone, Debug, PartialEq)]
pub enum WriteOp {
    /// create / create2 / createContainer (the opcode says which).
    Create(OpCode, CreateRequest),
    /// createTTL.
    CreateTtl(CreateTtlRequest),
    /// delete.
    Delete(DeleteRequest),
    /// setData.
    SetData(SetDataRequest),
    /// setACL.
    SetAcl(SetAclRequest),
    /// check.
    Check(CheckVersionRequest),
    /// multi.
    Multi(MultiRequest),
}

impl WriteOp {
    /// The request it came from (for forwarding it in the client's own
    /// encoding).
    pub fn into_request(self) -> Request {
        match self {
            WriteOp::Create(OpCode::Create2, r) => Request::Create2(r),
            WriteOp::Create(OpCode::CreateContainer, r) => Request::CreateContainer(r),
            // `route` builds `Create` with these three opcodes only.
            WriteOp::Create(_, r) => Request::Create(r),
            WriteOp::CreateTtl(r) => Request::CreateTtl(r),
            WriteOp::Delete(r) => Request::Delete(r),
            WriteOp::SetData(r) => Request::SetData(r),
            WriteOp::SetAcl(r) => Request::SetAcl(r),
            WriteOp::Check(r) => Request::Check(r),
            WriteOp::Multi(r) => Request::Multi(r),
        }
    }

    /// How its reply is built once its txn is applied.
    pub fn reply_as(&self) -> ReplyAs {
        match self {
            WriteOp::Create(op, _) => ReplyAs::Op(*op),
            WriteOp::CreateTtl(_) => ReplyAs::Op(OpCode::CreateTtl),
            WriteOp::Delete(_) => ReplyAs::Op(OpCode::Delete),
            WriteOp::SetData(_) => ReplyAs::Op(OpCode::SetData),
            WriteOp::SetAcl(_) => ReplyAs::Op(OpCode::SetAcl),
            WriteOp::Check(_) => ReplyAs::Op(OpCode::Check),
            WriteOp::Multi(m) => ReplyAs::Multi(m.ops.iter().map(|o| o.opcode()).collect()),
        }
    }
}

/// How a write's reply is built once applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyAs {
    /// A single op (create answers as its opcode says).
    Op(OpCode),
    /// A multi: one result per op.
    Multi(Vec<OpCode>),
    /// closeSession.
    CloseSession,
}

impl ReplyAs {
    /// The abbreviation `cons` prints as the connection's last operation
    /// (ZooKeeper's `lop`).
    pub fn abbrev(&self) -> &'static str {
        match self {
            ReplyAs::Op(op) => op_abbrev(*op),
            ReplyAs::Multi(_) => "MULT",
            ReplyAs::CloseSession => "CLOS",
        }
    }
}

/// The stage a request goes to, with what that stage needs.
#[derive(Debug)]
pub enum Route {
    /// A change: to the leader's prep, answered when its txn is applied here.
    Write(Xid, WriteOp),
    /// closeSession: a txn too, then the connection closes.
    Close(Xid),
    /// sync: the I6b barrier, answered once this member applied up to it.
    Sync(Xid, rzk_wire::ByteString),
    /// addauth: answered at once, outside the ordered pipeline (a client
    /// numbers its auth packets as it likes and matches the reply by them).
    Auth(Xid, AuthPacket),
    /// Everything served from the local tree, in order with the session's writes.
    Read(RequestFrame),
}

/// Routes a decoded request.
pub fn route(frame: RequestFrame) -> Route {
    let xid = frame.xid;
    let write = |op| Route::Write(xid, op);
    match frame.request {
        Request::Create(r) => write(WriteOp::Create(OpCode::Create, r)),
        Request::Create2(r) => write(WriteOp::Create(OpCode::Create2, r)),
        Request::CreateContainer(r) => write(WriteOp::Create(OpCode::CreateContainer, r)),
        Request::CreateTtl(r) => write(WriteOp::CreateTtl(r)),
        Request::Delete(r) => write(WriteOp::Delete(r)),
        Request::SetData(r) => write(WriteOp::SetData(r)),
        Request::SetAcl(r) => write(WriteOp::SetAcl(r)),
        Request::Check(r) => write(WriteOp::Check(r)),
        Request::Multi(m) => write(WriteOp::Multi(m)),
        Request::CloseSession => Route::Close(xid),
        Request::Sync(r) => Route::Sync(xid, r.path),
        Request::Auth(a) => Route::Auth(xid, a),
        request @ (Request::Exists(_)
        | Request::GetData(_)
        | Request::GetAcl(_)
        | Request::GetChildren(_)
        | Request::GetChildren2(_)
        | Request::Ping
        | Request::Reconfig(_)
        | Request::CheckWatches(_)
        | Request::RemoveWatches(_)
        | Request::MultiRead(_)
        | Request::SetWatches(_)
        | Request::Sasl(_)
        | Request::GetEphemerals(_)
        | Request::GetAllChildrenNumber(_)
        | Request::SetWatches2(_)
        | Request::AddWatch(_)
        | Request::WhoAmI) => Route::Read(RequestFrame { xid, request }),
    }
}

/// Whether an opcode is a write (for requests whose record could not be
/// decoded: a malformed write is still answered in the session's write order).
pub fn is_write(op: OpCode) -> bool {
    class(op).0
}

/// ZooKeeper's four-letter abbreviation of a write's opcode (`cons`'s `lop`).
fn op_abbrev(op: OpCode) -> &'static str {
    class(op).1
}

/// The one table of opcodes: whether each is a write, and how `cons` names it
/// (ZooKeeper's `lop`; writes only, the rest print as `CHEC`).
fn class(op: OpCode) -> (bool, &'static str) {
    match op {
        OpCode::Create | OpCode::Create2 | OpCode::CreateContainer | OpCode::CreateTtl => {
            (true, "CREA")
        }
        OpCode::Delete => (true, "DELE"),
        OpCode::SetData => (true, "SETD"),
        OpCode::SetAcl => (true, "SETA"),
        OpCode::Check => (true, "CHEC"),
        OpCode::Multi => (true, "MULT"),
        OpCode::CloseSession => (true, "CLOS"),
        // Never sent by clients: the server's decoder treats it as unknown.
        OpCode::DeleteContainer => (false, "DELE"),
        OpCode::Notification
        | OpCode::Exists
        | OpCode::GetData
        | OpCode::GetAcl
        | OpCode::GetChildren
        | OpCode::Sync
        | OpCode::Ping
        | OpCode::GetChildren2
        | OpCode::Reconfig
        | OpCode::CheckWatches
        | OpCode::RemoveWatches
        | OpCode::MultiRead
        | OpCode::Auth
        | OpCode::SetWatches
        | OpCode::Sasl
        | OpCode::GetEphemerals
        | OpCode::GetAllChildrenNumber
        | OpCode::SetWatches2
        | OpCode::AddWatch
        | OpCode::WhoAmI
        | OpCode::CreateSession
        | OpCode::Error => (false, "CHEC"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};

    /// A write keeps its opcode through the trip into a `WriteOp` and back:
    /// the forwarded bytes are the client's own request.
    #[test]
    fn a_write_op_turns_back_into_the_request_it_came_from() {
        let create = CreateRequest {
            path: "/a".into(),
            data: Some(Bytes::from_static(b"x")),
            acl: rzk_wire::Acl::open_unsafe(),
            flags: 0,
        };
        for request in [
            Request::Create(create.clone()),
            Request::Create2(create.clone()),
            Request::CreateContainer(create),
            Request::Delete(DeleteRequest {
                path: "/a".into(),
                version: 3,
            }),
            Request::Multi(MultiRequest { ops: Vec::new() }),
        ] {
            let frame = RequestFrame {
                xid: Xid(5),
                request: request.clone(),
            };
            let Route::Write(xid, op) = route(frame) else {
                panic!("{request:?} is a write");
            };
            assert_eq!(xid, Xid(5));
            assert!(is_write(request.opcode()), "{request:?}");
            let back = op.into_request();
            let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
            request.encode_body(&mut a);
            back.encode_body(&mut b);
            assert_eq!(back.opcode(), request.opcode());
            assert_eq!(a, b);
        }
    }

    /// The two classifications agree on the requests a client can send.
    #[test]
    fn route_and_is_write_agree() {
        let read = Request::Exists(rzk_wire::ExistsRequest {
            path: "/a".into(),
            watch: false,
        });
        assert!(!is_write(read.opcode()));
        assert!(matches!(
            route(RequestFrame {
                xid: Xid(1),
                request: read
            }),
            Route::Read(_)
        ));
        assert!(is_write(OpCode::CloseSession));
        assert!(matches!(
            route(RequestFrame {
                xid: Xid(1),
                request: Request::CloseSession
            }),
            Route::Close(_)
        ));
        assert!(!is_write(OpCode::Sync));
        assert!(!is_write(OpCode::Auth));
    }
}
