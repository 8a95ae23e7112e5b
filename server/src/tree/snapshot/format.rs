//! The snapshot format, byte for byte: a header, one record per node, an
//! end marker. The writer of a record ([`write_record`]), the length the
//! reader gives a record ([`record_len`]) and the reader of one
//! ([`read_entry`]) sit side by side here, and each pair is asserted to
//! agree on every record: the reader checks that a record consumed exactly
//! `record_len` bytes, and the writer (in debug builds, so in every test)
//! checks that `record_len` of what it wrote is what it wrote.
//!
//! ```text
//! header  "RZKTREE2" | zxid u64 | nodes u64 | sessions u32
//!         | each session: id i64 | timeout_ms i32 | password [u8; 16]
//! record  1 | path: u32 length, UTF-8 | data: i32 length (−1: null), bytes
//!         | ACL id u32 | the ACL list, if the id is the next new one
//!         | czxid, mzxid, pzxid, ctime, mtime: 8 bytes each
//!         | version, aversion, ccount: 4 bytes each | owner: 8 bytes
//! end     0 | records u64
//! ```
//!
//! Numbers are big-endian. An ACL list is a `u32` count of entries, each its
//! perms (`i32`), scheme and id (`u32`-length strings). ACL ids count up from
//! 0 in the order the lists first appear, so a list is written once and the
//! reader learns it where it is first used. The header's node count is
//! exactly the number of records; version 1 (`RZKSNAP1`) has no node count
//! and still loads. Records come in no order a reader can rely on: the walk
//! writes a parent before its children, but copy-on-write writes a node when
//! it is about to change, which can be before its parent.
//!
//! Relies on: the txn codec's helpers for buffers, strings and ACL lists (the
//! same encodings as in the log), and on [`Node`] for the stored fields.

use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use foldhash::HashMap;
use rzk_wire::Acl;
use rzk_zxid::Zxid;

use crate::tree::Node;
use crate::txn::{self, TxnError};

/// The format's magic, version 2: the header carries the node count.
pub(super) const SNAP_MAGIC: &[u8; 8] = b"RZKTREE2";
/// Version 1 (no node count in the header): still loaded.
pub(super) const SNAP_MAGIC_V1: &[u8; 8] = b"RZKSNAP1";
/// Magic, zxid, node count and session count.
const HEADER_BYTES: usize = 8 + 8 + 8 + 4;
/// A session in the header: id, timeout, password.
pub(super) const SESSION_BYTES: usize = 8 + 4 + 16;
/// The end marker: its tag and the record count.
const END_BYTES: usize = 1 + 8;
/// A record's fixed part after its ACL: czxid, mzxid, pzxid, ctime, mtime,
/// version, aversion, ccount, owner.
pub(super) const RECORD_STAT_BYTES: usize = 5 * 8 + 3 * 4 + 8;
/// A record's bytes besides its path and data, if its ACL is not defined
/// there: tag, two lengths, ACL id and the stored Stat fields.
const RECORD_FIXED_BYTES: usize = 1 + 4 + 4 + 4 + RECORD_STAT_BYTES;
/// The tag of the end marker.
const TAG_END: u8 = 0;
/// The tag of a node's record.
const TAG_NODE: u8 = 1;

/// A session as snapshots record it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRecord {
    /// The session id.
    pub id: i64,
    /// Its timeout (as logged at creation).
    pub timeout_ms: i32,
    /// Its password.
    pub password: [u8; 16],
}

/// About how long the snapshot of a tree of `nodes` nodes, whose paths and
/// data add up to `path_and_data_bytes`, with `sessions` sessions will be.
pub(super) fn size_estimate(sessions: usize, nodes: usize, path_and_data_bytes: u64) -> usize {
    HEADER_BYTES
        + END_BYTES
        + sessions * SESSION_BYTES
        + path_and_data_bytes as usize
        + nodes * RECORD_FIXED_BYTES
}

/// Appends the header of a snapshot at `zxid` of `nodes` nodes with these
/// sessions.
pub(super) fn write_header(out: &mut BytesMut, zxid: Zxid, nodes: u64, sessions: &[SessionRecord]) {
    let start = out.len();
    out.put_slice(SNAP_MAGIC);
    out.put_u64(zxid.as_u64());
    out.put_u64(nodes);
    out.put_u32(sessions.len() as u32);
    for s in sessions {
        out.put_i64(s.id);
        out.put_i32(s.timeout_ms);
        out.put_slice(&s.password);
    }
    assert_eq!(
        out.len() - start,
        HEADER_BYTES + sessions.len() * SESSION_BYTES
    );
}

