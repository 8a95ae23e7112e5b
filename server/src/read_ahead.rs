//! Reading a snapshot on a thread of its own, ahead of the loader.
//!
//! Loading a snapshot at start-up is three kinds of work: reading the file
//! (a copy from the page cache), checking its checksum as it is read (in the
//! source's `read`, see `rzk_wal::StateReader`), and decoding it into the
//! tree. The first two need nothing from the third, so [`ReadAhead`] does
//! them on another core while the loader decodes: the load then costs about
//! the decode alone. Memory stays bounded: [`READ_AHEAD_BLOCKS`] blocks of
//! [`READ_AHEAD_BLOCK_BYTES`] at most are filled and not yet consumed.
//!
//! The source's errors arrive in order, after every byte read before them:
//! a checksum that fails on the last read fails the load exactly as without
//! the thread (the loader reads its source to the end).

use std::io::{self, Read};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// Bytes the reading thread asks its source for at a time.
pub const READ_AHEAD_BLOCK_BYTES: usize = 1 << 20;
/// Blocks filled ahead of the loader at most (the memory the read-ahead
/// holds is this many blocks, plus the one being consumed).
pub const READ_AHEAD_BLOCKS: usize = 4;

/// What the reading thread sends: a filled block and its length (0: the end
/// of the source), or the source's error (the last message).
type Block = io::Result<(Vec<u8>, usize)>;

/// A reader whose source is read on a thread of its own, up to
/// [`READ_AHEAD_BLOCKS`] blocks ahead. Dropping it stops the thread (its next
/// send fails).
pub struct ReadAhead {
    blocks: Receiver<Block>,
    /// Consumed blocks go back to the thread to be filled again.
    spare: SyncSender<Vec<u8>>,
    current: Vec<u8>,
    /// `pos..len` of `current` is not yet consumed.
    pos: usize,
    len: usize,
    /// The source ended (or failed): every later read returns 0 (or fails).
    finished: Option<io::ErrorKind>,
}

impl ReadAhead {
    /// Starts reading `source` on a new thread.
    pub fn new(source: Box<dyn Read + Send>) -> io::Result<ReadAhead> {
        let (block_tx, blocks) = sync_channel(READ_AHEAD_BLOCKS);
        let (spare, spare_rx) = sync_channel(READ_AHEAD_BLOCKS + 1);
        std::thread::Builder::new()
            .name("rzk-snapshot-read".into())
            .spawn(move || fill_blocks(source, &block_tx, &spare_rx))?;
        Ok(ReadAhead {
            blocks,
            spare,
            current: Vec::new(),
            pos: 0,
            len: 0,
            finished: None,
        })
    }

    /// The next filled block into `current`; false at the end of the source.
    fn next_block(&mut self) -> io::Result<bool> {
        let block = match self.blocks.recv() {
            Ok(b) => b,
            Err(_) => Err(io::Error::other("the snapshot reading thread stopped")),
        };
        match block {
            Ok((_, 0)) => {
                self.finished = Some(io::ErrorKind::UnexpectedEof);
                Ok(false)
            }
            Ok((buf, len)) => {
                let used = std::mem::replace(&mut self.current, buf);
                if used.capacity() > 0 {
                    // The thread may have ended; a lost spare is only a new
                    // allocation for it.
                    let _ = self.spare.try_send(used);
                }
                self.pos = 0;
                self.len = len;
                Ok(true)
            }
            Err(e) => {
                self.finished = Some(e.kind());
                Err(e)
            }
        }
    }
}

