//! On-disk layouts: log records, segment headers and the small control files.
//!
//! All integers are little-endian. Every structure carries a CRC32C, so a torn or
//! rotten byte is detected before it is believed.
//!
//! A record:
//!
//! ```text
//! +-----------+-----------+-----------+------------------+
//! | len u32   | crc u32   | zxid u64  | payload (len B)  |
//! +-----------+-----------+-----------+------------------+
//! crc = crc32c(len bytes ++ zxid bytes ++ payload)
//! ```
//!
//! A record never has an all-zero header (zxid 0 is no transaction), so sixteen
//! zero bytes mark the end of the records in a preallocated segment.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use rzk_zxid::Zxid;

use crate::durability::Syncer;
use crate::error::{Result, WalError};

/// Bytes of a record header (len, crc, zxid).
pub(crate) const RECORD_HEADER_BYTES: usize = 16;

/// Bytes of a segment header.
pub(crate) const SEGMENT_HEADER_BYTES: u64 = 32;

const SEGMENT_MAGIC: &[u8; 8] = b"RZKLOG01";

/// The header of record `zxid` with `payload`.
pub(crate) fn record_header(zxid: Zxid, payload: &[u8]) -> [u8; RECORD_HEADER_BYTES] {
    let len = u32::try_from(payload.len()).expect("record length was checked against the limit");
    let len_bytes = len.to_le_bytes();
    let zxid_bytes = zxid.as_u64().to_le_bytes();
    let crc = crc32c::crc32c_append(crc32c::crc32c(&len_bytes), &zxid_bytes);
    let crc = crc32c::crc32c_append(crc, payload);
    let mut h = [0u8; RECORD_HEADER_BYTES];
    h[0..4].copy_from_slice(&len_bytes);
    h[4..8].copy_from_slice(&crc.to_le_bytes());
    h[8..16].copy_from_slice(&zxid_bytes);
    h
}

/// What the bytes at one position of a segment are.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded {
    /// A valid record of `total` bytes; the payload is `buf[RECORD_HEADER_BYTES..total]`.
    Record {
        /// Its zxid.
        zxid: Zxid,
        /// Header plus payload.
        total: usize,
    },
    /// Sixteen zero bytes: no record starts here.
    End,
    /// The buffer ends inside a record (or inside its header); read more.
    Incomplete {
        /// How many bytes the record needs in all, when the header is complete.
        total: Option<usize>,
    },
    /// Not a record: damaged or torn.
    Bad(String),
}

/// Decodes the record at the start of `buf`, checking its CRC.
pub(crate) fn decode_record(buf: &[u8], record_bytes_max: usize) -> Decoded {
    if buf.len() < RECORD_HEADER_BYTES {
        // The caller decides at the end of the file whether this is a torn header.
        return Decoded::Incomplete { total: None };
    }
    let header = &buf[..RECORD_HEADER_BYTES];
    if header.iter().all(|&b| b == 0) {
        return Decoded::End;
    }
    let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    let zxid = Zxid::from_u64(u64::from_le_bytes(
        header[8..16].try_into().expect("8 bytes"),
    ));
    let total = RECORD_HEADER_BYTES + len;
    if total > record_bytes_max {
        return Decoded::Bad(format!(
            "record length {len} exceeds the limit of {record_bytes_max} bytes"
        ));
    }
    if buf.len() < total {
        return Decoded::Incomplete { total: Some(total) };
    }
    let actual = crc32c::crc32c_append(crc32c::crc32c(&header[0..4]), &header[8..16]);
    let actual = crc32c::crc32c_append(actual, &buf[RECORD_HEADER_BYTES..total]);
    if actual != crc {
        return Decoded::Bad(format!(
            "crc mismatch for a record claiming zxid {zxid} (stored {crc:#010x}, computed {actual:#010x})"
        ));
    }
    Decoded::Record { zxid, total }
}

