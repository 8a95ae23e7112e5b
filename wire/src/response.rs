//! Replies: the typed [`Response`] bodies, the [`Reply`] a server sends, the
//! [`Notification`] (xid -1), and the [`RawReply`] a client receives before it
//! knows which opcode the reply answers.

use bytes::{BufMut, Bytes, BytesMut};
use rzk_zxid::Zxid;

use crate::codes::{ErrorCode, OpCode, Xid};
use crate::error::WireError;
use crate::jute::{Reader, Record, Strictness};
use crate::multi::MultiResponse;
use crate::records::{
    Create2Response, CreateResponse, ErrorResponse, GetAclResponse, GetAllChildrenNumberResponse,
    GetChildren2Response, GetChildrenResponse, GetDataResponse, GetEphemeralsResponse, ReplyHeader,
    SetSaslResponse, Stat, SyncResponse, WatcherEvent, WhoAmIResponse,
};

/// The body of a successful reply. Its shape depends on the request's opcode
/// (docs/client-protocol.md, "Opcodes"); [`Response::decode`] takes that
/// opcode, and the variant alone decides the bytes when encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// No body: delete, ping, check, checkWatches, removeWatches, auth,
    /// setWatches, setWatches2, closeSession.
    Empty,
    /// create (1).
    Create(CreateResponse),
    /// create2, createContainer, createTTL.
    Create2(Create2Response),
    /// exists, setData, setACL: a Stat alone.
    Stat(Stat),
    /// getData and reconfig.
    GetData(GetDataResponse),
    /// getACL.
    GetAcl(GetAclResponse),
    /// getChildren.
    GetChildren(GetChildrenResponse),
    /// getChildren2.
    GetChildren2(GetChildren2Response),
    /// sync.
    Sync(SyncResponse),
    /// multi and multiRead.
    Multi(MultiResponse),
    /// sasl.
    Sasl(SetSaslResponse),
    /// getEphemerals.
    GetEphemerals(GetEphemeralsResponse),
    /// getAllChildrenNumber.
    GetAllChildrenNumber(GetAllChildrenNumberResponse),
    /// addWatch: a 4-byte `ErrorResponse{0}` body, which the Java client needs
    /// (docs/client-protocol.md, "Opcodes").
    AddWatch,
    /// whoAmI.
    WhoAmI(WhoAmIResponse),
}

impl Response {
    /// Appends the body to `dst`.
    pub fn encode(&self, dst: &mut BytesMut) {
        match self {
            Response::Empty => {}
            Response::Create(r) => r.encode(dst),
            Response::Create2(r) => r.encode(dst),
            Response::Stat(r) => r.encode(dst),
            Response::GetData(r) => r.encode(dst),
            Response::GetAcl(r) => r.encode(dst),
            Response::GetChildren(r) => r.encode(dst),
            Response::GetChildren2(r) => r.encode(dst),
            Response::Sync(r) => r.encode(dst),
            Response::Multi(r) => r.encode(dst),
            Response::Sasl(r) => r.encode(dst),
            Response::GetEphemerals(r) => r.encode(dst),
            Response::GetAllChildrenNumber(r) => r.encode(dst),
            Response::AddWatch => ErrorResponse { err: ErrorCode::Ok }.encode(dst),
            Response::WhoAmI(r) => r.encode(dst),
        }
    }

    /// Decodes the body of a successful reply to a request of opcode `op`.
    ///
    /// Decoding is strict: bytes after the body, boolean bytes other than 0/1,
    /// unknown enum values and an addWatch body other than 0 are errors. The
    /// opcodes that have no reply (notification, deleteContainer,
    /// createSession, error) are [`WireError::UnknownOpCode`].
    pub fn decode(op: OpCode, body: &Bytes) -> Result<Response, WireError> {
        let mut r = Reader::new(body, Strictness::Strict);
        let response = Response::decode_from(op, &mut r)?;
        r.finish(op.zk_name())?;
        Ok(response)
    }

