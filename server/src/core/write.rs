//! One write request, from the connection to the txn: [`WriteRequest`] is
//! what the leader's prep takes, the same owned value whether the request
//! comes from this member's own connection (a local call) or from another
//! member ([`ToLeader`], sent with `rzk_quorum::Replicator::forward`). Besides
//! writes, a member sends its leader the session traffic the leader's expiry
//! tracker lives on (attachments and batched activity, like ZooKeeper's
//! learner pings and REVALIDATE).
//!
//! Every write names its origin request (`request`); the leader copies it into
//! the txn header, and the origin answers its client when it applies that txn
//! (I6). The origin member is not in the record: the leader knows who sent it.
//!
//! Format (internal to rzk, versioned by its first byte; big-endian; the same
//! bytes as before the write request was one type, so members of both
//! versions work together during a rolling upgrade):
//!
//! ```text
//! u8 version (1) | u8 kind | body
//! kind 1 Write:         u64 request, i64 session, i32 cxid, u8 super, u32 n, n × (str scheme, str id),
//!                       u32 len, len bytes of the client's request (xid, opcode, record)
//! kind 2 CreateSession: u64 request, i64 session, i32 timeout_ms, [u8; 16] password
//! kind 3 CloseSession:  u64 request, i64 session, i32 cxid
//! kind 4 Attach:        i64 session
//! kind 5 Touch:         u32 n, n × i64 session
//! kind 6 Error:         u64 request, i64 session, i32 cxid, i32 code
//! str = u32 length + UTF-8
//! ```

use bytes::{Buf, BufMut, Bytes, BytesMut};
use rzk_quorum::PeerId;
use rzk_wire::{ErrorCode, RequestFrame, SessionId, Xid};

use crate::acl::AuthInfo;
use crate::core::io::RequestId;
use crate::core::route::{route, Route, WriteOp};
use crate::txn::{get_i32, get_i64, get_str, get_u32, get_u64, get_u8, put_str, TxnError};

const VERSION: u8 = 1;

/// The most sessions one touch batch carries; more go in several batches.
pub const TOUCH_BATCH_MAX: usize = 16_384;

/// A request for the leader's prep, owned.
#[derive(Clone, Debug, PartialEq)]
pub struct WriteRequest {
    /// The member holding the client's connection (the leader itself for its
    /// own clients; 0 for the leader's own txns).
    pub origin: PeerId,
    /// The origin's id for the request.
    pub request: RequestId,
    /// The client's session.
    pub session: SessionId,
    /// The request's xid (0 for a session's creation).
    pub cxid: Xid,
    /// What it asks for.
    pub kind: WriteKind,
}

/// What a [`WriteRequest`] asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum WriteKind {
    /// A client's change, with its connection's identities (ACL checks and
    /// the ACL of what it creates are decided by them).
    Op {
        /// The connection's identities.
        auth: AuthInfo,
        /// The change.
        op: WriteOp,
    },
    /// A new session: the origin allocated the id (its top byte is the
    /// member's id) and the password.
    CreateSession {
        /// The negotiated timeout.
        timeout_ms: i32,
        /// The session's password.
        password: [u8; 16],
    },
    /// The client closes its session.
    CloseSession,
    /// A write the origin could not decode: an error txn, so that it is
    /// answered in order with the session's other writes.
    Error(ErrorCode),
}

/// A record a member sends its leader.
#[derive(Clone, Debug, PartialEq)]
pub enum ToLeader {
    /// A write (its `origin` is the sender).
    Write(WriteRequest),
    /// A client (re)connected to the sender with this session: the leader makes
    /// the member its owner, so writes from another member's stale connection get
    /// SESSIONMOVED, as ZooKeeper's leader answers them.
    Attach(SessionId),
    /// Sessions with traffic on the sender since its last batch.
    Touch(Vec<SessionId>),
}

/// A forwarded record that cannot be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("undecodable forwarded record: {0}")]
pub struct ForwardError(pub String);

impl From<TxnError> for ForwardError {
    fn from(e: TxnError) -> Self {
        ForwardError(e.0)
    }
}

impl ToLeader {
    /// Encodes the record. A write's op is encoded as the client encoded it.
    pub fn encode(self) -> Bytes {
        let mut b = BytesMut::with_capacity(64);
        b.put_u8(VERSION);
        match self {
            ToLeader::Write(w) => encode_write(&mut b, w),
            ToLeader::Attach(session) => {
                b.put_u8(4);
                b.put_i64(session.0);
            }
            ToLeader::Touch(sessions) => {
                b.put_u8(5);
                b.put_u32(sessions.len() as u32);
                for s in sessions {
                    b.put_i64(s.0);
                }
            }
        }
        b.freeze()
    }