/// A session of the header, from its [`SESSION_BYTES`] bytes.
pub(super) fn read_session(mut b: &[u8]) -> Result<SessionRecord, TxnError> {
    let id = txn::get_i64(&mut b)?;
    let timeout_ms = txn::get_i32(&mut b)?;
    let mut password = [0u8; 16];
    password.copy_from_slice(b);
    Ok(SessionRecord {
        id,
        timeout_ms,
        password,
    })
}

/// Appends the end marker of a snapshot of `records` records.
pub(super) fn write_end(out: &mut BytesMut, records: u64) {
    let start = out.len();
    out.put_u8(TAG_END);
    out.put_u64(records);
    assert_eq!(record_len(&out[start..], 0), Ok(Ok(out.len() - start)));
}

/// Appends the record of `node` at path `p`. `acl_ids` maps the ACL lists
/// written so far (by address: the interner keeps each alive while the
/// snapshot is written) to their ids; a list not in it is given the next id
/// and written in full.
pub(super) fn write_record(
    out: &mut BytesMut,
    acl_ids: &mut HashMap<usize, u32>,
    p: &[u8],
    node: &Node,
) {
    let start = out.len();
    let acls_defined = acl_ids.len();
    out.put_u8(TAG_NODE);
    out.put_u32(p.len() as u32);
    out.put_slice(p);
    txn::put_buf(out, node.data_slice());

    let key = Arc::as_ptr(&node.acl) as usize;
    let next = acl_ids.len() as u32;
    match acl_ids.get(&key) {
        Some(id) => out.put_u32(*id),
        None => {
            acl_ids.insert(key, next);
            out.put_u32(next);
            txn::put_acl(out, &node.acl);
        }
    }
    out.put_u64(node.czxid);
    out.put_u64(node.mzxid);
    out.put_u64(node.pzxid);
    out.put_i64(node.ctime);
    out.put_i64(node.mtime);
    out.put_i32(node.version);
    out.put_i32(node.aversion);
    out.put_i32(node.ccount);
    out.put_i64(node.owner);
    // The pair assertion: a reader takes exactly these bytes as this record.
    // Debug builds only: parsing each record back costs a snapshot step
    // about a sixth more instructions, and a step runs between txns, so
    // writes wait for it. Every snapshot written by the tests is checked,
    // and the reader checks its side of the pair in every build.
    if cfg!(debug_assertions) {
        let written = out.len() - start;
        let read = record_len(&out[start..], acls_defined);
        assert!(
            read == Ok(Ok(written)),
            "record of {written} bytes read as {read:?}"
        );
    }
}

/// The length of the record at the start of `b`: `Ok(len)`, or `Err(n)` when
/// `b` is too short to tell and at least `n` bytes are needed to go on. An
/// unknown tag is an error. `acls_defined`: ACL ids defined so far (a record
/// whose ACL id is the next one carries the ACL inline).
pub(super) fn record_len(b: &[u8], acls_defined: usize) -> Result<Result<usize, usize>, TxnError> {
    let u32_at = |at: usize| -> Option<u32> {
        b.get(at..at + 4)
            .map(|x| u32::from_be_bytes(x.try_into().expect("4 bytes")))
    };
    match b.first() {
        None => return Ok(Err(1)),
        Some(&TAG_END) => return Ok(Ok(END_BYTES)),
        Some(&TAG_NODE) => {}
        Some(t) => return Err(TxnError(format!("unknown snapshot record {t}"))),
    }
    let mut at = 1usize;
    // path
    let Some(n) = u32_at(at) else {
        return Ok(Err(at + 4));
    };
    at += 4 + n as usize;
    // data (-1: null)
    let Some(n) = u32_at(at) else {
        return Ok(Err(at + 4));
    };
    at += 4 + (n as i32).max(0) as usize;
    // ACL id, and the ACL itself when it is defined here
    let Some(acl_ref) = u32_at(at) else {
        return Ok(Err(at + 4));
    };
    at += 4;
    if acl_ref as usize == acls_defined {
        let Some(count) = u32_at(at) else {
            return Ok(Err(at + 4));
        };
        at += 4;
        for _ in 0..count {
            at += 4; // perms
            for _ in 0..2 {
                // scheme, id
                let Some(n) = u32_at(at) else {
                    return Ok(Err(at + 4));
                };
                at += 4 + n as usize;
            }
        }
    }
    Ok(Ok(at + RECORD_STAT_BYTES))
}