    fn decode_from(op: OpCode, r: &mut Reader<'_>) -> Result<Response, WireError> {
        let response = match op {
            OpCode::Delete
            | OpCode::Ping
            | OpCode::Check
            | OpCode::CheckWatches
            | OpCode::RemoveWatches
            | OpCode::Auth
            | OpCode::SetWatches
            | OpCode::SetWatches2
            | OpCode::CloseSession => Response::Empty,
            OpCode::Create => Response::Create(CreateResponse::decode(r)?),
            OpCode::Create2 | OpCode::CreateContainer | OpCode::CreateTtl => {
                Response::Create2(Create2Response::decode(r)?)
            }
            OpCode::Exists | OpCode::SetData | OpCode::SetAcl => Response::Stat(Stat::decode(r)?),
            OpCode::GetData | OpCode::Reconfig => Response::GetData(GetDataResponse::decode(r)?),
            OpCode::GetAcl => Response::GetAcl(GetAclResponse::decode(r)?),
            OpCode::GetChildren => Response::GetChildren(GetChildrenResponse::decode(r)?),
            OpCode::GetChildren2 => Response::GetChildren2(GetChildren2Response::decode(r)?),
            OpCode::Sync => Response::Sync(SyncResponse::decode(r)?),
            OpCode::Multi | OpCode::MultiRead => Response::Multi(MultiResponse::decode(r)?),
            OpCode::Sasl => Response::Sasl(SetSaslResponse::decode(r)?),
            OpCode::GetEphemerals => Response::GetEphemerals(GetEphemeralsResponse::decode(r)?),
            OpCode::GetAllChildrenNumber => {
                Response::GetAllChildrenNumber(GetAllChildrenNumberResponse::decode(r)?)
            }
            OpCode::AddWatch => {
                let offset = r.position();
                let err = ErrorResponse::decode(r)?.err;
                if err != ErrorCode::Ok {
                    return Err(WireError::InvalidValue {
                        field: "ErrorResponse.err",
                        offset,
                        value: i64::from(err.as_i32()),
                    });
                }
                Response::AddWatch
            }
            OpCode::WhoAmI => Response::WhoAmI(WhoAmIResponse::decode(r)?),
            OpCode::Notification
            | OpCode::DeleteContainer
            | OpCode::CreateSession
            | OpCode::Error => {
                return Err(WireError::UnknownOpCode {
                    opcode: op.as_i32(),
                })
            }
        };
        Ok(response)
    }
}

/// A reply as a server sends it: header fields and either a body or an error
/// code. An error reply has no body (docs/client-protocol.md, "Error replies
/// have no body").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The request's xid.
    pub xid: Xid,
    /// The zxid to report (docs/client-protocol.md, "The zxid in replies").
    pub zxid: Zxid,
    /// The body, or the error code. `Err(ErrorCode::Ok)` encodes like
    /// `Ok(Response::Empty)`: a bodiless OK header.
    pub result: Result<Response, ErrorCode>,
}

impl Reply {
    /// A successful reply.
    pub fn ok(xid: Xid, zxid: Zxid, response: Response) -> Reply {
        Reply {
            xid,
            zxid,
            result: Ok(response),
        }
    }

    /// An error reply (header only).
    pub fn error(xid: Xid, zxid: Zxid, code: ErrorCode) -> Reply {
        Reply {
            xid,
            zxid,
            result: Err(code),
        }
    }

    /// The reply ZooKeeper sends to an unknown opcode: UNIMPLEMENTED with zxid
    /// -1 (docs/client-protocol.md, "Opcodes"). The server then closes the
    /// connection.
    pub fn unimplemented(xid: Xid) -> Reply {
        Reply::error(xid, Zxid::from_i64(-1), ErrorCode::Unimplemented)
    }

    /// The header this reply starts with.
    pub fn header(&self) -> ReplyHeader {
        ReplyHeader {
            xid: self.xid,
            zxid: self.zxid,
            err: match &self.result {
                Ok(_) => ErrorCode::Ok,
                Err(code) => *code,
            },
        }
    }

    /// Appends the header and the body (no length prefix) to `dst`.
    pub fn encode_payload(&self, dst: &mut BytesMut) {
        self.header().encode(dst);
        if let Ok(response) = &self.result {
            response.encode(dst);
        }
    }
}

/// A watch notification: xid -1, err 0, and a [`WatcherEvent`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notification {
    /// -1 in ZooKeeper 3.8; the zxid of the transaction that fired the watch in
    /// 3.9+ (ZOOKEEPER-4655). Clients ignore it.
    pub zxid: Zxid,
    /// The event.
    pub event: WatcherEvent,
}

impl Notification {
    /// Appends the header and the event (no length prefix) to `dst`.
    pub fn encode_payload(&self, dst: &mut BytesMut) {
        dst.put_i32(Xid::NOTIFICATION.0);
        dst.put_i64(self.zxid.as_i64());
        dst.put_i32(ErrorCode::Ok.as_i32());
        self.event.encode(dst);
    }
}

/// A reply as a client first sees it: the header decoded, the body kept as
/// bytes until the client looks up which opcode the xid belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawReply {
    /// The header.
    pub header: ReplyHeader,
    /// The bytes after the header (a slice of the frame, not a copy).
    pub body: Bytes,
}

impl RawReply {
    /// Decodes the body as the reply to a request of opcode `op`.
    ///
    /// An error header must have an empty body (strict: ZooKeeper never sends
    /// one). Pings (xid -2), auth (-4) and setWatches (-8) replies decode with
    /// their own opcodes like any other.
    pub fn decode(&self, op: OpCode) -> Result<Reply, WireError> {
        let result = if self.header.err == ErrorCode::Ok {
            Ok(Response::decode(op, &self.body)?)
        } else if self.body.is_empty() {
            Err(self.header.err)
        } else {
            return Err(WireError::TrailingBytes {
                record: "ReplyHeader",
                offset: ReplyHeader::ENCODED_BYTES_MIN,
                trailing: self.body.len(),
            });
        };
        Ok(Reply {
            xid: self.header.xid,
            zxid: self.header.zxid,
            result,
        })
    }
}
