//! The snapshot on one thread, written and loaded: a round trip, streamed
//! output equal to the one-buffer form, consistency at the snapshot's zxid
//! while writes go on, a bounded read buffer, and the damage a load refuses.

use bytes::Bytes;
use rzk_wire::Acl;
use rzk_zxid::Zxid;

use super::format::{SNAP_MAGIC, SNAP_MAGIC_V1};
use super::load::LOAD_BUFFER_PEAK;
use super::*;
use crate::tree::{DataTree, CONTAINER_OWNER};

fn open() -> Vec<Acl> {
    Acl::open_unsafe()
}

#[test]
fn snapshot_round_trip() {
    let mut t = DataTree::new();
    t.create("/a", Some(Bytes::from_static(b"1")), &open(), 0, 1, 1)
        .unwrap();
    t.create("/a/b", Some(Bytes::new()), &Acl::read_unsafe(), 0x77, 2, 2)
        .unwrap();
    t.create("/a/c", None, &open(), CONTAINER_OWNER, 3, 3)
        .unwrap();
    t.delete("/a/c", 4).unwrap();
    let sessions = vec![SessionRecord {
        id: 0x77,
        timeout_ms: 4000,
        password: [3; 16],
    }];
    let bytes = t.snapshot_now(Zxid::from_u64(4), &sessions);
    let (loaded, s, z) = DataTree::load_snapshot(&bytes).unwrap();
    assert_eq!(z.as_u64(), 4);
    assert_eq!(s, sessions);
    assert_eq!(loaded.dump(), t.dump());
    assert!(loaded.ephemerals_of(0x77).unwrap().contains("/a/b"));
    for cut in 0..bytes.len() {
        assert!(DataTree::load_snapshot(&bytes[..cut]).is_err());
    }
}

/// A tree of `n` nodes under a few directories, with data of `data_bytes`.
fn sample_tree(n: u64, data_bytes: usize) -> DataTree {
    let mut t = DataTree::new();
    for d in 0..8u64 {
        t.create(&format!("/d{d}"), None, &open(), 0, d + 1, 1)
            .unwrap();
    }
    for i in 0..n {
        let data = Bytes::from(vec![(i % 251) as u8; data_bytes]);
        let acl = if i % 3 == 0 {
            Acl::read_unsafe()
        } else {
            open()
        };
        t.create(
            &format!("/d{}/n{i}", i % 8),
            Some(data),
            &acl,
            0,
            100 + i,
            2,
        )
        .unwrap();
    }
    t
}

#[test]
fn streamed_snapshot_equals_the_one_buffer_form_byte_for_byte() {
    use rand::{Rng, SeedableRng};
    const MIN_BYTES: usize = 4096;
    let mut a = sample_tree(2000, 100);
    // A copy with the same maps (same iteration order): the same steps and
    // writes on both must give the same bytes, in chunks or in one buffer.
    let mut b = a.clone();
    let sessions = vec![SessionRecord {
        id: 9,
        timeout_ms: 30_000,
        password: [7; 16],
    }];
    let at = Zxid::from_u64(2099);
    assert!(a.begin_snapshot(at, &sessions));
    assert!(b.begin_snapshot(at, &sessions));
    let seed = 0x5eed_u64;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let (mut chunks, mut rest) = (Vec::new(), None);
    let mut zxid = 3000;
    for _ in 0..100_000 {
        // Writes that copy-on-write nodes the walk has or has not reached.
        for _ in 0..3 {
            let i = rng.random_range(0..2000u64);
            let p = format!("/d{}/n{i}", i % 8);
            zxid += 1;
            for t in [&mut a, &mut b] {
                if t.get(&p).is_some() {
                    if zxid % 4 == 0 {
                        t.delete(&p, zxid).unwrap();
                    } else {
                        t.set_data(&p, None, zxid, 3).unwrap();
                    }
                } else {
                    t.create(&p, None, &open(), 0, zxid, 3).unwrap();
                }
            }
        }
        if let Some(chunk) = a.take_snapshot_output(MIN_BYTES) {
            assert!(chunk.len() >= MIN_BYTES, "seed {seed}");
            chunks.push(chunk);
        }
        let (ra, rb) = (a.snapshot_step(7), b.snapshot_step(7));
        assert_eq!(
            ra.is_some(),
            rb.is_some(),
            "seed {seed}: both finish together"
        );
        if let (Some((za, ra)), Some((zb, rb))) = (ra, rb) {
            assert_eq!((za, zb), (at, at));
            rest = Some((ra, rb));
            break;
        }
        // Bounded: what is buffered is at most the minimum plus one step
        // and three writes (records of about 250 B here).
        let buffered = a.snap.as_ref().unwrap().out.len();
        assert!(
            buffered < MIN_BYTES + 10 * 250,
            "seed {seed}: {buffered} B buffered"
        );
    }
    let (rest_a, whole) = rest.expect("the snapshot finishes");
    assert!(chunks.len() > 20, "{} chunks", chunks.len());
    let mut streamed = Vec::new();
    for c in &chunks {
        streamed.extend_from_slice(c);
    }
    streamed.extend_from_slice(&rest_a);
    assert_eq!(streamed.len(), whole.len(), "seed {seed}");
    assert!(streamed == whole[..], "seed {seed}: streamed bytes differ");
    let (loaded, s, z) = DataTree::load_snapshot(&streamed).unwrap();
    assert_eq!((s, z), (sessions, at));
    assert_eq!(loaded.node_count(), 2000 + 8 + 4);
}

