//! What a member sends its leader ([`rzk_quorum::Replicator::forward`]): the
//! requests that need the leader (writes, session creation and close) and the
//! session traffic the leader's expiry tracker lives on (attachments and
//! batched activity, like ZooKeeper's learner pings and REVALIDATE).
//!
//! On the leader the same records come from its own connections without a hop
//! (a local call). Every record that asks for a change names its origin request
//! (`request`); the leader copies it into the txn header, and the origin answers
//! its client when it applies that txn (I6).
//!
//! Format (internal to rzk, versioned by its first byte; big-endian):
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
use rzk_wire::ErrorCode;

use crate::acl::AuthInfo;

const VERSION: u8 = 1;

/// The most sessions one touch batch carries; more go in several batches.
pub const TOUCH_BATCH_MAX: usize = 16_384;

/// A record for the leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForwardMsg {
    /// A client's write, as the client sent it, with the connection's identities.
    Write {
        /// The origin's request id.
        request: u64,
        /// The client's session.
        session: i64,
        /// The request's xid.
        cxid: i32,
        /// The connection's identities (`scheme`, `id`) and super flag.
        auth: AuthInfo,
        /// The request payload as received (xid, opcode, record).
        frame: Bytes,
    },
    /// A new session: the member allocated the id (its top byte is the member's
    /// id) and the password.
    CreateSession {
        /// The origin's request id.
        request: u64,
        /// The new session's id.
        session: i64,
        /// The negotiated timeout.
        timeout_ms: i32,
        /// The session's password.
        password: [u8; 16],
    },
    /// The client closes its session.
    CloseSession {
        /// The origin's request id.
        request: u64,
        /// The session.
        session: i64,
        /// The closeSession request's xid.
        cxid: i32,
    },
    /// A client (re)connected to this member with this session: the leader makes
    /// the member its owner, so writes from another member's stale connection get
    /// SESSIONMOVED, as ZooKeeper's leader answers them.
    Attach {
        /// The session.
        session: i64,
    },
    /// Sessions with traffic on this member since the last batch.
    Touch {
        /// Their ids.
        sessions: Vec<i64>,
    },
    /// A write the member could not decode: the leader turns it into an error
    /// txn, so it is answered in order with the session's other writes.
    Error {
        /// The origin's request id.
        request: u64,
        /// The client's session.
        session: i64,
        /// The request's xid.
        cxid: i32,
        /// The error the client gets.
        code: ErrorCode,
    },
}

/// A forwarded record that cannot be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("undecodable forwarded record: {0}")]
pub struct ForwardError(pub String);

impl ForwardMsg {
    /// Encodes the record.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(64);
        b.put_u8(VERSION);
        match self {
            ForwardMsg::Write {
                request,
                session,
                cxid,
                auth,
                frame,
            } => {
                b.put_u8(1);
                b.put_u64(*request);
                b.put_i64(*session);
                b.put_i32(*cxid);
                b.put_u8(u8::from(auth.is_super));
                b.put_u32(auth.identities().count() as u32);
                for (scheme, id) in auth.identities() {
                    put_str(&mut b, scheme);
                    put_str(&mut b, &id);
                }
                b.put_u32(frame.len() as u32);
                b.put_slice(frame);
            }
            ForwardMsg::CreateSession {
                request,
                session,
                timeout_ms,
                password,
            } => {
                b.put_u8(2);
                b.put_u64(*request);
                b.put_i64(*session);
                b.put_i32(*timeout_ms);
                b.put_slice(password);
            }
            ForwardMsg::CloseSession {
                request,
                session,
                cxid,
            } => {
                b.put_u8(3);
                b.put_u64(*request);
                b.put_i64(*session);
                b.put_i32(*cxid);
            }
            ForwardMsg::Attach { session } => {
                b.put_u8(4);
                b.put_i64(*session);
            }
            ForwardMsg::Touch { sessions } => {
                b.put_u8(5);
                b.put_u32(sessions.len() as u32);
                for s in sessions {
                    b.put_i64(*s);
                }
            }
            ForwardMsg::Error {
                request,
                session,
                cxid,
                code,
            } => {
                b.put_u8(6);
                b.put_u64(*request);
                b.put_i64(*session);
                b.put_i32(*cxid);
                b.put_i32(code.as_i32());
            }
        }
        b.freeze()
    }

    /// Decodes a record; never panics on bad input (I7).
    pub fn decode(bytes: &Bytes) -> Result<ForwardMsg, ForwardError> {
        let mut r: &[u8] = bytes;
        let version = get_u8(&mut r)?;
        if version != VERSION {
            return Err(ForwardError(format!("unknown version {version}")));
        }
        let kind = get_u8(&mut r)?;
        let msg = match kind {
            1 => {
                let request = get_u64(&mut r)?;
                let session = get_i64(&mut r)?;
                let cxid = get_i32(&mut r)?;
                let is_super = get_u8(&mut r)? != 0;
                let n = get_u32(&mut r)? as usize;
                // Each identity takes at least 8 bytes: no allocation beyond the input.
                let mut ids = Vec::with_capacity(n.min(r.len() / 8));
                for _ in 0..n {
                    let scheme = get_str(&mut r)?;
                    let id = get_str(&mut r)?;
                    ids.push((scheme.into(), id.into()));
                }
                let len = get_u32(&mut r)? as usize;
                need(r, len)?;
                let start = bytes.len() - r.len();
                let frame = bytes.slice(start..start + len);
                r.advance(len);
                ForwardMsg::Write {
                    request,
                    session,
                    cxid,
                    auth: AuthInfo {
                        peer_ip: None,
                        ids,
                        is_super,
                    },
                    frame,
                }
            }
            2 => {
                let request = get_u64(&mut r)?;
                let session = get_i64(&mut r)?;
                let timeout_ms = get_i32(&mut r)?;
                need(r, 16)?;
                let mut password = [0u8; 16];
                r.copy_to_slice(&mut password);
                ForwardMsg::CreateSession {
                    request,
                    session,
                    timeout_ms,
                    password,
                }
            }
            3 => ForwardMsg::CloseSession {
                request: get_u64(&mut r)?,
                session: get_i64(&mut r)?,
                cxid: get_i32(&mut r)?,
            },
            4 => ForwardMsg::Attach {
                session: get_i64(&mut r)?,
            },
            5 => {
                let n = get_u32(&mut r)? as usize;
                if n > TOUCH_BATCH_MAX {
                    return Err(ForwardError(format!("a touch batch of {n} sessions")));
                }
                let mut sessions = Vec::with_capacity(n.min(r.len() / 8));
                for _ in 0..n {
                    sessions.push(get_i64(&mut r)?);
                }
                ForwardMsg::Touch { sessions }
            }
            6 => {
                let request = get_u64(&mut r)?;
                let session = get_i64(&mut r)?;
                let cxid = get_i32(&mut r)?;
                let c = get_i32(&mut r)?;
                let code = ErrorCode::from_i32(c)
                    .ok_or_else(|| ForwardError(format!("unknown error code {c}")))?;
                ForwardMsg::Error {
                    request,
                    session,
                    cxid,
                    code,
                }
            }
            k => return Err(ForwardError(format!("unknown kind {k}"))),
        };
        if !r.is_empty() {
            return Err(ForwardError(format!("{} trailing bytes", r.len())));
        }
        Ok(msg)
    }
}

