//! The jute binary format: primitives, the [`Reader`] that decodes them from a
//! frame without copying, the writers, and the [`Record`] trait every protocol
//! record implements.
//!
//! Encoding (docs/client-protocol.md, "Encoding"): big-endian integers, no tags
//! or padding; a `buffer` or `ustring` is an `int` length and that many bytes,
//! a `vector` an `int` count and the elements. A length or count of -1 means
//! null.
//!
//! Null handling, decided once here:
//! - a null **buffer** decodes to `None` where the record keeps the distinction
//!   (znode data, SASL tokens) and to an empty [`Bytes`] elsewhere;
//! - a null **string** decodes to the empty string (kazoo sends `''` as null),
//!   except in the few fields that are `Option` (reconfig's arguments);
//! - a null **vector** decodes to an empty `Vec`;
//! - the writers never produce a null string or vector; a null buffer only from
//!   an explicit `None`.

use bytes::{BufMut, Bytes, BytesMut};
use bytestring::ByteString;

use crate::error::WireError;

/// How lenient a [`Reader`] is.
///
/// ZooKeeper ignores trailing bytes after a request record and treats any
/// non-zero byte as `true` (docs/client-protocol.md, "Encoding"); a server
/// decoding requests must do the same to accept what ZooKeeper accepts. A
/// client decoding replies has no such need and is strict, so that a broken
/// server is noticed at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strictness {
    /// ZooKeeper's own reading rules: trailing bytes ignored, any non-zero
    /// boolean byte is `true`.
    Lenient,
    /// Trailing bytes and boolean bytes other than 0 and 1 are errors.
    Strict,
}

/// A cursor over one frame's payload that hands out fields without copying:
/// buffers and strings are [`Bytes`] slices of the frame.
///
/// Every length and count is checked against the bytes left **before** anything
/// is allocated, so a hostile length costs nothing.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
    strictness: Strictness,
}

