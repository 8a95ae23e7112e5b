//! The snapshot load split over two threads ([`DataTree::load_snapshot_split`])
//! against the load on one ([`DataTree::load_snapshot_from`]): the same
//! tree, sessions and zxid from random trees (copy-on-write records before
//! their parents included), the same error for a damaged snapshot, and a
//! parser that stops a few batches after the insert failed.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rzk_wire::{Acl, Stat};

use super::*;
use crate::path;
use crate::tree::snapshot::format::{record_len, RECORD_STAT_BYTES, SESSION_BYTES};
use crate::tree::{ttl_owner, CONTAINER_OWNER};

/// Everything a tree holds that a load must restore: every node, and the
/// indices derived from them (ephemerals, containers, TTL nodes, counts).
#[derive(Debug, PartialEq)]
struct State {
    nodes: BTreeMap<String, (Option<Bytes>, Vec<Acl>, Stat)>,
    ephemerals: BTreeMap<i64, BTreeSet<String>>,
    containers: BTreeSet<String>,
    ttls: BTreeSet<String>,
    node_count: usize,
    data_bytes: u64,
}

fn state(t: &DataTree) -> State {
    State {
        nodes: t.dump(),
        ephemerals: t
            .all_ephemerals()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect(),
        containers: t.containers().clone(),
        ttls: t.ttl_nodes().clone(),
        node_count: t.node_count(),
        data_bytes: t.approximate_data_size(),
    }
}

/// A loaded snapshot as compared: its state, sessions and zxid, or the error.
type Outcome = Result<(State, Vec<SessionRecord>, Zxid), String>;

fn outcome(loaded: Result<(DataTree, Vec<SessionRecord>, Zxid), TxnError>) -> Outcome {
    loaded.map(|(t, s, z)| (state(&t), s, z)).map_err(|e| e.0)
}

/// Hands out at most `step` bytes a read, counts them, and fails at the end
/// if told to (a checksum that does not match).
struct Source<'a> {
    data: &'a [u8],
    step: usize,
    read_bytes: usize,
    fail_at_end: bool,
}

impl<'a> Source<'a> {
    fn new(data: &'a [u8], step: usize) -> Source<'a> {
        Source {
            data,
            step,
            read_bytes: 0,
            fail_at_end: false,
        }
    }
}

impl std::io::Read for Source<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.data.is_empty() && self.fail_at_end {
            return Err(std::io::Error::other("checksum mismatch"));
        }
        let n = buf.len().min(self.step).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        self.read_bytes += n;
        Ok(n)
    }
}

fn load_one_thread(bytes: &[u8], step: usize) -> Outcome {
    outcome(DataTree::load_snapshot_from(&mut Source::new(bytes, step)))
}

fn load_two_threads(bytes: &[u8], step: usize, batch_records: usize) -> Outcome {
    let mut src = Source::new(bytes, step);
    outcome(load_split_from(
        &mut SnapReader::new(&mut src),
        batch_records,
    ))
}

/// A random name: ASCII, and now and then a character of two or three bytes.
fn random_name(rng: &mut ChaCha8Rng) -> String {
    const CHARS: [char; 8] = ['a', 'b', 'c', 'x', '1', '-', 'é', '名'];
    let len = rng.random_range(1..6);
    (0..len)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())])
        .collect()
}

fn random_data(rng: &mut ChaCha8Rng) -> Option<Bytes> {
    match rng.random_range(0..5) {
        0 => None,
        1 => Some(Bytes::new()),
        _ => {
            let len = rng.random_range(1..200);
            Some((0..len).map(|_| rng.random::<u8>()).collect())
        }
    }
}

/// One random change: a create (of any kind of node), a setData or the
/// delete of a leaf. `paths` holds the live paths besides the initial tree's.
fn random_change(t: &mut DataTree, paths: &mut Vec<String>, zxid: u64, rng: &mut ChaCha8Rng) {
    let acls = [Acl::open_unsafe(), Acl::read_unsafe(), Acl::creator_all()];
    match rng.random_range(0..10) {
        0..=5 => {
            let parent = match rng.random_range(0..=paths.len()) {
                0 => "/".to_owned(),
                i => paths[i - 1].clone(),
            };
            let p = path::join(&parent, &random_name(rng));
            let owner = match rng.random_range(0..10) {
                0 => 0x100 + rng.random_range(0..4),
                1 => CONTAINER_OWNER,
                2 => ttl_owner(rng.random_range(1..100_000)),
                _ => 0,
            };
            let acl = &acls[rng.random_range(0..acls.len())];
            let data = random_data(rng);
            if t.create(&p, data, acl, owner, zxid, zxid as i64).is_ok() {
                paths.push(p);
            }
        }
        6..=7 if !paths.is_empty() => {
            let p = &paths[rng.random_range(0..paths.len())];
            let data = random_data(rng);
            t.set_data(p, data, zxid, zxid as i64).unwrap();
        }
        _ if !paths.is_empty() => {
            let i = rng.random_range(0..paths.len());
            if t.get(&paths[i]).is_some_and(|n| n.num_children() == 0) {
                t.delete(&paths[i], zxid).unwrap();
                paths.swap_remove(i);
            }
        }
        _ => {}
    }
}

