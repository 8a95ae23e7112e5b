//! Snapshot files: written atomically, checksummed, verified on load.
//!
//! ```text
//! +-------------------+-------------+---------------------------------------+
//! | magic "RZKSNAP1"  | zxid u64    | reserved u64 (0)                      |  header, 24 B
//! +-------------------+-------------+---------------------------------------+
//! | the caller's state, opaque bytes                                        |
//! +-------------------+-------------+---------------------------------------+
//! | data length u64   | crc32c u32  | "RZKE"                                |  trailer, 16 B
//! +-------------------+-------------+---------------------------------------+
//! crc = crc32c(header ++ data ++ data length)
//! ```

use std::fs::{self, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use rzk_zxid::Zxid;

use crate::durability::Syncer;
use crate::error::{Result, WalError};
use crate::format::{snapshot_name, TMP_SUFFIX};
use crate::meta::CatalogEntry;

const MAGIC: &[u8; 8] = b"RZKSNAP1";
const END_MAGIC: &[u8; 4] = b"RZKE";
const HEADER_BYTES: usize = 24;
const TRAILER_BYTES: usize = 16;
/// A snapshot being written is made durable this many bytes at a time.
///
/// Why: on ext4 (data=ordered, delayed allocation) the blocks of a large file
/// are allocated when it is written back, and the next journal commit must
/// wait for all of that data. A snapshot of hundreds of MB written in one go
/// and synced at the end therefore holds the log's fdatasync (and so every
/// write) for as long as the disk takes to write the whole snapshot, 0.5-0.9 s
/// at 1M nodes. Syncing every few MB bounds what a log commit can wait for.
const SYNC_EVERY_BYTES: u64 = 4 << 20;

/// A snapshot in the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The last transaction the snapshot includes.
    pub zxid: Zxid,
    /// Its file.
    pub path: PathBuf,
    /// The file's size.
    pub size_bytes: u64,
}

/// A snapshot read back and verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedSnapshot {
    /// The last transaction the snapshot includes.
    pub zxid: Zxid,
    /// The caller's state, as it was written.
    pub data: Bytes,
}

/// The path of the snapshot at `zxid` in `dir`.
pub(crate) fn snapshot_path(dir: &Path, zxid: Zxid) -> PathBuf {
    dir.join(snapshot_name(zxid))
}

/// Writes the snapshot at `zxid` from `data` under a temporary name, fsyncs it,
/// renames it into place and fsyncs the directory. Returns its catalog entry;
/// the snapshot exists for the store only once that entry is committed.
pub(crate) fn write_snapshot(
    dir: &Path,
    zxid: Zxid,
    data: &mut dyn Read,
    syncer: &dyn Syncer,
) -> Result<CatalogEntry> {
    let path = snapshot_path(dir, zxid);
    let tmp = dir.join(format!("{}{TMP_SUFFIX}", snapshot_name(zxid)));
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| WalError::io("create", &tmp, e))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut header = [0u8; HEADER_BYTES];
    header[0..8].copy_from_slice(MAGIC);
    header[8..16].copy_from_slice(&zxid.as_u64().to_le_bytes());
    let mut crc = crc32c::crc32c(&header);
    out.write_all(&header)
        .map_err(|e| WalError::io("write", &tmp, e))?;
    let mut len = 0u64;
    let mut unsynced = 0u64;
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let n = match data.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(WalError::io("read snapshot data for", &tmp, e)),
        };
        crc = crc32c::crc32c_append(crc, &chunk[..n]);
        len += n as u64;
        out.write_all(&chunk[..n])
            .map_err(|e| WalError::io("write", &tmp, e))?;
        unsynced += n as u64;
        if unsynced >= SYNC_EVERY_BYTES {
            out.flush().map_err(|e| WalError::io("write", &tmp, e))?;
            syncer
                .sync_data(out.get_ref(), &tmp)
                .map_err(|e| WalError::io("fsync", &tmp, e))?;
            unsynced = 0;
        }
    }
    let len_bytes = len.to_le_bytes();
    crc = crc32c::crc32c_append(crc, &len_bytes);
    let mut trailer = [0u8; TRAILER_BYTES];
    trailer[0..8].copy_from_slice(&len_bytes);
    trailer[8..12].copy_from_slice(&crc.to_le_bytes());
    trailer[12..16].copy_from_slice(END_MAGIC);
    out.write_all(&trailer)
        .map_err(|e| WalError::io("write", &tmp, e))?;
    let file = out
        .into_inner()
        .map_err(|e| WalError::io("write", &tmp, e.into_error()))?;
    syncer
        .sync_all(&file, &tmp)
        .map_err(|e| WalError::io("fsync", &tmp, e))?;
    drop(file);
    fs::rename(&tmp, &path).map_err(|e| WalError::io("rename", &tmp, e))?;
    syncer
        .sync_dir(dir)
        .map_err(|e| WalError::io("fsync directory", dir, e))?;
    Ok(CatalogEntry {
        zxid,
        size_bytes: HEADER_BYTES as u64 + len + TRAILER_BYTES as u64,
        crc,
    })
}

/// Reads the snapshot of `entry` and checks it against its own checksum and the
/// catalog's record of it.
pub(crate) fn load_snapshot(dir: &Path, entry: &CatalogEntry) -> Result<LoadedSnapshot> {
    let path = snapshot_path(dir, entry.zxid);
    let bytes = fs::read(&path).map_err(|e| WalError::io("read", &path, e))?;
    let corrupt = |reason: String| WalError::CorruptFile {
        path: path.clone(),
        reason,
    };
    if bytes.len() as u64 != entry.size_bytes {
        return Err(corrupt(format!(
            "size is {} bytes, the catalog says {}",
            bytes.len(),
            entry.size_bytes
        )));
    }
    if bytes.len() < HEADER_BYTES + TRAILER_BYTES || &bytes[0..8] != MAGIC {
        return Err(corrupt("not a snapshot file".to_owned()));
    }
    let zxid = Zxid::from_u64(u64::from_le_bytes(
        bytes[8..16].try_into().expect("8 bytes"),
    ));
    if zxid != entry.zxid {
        return Err(corrupt(format!(
            "holds zxid {zxid}, expected {}",
            entry.zxid
        )));
    }
    let t = bytes.len() - TRAILER_BYTES;
    let len = u64::from_le_bytes(bytes[t..t + 8].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(bytes[t + 8..t + 12].try_into().expect("4 bytes"));
    if &bytes[t + 12..] != END_MAGIC || len != (t - HEADER_BYTES) as u64 {
        return Err(corrupt("bad trailer".to_owned()));
    }
    let actual = crc32c::crc32c(&bytes[..t + 8]);
    if actual != crc || crc != entry.crc {
        return Err(corrupt(format!(
            "crc mismatch: stored {crc:#010x}, computed {actual:#010x}, catalog {:#010x}",
            entry.crc
        )));
    }
    let data = Bytes::from(bytes).slice(HEADER_BYTES..t);
    Ok(LoadedSnapshot { zxid, data })
}