    /// Decodes a record `from` sent; never panics on bad input (I7). A write
    /// whose client request does not decode, or is not a write, becomes an
    /// error write (MARSHALLINGERROR), answered in its session's order.
    pub fn decode(from: PeerId, bytes: &Bytes) -> Result<ToLeader, ForwardError> {
        let mut r: &[u8] = bytes;
        let version = get_u8(&mut r)?;
        if version != VERSION {
            return Err(ForwardError(format!("unknown version {version}")));
        }
        let kind = get_u8(&mut r)?;
        let head = |r: &mut &[u8]| -> Result<(RequestId, SessionId), ForwardError> {
            Ok((RequestId(get_u64(r)?), SessionId(get_i64(r)?)))
        };
        let write = |(request, session): (RequestId, SessionId), cxid: i32, kind| {
            ToLeader::Write(WriteRequest {
                origin: from,
                request,
                session,
                cxid: Xid(cxid),
                kind,
            })
        };
        let msg = match kind {
            1 => {
                let head = head(&mut r)?;
                let cxid = get_i32(&mut r)?;
                let auth = get_auth(&mut r)?;
                let len = get_u32(&mut r)? as usize;
                need(r, len)?;
                let start = bytes.len() - r.len();
                let frame = bytes.slice(start..start + len);
                r.advance(len);
                write(head, cxid, op_of(from, &frame, auth))
            }
            2 => {
                let head = head(&mut r)?;
                let timeout_ms = get_i32(&mut r)?;
                need(r, 16)?;
                let mut password = [0u8; 16];
                r.copy_to_slice(&mut password);
                write(
                    head,
                    0,
                    WriteKind::CreateSession {
                        timeout_ms,
                        password,
                    },
                )
            }
            3 => {
                let head = head(&mut r)?;
                write(head, get_i32(&mut r)?, WriteKind::CloseSession)
            }
            4 => ToLeader::Attach(SessionId(get_i64(&mut r)?)),
            5 => {
                let n = get_u32(&mut r)? as usize;
                if n > TOUCH_BATCH_MAX {
                    return Err(ForwardError(format!("a touch batch of {n} sessions")));
                }
                let mut sessions = Vec::with_capacity(n.min(r.len() / 8));
                for _ in 0..n {
                    sessions.push(SessionId(get_i64(&mut r)?));
                }
                ToLeader::Touch(sessions)
            }
            6 => {
                let head = head(&mut r)?;
                let cxid = get_i32(&mut r)?;
                let c = get_i32(&mut r)?;
                let code = ErrorCode::from_i32(c)
                    .ok_or_else(|| ForwardError(format!("unknown error code {c}")))?;
                write(head, cxid, WriteKind::Error(code))
            }
            k => return Err(ForwardError(format!("unknown kind {k}"))),
        };
        if !r.is_empty() {
            return Err(ForwardError(format!("{} trailing bytes", r.len())));
        }
        Ok(msg)
    }
}

fn encode_write(b: &mut BytesMut, w: WriteRequest) {
    let head = |b: &mut BytesMut, kind: u8| {
        b.put_u8(kind);
        b.put_u64(w.request.0);
        b.put_i64(w.session.0);
    };
    match w.kind {
        WriteKind::Op { auth, op } => {
            head(b, 1);
            b.put_i32(w.cxid.0);
            b.put_u8(u8::from(auth.is_super));
            b.put_u32(auth.identities().count() as u32);
            for (scheme, id) in auth.identities() {
                put_str(b, scheme);
                put_str(b, &id);
            }
            // The client's request, length-prefixed: its length is known
            // only once it is written.
            let at = b.len();
            b.put_u32(0);
            RequestFrame {
                xid: w.cxid,
                request: op.into_request(),
            }
            .encode_payload(b);
            let len = (b.len() - at - 4) as u32;
            b[at..at + 4].copy_from_slice(&len.to_be_bytes());
        }
        WriteKind::CreateSession {
            timeout_ms,
            password,
        } => {
            head(b, 2);
            b.put_i32(timeout_ms);
            b.put_slice(&password);
        }
        WriteKind::CloseSession => {
            head(b, 3);
            b.put_i32(w.cxid.0);
        }
        WriteKind::Error(code) => {
            head(b, 6);
            b.put_i32(w.cxid.0);
            b.put_i32(code.as_i32());
        }
    }
}

fn get_auth(r: &mut &[u8]) -> Result<AuthInfo, ForwardError> {
    let is_super = get_u8(r)? != 0;
    let n = get_u32(r)? as usize;
    // Each identity takes at least 8 bytes: no allocation beyond the input.
    let mut ids = Vec::with_capacity(n.min(r.len() / 8));
    for _ in 0..n {
        let scheme = get_str(r)?;
        let id = get_str(r)?;
        ids.push((scheme.into(), id.into()));
    }
    Ok(AuthInfo {
        peer_ip: None,
        ids,
        is_super,
    })
}

