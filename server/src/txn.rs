//! Transactions: what prep decides and every server applies, in zxid order.
//!
//! A txn is deterministic: sequence names are resolved, versions checked and
//! the time chosen by the leader's prep, so applying it needs nothing but the
//! tree it is applied to. A write that failed its checks is still a txn (an
//! error txn, as ZooKeeper logs failed writes): it consumes a zxid and carries
//! the error the client gets.
//!
//! Format (internal to rzk, versioned by its first byte; big-endian):
//!
//! ```text
//! u8 version (2) | u64 origin | u64 request | i64 session | i32 cxid | i64 time_ms | u8 kind | body
//!   (version 1, written by standalone servers before the ensemble, has no
//!   origin and request: they decode as 0)
//! kind 1 CreateSession: i32 timeout_ms, [u8; 16] password
//! kind 2 CloseSession
//! kind 3 Create: str path, buf data, acl list, i64 owner
//! kind 4 Delete: str path
//! kind 5 SetData: str path, buf data
//! kind 6 SetAcl: str path, acl list
//! kind 7 Check: str path                     (no change; a multi's check)
//! kind 8 Multi: u32 count, count × (u8 kind 3..7, body)
//! kind 9 Error: i32 code
//! kind 10 MultiError: u32 op_count, u32 failed_index, i32 code
//! str = u32 length + UTF-8; buf = i32 length (-1 = null) + bytes;
//! acl list = u32 count + count × (i32 perms, str scheme, str id)
//! ```

use bytes::{Buf, BufMut, Bytes, BytesMut};
use rzk_wire::{Acl, ByteString, ErrorCode, Id, Perms};

const VERSION: u8 = 2;
/// The format before the ensemble: no origin, no request id.
const VERSION_STANDALONE: u8 = 1;

/// Who caused a txn and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnHeader {
    /// The member holding the client connection the request came from (its
    /// server id), or 0 for the leader's own txns (expiry, container and TTL
    /// deletion). That member answers the client once it applied the txn (I6).
    pub origin: u64,
    /// The origin's id for the request, unique on that member: the member
    /// finds the request a committed txn answers by `(origin, request)`, never
    /// by its position in a queue.
    pub request: u64,
    /// The session the request came from (0 for the server's own txns:
    /// container and TTL deletions).
    pub session: i64,
    /// The request's xid (0 for server txns).
    pub cxid: i32,
    /// Wall-clock time chosen by prep (ms since the epoch): ctime/mtime.
    pub time_ms: i64,
}

/// One change to the tree (alone or inside a multi).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnOp {
    /// Create a node. `owner` is the ephemeral owner as ZooKeeper encodes it:
    /// a session id, `i64::MIN` for a container, `0xFF..|ttl` for TTL nodes,
    /// 0 for plain persistent nodes.
    Create {
        /// The final path (sequence suffix included).
        path: String,
        /// The data; `None` is null data.
        data: Option<Bytes>,
        /// The validated ACL.
        acl: Vec<Acl>,
        /// The owner encoding.
        owner: i64,
    },
    /// Delete a node.
    Delete {
        /// Its path.
        path: String,
    },
    /// Replace a node's data (version + 1).
    SetData {
        /// Its path.
        path: String,
        /// The new data.
        data: Option<Bytes>,
    },
    /// Replace a node's ACL (aversion + 1).
    SetAcl {
        /// Its path.
        path: String,
        /// The validated ACL.
        acl: Vec<Acl>,
    },
    /// A multi's version check that passed: no change.
    Check {
        /// Its path.
        path: String,
    },
}

/// What a txn does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnBody {
    /// A new session (the header's session id).
    CreateSession {
        /// The negotiated timeout.
        timeout_ms: i32,
        /// The session's password.
        password: [u8; 16],
    },
    /// Close the header's session: delete its ephemerals.
    CloseSession,
    /// One change.
    Op(TxnOp),
    /// An atomic multi that passed its checks.
    Multi(Vec<TxnOp>),
    /// A write that failed its checks; nothing changes.
    Error(ErrorCode),
    /// A multi that failed at `failed_index` with `code`; nothing changes.
    MultiError {
        /// How many ops the multi had.
        op_count: u32,
        /// The op that failed.
        failed_index: u32,
        /// Its error.
        code: ErrorCode,
    },
}