/// What a record or the end marker holds, borrowed from the snapshot.
pub(super) enum Entry<'a> {
    /// A node's record.
    Node(RecordRef<'a>),
    /// The end marker, with the record count it declares.
    End {
        /// The records the snapshot holds, by its own count.
        records: u64,
    },
}

/// A node's record, its path and data borrowed from the snapshot.
pub(super) struct RecordRef<'a> {
    /// The node's path.
    pub(super) path: &'a str,
    /// Its data (`None`: null).
    pub(super) data: Option<&'a [u8]>,
    /// The id of its ACL list.
    pub(super) acl_id: usize,
    /// The list itself, when this record defines `acl_id` (the next new id).
    pub(super) acl: Option<Vec<Acl>>,
    /// The stored Stat fields.
    pub(super) stat: RecordStat,
}

/// A record's stored Stat fields, as [`Node`] holds them.
pub(super) struct RecordStat {
    czxid: u64,
    mzxid: u64,
    pzxid: u64,
    ctime: i64,
    mtime: i64,
    version: i32,
    aversion: i32,
    ccount: i32,
    owner: i64,
}

impl RecordStat {
    /// Gives `node` these fields.
    pub(super) fn set_on(&self, node: &mut Node) {
        node.czxid = self.czxid;
        node.mzxid = self.mzxid;
        node.pzxid = self.pzxid;
        node.ctime = self.ctime;
        node.mtime = self.mtime;
        node.version = self.version;
        node.aversion = self.aversion;
        node.ccount = self.ccount;
        node.owner = self.owner;
    }
}

/// The record or end marker that is all of `b`, as long as [`record_len`]
/// said it is (with the same `acls_defined`).
// Always inlined into the loader's loop: a call returning the record by
// value cost a load about 3% more time.
#[inline(always)]
pub(super) fn read_entry(mut b: &[u8], acls_defined: usize) -> Result<Entry<'_>, TxnError> {
    let r = &mut b;
    let entry = match txn::get_u8(r)? {
        TAG_END => Entry::End {
            records: txn::get_i64(r)? as u64,
        },
        TAG_NODE => Entry::Node(read_record(r, acls_defined)?),
        t => return Err(TxnError(format!("unknown snapshot record {t}"))),
    };
    // The pair assertion: a record is exactly as long as `record_len` said.
    // The two read the same length fields the same way, so bytes left over
    // are a bug here, not damage to the snapshot.
    assert!(
        r.is_empty(),
        "{} bytes left after a snapshot record",
        r.len()
    );
    Ok(entry)
}

/// A node's record after its tag.
#[inline]
fn read_record<'a>(r: &mut &'a [u8], acls_defined: usize) -> Result<RecordRef<'a>, TxnError> {
    let path = txn::get_str_ref(r)?;
    let data = get_buf_ref(r)?;
    let acl_id = txn::get_u32(r)? as usize;
    let acl = if acl_id == acls_defined {
        Some(txn::get_acl(r)?)
    } else {
        None
    };
    let stat = RecordStat {
        czxid: txn::get_i64(r)? as u64,
        mzxid: txn::get_i64(r)? as u64,
        pzxid: txn::get_i64(r)? as u64,
        ctime: txn::get_i64(r)?,
        mtime: txn::get_i64(r)?,
        version: txn::get_i32(r)?,
        aversion: txn::get_i32(r)?,
        ccount: txn::get_i32(r)?,
        owner: txn::get_i64(r)?,
    };
    Ok(RecordRef {
        path,
        data,
        acl_id,
        acl,
        stat,
    })
}

/// A buffer borrowed from the input (`i32` length, −1 = null).
fn get_buf_ref<'a>(r: &mut &'a [u8]) -> Result<Option<&'a [u8]>, TxnError> {
    let n = txn::get_i32(r)?;
    if n < 0 {
        return Ok(None);
    }
    let n = n as usize;
    if r.len() < n {
        return Err(TxnError(format!(
            "truncated: {n} bytes of data needed, {} left",
            r.len()
        )));
    }
    let (data, rest) = r.split_at(n);
    *r = rest;
    Ok(Some(data))
}