/// The write a forwarded client request asks for; an error write if it does
/// not decode or is not a write (a member forwards only writes: anything
/// else is a bug there, and its client gets an error instead of a hang).
fn op_of(from: PeerId, frame: &Bytes, auth: AuthInfo) -> WriteKind {
    let decoded = match RequestFrame::decode_payload(frame) {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(peer = from.0, error = %e, "a forwarded request does not decode");
            return WriteKind::Error(ErrorCode::MarshallingError);
        }
    };
    match route(decoded) {
        Route::Write(_, op) => WriteKind::Op { auth, op },
        Route::Close(_) | Route::Sync(..) | Route::Auth(..) | Route::Read(_) => {
            tracing::error!(peer = from.0, "a forwarded request is not a write");
            WriteKind::Error(ErrorCode::SystemError)
        }
    }
}

fn need(r: &[u8], n: usize) -> Result<(), ForwardError> {
    if r.len() < n {
        return Err(ForwardError(format!("{n} bytes needed, {} left", r.len())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rzk_wire::SetDataRequest;

    const FROM: PeerId = PeerId(2);

    fn write(request: u64, session: i64, cxid: i32, kind: WriteKind) -> ToLeader {
        ToLeader::Write(WriteRequest {
            origin: FROM,
            request: RequestId(request),
            session: SessionId(session),
            cxid: Xid(cxid),
            kind,
        })
    }

    fn all() -> Vec<ToLeader> {
        let mut auth = AuthInfo::for_peer("127.0.0.1".parse().unwrap());
        auth.add("digest", "bob:hash=");
        // A forwarded identity list spells the address out, as text.
        let auth = AuthInfo {
            peer_ip: None,
            ids: auth
                .identities()
                .map(|(s, i)| (s.into(), i.as_ref().into()))
                .collect(),
            is_super: false,
        };
        let set = WriteOp::SetData(SetDataRequest {
            path: "/a".into(),
            data: Some(Bytes::from_static(b"v")),
            version: -1,
        });
        vec![
            write(
                7,
                0x0200_0000_0000_0001,
                42,
                WriteKind::Op { auth, op: set },
            ),
            write(
                8,
                0x0200_0000_0000_0002,
                0,
                WriteKind::CreateSession {
                    timeout_ms: 4000,
                    password: [9; 16],
                },
            ),
            write(9, 3, -11, WriteKind::CloseSession),
            ToLeader::Attach(SessionId(4)),
            ToLeader::Touch(vec![SessionId(1), SessionId(2), SessionId(3)]),
            write(10, 5, 6, WriteKind::Error(ErrorCode::MarshallingError)),
        ]
    }

    #[test]
    fn every_record_round_trips() {
        for m in all() {
            assert_eq!(ToLeader::decode(FROM, &m.clone().encode()).unwrap(), m);
        }
    }

    /// The bytes of a forwarded write are those of the format before the
    /// write request was one type (a member of the earlier version decodes
    /// them): checked against a record built field by field.
    #[test]
    fn a_write_is_encoded_in_the_format_of_the_previous_version() {
        let op = WriteOp::Delete(rzk_wire::DeleteRequest {
            path: "/a".into(),
            version: 7,
        });
        let got = write(
            1,
            2,
            3,
            WriteKind::Op {
                auth: AuthInfo::default(),
                op,
            },
        )
        .encode();
        let mut want = BytesMut::new();
        want.put_u8(1); // version
        want.put_u8(1); // Write
        want.put_u64(1);
        want.put_i64(2);
        want.put_i32(3);
        want.put_u8(0); // not super
        want.put_u32(0); // no identities
        let frame: &[u8] = &[0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2, b'/', b'a', 0, 0, 0, 7];
        want.put_u32(frame.len() as u32);
        want.put_slice(frame);
        assert_eq!(got, want.freeze());
    }

    #[test]
    fn a_forwarded_request_that_is_not_a_write_becomes_an_error_write() {
        let mut b = BytesMut::new();
        b.put_u8(1);
        b.put_u8(1);
        b.put_u64(1);
        b.put_i64(2);
        b.put_i32(3);
        b.put_u8(0);
        b.put_u32(0);
        // getData "/a", no watch
        let frame: &[u8] = &[0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 2, b'/', b'a', 0];
        b.put_u32(frame.len() as u32);
        b.put_slice(frame);
        let got = ToLeader::decode(FROM, &b.freeze()).unwrap();
        assert_eq!(
            got,
            write(1, 2, 3, WriteKind::Error(ErrorCode::SystemError))
        );
    }

    #[test]
    fn truncated_or_garbage_is_an_error_not_a_panic() {
        for m in all() {
            let b = m.encode();
            for cut in 0..b.len() {
                assert!(
                    ToLeader::decode(FROM, &b.slice(..cut)).is_err(),
                    "cut at {cut}"
                );
            }
            let mut longer = b.to_vec();
            longer.push(0);
            assert!(ToLeader::decode(FROM, &Bytes::from(longer)).is_err());
        }
        let huge = {
            let mut b = BytesMut::new();
            b.put_u8(VERSION);
            b.put_u8(5);
            b.put_u32(u32::MAX);
            b.freeze()
        };
        assert!(ToLeader::decode(FROM, &huge).is_err());
        assert!(ToLeader::decode(FROM, &Bytes::from_static(&[2, 1])).is_err());
    }
}