/// A segment's header: which zxid it starts with and which one precedes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    /// The zxid of its first record (also in its file name).
    pub first: Zxid,
    /// The zxid its first record follows: the previous segment's last record, or
    /// the log's start.
    pub prev: Zxid,
}

impl SegmentHeader {
    pub(crate) fn encode(&self) -> [u8; SEGMENT_HEADER_BYTES as usize] {
        let mut h = [0u8; SEGMENT_HEADER_BYTES as usize];
        h[0..8].copy_from_slice(SEGMENT_MAGIC);
        h[8..16].copy_from_slice(&self.first.as_u64().to_le_bytes());
        h[16..24].copy_from_slice(&self.prev.as_u64().to_le_bytes());
        let crc = crc32c::crc32c(&h[0..28]);
        h[28..32].copy_from_slice(&crc.to_le_bytes());
        h
    }

    pub(crate) fn decode(h: &[u8]) -> std::result::Result<SegmentHeader, String> {
        if h.len() < SEGMENT_HEADER_BYTES as usize {
            return Err(format!("segment header is {} bytes, expected 32", h.len()));
        }
        if &h[0..8] != SEGMENT_MAGIC {
            return Err("bad segment magic".to_owned());
        }
        let crc = u32::from_le_bytes(h[28..32].try_into().expect("4 bytes"));
        if crc32c::crc32c(&h[0..28]) != crc {
            return Err("segment header crc mismatch".to_owned());
        }
        Ok(SegmentHeader {
            first: Zxid::from_u64(u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"))),
            prev: Zxid::from_u64(u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"))),
        })
    }
}

/// `log.<hex zxid>`, the name ZooKeeper gives a log file starting at `first`.
pub(crate) fn segment_name(first: Zxid) -> String {
    format!("log.{first:x}")
}

/// The first zxid of a segment from its file name, if it is one.
pub(crate) fn parse_segment_name(name: &str) -> Option<Zxid> {
    let hex = name.strip_prefix("log.")?;
    if hex.is_empty() || hex.len() > 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    format!("0x{hex}").parse().ok()
}

/// `snapshot.<hex zxid>`, the name ZooKeeper gives a snapshot at `zxid`.
pub(crate) fn snapshot_name(zxid: Zxid) -> String {
    format!("snapshot.{zxid:x}")
}

/// The zxid of a snapshot from its file name, if it is one.
pub(crate) fn parse_snapshot_name(name: &str) -> Option<Zxid> {
    let hex = name.strip_prefix("snapshot.")?;
    if hex.is_empty() || hex.len() > 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    format!("0x{hex}").parse().ok()
}

/// Suffix of files being written; they are never read, and deleted on open.
pub(crate) const TMP_SUFFIX: &str = ".tmp";

/// Writes a small control file atomically: `<name>.tmp`, fsync, rename, fsync
/// of the directory. After a crash the file holds the old content or the new one.
pub(crate) fn write_small_file(
    dir: &Path,
    name: &str,
    magic: &[u8; 8],
    body: &[u8],
    syncer: &dyn Syncer,
) -> Result<()> {
    let mut bytes = Vec::with_capacity(8 + body.len() + 4);
    bytes.extend_from_slice(magic);
    bytes.extend_from_slice(body);
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
    let path = dir.join(name);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| WalError::io("create", &tmp, e))?;
    f.write_all(&bytes)
        .map_err(|e| WalError::io("write", &tmp, e))?;
    syncer
        .sync_all(&f, &tmp)
        .map_err(|e| WalError::io("fsync", &tmp, e))?;
    drop(f);
    fs::rename(&tmp, &path).map_err(|e| WalError::io("rename", &tmp, e))?;
    syncer
        .sync_dir(dir)
        .map_err(|e| WalError::io("fsync directory", dir, e))
}

/// Reads a small control file written by [`write_small_file`]; `None` if absent.
pub(crate) fn read_small_file(path: &Path, magic: &[u8; 8]) -> Result<Option<Vec<u8>>> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(WalError::io("read", path, e)),
    };
    let corrupt = |reason: &str| WalError::CorruptFile {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    if bytes.len() < 12 || &bytes[0..8] != magic {
        return Err(corrupt("bad magic or too short"));
    }
    let (content, crc) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(content) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(corrupt("crc mismatch"));
    }
    Ok(Some(content[8..].to_vec()))
}