fn put_str(b: &mut BytesMut, s: &str) {
    b.put_u32(s.len() as u32);
    b.put_slice(s.as_bytes());
}

fn need(r: &[u8], n: usize) -> Result<(), ForwardError> {
    if r.len() < n {
        return Err(ForwardError(format!("{n} bytes needed, {} left", r.len())));
    }
    Ok(())
}

fn get_u8(r: &mut &[u8]) -> Result<u8, ForwardError> {
    need(r, 1)?;
    Ok(r.get_u8())
}

fn get_i32(r: &mut &[u8]) -> Result<i32, ForwardError> {
    need(r, 4)?;
    Ok(r.get_i32())
}

fn get_u32(r: &mut &[u8]) -> Result<u32, ForwardError> {
    need(r, 4)?;
    Ok(r.get_u32())
}

fn get_i64(r: &mut &[u8]) -> Result<i64, ForwardError> {
    need(r, 8)?;
    Ok(r.get_i64())
}

fn get_u64(r: &mut &[u8]) -> Result<u64, ForwardError> {
    need(r, 8)?;
    Ok(r.get_u64())
}

fn get_str(r: &mut &[u8]) -> Result<String, ForwardError> {
    let n = get_u32(r)? as usize;
    need(r, n)?;
    let s = std::str::from_utf8(&r[..n])
        .map_err(|_| ForwardError("a string is not UTF-8".into()))?
        .to_owned();
    r.advance(n);
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<ForwardMsg> {
        let mut auth = AuthInfo::for_peer("127.0.0.1".parse().unwrap());
        auth.add("digest", "bob:hash=");
        vec![
            ForwardMsg::Write {
                request: 7,
                session: 0x0200_0000_0000_0001,
                cxid: 42,
                auth,
                frame: Bytes::from_static(b"\x00\x00\x00\x2a\x00\x00\x00\x05/a"),
            },
            ForwardMsg::CreateSession {
                request: 8,
                session: 0x0200_0000_0000_0002,
                timeout_ms: 4000,
                password: [9; 16],
            },
            ForwardMsg::CloseSession {
                request: 9,
                session: 3,
                cxid: -11,
            },
            ForwardMsg::Attach { session: 4 },
            ForwardMsg::Touch {
                sessions: vec![1, 2, 3],
            },
            ForwardMsg::Error {
                request: 10,
                session: 5,
                cxid: 6,
                code: ErrorCode::MarshallingError,
            },
        ]
    }

    #[test]
    fn every_record_round_trips() {
        for m in all() {
            assert_eq!(ForwardMsg::decode(&m.encode()).unwrap(), m);
        }
    }

    #[test]
    fn truncated_or_garbage_is_an_error_not_a_panic() {
        for m in all() {
            let b = m.encode();
            for cut in 0..b.len() {
                assert!(
                    ForwardMsg::decode(&b.slice(..cut)).is_err(),
                    "{m:?} cut at {cut}"
                );
            }
            let mut longer = b.to_vec();
            longer.push(0);
            assert!(ForwardMsg::decode(&Bytes::from(longer)).is_err());
        }
        let huge = {
            let mut b = BytesMut::new();
            b.put_u8(VERSION);
            b.put_u8(5);
            b.put_u32(u32::MAX);
            b.freeze()
        };
        assert!(ForwardMsg::decode(&huge).is_err());
        assert!(ForwardMsg::decode(&Bytes::from_static(&[2, 1])).is_err());
    }
}