/// A random tree of about `changes` changes, and its snapshot taken while
/// random writes go on (so copy-on-write records come before their
/// parents): the bytes, and the state, sessions and zxid they hold.
fn random_snapshot(rng: &mut ChaCha8Rng, changes: u64) -> (Bytes, State, Vec<SessionRecord>, Zxid) {
    let mut t = DataTree::new();
    let mut paths = Vec::new();
    for zxid in 1..=changes {
        random_change(&mut t, &mut paths, zxid, rng);
    }
    let sessions: Vec<SessionRecord> = (0..rng.random_range(0..5))
        .map(|i| SessionRecord {
            id: 0x100 + i,
            timeout_ms: rng.random_range(1000..60_000),
            password: rng.random(),
        })
        .collect();
    let at = Zxid::from_u64(changes);
    let expected = state(&t);
    assert!(t.begin_snapshot(at, &sessions));
    let mut zxid = changes;
    loop {
        for _ in 0..rng.random_range(0..4) {
            zxid += 1;
            random_change(&mut t, &mut paths, zxid, rng);
        }
        if let Some((z, bytes)) = t.snapshot_step(rng.random_range(1..40)) {
            assert_eq!(z, at);
            return (bytes, expected, sessions, at);
        }
    }
}

/// The records of a snapshot: where each starts and how long it is.
fn record_spans(bytes: &[u8]) -> Vec<(usize, usize)> {
    let sessions = u32::from_be_bytes(bytes[24..28].try_into().unwrap()) as usize;
    let mut at = 28 + sessions * SESSION_BYTES;
    let (mut spans, mut acls) = (Vec::new(), 0);
    while bytes[at] == 1 {
        let len = record_len(&bytes[at..], acls).unwrap().unwrap();
        let path_len = u32::from_be_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
        let data_at = at + 5 + path_len;
        let data_len = i32::from_be_bytes(bytes[data_at..data_at + 4].try_into().unwrap());
        let acl_at = data_at + 4 + data_len.max(0) as usize;
        let acl_ref = u32::from_be_bytes(bytes[acl_at..acl_at + 4].try_into().unwrap());
        if acl_ref as usize == acls {
            acls += 1;
        }
        spans.push((at, len));
        at += len;
    }
    spans
}

/// The range of a record's path bytes.
fn path_range(bytes: &[u8], at: usize) -> std::ops::Range<usize> {
    let len = u32::from_be_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
    at + 5..at + 5 + len
}

#[test]
fn a_split_load_gives_the_same_tree_sessions_and_zxid_as_one_thread() {
    let mut deferred_seen = false;
    for seed in 0..24u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let changes = if seed == 0 {
            12_000
        } else {
            rng.random_range(1..1500)
        };
        let (bytes, expected, sessions, at) = random_snapshot(&mut rng, changes);
        let want: Outcome = Ok((expected, sessions, at));
        // Some record came before its parent (the loader held it back).
        let spans = record_spans(&bytes);
        let mut seen = BTreeSet::new();
        for &(at, _) in &spans {
            let p = std::str::from_utf8(&bytes[path_range(&bytes, at)]).unwrap();
            deferred_seen |= p != "/" && !seen.contains(path::parent(p).unwrap());
            seen.insert(p);
        }
        assert_eq!(load_one_thread(&bytes, usize::MAX), want, "seed {seed}");
        for batch_records in [1, 7, LOAD_BATCH_RECORDS] {
            for step in [997, usize::MAX] {
                assert_eq!(
                    load_two_threads(&bytes, step, batch_records),
                    want,
                    "seed {seed}, batches of {batch_records}, reads of {step}"
                );
            }
        }
    }
    assert!(deferred_seen, "no snapshot had a record before its parent");
}