/// A transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Txn {
    /// Who and when.
    pub header: TxnHeader,
    /// What.
    pub body: TxnBody,
}

/// A txn that cannot be decoded: the log or the stream is corrupt, which the
/// server treats as fatal (it never guesses at history).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("undecodable txn: {0}")]
pub struct TxnError(pub String);

impl Txn {
    /// Encodes the txn.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(64);
        b.put_u8(VERSION);
        b.put_u64(self.header.origin);
        b.put_u64(self.header.request);
        b.put_i64(self.header.session);
        b.put_i32(self.header.cxid);
        b.put_i64(self.header.time_ms);
        match &self.body {
            TxnBody::CreateSession {
                timeout_ms,
                password,
            } => {
                b.put_u8(1);
                b.put_i32(*timeout_ms);
                b.put_slice(password);
            }
            TxnBody::CloseSession => b.put_u8(2),
            TxnBody::Op(op) => put_op(&mut b, op),
            TxnBody::Multi(ops) => {
                b.put_u8(8);
                b.put_u32(ops.len() as u32);
                for op in ops {
                    put_op(&mut b, op);
                }
            }
            TxnBody::Error(code) => {
                b.put_u8(9);
                b.put_i32(code.as_i32());
            }
            TxnBody::MultiError {
                op_count,
                failed_index,
                code,
            } => {
                b.put_u8(10);
                b.put_u32(*op_count);
                b.put_u32(*failed_index);
                b.put_i32(code.as_i32());
            }
        }
        b.freeze()
    }

    /// Decodes a txn. Data is copied out of `bytes`, so the tree never pins a
    /// log read buffer or a client frame.
    pub fn decode(bytes: &[u8]) -> Result<Txn, TxnError> {
        let mut r = bytes;
        let version = get_u8(&mut r)?;
        let (origin, request) = match version {
            VERSION => (get_u64(&mut r)?, get_u64(&mut r)?),
            VERSION_STANDALONE => (0, 0),
            v => return Err(TxnError(format!("unknown txn version {v}"))),
        };
        let header = TxnHeader {
            origin,
            request,
            session: get_i64(&mut r)?,
            cxid: get_i32(&mut r)?,
            time_ms: get_i64(&mut r)?,
        };
        let kind = get_u8(&mut r)?;
        let body = match kind {
            1 => {
                let timeout_ms = get_i32(&mut r)?;
                need(r, 16)?;
                let mut password = [0u8; 16];
                r.copy_to_slice(&mut password);
                TxnBody::CreateSession {
                    timeout_ms,
                    password,
                }
            }
            2 => TxnBody::CloseSession,
            3..=7 => TxnBody::Op(get_op(kind, &mut r)?),
            8 => {
                let n = get_u32(&mut r)? as usize;
                // Each op takes at least 5 bytes: no allocation beyond the input.
                let mut ops = Vec::with_capacity(n.min(r.len() / 5));
                for _ in 0..n {
                    let k = get_u8(&mut r)?;
                    if !(3..=7).contains(&k) {
                        return Err(TxnError(format!("op kind {k} inside a multi")));
                    }
                    ops.push(get_op(k, &mut r)?);
                }
                TxnBody::Multi(ops)
            }
            9 => TxnBody::Error(get_code(&mut r)?),
            10 => TxnBody::MultiError {
                op_count: get_u32(&mut r)?,
                failed_index: get_u32(&mut r)?,
                code: get_code(&mut r)?,
            },
            k => return Err(TxnError(format!("unknown txn kind {k}"))),
        };
        if !r.is_empty() {
            return Err(TxnError(format!("{} trailing bytes", r.len())));
        }
        Ok(Txn { header, body })
    }
}

