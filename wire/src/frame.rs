//! Framing: every message after the TCP connect is an `int32` length and that
//! many bytes (docs/client-protocol.md, "Framing"). This module holds the
//! limits and the two primitives the codecs share: take a whole frame from a
//! read buffer, and write a frame with its length prefix patched in place.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::error::WireError;

/// The default limit on a request frame's payload a server accepts, in bytes:
/// `0xfffff` = 1,048,575, ZooKeeper's default `jute.maxbuffer`.
///
/// This is exactly the check ZooKeeper makes (docs/client-protocol.md, "Frame
/// size limit"; verified live: a declared length of 1,048,575 is accepted,
/// 1,048,576 gets the connection closed). Using the same number means a request
/// ZooKeeper accepts is accepted here and one it refuses is refused here. The
/// limit applies to the payload, not counting the 4-byte prefix; it bounds a
/// znode's data to a little under 1 MiB (the header, path, version and ACL
/// share the frame).
pub const REQUEST_FRAME_BYTES_MAX_DEFAULT: usize = 0xfffff;

/// The default limit on a reply frame's payload a client accepts, in bytes:
/// [`REQUEST_FRAME_BYTES_MAX_DEFAULT`] plus 1 KiB of headroom = 1,049,599.
///
/// The headroom exists because a reply can legitimately be larger than the
/// request that stored its data: the largest setData a default server accepts
/// carries `0xfffff - 21` bytes of data (8 header + 4 + a 1-byte path + 4 + 4
/// version), and the getData reply for it adds 16 header + 4 length + 68 Stat
/// bytes, 67 bytes over `0xfffff`. 1 KiB covers that with room to spare. (The
/// Java client uses plain `0xfffff` here and fails on such replies.) Replies
/// that list children are not bounded by the server at all; a client that reads
/// huge directories must raise this limit.
pub const REPLY_FRAME_BYTES_MAX_DEFAULT: usize = REQUEST_FRAME_BYTES_MAX_DEFAULT + 1024;

/// The absolute limit of any frame: its length must fit the signed prefix.
pub const FRAME_BYTES_MAX_ABSOLUTE: usize = i32::MAX as usize;

/// Reads and checks a frame's length prefix, if 4 bytes are there. The check is
/// on the declared length, before any payload is buffered.
pub(crate) fn peek_length(src: &[u8], max: usize) -> Result<Option<usize>, WireError> {
    let Some(prefix) = src.first_chunk::<4>() else {
        return Ok(None);
    };
    let length = i32::from_be_bytes(*prefix);
    if length < 0 {
        return Err(WireError::NegativeFrameLength { length });
    }
    let length = length as usize;
    if length > max {
        return Err(WireError::FrameTooLarge {
            length: length as u64,
            max,
        });
    }
    Ok(Some(length))
}

/// Takes one whole frame's payload from `src` (zero-copy: the returned bytes
/// share `src`'s allocation), or `None` if it has not fully arrived yet, in
/// which case room for the rest is reserved (at most `max` bytes, since the
/// length was checked first).
pub(crate) fn take_frame(src: &mut BytesMut, max: usize) -> Result<Option<Bytes>, WireError> {
    let Some(length) = peek_length(src, max)? else {
        return Ok(None);
    };
    let total = 4 + length;
    if src.len() < total {
        src.reserve(total - src.len());
        return Ok(None);
    }
    src.advance(4);
    Ok(Some(src.split_to(length).freeze()))
}

/// Appends one frame to `dst`: a length placeholder, the payload written by
/// `write`, then the real length patched over the placeholder. No intermediate
/// buffer. If the payload exceeds `max`, everything written is removed again and
/// [`WireError::FrameTooLarge`] is returned, so `dst` holds only whole frames.
pub fn write_frame(
    dst: &mut BytesMut,
    max: usize,
    write: impl FnOnce(&mut BytesMut),
) -> Result<(), WireError> {
    let start = dst.len();
    dst.put_i32(0);
    write(dst);
    let length = dst.len() - start - 4;
    let max = max.min(FRAME_BYTES_MAX_ABSOLUTE);
    if length > max {
        dst.truncate(start);
        return Err(WireError::FrameTooLarge {
            length: length as u64,
            max,
        });
    }
    dst[start..start + 4].copy_from_slice(&(length as i32).to_be_bytes());
    Ok(())
}

/// The bare framing layer as a codec: payloads in and out as bytes, with the
/// length checks of the protocol codecs and the same typed errors.
///
/// The protocol codecs ([`crate::ServerCodec`], [`crate::ClientCodec`]) frame
/// by themselves; this one is for code that handles frames without decoding
/// them (a proxy, a load generator replaying pre-encoded requests, a capture
/// tool). It knows nothing of four-letter words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameCodec {
    /// Largest payload accepted and sent (the 4-byte prefix not counted).
    frame_bytes_max: usize,
}