#[test]
fn a_split_load_fails_as_the_one_thread_load_on_a_damaged_snapshot() {
    for seed in 0..4u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (bytes, ..) = random_snapshot(&mut rng, 400);
        let spans = record_spans(&bytes);
        let mut damaged = Vec::new();
        // Cut anywhere.
        for _ in 0..150 {
            damaged.push(bytes[..rng.random_range(0..bytes.len())].to_vec());
        }
        // Bytes flipped where no length is (a length flipped can ask for any
        // amount of memory, the same on both paths): a tag, a path (bad
        // UTF-8, a missing parent, a repeated node), data, a stat field.
        for _ in 0..300 {
            let (at, len) = spans[rng.random_range(0..spans.len())];
            let stats = at + len - RECORD_STAT_BYTES..at + len;
            let path = path_range(&bytes, at);
            let i = match rng.random_range(0..3) {
                0 => at,
                1 if !path.is_empty() => rng.random_range(path),
                _ => rng.random_range(stats),
            };
            let mut b = bytes.to_vec();
            b[i] ^= 1 << rng.random_range(0..8);
            damaged.push(b);
        }
        // A path made its previous sibling's (a repeated node).
        for w in spans.windows(2) {
            let (a, b) = (path_range(&bytes, w[0].0), path_range(&bytes, w[1].0));
            let (pa, pb) = (&bytes[a.clone()], &bytes[b.clone()]);
            if a.len() == b.len()
                && path::parent(std::str::from_utf8(pa).unwrap())
                    == path::parent(std::str::from_utf8(pb).unwrap())
            {
                let mut d = bytes.to_vec();
                d.copy_within(a, b.start);
                // And cut after it: the repeated node is the error reported,
                // though the parser meets the cut before the insert meets it.
                let cut = rng.random_range(b.end..d.len());
                damaged.push(d[..cut].to_vec());
                damaged.push(d);
            }
        }
        let mut errors = 0;
        for (i, d) in damaged.iter().enumerate() {
            let one = load_one_thread(d, 4093);
            errors += usize::from(one.is_err());
            for batch_records in [1, 5, LOAD_BATCH_RECORDS] {
                assert_eq!(
                    load_two_threads(d, 4093, batch_records),
                    one,
                    "seed {seed}, damage {i}, batches of {batch_records}"
                );
            }
        }
        assert!(errors > damaged.len() / 2, "seed {seed}: {errors} errors");
    }
}

#[test]
fn a_split_load_reads_its_source_to_the_end_where_the_checksum_fails() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let (bytes, ..) = random_snapshot(&mut rng, 3000);
    let mut src = Source::new(&bytes, 1000);
    src.fail_at_end = true;
    let err = load_split_from(&mut SnapReader::new(&mut src), 64)
        .map(|_| ())
        .unwrap_err();
    assert!(err.0.contains("checksum mismatch"), "{err}");
    assert_eq!(src.read_bytes, bytes.len());
}

#[test]
fn a_split_load_stops_its_parser_a_few_batches_after_the_insert_failed() {
    // A snapshot of many small records, one near the start made a copy of
    // its sibling before it: the insert fails in its first batch; the parser
    // may have filled the batches the channel holds and one more, and stops
    // there.
    let mut t = DataTree::new();
    let nodes = 20 * LOAD_BATCH_RECORDS as u64;
    for i in 0..nodes {
        t.create(
            &format!("/n{i:06}"),
            Some(Bytes::from_static(b"0123456789")),
            &Acl::open_unsafe(),
            0,
            i + 1,
            1,
        )
        .unwrap();
    }
    let mut bytes = t.snapshot_now(Zxid::from_u64(nodes), &[]).to_vec();
    let spans = record_spans(&bytes);
    let (first, second) = spans[..100]
        .windows(2)
        .map(|w| (path_range(&bytes, w[0].0), path_range(&bytes, w[1].0)))
        .find(|(a, b)| a.len() == 8 && b.len() == 8)
        .expect("two records /nNNNNNN in a row");
    let record_bytes_max = spans.iter().map(|s| s.1).max().unwrap();
    bytes.copy_within(first, second.start);

    let mut src = Source::new(&bytes, usize::MAX);
    let err = load_split_from(&mut SnapReader::new(&mut src), LOAD_BATCH_RECORDS)
        .map(|_| ())
        .unwrap_err();
    assert!(err.0.contains("repeated"), "{err}");
    // The batch that failed, those in the channel and the one the parser
    // was sending, plus the reader's window.
    let bound = (LOAD_BATCHES_IN_FLIGHT + 2) * LOAD_BATCH_RECORDS * record_bytes_max
        + 2 * SNAPSHOT_LOAD_READ_BYTES;
    assert!(bound < bytes.len() / 2, "the snapshot is too small to tell");
    assert!(
        src.read_bytes <= bound,
        "{} bytes read of {}, bound {bound}",
        src.read_bytes,
        bytes.len()
    );
}