#[test]
fn take_snapshot_output_waits_for_min_bytes_and_for_a_snapshot() {
    let mut t = sample_tree(100, 10);
    assert!(
        t.take_snapshot_output(0).is_none(),
        "no snapshot in progress"
    );
    assert!(t.begin_snapshot(Zxid::from_u64(199), &[]));
    let header = t.take_snapshot_output(0).expect("the header is buffered");
    assert_eq!(&header[..8], SNAP_MAGIC);
    assert!(t.take_snapshot_output(0).is_none(), "nothing new");
    assert!(t.snapshot_step(5).is_none());
    assert!(t.take_snapshot_output(1 << 20).is_none(), "less than asked");
    let some = t.take_snapshot_output(1).expect("five records");
    let mut all = header.to_vec();
    all.extend_from_slice(&some);
    let rest = loop {
        if let Some((_, rest)) = t.snapshot_step(usize::MAX) {
            break rest;
        }
    };
    all.extend_from_slice(&rest);
    assert_eq!(DataTree::load_snapshot(&all).unwrap().0.dump(), t.dump());
}

/// Hands out at most `step` bytes per read and remembers the largest read
/// asked for.
struct Trickle<'a> {
    data: &'a [u8],
    step: usize,
    asked_max: usize,
    fail_at_end: bool,
}

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.asked_max = self.asked_max.max(buf.len());
        if self.data.is_empty() && self.fail_at_end {
            return Err(std::io::Error::other("checksum mismatch"));
        }
        let n = buf.len().min(self.step).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

#[test]
fn snapshot_loads_from_a_reader_with_a_bounded_buffer() {
    // 3000 nodes of 1 KiB and one of 600 KiB: about 3.8 MB, fifteen times
    // the read size.
    let mut t = sample_tree(3000, 1024);
    let big = Bytes::from(vec![1u8; 600 * 1024]);
    t.create("/big", Some(big), &open(), 0, 9000, 4).unwrap();
    let bytes = t.snapshot_now(Zxid::from_u64(9000), &[]);
    assert!(bytes.len() > 14 * SNAPSHOT_LOAD_READ_BYTES);
    for step in [1000, 4093, usize::MAX] {
        let mut src = Trickle {
            data: &bytes,
            step,
            asked_max: 0,
            fail_at_end: false,
        };
        let (loaded, _, z) = DataTree::load_snapshot_from(&mut src).unwrap();
        assert_eq!(z.as_u64(), 9000);
        assert_eq!(loaded.dump(), t.dump(), "reads of {step} bytes");
        let peak = LOAD_BUFFER_PEAK.with(|p| p.get());
        // The read size, or the largest record (600 KiB + ~100 B).
        let bound = SNAPSHOT_LOAD_READ_BYTES.max(600 * 1024 + 256);
        assert!(peak <= bound, "buffer peak {peak} with reads of {step}");
        assert!(src.asked_max <= bound, "asked for {}", src.asked_max);
    }
}

