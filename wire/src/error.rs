//! The one error type of the crate.

use std::io;

/// Everything that can go wrong reading or writing the ZooKeeper client protocol.
///
/// Variants say *what* went wrong and *where*: the record and field (as
/// `"Record.field"`), and the byte offset inside the frame payload (the 4-byte
/// length prefix is not counted, so offset 0 is the first byte after it).
///
/// How a server should react depends on where the error surfaced, not on the
/// variant alone; see [`crate::server::Incoming`]: an error returned by the
/// decoder itself is a framing error (close the connection), while an error
/// carried inside [`crate::server::Incoming::Malformed`] concerns one request
/// (reply `MARSHALLINGERROR` and go on).
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// A frame's length prefix is negative. ZooKeeper logs "Len error" and closes
    /// the connection without a reply.
    #[error("frame length {length} is negative")]
    NegativeFrameLength {
        /// The declared length.
        length: i32,
    },

    /// A frame is longer than the configured maximum (checked on the declared
    /// length, before any of the payload is read or buffered).
    #[error("frame of {length} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// The declared (or, when encoding, the produced) payload length.
        length: u64,
        /// The limit in force.
        max: usize,
    },

    /// The peer closed the connection in the middle of a frame.
    #[error("connection closed in the middle of a frame ({buffered} bytes buffered)")]
    ClosedMidFrame {
        /// Bytes received of the unfinished frame, prefix included.
        buffered: usize,
    },

    /// A field needs more bytes than the frame has left.
    #[error("{field} at offset {offset}: needs {needed} bytes but only {remaining} remain")]
    Truncated {
        /// The field, as `"Record.field"`.
        field: &'static str,
        /// Where the field starts.
        offset: usize,
        /// Bytes the field needs (for a buffer or string: its declared length).
        needed: u64,
        /// Bytes left in the frame.
        remaining: usize,
    },

    /// A buffer, string or vector length below -1 (-1 itself means null).
    #[error("{field} at offset {offset}: invalid length {length}")]
    NegativeLength {
        /// The field, as `"Record.field"`.
        field: &'static str,
        /// Where the length prefix starts.
        offset: usize,
        /// The declared length.
        length: i32,
    },

    /// A vector's element count cannot fit in the bytes left, even with every
    /// element at its smallest encoding. Reported before anything is allocated.
    #[error(
        "{field} at offset {offset}: {count} elements of at least {element_bytes_min} bytes \
         cannot fit in the {remaining} bytes left"
    )]
    CountTooLarge {
        /// The field, as `"Record.field"`.
        field: &'static str,
        /// Where the count starts.
        offset: usize,
        /// The declared element count.
        count: i32,
        /// The smallest encoding of one element.
        element_bytes_min: usize,
        /// Bytes left in the frame after the count.
        remaining: usize,
    },

    /// A string (a path, a scheme, a name) is not valid UTF-8.
    #[error("{field} at offset {offset}: {length} bytes are not valid UTF-8")]
    InvalidUtf8 {
        /// The field, as `"Record.field"`.
        field: &'static str,
        /// Where the string's bytes start (after its length prefix).
        offset: usize,
        /// The string's length in bytes.
        length: usize,
    },

    /// A field holds a value outside the set the protocol defines (an addWatch
    /// mode of 2, an event type of 9, a multi op that is not allowed there, a
    /// boolean byte other than 0 or 1 in strict decoding, ...).
    #[error("{field} at offset {offset}: invalid value {value}")]
    InvalidValue {
        /// The field, as `"Record.field"`.
        field: &'static str,
        /// Where the field starts.
        offset: usize,
        /// The value found.
        value: i64,
    },

    /// A request header carries an opcode this crate does not know, or one that
    /// clients never send (notification 0, deleteContainer 20, createSession -10,
    /// error -1).
    #[error("unknown opcode {opcode}")]
    UnknownOpCode {
        /// The raw opcode.
        opcode: i32,
    },

    /// Bytes follow a record where the protocol allows none (strict decoding of
    /// replies; request decoding ignores trailing bytes like ZooKeeper does).
    #[error("{record}: {trailing} unexpected trailing bytes at offset {offset}")]
    TrailingBytes {
        /// The record that should have ended.
        record: &'static str,
        /// Where the extra bytes start.
        offset: usize,
        /// How many there are.
        trailing: usize,
    },

    /// An I/O error from the transport under a codec.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
}
