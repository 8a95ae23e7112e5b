//! Requests: the typed [`Request`] (one variant per client opcode) and the
//! [`RequestFrame`] that pairs it with its xid.

use bytes::{BufMut, Bytes, BytesMut};

use crate::codes::{OpCode, Xid};
use crate::error::WireError;
use crate::jute::{Reader, Record, Strictness};
use crate::multi::{MultiReadRequest, MultiRequest};
use crate::records::{
    AddWatchRequest, AuthPacket, CheckVersionRequest, CheckWatchesRequest, CreateRequest,
    CreateTtlRequest, DeleteRequest, ExistsRequest, GetAclRequest, GetAllChildrenNumberRequest,
    GetChildren2Request, GetChildrenRequest, GetDataRequest, GetEphemeralsRequest, GetSaslRequest,
    ReconfigRequest, RemoveWatchesRequest, SetAclRequest, SetDataRequest, SetWatches, SetWatches2,
    SyncRequest,
};

/// A client request, typed by its opcode. The variant *is* the opcode
/// ([`Request::opcode`]), so the two cannot disagree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// create (1).
    Create(CreateRequest),
    /// delete (2).
    Delete(DeleteRequest),
    /// exists (3).
    Exists(ExistsRequest),
    /// getData (4).
    GetData(GetDataRequest),
    /// setData (5).
    SetData(SetDataRequest),
    /// getACL (6).
    GetAcl(GetAclRequest),
    /// setACL (7).
    SetAcl(SetAclRequest),
    /// getChildren (8).
    GetChildren(GetChildrenRequest),
    /// sync (9).
    Sync(SyncRequest),
    /// ping (11), xid -2, no body.
    Ping,
    /// getChildren2 (12).
    GetChildren2(GetChildren2Request),
    /// check (13) outside a multi.
    Check(CheckVersionRequest),
    /// multi (14).
    Multi(MultiRequest),
    /// create2 (15).
    Create2(CreateRequest),
    /// reconfig (16).
    Reconfig(ReconfigRequest),
    /// checkWatches (17).
    CheckWatches(CheckWatchesRequest),
    /// removeWatches (18).
    RemoveWatches(RemoveWatchesRequest),
    /// createContainer (19).
    CreateContainer(CreateRequest),
    /// createTTL (21).
    CreateTtl(CreateTtlRequest),
    /// multiRead (22).
    MultiRead(MultiReadRequest),
    /// auth (100), xid -4.
    Auth(AuthPacket),
    /// setWatches (101), xid -8.
    SetWatches(SetWatches),
    /// sasl (102).
    Sasl(GetSaslRequest),
    /// getEphemerals (103).
    GetEphemerals(GetEphemeralsRequest),
    /// getAllChildrenNumber (104).
    GetAllChildrenNumber(GetAllChildrenNumberRequest),
    /// setWatches2 (105), xid -8.
    SetWatches2(SetWatches2),
    /// addWatch (106).
    AddWatch(AddWatchRequest),
    /// whoAmI (107), no body.
    WhoAmI,
    /// closeSession (-11), no body.
    CloseSession,
}

impl Request {
    /// The request's opcode.
    pub fn opcode(&self) -> OpCode {
        match self {
            Request::Create(_) => OpCode::Create,
            Request::Delete(_) => OpCode::Delete,
            Request::Exists(_) => OpCode::Exists,
            Request::GetData(_) => OpCode::GetData,
            Request::SetData(_) => OpCode::SetData,
            Request::GetAcl(_) => OpCode::GetAcl,
            Request::SetAcl(_) => OpCode::SetAcl,
            Request::GetChildren(_) => OpCode::GetChildren,
            Request::Sync(_) => OpCode::Sync,
            Request::Ping => OpCode::Ping,
            Request::GetChildren2(_) => OpCode::GetChildren2,
            Request::Check(_) => OpCode::Check,
            Request::Multi(_) => OpCode::Multi,
            Request::Create2(_) => OpCode::Create2,
            Request::Reconfig(_) => OpCode::Reconfig,
            Request::CheckWatches(_) => OpCode::CheckWatches,
            Request::RemoveWatches(_) => OpCode::RemoveWatches,
            Request::CreateContainer(_) => OpCode::CreateContainer,
            Request::CreateTtl(_) => OpCode::CreateTtl,
            Request::MultiRead(_) => OpCode::MultiRead,
            Request::Auth(_) => OpCode::Auth,
            Request::SetWatches(_) => OpCode::SetWatches,
            Request::Sasl(_) => OpCode::Sasl,
            Request::GetEphemerals(_) => OpCode::GetEphemerals,
            Request::GetAllChildrenNumber(_) => OpCode::GetAllChildrenNumber,
            Request::SetWatches2(_) => OpCode::SetWatches2,
            Request::AddWatch(_) => OpCode::AddWatch,
            Request::WhoAmI => OpCode::WhoAmI,
            Request::CloseSession => OpCode::CloseSession,
        }
    }