#[test]
fn snapshot_load_reads_its_source_to_the_end() {
    let t = sample_tree(50, 10);
    let bytes = t.clone().snapshot_now(Zxid::from_u64(149), &[]);
    // A source that fails at its end (a checksum that does not match).
    let mut src = Trickle {
        data: &bytes,
        step: 100,
        asked_max: 0,
        fail_at_end: true,
    };
    let err = DataTree::load_snapshot_from(&mut src).unwrap_err();
    assert!(err.0.contains("checksum mismatch"), "{err}");
    // Bytes after the end marker.
    let mut longer = bytes.to_vec();
    longer.push(0);
    assert!(DataTree::load_snapshot(&longer).is_err());
}

#[test]
fn version_1_snapshots_still_load() {
    let mut t = sample_tree(300, 10);
    let v2 = t.snapshot_now(Zxid::from_u64(399), &[]);
    // Version 1: the old magic and no node count after the zxid.
    let mut v1 = SNAP_MAGIC_V1.to_vec();
    v1.extend_from_slice(&v2[8..16]);
    v1.extend_from_slice(&v2[24..]);
    let (loaded, _, z) = DataTree::load_snapshot(&v1).unwrap();
    assert_eq!((z.as_u64(), loaded.dump()), (399, t.dump()));
}

#[test]
fn a_wrong_node_count_in_the_header_is_refused() {
    let mut t = sample_tree(30, 10);
    let bytes = t.snapshot_now(Zxid::from_u64(129), &[]);
    for declared in [0u64, 41, 43, u64::from(u32::MAX) + 1, u64::MAX] {
        let mut b = bytes.to_vec();
        b[16..24].copy_from_slice(&declared.to_be_bytes());
        assert!(DataTree::load_snapshot(&b).is_err(), "{declared}");
    }
}

#[test]
fn snapshot_load_takes_records_that_come_before_their_parent() {
    // Copy-on-write writes a node when it changes, which can be before the
    // walk has reached its parent: the loader must hold such records back
    // until the parent is in (it inserts the others as they come).
    let mut t = DataTree::new();
    t.create("/a", None, &open(), 0, 1, 1).unwrap();
    t.create("/a/b", None, &open(), 0, 2, 1).unwrap();
    t.create("/a/b/c", Some(Bytes::from_static(b"c")), &open(), 0, 3, 1)
        .unwrap();
    let expected = t.dump();
    assert!(t.begin_snapshot(Zxid::from_u64(3), &[]));
    t.set_data("/a/b/c", None, 4, 2).unwrap(); // written first, parent unknown
    t.set_data("/a/b", None, 5, 2).unwrap();
    let bytes = t.snapshot_now(Zxid::from_u64(3), &[]);
    let (loaded, _, _) = DataTree::load_snapshot(&bytes).unwrap();
    assert_eq!(loaded.dump(), expected);
    assert_eq!(loaded.node_count(), expected.len());
}

#[test]
fn snapshot_is_consistent_at_its_zxid_while_writes_go_on() {
    let mut t = DataTree::new();
    for i in 0..50u64 {
        t.create(
            &format!("/n{i}"),
            Some(Bytes::from(vec![i as u8])),
            &open(),
            0,
            i + 1,
            1,
        )
        .unwrap();
    }
    let expected = t.dump();
    assert!(t.begin_snapshot(Zxid::from_u64(50), &[]));
    let mut zxid = 51;
    let mut done = None;
    #[allow(clippy::explicit_counter_loop)]
    for round in 0..1000u64 {
        // change things the snapshot may or may not have written yet
        let i = round % 50;
        let p = format!("/n{i}");
        if t.get(&p).is_some() {
            if round % 3 == 0 {
                t.delete(&p, zxid).unwrap();
            } else {
                t.set_data(&p, None, zxid, 2).unwrap();
            }
        } else {
            t.create(&p, None, &open(), 0, zxid, 2).unwrap();
        }
        t.create(&format!("/new{round}"), None, &open(), 0, zxid, 2)
            .unwrap();
        zxid += 1;
        if let Some(s) = t.snapshot_step(2) {
            done = Some(s);
            break;
        }
    }
    let (z, bytes) = done.expect("snapshot finishes");
    assert_eq!(z.as_u64(), 50);
    let (loaded, _, _) = DataTree::load_snapshot(&bytes).unwrap();
    assert_eq!(loaded.dump(), expected);
}
