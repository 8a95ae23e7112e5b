//! The copy-on-write snapshot writer: a snapshot consistent at one zxid,
//! written a few nodes at a time between transactions, and by copy-on-write
//! as transactions change nodes it has not reached yet.
//!
//! The walk is a depth-first search from the root. Each node carries the
//! generation of the last snapshot that wrote it; the walk skips a node of
//! the current generation (copy-on-write wrote it first) and one created
//! after the snapshot's zxid (and so everything below it). Before a change
//! touches a node the snapshot has not written, [`DataTree::cow`] writes the
//! node's state as it is still at the snapshot's zxid. Every node alive at
//! that zxid is so written exactly once, which is what the header's node
//! count promises.
//!
//! Owns the snapshot in progress ([`SnapWriter`]) and its output buffer.
//! Relies on: the tree calling [`DataTree::cow`] before every change to a
//! node (create and delete for the parent, delete for the node itself,
//! setData, setACL, the config node); the record format in `format`; and no
//! ACL list being freed while a snapshot is written (ids are kept by the
//! list's address, and ACL garbage is collected between snapshots only).

use bytes::{Bytes, BytesMut};
use foldhash::{HashMap, HashMapExt};
use rzk_zxid::Zxid;

use super::format::{self, SessionRecord};
use crate::tree::node::ROOT;
use crate::tree::{DataTree, Node};

/// A snapshot being written.
#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub(in crate::tree) struct SnapWriter {
    /// The generation this snapshot marks the nodes it writes with.
    gen: u32,
    /// The zxid the snapshot is consistent at.
    zxid: u64,
    /// The DFS from the root: one frame per node whose children are still
    /// being visited.
    frames: Vec<SnapFrame>,
    /// Whether the DFS has started (visited the root).
    root_visited: bool,
    /// Bytes produced and not yet taken.
    pub(super) out: BytesMut,
    /// ACL lists written so far, by their address, and their snapshot ids.
    acl_refs: HashMap<usize, u32>,
    /// Records written so far.
    records: u64,
    /// The capacity of a fresh output buffer once the caller takes the
    /// output in chunks ([`DataTree::take_snapshot_output`]); 0 until then.
    chunk_bytes: usize,
}

impl SnapWriter {
    /// Writes the record of `node` at path `p`.
    fn write(&mut self, p: &[u8], node: &Node) {
        format::write_record(&mut self.out, &mut self.acl_refs, p, node);
        self.records += 1;
    }
}

/// A node whose children a snapshot is visiting.
///
/// The children's names are copied into one buffer when the frame is made
/// (one allocation, not one `String` per child): a parent with a million
/// children costs one pass over its table, and each later step takes a few
/// children off the end.
#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
struct SnapFrame {
    /// The parent's path.
    path: Vec<u8>,
    /// The children's names, back to back.
    names: Vec<u8>,
    /// Each child's slab index and the end of its name in `names` (its start
    /// is the previous child's end).
    kids: Vec<(u32, u32)>,
}

impl SnapFrame {
    /// The next child to visit and its path, written into `path`.
    #[inline]
    fn pop(&mut self, path: &mut Vec<u8>) -> Option<u32> {
        let (idx, end) = self.kids.pop()?;
        let start = self.kids.last().map_or(0, |k| k.1);
        path.clear();
        path.extend_from_slice(&self.path);
        if self.path != b"/" {
            path.push(b'/');
        }
        path.extend_from_slice(&self.names[start as usize..end as usize]);
        self.names.truncate(start as usize);
        Some(idx)
    }
}

impl DataTree {
    /// Whether a snapshot is being written.
    pub fn snapshot_in_progress(&self) -> bool {
        self.snap.is_some()
    }

    /// Abandons the snapshot in progress, if any (its writer failed): what it
    /// produced is dropped, changed nodes are no longer copied for it, and a
    /// new one can begin.
    pub fn abort_snapshot(&mut self) {
        self.snap = None;
    }

    /// Starts a snapshot consistent at `zxid` (the last applied txn) with these
    /// sessions. Returns false if one is already being written.
    ///
    /// The snapshot is then produced by [`DataTree::snapshot_step`] and by
    /// copy-on-write as txns change nodes it has not written yet. Its bytes
    /// come either in one buffer (the last `snapshot_step` returns them all)
    /// or in chunks: [`DataTree::take_snapshot_output`] hands over what has
    /// been produced so far, and the last `snapshot_step` returns the rest.
    pub fn begin_snapshot(&mut self, zxid: Zxid, sessions: &[SessionRecord]) -> bool {
        if self.snap.is_some() {
            return false;
        }
        self.snap_gen = self.snap_gen.wrapping_add(1);
        // Sized once from the tree (a record is its path, its data and about
        // 70 bytes): the buffer does not grow by copies while nodes are written,
        // and the pages it does not use are never touched. A caller that takes
        // the output in chunks gives this buffer up with its first chunk.
        let estimate = format::size_estimate(sessions.len(), self.node_count, self.data_bytes);
        let mut out = BytesMut::with_capacity(estimate + estimate / 16);
        // Exactly the records to come: one per node at `zxid` (the walk writes
        // those it reaches, copy-on-write those changed or deleted first).
        format::write_header(&mut out, zxid, self.node_count as u64, sessions);
        self.snap = Some(SnapWriter {
            gen: self.snap_gen,
            zxid: zxid.as_u64(),
            frames: Vec::new(),
            root_visited: false,
            out,
            acl_refs: HashMap::new(),
            records: 0,
            chunk_bytes: 0,
        });
        true
    }