    /// Appends the request record (no header) to `dst`.
    pub fn encode_body(&self, dst: &mut BytesMut) {
        match self {
            Request::Create(r) | Request::Create2(r) | Request::CreateContainer(r) => r.encode(dst),
            Request::Delete(r) => r.encode(dst),
            Request::Exists(r) => r.encode(dst),
            Request::GetData(r) => r.encode(dst),
            Request::SetData(r) => r.encode(dst),
            Request::GetAcl(r) => r.encode(dst),
            Request::SetAcl(r) => r.encode(dst),
            Request::GetChildren(r) => r.encode(dst),
            Request::Sync(r) => r.encode(dst),
            Request::Ping | Request::WhoAmI | Request::CloseSession => {}
            Request::GetChildren2(r) => r.encode(dst),
            Request::Check(r) => r.encode(dst),
            Request::Multi(r) => r.encode(dst),
            Request::Reconfig(r) => r.encode(dst),
            Request::CheckWatches(r) => r.encode(dst),
            Request::RemoveWatches(r) => r.encode(dst),
            Request::CreateTtl(r) => r.encode(dst),
            Request::MultiRead(r) => r.encode(dst),
            Request::Auth(r) => r.encode(dst),
            Request::SetWatches(r) => r.encode(dst),
            Request::Sasl(r) => r.encode(dst),
            Request::GetEphemerals(r) => r.encode(dst),
            Request::GetAllChildrenNumber(r) => r.encode(dst),
            Request::SetWatches2(r) => r.encode(dst),
            Request::AddWatch(r) => r.encode(dst),
        }
    }

    /// Decodes the request record of opcode `op` from `r`.
    ///
    /// Returns [`WireError::UnknownOpCode`] for the opcodes clients never send
    /// (see [`OpCode::is_client_request`]). Trailing bytes after the record are
    /// left to the caller ([`Reader::finish`]); ZooKeeper ignores them.
    pub fn decode(op: OpCode, r: &mut Reader<'_>) -> Result<Request, WireError> {
        let request = match op {
            OpCode::Create => Request::Create(CreateRequest::decode(r)?),
            OpCode::Delete => Request::Delete(DeleteRequest::decode(r)?),
            OpCode::Exists => Request::Exists(ExistsRequest::decode(r)?),
            OpCode::GetData => Request::GetData(GetDataRequest::decode(r)?),
            OpCode::SetData => Request::SetData(SetDataRequest::decode(r)?),
            OpCode::GetAcl => Request::GetAcl(GetAclRequest::decode(r)?),
            OpCode::SetAcl => Request::SetAcl(SetAclRequest::decode(r)?),
            OpCode::GetChildren => Request::GetChildren(GetChildrenRequest::decode(r)?),
            OpCode::Sync => Request::Sync(SyncRequest::decode(r)?),
            OpCode::Ping => Request::Ping,
            OpCode::GetChildren2 => Request::GetChildren2(GetChildren2Request::decode(r)?),
            OpCode::Check => Request::Check(CheckVersionRequest::decode(r)?),
            OpCode::Multi => Request::Multi(MultiRequest::decode(r)?),
            OpCode::Create2 => Request::Create2(CreateRequest::decode(r)?),
            OpCode::Reconfig => Request::Reconfig(ReconfigRequest::decode(r)?),
            OpCode::CheckWatches => Request::CheckWatches(CheckWatchesRequest::decode(r)?),
            OpCode::RemoveWatches => Request::RemoveWatches(RemoveWatchesRequest::decode(r)?),
            OpCode::CreateContainer => Request::CreateContainer(CreateRequest::decode(r)?),
            OpCode::CreateTtl => Request::CreateTtl(CreateTtlRequest::decode(r)?),
            OpCode::MultiRead => Request::MultiRead(MultiReadRequest::decode(r)?),
            OpCode::Auth => Request::Auth(AuthPacket::decode(r)?),
            OpCode::SetWatches => Request::SetWatches(SetWatches::decode(r)?),
            OpCode::Sasl => Request::Sasl(GetSaslRequest::decode(r)?),
            OpCode::GetEphemerals => Request::GetEphemerals(GetEphemeralsRequest::decode(r)?),
            OpCode::GetAllChildrenNumber => {
                Request::GetAllChildrenNumber(GetAllChildrenNumberRequest::decode(r)?)
            }
            OpCode::SetWatches2 => Request::SetWatches2(SetWatches2::decode(r)?),
            OpCode::AddWatch => Request::AddWatch(AddWatchRequest::decode(r)?),
            OpCode::WhoAmI => Request::WhoAmI,
            OpCode::CloseSession => Request::CloseSession,
            OpCode::Notification
            | OpCode::DeleteContainer
            | OpCode::CreateSession
            | OpCode::Error => {
                return Err(WireError::UnknownOpCode {
                    opcode: op.as_i32(),
                })
            }
        };
        Ok(request)
    }