#[cfg(test)]
mod tests {
    use rzk_wire::{ByteString, Id, Perms};

    use super::*;
    use crate::acl::{AclInterner, AclRef};

    /// One node of every shape a record takes: null and empty data, data,
    /// an ACL list defined by its record or used again, a list of several
    /// entries, a path of multi-byte characters, every owner kind.
    fn nodes() -> Vec<(&'static str, Node)> {
        let mut acls = AclInterner::default();
        let open = acls.intern(&Acl::open_unsafe());
        let several = acls.intern(&[
            Acl {
                perms: Perms::READ,
                id: Id::anyone(),
            },
            Acl {
                perms: Perms::ALL,
                id: Id {
                    scheme: ByteString::from_static("digest"),
                    id: ByteString::from_static("u:c2VjcmV0"),
                },
            },
        ]);
        let none = acls.intern(&[]);
        let shapes: [(&str, Option<&[u8]>, &AclRef, i64); 6] = [
            ("/", Some(b""), &open, 0),
            ("/a", None, &open, 0x42),
            (
                "/a/b",
                Some(b"data"),
                &several,
                crate::tree::CONTAINER_OWNER,
            ),
            (
                "/a/b/名前",
                Some(&[0xff; 300]),
                &several,
                crate::tree::ttl_owner(9),
            ),
            ("/c", Some(b""), &open, 0),
            ("/c/d", None, &none, 0),
        ];
        shapes
            .into_iter()
            .enumerate()
            .map(|(i, (p, data, acl, owner))| {
                let name = p.rsplit('/').next().unwrap_or_default();
                let i = i as u64;
                let mut n = Node::new(name, data, acl.clone(), owner, 10 + i, 20 + i as i64);
                (n.mzxid, n.pzxid, n.mtime) = (30 + i, 40 + i, 50 + i as i64);
                (n.version, n.aversion, n.ccount) = (1, 2, 3 + i as i32);
                (p, n)
            })
            .collect()
    }

    #[test]
    fn every_record_shape_reads_back_as_written() {
        let nodes = nodes();
        let (mut out, mut ids) = (BytesMut::new(), HashMap::default());
        for (p, node) in &nodes {
            write_record(&mut out, &mut ids, p.as_bytes(), node);
        }
        write_end(&mut out, nodes.len() as u64);
        let (mut at, mut defined) = (0, 0);
        for (p, node) in &nodes {
            let len = record_len(&out[at..], defined).unwrap().unwrap();
            let Entry::Node(rec) = read_entry(&out[at..at + len], defined).unwrap() else {
                panic!("{p}: not a node's record");
            };
            assert_eq!((rec.path, rec.data), (*p, node.data_slice()));
            if let Some(acl) = &rec.acl {
                assert_eq!((&acl[..], rec.acl_id), (&node.acl[..], defined), "{p}");
                defined += 1;
            }
            let name = p.rsplit('/').next().unwrap_or_default();
            let mut back = Node::new(name, rec.data, node.acl.clone(), 0, 0, 0);
            rec.stat.set_on(&mut back);
            assert_eq!(back.stat(), node.stat(), "{p}");
            assert_eq!((back.owner, back.ccount), (node.owner, node.ccount), "{p}");
            at += len;
        }
        assert_eq!(
            defined, 3,
            "three lists, each defined once where first used"
        );
        let Entry::End { records } = read_entry(&out[at..], defined).unwrap() else {
            panic!("no end marker");
        };
        assert_eq!(records, nodes.len() as u64);
    }

    #[test]
    fn record_len_never_gives_a_wrong_length_for_a_record_cut_short() {
        // The loader reads until `record_len` knows a length: from any prefix
        // of a record it must ask for more bytes, or give the record's
        // length, never another.
        for (p, node) in nodes() {
            let (mut out, mut ids) = (BytesMut::new(), HashMap::default());
            write_record(&mut out, &mut ids, p.as_bytes(), &node);
            for cut in 0..out.len() {
                match record_len(&out[..cut], 0) {
                    Ok(Ok(len)) => assert_eq!(len, out.len(), "{p} cut at {cut}"),
                    Ok(Err(more)) => assert!(more > cut, "{p} cut at {cut} asks for {more}"),
                    Err(e) => panic!("{p} cut at {cut}: {e}"),
                }
            }
        }
    }
}