fn put_op(b: &mut BytesMut, op: &TxnOp) {
    match op {
        TxnOp::Create {
            path,
            data,
            acl,
            owner,
        } => {
            b.put_u8(3);
            put_str(b, path);
            put_buf(b, data.as_deref());
            put_acl(b, acl);
            b.put_i64(*owner);
        }
        TxnOp::Delete { path } => {
            b.put_u8(4);
            put_str(b, path);
        }
        TxnOp::SetData { path, data } => {
            b.put_u8(5);
            put_str(b, path);
            put_buf(b, data.as_deref());
        }
        TxnOp::SetAcl { path, acl } => {
            b.put_u8(6);
            put_str(b, path);
            put_acl(b, acl);
        }
        TxnOp::Check { path } => {
            b.put_u8(7);
            put_str(b, path);
        }
    }
}

fn get_op(kind: u8, r: &mut &[u8]) -> Result<TxnOp, TxnError> {
    Ok(match kind {
        3 => TxnOp::Create {
            path: get_str(r)?,
            data: get_buf(r)?,
            acl: get_acl(r)?,
            owner: get_i64(r)?,
        },
        4 => TxnOp::Delete { path: get_str(r)? },
        5 => TxnOp::SetData {
            path: get_str(r)?,
            data: get_buf(r)?,
        },
        6 => TxnOp::SetAcl {
            path: get_str(r)?,
            acl: get_acl(r)?,
        },
        _ => TxnOp::Check { path: get_str(r)? },
    })
}

/// Appends a `u32`-length string.
pub(crate) fn put_str(b: &mut BytesMut, s: &str) {
    b.put_u32(s.len() as u32);
    b.put_slice(s.as_bytes());
}

/// Appends an `i32`-length buffer (-1 = null).
pub(crate) fn put_buf(b: &mut BytesMut, data: Option<&[u8]>) {
    match data {
        None => b.put_i32(-1),
        Some(d) => {
            b.put_i32(d.len() as i32);
            b.put_slice(d);
        }
    }
}

/// Appends an ACL list.
pub(crate) fn put_acl(b: &mut BytesMut, acl: &[Acl]) {
    b.put_u32(acl.len() as u32);
    for a in acl {
        b.put_i32(a.perms.0);
        put_str(b, &a.id.scheme);
        put_str(b, &a.id.id);
    }
}

fn need(r: &[u8], n: usize) -> Result<(), TxnError> {
    if r.len() < n {
        return Err(TxnError(format!(
            "truncated: {n} bytes needed, {} left",
            r.len()
        )));
    }
    Ok(())
}

pub(crate) fn get_u8(r: &mut &[u8]) -> Result<u8, TxnError> {
    need(r, 1)?;
    Ok(r.get_u8())
}

pub(crate) fn get_i32(r: &mut &[u8]) -> Result<i32, TxnError> {
    need(r, 4)?;
    Ok(r.get_i32())
}

pub(crate) fn get_u32(r: &mut &[u8]) -> Result<u32, TxnError> {
    need(r, 4)?;
    Ok(r.get_u32())
}

pub(crate) fn get_u64(r: &mut &[u8]) -> Result<u64, TxnError> {
    need(r, 8)?;
    Ok(r.get_u64())
}

pub(crate) fn get_i64(r: &mut &[u8]) -> Result<i64, TxnError> {
    need(r, 8)?;
    Ok(r.get_i64())
}

fn get_code(r: &mut &[u8]) -> Result<ErrorCode, TxnError> {
    let c = get_i32(r)?;
    ErrorCode::from_i32(c).ok_or_else(|| TxnError(format!("unknown error code {c}")))
}

pub(crate) fn get_str(r: &mut &[u8]) -> Result<String, TxnError> {
    let n = get_u32(r)? as usize;
    need(r, n)?;
    let s = std::str::from_utf8(&r[..n])
        .map_err(|e| TxnError(format!("bad UTF-8: {e}")))?
        .to_owned();
    r.advance(n);
    Ok(s)
}