impl FrameCodec {
    /// A codec with the given payload limit in both directions.
    pub fn new(frame_bytes_max: usize) -> FrameCodec {
        FrameCodec {
            frame_bytes_max: frame_bytes_max.min(FRAME_BYTES_MAX_ABSOLUTE),
        }
    }

    /// The limit in force.
    pub fn frame_bytes_max(&self) -> usize {
        self.frame_bytes_max
    }
}

impl Default for FrameCodec {
    /// [`REQUEST_FRAME_BYTES_MAX_DEFAULT`], ZooKeeper's `jute.maxbuffer`.
    fn default() -> Self {
        FrameCodec::new(REQUEST_FRAME_BYTES_MAX_DEFAULT)
    }
}

impl Decoder for FrameCodec {
    type Item = Bytes;
    type Error = WireError;

    /// The next whole payload (zero-copy), without its length prefix.
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, WireError> {
        take_frame(src, self.frame_bytes_max)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, WireError> {
        if let Some(frame) = self.decode(src)? {
            return Ok(Some(frame));
        }
        if src.is_empty() {
            return Ok(None);
        }
        Err(WireError::ClosedMidFrame {
            buffered: src.len(),
        })
    }
}

impl Encoder<&[u8]> for FrameCodec {
    type Error = WireError;

    /// Writes the length prefix and the payload.
    fn encode(&mut self, payload: &[u8], dst: &mut BytesMut) -> Result<(), WireError> {
        write_frame(dst, self.frame_bytes_max, |d| d.put_slice(payload))
    }
}

impl Encoder<Bytes> for FrameCodec {
    type Error = WireError;

    /// Writes the length prefix and the payload.
    fn encode(&mut self, payload: Bytes, dst: &mut BytesMut) -> Result<(), WireError> {
        self.encode(&payload[..], dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_prefix_is_patched_in_place() {
        let mut dst = BytesMut::from(&b"xx"[..]);
        write_frame(&mut dst, 100, |d| d.put_slice(b"hello")).unwrap();
        assert_eq!(&dst[..], b"xx\0\0\0\x05hello");
    }

    #[test]
    fn oversized_frame_is_removed_again() {
        let mut dst = BytesMut::from(&b"xx"[..]);
        let err = write_frame(&mut dst, 4, |d| d.put_slice(b"hello")).unwrap_err();
        assert!(matches!(
            err,
            WireError::FrameTooLarge { length: 5, max: 4 }
        ));
        assert_eq!(&dst[..], b"xx");
    }

    #[test]
    fn frame_at_the_limit_passes_and_one_over_fails() {
        let at = (REQUEST_FRAME_BYTES_MAX_DEFAULT as u32).to_be_bytes();
        assert_eq!(
            peek_length(&at, REQUEST_FRAME_BYTES_MAX_DEFAULT).unwrap(),
            Some(0xfffff)
        );
        let over = (REQUEST_FRAME_BYTES_MAX_DEFAULT as u32 + 1).to_be_bytes();
        let err = peek_length(&over, REQUEST_FRAME_BYTES_MAX_DEFAULT).unwrap_err();
        assert!(matches!(
            err,
            WireError::FrameTooLarge {
                length: 0x100000,
                max: 0xfffff
            }
        ));
    }

    #[test]
    fn negative_length_is_refused() {
        let err = peek_length(&(-1i32).to_be_bytes(), 10).unwrap_err();
        assert!(matches!(err, WireError::NegativeFrameLength { length: -1 }));
    }

    #[test]
    fn frame_codec_round_trips_payloads_and_reports_limits() {
        let mut codec = FrameCodec::new(8);
        let mut wire = BytesMut::new();
        codec.encode(&b"abc"[..], &mut wire).unwrap();
        codec.encode(Bytes::from_static(b""), &mut wire).unwrap();
        assert!(matches!(
            codec.encode(&b"123456789"[..], &mut wire),
            Err(WireError::FrameTooLarge { length: 9, max: 8 })
        ));
        assert_eq!(codec.decode(&mut wire).unwrap().unwrap(), &b"abc"[..]);
        assert_eq!(codec.decode(&mut wire).unwrap().unwrap(), &b""[..]);
        assert!(codec.decode_eof(&mut wire).unwrap().is_none());
        let mut wire = BytesMut::from(&[0u8, 0, 0, 9][..]);
        assert!(matches!(
            codec.decode(&mut wire),
            Err(WireError::FrameTooLarge { length: 9, max: 8 })
        ));
        let mut wire = BytesMut::from(&[0u8, 0, 0, 2, 1][..]);
        assert!(matches!(
            codec.decode_eof(&mut wire),
            Err(WireError::ClosedMidFrame { buffered: 5 })
        ));
    }

    #[test]
    fn incomplete_frame_reserves_only_what_was_declared() {
        let mut src = BytesMut::from(&[0u8, 0, 0, 200, 1, 2][..]);
        assert!(take_frame(&mut src, 1000).unwrap().is_none());
        assert!(src.capacity() >= 204);
        assert_eq!(src.len(), 6);
    }
}