/// Removes a file and makes the removal durable. A missing file is fine.
pub(crate) fn remove_durably(path: &Path, dir: &Path, syncer: &dyn Syncer) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(WalError::io("remove", path, e)),
    }
    syncer
        .sync_dir(dir)
        .map_err(|e| WalError::io("fsync directory", dir, e))
}

/// Creates `dir` (and parents) and makes its entry durable in its parent.
pub(crate) fn create_dir_durably(dir: &Path, syncer: &dyn Syncer) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(|e| WalError::io("create directory", dir, e))?;
    if let Some(parent) = dir.parent() {
        // A relative one-component path such as `data` has the empty parent: the
        // entry lives in the current directory.
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        syncer
            .sync_dir(parent)
            .map_err(|e| WalError::io("fsync directory", parent, e))?;
    }
    Ok(())
}

/// Opens a file for reading.
pub(crate) fn open_read(path: &Path) -> Result<File> {
    File::open(path).map_err(|e| WalError::io("open", path, e))
}

/// Lists the file names in `dir`.
pub(crate) fn list_dir(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let entries = fs::read_dir(dir).map_err(|e| WalError::io("list", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| WalError::io("list", dir, e))?;
        if let Some(name) = entry.file_name().to_str() {
            out.push((name.to_owned(), entry.path()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_roundtrip_and_crc_catches_every_flipped_bit() {
        let z = Zxid::from_u64(0x1_0000_0007);
        let payload = b"hello";
        let mut buf = record_header(z, payload).to_vec();
        buf.extend_from_slice(payload);
        assert_eq!(
            decode_record(&buf, 1 << 20),
            Decoded::Record { zxid: z, total: 21 }
        );
        for bit in 0..buf.len() * 8 {
            let mut bad = buf.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            match decode_record(&bad, 1 << 20) {
                Decoded::Record { .. } | Decoded::End => panic!("bit {bit} flip accepted"),
                Decoded::Bad(_) | Decoded::Incomplete { .. } => {}
            }
        }
    }

    #[test]
    fn zero_header_is_end_and_short_buffer_is_incomplete() {
        assert_eq!(decode_record(&[0u8; 40], 1 << 20), Decoded::End);
        assert_eq!(
            decode_record(&[0u8; 3], 1 << 20),
            Decoded::Incomplete { total: None }
        );
        let z = Zxid::from_u64(5);
        let mut buf = record_header(z, &[1, 2, 3]).to_vec();
        buf.push(1);
        assert_eq!(
            decode_record(&buf, 1 << 20),
            Decoded::Incomplete { total: Some(19) }
        );
    }

    #[test]
    fn names_are_zookeepers() {
        let z = Zxid::from_u64(0x1_0000_0001);
        assert_eq!(segment_name(z), "log.100000001");
        assert_eq!(parse_segment_name("log.100000001"), Some(z));
        assert_eq!(parse_segment_name("log.start"), None);
        assert_eq!(parse_segment_name("log.1.tmp"), None);
        assert_eq!(parse_segment_name("log."), None);
        assert_eq!(snapshot_name(z), "snapshot.100000001");
        assert_eq!(parse_snapshot_name("snapshot.100000001"), Some(z));
        assert_eq!(parse_snapshot_name("snapshot.1.tmp"), None);
    }

    #[test]
    fn segment_header_roundtrip() {
        let h = SegmentHeader {
            first: Zxid::from_u64(0x2_0000_0001),
            prev: Zxid::from_u64(0x1_0000_0009),
        };
        let bytes = h.encode();
        assert_eq!(SegmentHeader::decode(&bytes), Ok(h));
        let mut bad = bytes;
        bad[9] ^= 1;
        assert!(SegmentHeader::decode(&bad).is_err());
    }
}