    /// The bytes of the snapshot in progress produced so far (by steps and by
    /// copy-on-write) and not taken yet, if at least `min_bytes` of them are
    /// buffered; `None` otherwise, or when no snapshot is in progress.
    ///
    /// For streaming a snapshot in bounded chunks: call it after steps and
    /// after applying txns, write what it returns in order, and finish with
    /// the rest that the last [`DataTree::snapshot_step`] returns. The chunks
    /// and that rest, concatenated, are byte for byte what the one-buffer form
    /// would have returned. Once a chunk has been taken, the snapshot buffers
    /// at most about `min_bytes` plus one step's output (each chunk is its own
    /// allocation, freed when the caller drops it).
    pub fn take_snapshot_output(&mut self, min_bytes: usize) -> Option<Bytes> {
        let snap = self.snap.as_mut()?;
        if snap.out.is_empty() || snap.out.len() < min_bytes {
            return None;
        }
        if snap.chunk_bytes == 0 {
            snap.chunk_bytes = (min_bytes + min_bytes / 4).max(4096);
        }
        let fresh = BytesMut::with_capacity(snap.chunk_bytes);
        Some(std::mem::replace(&mut snap.out, fresh).freeze())
    }

    /// Writes up to `budget` nodes of the snapshot in progress. Returns the
    /// finished snapshot (its zxid and bytes) when the last node is written.
    pub fn snapshot_step(&mut self, budget: usize) -> Option<(Zxid, Bytes)> {
        let mut snap = self.snap.take()?;
        let mut p = Vec::new();
        for _ in 0..budget {
            let idx = if !snap.root_visited {
                snap.root_visited = true;
                p.clear();
                p.push(b'/');
                ROOT
            } else {
                let Some(frame) = snap.frames.last_mut() else {
                    break;
                };
                match frame.pop(&mut p) {
                    Some(idx) => idx,
                    None => {
                        snap.frames.pop();
                        continue;
                    }
                }
            };
            let Some(node) = self.nodes.get_mut(idx) else {
                continue; // deleted since its parent was visited (its old state is written)
            };
            if node.czxid > snap.zxid {
                continue; // created after the snapshot's zxid, and so is all below it
            }
            if node.snap_gen != snap.gen {
                node.snap_gen = snap.gen;
                snap.write(&p, node);
            }
            if let Some(frame) = self.frame(idx, &p) {
                snap.frames.push(frame);
            }
        }
        if !snap.frames.is_empty() || !snap.root_visited {
            self.snap = Some(snap);
            return None;
        }
        format::write_end(&mut snap.out, snap.records);
        Some((Zxid::from_u64(snap.zxid), snap.out.freeze()))
    }

    /// Writes the whole snapshot at once (tests and shutdown).
    pub fn snapshot_now(&mut self, zxid: Zxid, sessions: &[SessionRecord]) -> Bytes {
        if self.snap.is_none() {
            self.begin_snapshot(zxid, sessions);
        }
        loop {
            if let Some((_, bytes)) = self.snapshot_step(usize::MAX) {
                return bytes;
            }
        }
    }

    /// The frame of a snapshot's walk for the children of the node at `idx`
    /// (path `p`), if it has any: their indices and names, copied at once.
    fn frame(&self, idx: u32, p: &[u8]) -> Option<SnapFrame> {
        let children = self.nodes.get(idx)?.children.as_ref()?;
        let mut names = Vec::new();
        let mut kids = Vec::with_capacity(children.len());
        for &child in children.iter() {
            let Some(n) = self.nodes.get(child) else {
                continue;
            };
            names.extend_from_slice(n.name());
            kids.push((child, names.len() as u32));
        }
        Some(SnapFrame {
            path: p.to_vec(),
            names,
            kids,
        })
    }

    /// Copy-on-write: before the node at `idx` (path `p`) changes, a snapshot
    /// in progress that has not written it yet writes its current state.
    #[inline]
    pub(in crate::tree) fn cow(&mut self, idx: u32, p: &str) {
        let Some(snap) = self.snap.as_mut() else {
            return;
        };
        let Some(node) = self.nodes.get_mut(idx) else {
            return;
        };
        if node.snap_gen == snap.gen || node.czxid > snap.zxid {
            return;
        }
        node.snap_gen = snap.gen;
        snap.write(p.as_bytes(), node);
    }
}