impl Read for ReadAhead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while self.pos == self.len {
            match self.finished {
                Some(io::ErrorKind::UnexpectedEof) => return Ok(0),
                Some(kind) => return Err(io::Error::new(kind, "the snapshot source failed")),
                None => {}
            }
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.len - self.pos);
        buf[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// The reading thread: fills blocks until the source ends or fails, or the
/// reader is dropped.
fn fill_blocks(
    mut source: Box<dyn Read + Send>,
    blocks: &SyncSender<Block>,
    spare: &Receiver<Vec<u8>>,
) {
    loop {
        let mut block = spare
            .try_recv()
            .unwrap_or_else(|_| vec![0; READ_AHEAD_BLOCK_BYTES]);
        let sent = match fill(&mut *source, &mut block) {
            Ok(0) => {
                let _ = blocks.send(Ok((Vec::new(), 0)));
                return;
            }
            Ok(n) => blocks.send(Ok((block, n))),
            Err(e) => {
                let _ = blocks.send(Err(e));
                return;
            }
        };
        if sent.is_err() {
            return; // the reader was dropped
        }
    }
}

/// Reads until `buf` is full or the source ends; the bytes read.
fn fill(source: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match source.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that hands out at most `step` bytes a call and fails with
    /// `fail_at_end` instead of its last bytes (as a checksumming reader
    /// fails on its last read).
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        step: usize,
        fail_at_end: bool,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.step).min(self.data.len() - self.at);
            if self.fail_at_end && self.at + n == self.data.len() && n > 0 {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "crc mismatch"));
            }
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn read_ahead_returns_every_byte_in_order_at_any_size() {
        let b = READ_AHEAD_BLOCK_BYTES;
        for len in [
            0,
            1,
            4095,
            b - 1,
            b,
            b + 1,
            7 * b / 2,
            (READ_AHEAD_BLOCKS + 3) * b,
        ] {
            for step in [1000, 65536, usize::MAX] {
                let data = pattern(len);
                let src = Trickle {
                    data: data.clone(),
                    at: 0,
                    step,
                    fail_at_end: false,
                };
                let mut r = ReadAhead::new(Box::new(src)).unwrap();
                let mut out = Vec::new();
                let mut buf = vec![0u8; 300_000];
                loop {
                    let n = r.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    out.extend_from_slice(&buf[..n]);
                }
                assert!(out == data, "len {len} step {step}: bytes differ");
                assert_eq!(r.read(&mut buf).unwrap(), 0, "the end stays the end");
            }
        }
    }

    #[test]
    fn read_ahead_passes_on_the_error_of_the_last_read() {
        let len = 3 * READ_AHEAD_BLOCK_BYTES + 10;
        let src = Trickle {
            data: pattern(len),
            at: 0,
            step: 4096,
            fail_at_end: true,
        };
        let mut r = ReadAhead::new(Box::new(src)).unwrap();
        let mut buf = vec![0u8; 100_000];
        let mut total = 0;
        let err = loop {
            match r.read(&mut buf) {
                Ok(0) => panic!("ended without the source's error after {total} bytes"),
                Ok(n) => total += n,
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        assert!(total < len, "{total} bytes");
        assert!(r.read(&mut buf).is_err(), "a failed source stays failed");
    }

    #[test]
    fn dropping_the_reader_early_stops_the_thread() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::Arc;
        // An endless source: the thread ends only because the reader is gone;
        // it drops its source when it ends.
        struct Endless(Arc<AtomicUsize>, Arc<AtomicBool>);
        impl Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                self.0.fetch_add(buf.len(), Ordering::SeqCst);
                Ok(buf.len())
            }
        }
        impl Drop for Endless {
            fn drop(&mut self) {
                self.1.store(true, Ordering::SeqCst);
            }
        }
        let (count, dropped) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let src = Endless(count.clone(), dropped.clone());
        let mut r = ReadAhead::new(Box::new(src)).unwrap();
        let mut buf = [0u8; 10];
        r.read_exact(&mut buf).unwrap();
        drop(r);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !dropped.load(Ordering::SeqCst) {
            assert!(
                std::time::Instant::now() < deadline,
                "the thread did not stop"
            );
            std::thread::yield_now();
        }
        // The block consumed, the queue, and one block filled while the queue
        // was full.
        let read = count.load(Ordering::SeqCst);
        assert!(
            read <= (READ_AHEAD_BLOCKS + 2) * READ_AHEAD_BLOCK_BYTES,
            "{read} bytes"
        );
    }

    /// The load path of a start-up: a snapshot file written by rzk-wal, read
    /// through its checksumming reader and this read-ahead into a tree. The
    /// intact file loads; one flipped bit inside a znode's data (which the
    /// decoder alone cannot notice) is refused by the checksum.
    #[test]
    fn a_snapshot_file_with_a_flipped_data_bit_is_refused_through_the_read_ahead() {
        use crate::tree::DataTree;
        use bytes::Bytes;
        use rzk_wal::{Wal, WalOptions};
        use rzk_zxid::Zxid;

        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
        let mut tree = DataTree::new();
        // Enough nodes for several read-ahead blocks.
        let nodes = 20_000u64;
        for i in 0..nodes {
            let value = Bytes::from(format!("value-{i:06}-{}", "v".repeat(200)));
            let acl = rzk_wire::Acl::open_unsafe();
            tree.create(&format!("/n{i}"), Some(value), &acl, 0, i + 1, 1)
                .unwrap();
        }
        // A snapshot must not be ahead of the log: one txn in it.
        let at = Zxid::from_u64((1 << 32) | 1);
        let _appended = wal.append(at, Bytes::from_static(b"txn")).unwrap();
        wal.flush().unwrap();
        let bytes = tree.snapshot_now(at, &[]);
        assert!(
            bytes.len() > 3 * READ_AHEAD_BLOCK_BYTES,
            "{} bytes",
            bytes.len()
        );
        let info = wal.save_snapshot(at, &mut &bytes[..]).unwrap();

        let load = |wal: &Wal| {
            let file = wal.open_snapshot(at).unwrap();
            let mut r = ReadAhead::new(Box::new(file.state_reader())).unwrap();
            DataTree::load_snapshot_from(&mut r)
        };
        let (loaded, _, z) = load(&wal).expect("the intact file loads");
        assert_eq!(z, at);
        assert_eq!(loaded.dump(), tree.dump());

        // One byte of a value near the end of the file: "value-019990" becomes
        // "valuf-019990"; the record still decodes.
        let mut file = std::fs::read(&info.path).unwrap();
        let needle = b"value-019990";
        let at_byte = file
            .windows(needle.len())
            .position(|w| w == needle)
            .expect("the value is in the file");
        file[at_byte + 4] ^= 0x03;
        std::fs::write(&info.path, &file).unwrap();
        let err = load(&wal).expect_err("a flipped bit must be refused");
        assert!(err.to_string().contains("crc mismatch"), "{err}");
    }
}