    /// The path the request works on, for requests that have one.
    pub fn path(&self) -> Option<&str> {
        match self {
            Request::Create(r) | Request::Create2(r) | Request::CreateContainer(r) => Some(&r.path),
            Request::Delete(r) => Some(&r.path),
            Request::Exists(r) => Some(&r.path),
            Request::GetData(r) => Some(&r.path),
            Request::SetData(r) => Some(&r.path),
            Request::GetAcl(r) => Some(&r.path),
            Request::SetAcl(r) => Some(&r.path),
            Request::GetChildren(r) => Some(&r.path),
            Request::Sync(r) => Some(&r.path),
            Request::GetChildren2(r) => Some(&r.path),
            Request::Check(r) => Some(&r.path),
            Request::CheckWatches(r) => Some(&r.path),
            Request::RemoveWatches(r) => Some(&r.path),
            Request::CreateTtl(r) => Some(&r.path),
            Request::GetEphemerals(r) => Some(&r.prefix_path),
            Request::GetAllChildrenNumber(r) => Some(&r.path),
            Request::AddWatch(r) => Some(&r.path),
            Request::Ping
            | Request::Multi(_)
            | Request::Reconfig(_)
            | Request::MultiRead(_)
            | Request::Auth(_)
            | Request::SetWatches(_)
            | Request::Sasl(_)
            | Request::SetWatches2(_)
            | Request::WhoAmI
            | Request::CloseSession => None,
        }
    }
}

/// A request with its xid: what follows the length prefix of every frame a
/// client sends after the ConnectRequest (`RequestHeader` + record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestFrame {
    /// The correlation id echoed by the reply.
    pub xid: Xid,
    /// The request; its variant gives the header's opcode.
    pub request: Request,
}

impl RequestFrame {
    /// A ping with its reserved xid -2.
    pub fn ping() -> RequestFrame {
        RequestFrame {
            xid: Xid::PING,
            request: Request::Ping,
        }
    }

    /// Appends the header and the record (no length prefix) to `dst`.
    pub fn encode_payload(&self, dst: &mut BytesMut) {
        dst.put_i32(self.xid.0);
        dst.put_i32(self.request.opcode().as_i32());
        self.request.encode_body(dst);
    }

    /// Decodes a whole frame payload (header + record) leniently, as a server
    /// reads requests (trailing bytes ignored). Every failure is an `Err` here,
    /// whatever its kind; a server that must tell a bad record from an unknown
    /// opcode uses [`crate::server::classify_request`] (or the codec) instead.
    pub fn decode_payload(payload: &Bytes) -> Result<RequestFrame, WireError> {
        let mut r = Reader::new(payload, Strictness::Lenient);
        let xid = Xid(r.i32("RequestHeader.xid")?);
        let opcode = r.i32("RequestHeader.type")?;
        let op = OpCode::from_i32(opcode).ok_or(WireError::UnknownOpCode { opcode })?;
        let request = Request::decode(op, &mut r)?;
        Ok(RequestFrame { xid, request })
    }
}