impl<'a> Reader<'a> {
    /// A reader over `buf`, starting at offset 0.
    pub fn new(buf: &'a Bytes, strictness: Strictness) -> Reader<'a> {
        Reader::at(buf, 0, strictness)
    }

    /// A reader over `buf`, starting at `pos` (for example after a header that
    /// was already read). Offsets in errors stay relative to the start of `buf`.
    pub fn at(buf: &'a Bytes, pos: usize, strictness: Strictness) -> Reader<'a> {
        Reader {
            buf,
            pos: pos.min(buf.len()),
            strictness,
        }
    }

    /// The offset of the next unread byte.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left to read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Whether this reader is strict.
    pub fn strictness(&self) -> Strictness {
        self.strictness
    }

    /// Takes `n` bytes, or fails with [`WireError::Truncated`] naming `field`.
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], WireError> {
        if n > self.remaining() {
            return Err(WireError::Truncated {
                field,
                offset: self.pos,
                needed: n as u64,
                remaining: self.remaining(),
            });
        }
        let start = self.pos;
        self.pos += n;
        Ok(&self.buf[start..self.pos])
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    /// Reads an `int`.
    pub fn i32(&mut self, field: &'static str) -> Result<i32, WireError> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    /// Reads a `long`.
    pub fn i64(&mut self, field: &'static str) -> Result<i64, WireError> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    /// Reads a `boolean`: any non-zero byte is `true` when lenient (as Java
    /// reads it); only 0 and 1 are accepted when strict.
    pub fn bool(&mut self, field: &'static str) -> Result<bool, WireError> {
        let offset = self.pos;
        let [byte] = self.array::<1>(field)?;
        match (byte, self.strictness) {
            (0, _) => Ok(false),
            (1, _) | (_, Strictness::Lenient) => Ok(true),
            (_, Strictness::Strict) => Err(WireError::InvalidValue {
                field,
                offset,
                value: i64::from(byte),
            }),
        }
    }

    /// Reads a length or count prefix: `None` for -1 (null), an error below -1.
    fn length(&mut self, field: &'static str) -> Result<Option<usize>, WireError> {
        let offset = self.pos;
        let length = self.i32(field)?;
        match length {
            -1 => Ok(None),
            n if n < -1 => Err(WireError::NegativeLength {
                field,
                offset,
                length: n,
            }),
            // Non-negative i32 always fits in usize on the platforms we build for.
            n => Ok(Some(n as usize)),
        }
    }

    /// Reads a `buffer`, keeping null (`None`) apart from empty.
    /// A declared length beyond the bytes left is [`WireError::Truncated`] at
    /// the field's start, and nothing is allocated for it.
    pub fn buffer(&mut self, field: &'static str) -> Result<Option<Bytes>, WireError> {
        let offset = self.pos;
        let Some(length) = self.length(field)? else {
            return Ok(None);
        };
        if length > self.remaining() {
            return Err(WireError::Truncated {
                field,
                offset,
                needed: length as u64,
                remaining: self.remaining(),
            });
        }
        let start = self.pos;
        self.pos += length;
        Ok(Some(self.buf.slice(start..self.pos)))
    }

    /// Reads a `buffer` where null means empty.
    pub fn buffer_or_empty(&mut self, field: &'static str) -> Result<Bytes, WireError> {
        Ok(self.buffer(field)?.unwrap_or_default())
    }

    /// Reads a `ustring`, keeping null (`None`) apart from empty. Invalid UTF-8
    /// is an error ([`WireError::InvalidUtf8`]).
    pub fn opt_string(&mut self, field: &'static str) -> Result<Option<ByteString>, WireError> {
        let Some(bytes) = self.buffer(field)? else {
            return Ok(None);
        };
        let length = bytes.len();
        let offset = self.pos - length;
        ByteString::try_from(bytes)
            .map(Some)
            .map_err(|_| WireError::InvalidUtf8 {
                field,
                offset,
                length,
            })
    }

    /// Reads a `ustring` where null means empty (kazoo sends `''` as null).
    pub fn string(&mut self, field: &'static str) -> Result<ByteString, WireError> {
        Ok(self.opt_string(field)?.unwrap_or_default())
    }

    /// Reads a vector's count (null means 0) and checks that `count` elements of
    /// at least `element_bytes_min` bytes each can fit in what is left, so that
    /// the caller may reserve `count` elements safely.
    pub fn count(
        &mut self,
        field: &'static str,
        element_bytes_min: usize,
    ) -> Result<usize, WireError> {
        let offset = self.pos;
        let Some(count) = self.length(field)? else {
            return Ok(0);
        };
        let fits = count
            .checked_mul(element_bytes_min)
            .is_some_and(|bytes| bytes <= self.remaining());
        if !fits {
            return Err(WireError::CountTooLarge {
                field,
                offset,
                count: count as i32,
                element_bytes_min,
                remaining: self.remaining(),
            });
        }
        Ok(count)
    }

    /// Reads a `vector<T>` of records (null means empty).
    pub fn records<T: Record>(&mut self, field: &'static str) -> Result<Vec<T>, WireError> {
        let count = self.count(field, T::ENCODED_BYTES_MIN)?;
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            out.push(T::decode(self)?);
        }
        Ok(out)
    }

    /// Reads a `vector<ustring>` (null means empty).
    pub fn strings(&mut self, field: &'static str) -> Result<Vec<ByteString>, WireError> {
        let count = self.count(field, 4)?;
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            out.push(self.string(field)?);
        }
        Ok(out)
    }

    /// Ends a top-level record: when strict, bytes left over are an error; when
    /// lenient they are ignored, as ZooKeeper ignores them after a request.
    pub fn finish(&self, record: &'static str) -> Result<(), WireError> {
        if self.strictness == Strictness::Lenient || self.remaining() == 0 {
            return Ok(());
        }
        Err(WireError::TrailingBytes {
            record,
            offset: self.pos,
            trailing: self.remaining(),
        })
    }
}

/// Writes a `buffer`; `None` is written as null (-1).
pub fn put_buffer(dst: &mut BytesMut, data: Option<&[u8]>) {
    match data {
        None => dst.put_i32(-1),
        Some(data) => put_bytes(dst, data),
    }
}

/// Writes a non-null `buffer` or `ustring` body: length, then the bytes.
///
/// Lengths above `i32::MAX` cannot be represented; they are written truncated
/// and rejected by the frame-size check of whatever frame holds them (no frame
/// may exceed `i32::MAX` bytes), so they never reach the wire.
pub fn put_bytes(dst: &mut BytesMut, data: &[u8]) {
    dst.put_i32(data.len() as i32);
    dst.put_slice(data);
}

/// Writes a `ustring` (never null).
pub fn put_string(dst: &mut BytesMut, s: &str) {
    put_bytes(dst, s.as_bytes());
}

/// Writes an optional `ustring`: `None` as null (-1). Used only in requests;
/// responses never carry null strings (Go clients cannot read them).
pub fn put_opt_string(dst: &mut BytesMut, s: Option<&str>) {
    put_buffer(dst, s.map(str::as_bytes));
}

/// Writes a `boolean` as 0 or 1.
pub fn put_bool(dst: &mut BytesMut, value: bool) {
    dst.put_u8(u8::from(value));
}

/// Writes a `vector<ustring>` (never null).
pub fn put_strings<S: AsRef<str>>(dst: &mut BytesMut, items: &[S]) {
    dst.put_i32(items.len() as i32);
    for item in items {
        put_string(dst, item.as_ref());
    }
}

/// Writes a `vector<T>` of records (never null).
pub fn put_records<T: Record>(dst: &mut BytesMut, items: &[T]) {
    dst.put_i32(items.len() as i32);
    for item in items {
        item.encode(dst);
    }
}

/// A jute record: a fixed sequence of fields with an encoding and a decoding.
///
/// `decode` reads exactly the record's fields and leaves the reader after them;
/// checking for trailing bytes is the caller's business ([`Reader::finish`]),
/// because records nest.
pub trait Record: Sized {
    /// The record's name as ZooKeeper's jute files spell it, for error messages.
    const NAME: &'static str;

    /// The fewest bytes any encoding of this record takes. Vectors of this
    /// record use it to refuse counts that cannot fit before reserving memory.
    const ENCODED_BYTES_MIN: usize;

    /// Appends the record's encoding to `dst`.
    fn encode(&self, dst: &mut BytesMut);

    /// Reads the record's fields from `r`.
    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError>;

    /// Decodes a whole buffer holding exactly this record (trailing bytes
    /// follow `strictness`).
    fn decode_from(buf: &Bytes, strictness: Strictness) -> Result<Self, WireError> {
        let mut r = Reader::new(buf, strictness);
        let record = Self::decode(&mut r)?;
        r.finish(Self::NAME)?;
        Ok(record)
    }

    /// The record's encoding as a fresh buffer (convenient in tests; encoders
    /// on hot paths write into a shared `BytesMut` with [`Record::encode`]).
    fn to_bytes(&self) -> Bytes {
        let mut dst = BytesMut::new();
        self.encode(&mut dst);
        dst.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(raw: &[u8]) -> Bytes {
        Bytes::copy_from_slice(raw)
    }

    #[test]
    fn null_buffer_is_none_and_empty_buffer_is_some_empty() {
        let buf = bytes(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        let mut r = Reader::new(&buf, Strictness::Strict);
        assert_eq!(r.buffer("T.a").unwrap(), None);
        assert_eq!(r.buffer("T.b").unwrap(), Some(Bytes::new()));
        r.finish("T").unwrap();
    }

    #[test]
    fn null_string_reads_as_empty() {
        let buf = bytes(&[0xff, 0xff, 0xff, 0xff]);
        let mut r = Reader::new(&buf, Strictness::Lenient);
        assert_eq!(r.string("T.path").unwrap(), "");
    }

    #[test]
    fn length_below_minus_one_is_an_error() {
        let buf = bytes(&[0xff, 0xff, 0xff, 0xfe]);
        let err = Reader::new(&buf, Strictness::Lenient)
            .buffer("T.data")
            .unwrap_err();
        assert!(
            matches!(
                err,
                WireError::NegativeLength {
                    field: "T.data",
                    offset: 0,
                    length: -2
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn string_longer_than_the_frame_is_truncated_not_allocated() {
        // Declares 2^31-1 bytes and carries 3.
        let buf = bytes(&[0x7f, 0xff, 0xff, 0xff, b'a', b'b', b'c']);
        let err = Reader::new(&buf, Strictness::Lenient)
            .string("T.path")
            .unwrap_err();
        assert!(
            matches!(
                err,
                WireError::Truncated {
                    field: "T.path",
                    offset: 0,
                    needed: 0x7fff_ffff,
                    remaining: 3
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn vector_count_of_two_to_the_31_minus_one_is_refused_before_reserving() {
        // If the count were trusted this would reserve 2^31 strings (48 GiB) and
        // abort the test process; refusing it first is what keeps it alive.
        let buf = bytes(&[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        let err = Reader::new(&buf, Strictness::Lenient)
            .strings("T.children")
            .unwrap_err();
        assert!(
            matches!(
                err,
                WireError::CountTooLarge {
                    count: 0x7fff_ffff,
                    element_bytes_min: 4,
                    remaining: 4,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn bad_utf8_is_an_error_with_its_offset() {
        let buf = bytes(&[0, 0, 0, 2, 0xc3, 0x28]);
        let err = Reader::new(&buf, Strictness::Lenient)
            .string("T.path")
            .unwrap_err();
        assert!(
            matches!(
                err,
                WireError::InvalidUtf8 {
                    field: "T.path",
                    offset: 4,
                    length: 2
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn booleans_are_lenient_or_strict() {
        let buf = bytes(&[2]);
        assert!(Reader::new(&buf, Strictness::Lenient).bool("T.b").unwrap());
        let err = Reader::new(&buf, Strictness::Strict)
            .bool("T.b")
            .unwrap_err();
        assert!(
            matches!(err, WireError::InvalidValue { value: 2, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn trailing_bytes_are_ignored_when_lenient_and_refused_when_strict() {
        let buf = bytes(&[0, 0, 0, 1, 9]);
        let mut r = Reader::new(&buf, Strictness::Lenient);
        r.i32("T.a").unwrap();
        r.finish("T").unwrap();
        let mut r = Reader::new(&buf, Strictness::Strict);
        r.i32("T.a").unwrap();
        let err = r.finish("T").unwrap_err();
        assert!(
            matches!(
                err,
                WireError::TrailingBytes {
                    record: "T",
                    offset: 4,
                    trailing: 1
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn buffers_are_slices_of_the_frame_not_copies() {
        let buf = bytes(&[0, 0, 0, 3, b'x', b'y', b'z']);
        let data = Reader::new(&buf, Strictness::Strict)
            .buffer("T.data")
            .unwrap()
            .unwrap();
        assert_eq!(data.as_ptr(), buf[4..].as_ptr());
    }
}