/// A string borrowed from the input (no copy).
pub(crate) fn get_str_ref<'a>(r: &mut &'a [u8]) -> Result<&'a str, TxnError> {
    let n = get_u32(r)? as usize;
    need(r, n)?;
    let (s, rest) = r.split_at(n);
    let s = std::str::from_utf8(s).map_err(|e| TxnError(format!("bad UTF-8: {e}")))?;
    *r = rest;
    Ok(s)
}

pub(crate) fn get_buf(r: &mut &[u8]) -> Result<Option<Bytes>, TxnError> {
    let n = get_i32(r)?;
    if n < 0 {
        return Ok(None);
    }
    let n = n as usize;
    need(r, n)?;
    let data = Bytes::copy_from_slice(&r[..n]);
    r.advance(n);
    Ok(Some(data))
}

pub(crate) fn get_acl(r: &mut &[u8]) -> Result<Vec<Acl>, TxnError> {
    let n = get_u32(r)? as usize;
    let mut acl = Vec::with_capacity(n.min(r.len() / 12));
    for _ in 0..n {
        let perms = Perms(get_i32(r)?);
        let scheme = ByteString::from(get_str(r)?);
        let id = ByteString::from(get_str(r)?);
        acl.push(Acl {
            perms,
            id: Id { scheme, id },
        });
    }
    Ok(acl)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> TxnHeader {
        TxnHeader {
            origin: 3,
            request: 0x1_0000_0007,
            session: 0x0100_0000_0000_0001,
            cxid: 7,
            time_ms: 1_700_000_000_000,
        }
    }

    #[test]
    fn every_kind_round_trips() {
        let bodies = vec![
            TxnBody::CreateSession {
                timeout_ms: 30000,
                password: [7; 16],
            },
            TxnBody::CloseSession,
            TxnBody::Op(TxnOp::Create {
                path: "/a".into(),
                data: None,
                acl: Acl::open_unsafe(),
                owner: i64::MIN,
            }),
            TxnBody::Multi(vec![
                TxnOp::Create {
                    path: "/a/b".into(),
                    data: Some(Bytes::new()),
                    acl: Acl::read_unsafe(),
                    owner: 5,
                },
                TxnOp::SetData {
                    path: "/a".into(),
                    data: Some(Bytes::from_static(b"x")),
                },
                TxnOp::SetAcl {
                    path: "/a".into(),
                    acl: Acl::open_unsafe(),
                },
                TxnOp::Check { path: "/a".into() },
                TxnOp::Delete {
                    path: "/a/b".into(),
                },
            ]),
            TxnBody::Error(ErrorCode::NodeExists),
            TxnBody::MultiError {
                op_count: 3,
                failed_index: 1,
                code: ErrorCode::BadVersion,
            },
        ];
        for body in bodies {
            let txn = Txn {
                header: header(),
                body,
            };
            assert_eq!(Txn::decode(&txn.encode()).unwrap(), txn);
        }
    }

    #[test]
    fn standalone_txns_written_before_the_ensemble_still_decode() {
        // Version 1: no origin and request id; they read as 0 (the server's own).
        let v2 = Txn {
            header: header(),
            body: TxnBody::Op(TxnOp::Delete { path: "/a".into() }),
        }
        .encode();
        let mut v1 = vec![1u8];
        v1.extend_from_slice(&v2[17..]);
        let t = Txn::decode(&v1).unwrap();
        assert_eq!((t.header.origin, t.header.request), (0, 0));
        assert_eq!(t.header.session, header().session);
        assert_eq!(t.body, TxnBody::Op(TxnOp::Delete { path: "/a".into() }));
        assert!(Txn::decode(&[3u8, 0, 0]).is_err(), "unknown version");
    }

    #[test]
    fn truncated_or_garbage_is_an_error_not_a_panic() {
        let txn = Txn {
            header: header(),
            body: TxnBody::Op(TxnOp::SetData {
                path: "/x".into(),
                data: Some(Bytes::from_static(b"hello")),
            }),
        };
        let bytes = txn.encode();
        for cut in 0..bytes.len() {
            assert!(Txn::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert!(Txn::decode(&[1, 0, 0]).is_err());
        assert!(Txn::decode(&[9; 40]).is_err());
    }
}
