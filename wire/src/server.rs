//! The server side of a connection: [`ServerCodec`] decodes what a client sends
//! ([`Incoming`]) and encodes what a server sends ([`Outgoing`]).

use bytes::{Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::codes::{OpCode, Xid};
use crate::error::WireError;
use crate::four_letter::{self, FourLetterWord, Recognised};
use crate::frame::{self, FRAME_BYTES_MAX_ABSOLUTE, REQUEST_FRAME_BYTES_MAX_DEFAULT};
use crate::jute::{Reader, Record, Strictness};
use crate::records::{ConnectRequest, ConnectResponse};
use crate::request::{Request, RequestFrame};
use crate::response::{Notification, Reply};

/// One thing a client sent, as the server must handle it.
///
/// The three failure shapes the issue and ZooKeeper distinguish:
/// - a **framing** error (negative or oversized length, a frame too short for a
///   RequestHeader, a ConnectRequest that cannot be decoded, EOF mid-frame) is
///   an `Err` from the decoder: close the connection without a reply;
/// - [`Incoming::Malformed`]: the header was fine but the record was not (too
///   short, a length below -1, bad UTF-8, an addWatch mode of 2, a multi with a
///   forbidden op): reply `MARSHALLINGERROR` to that xid and keep going
///   (docs/client-protocol.md, "Malformed requests");
/// - [`Incoming::UnknownOpCode`]: reply [`Reply::unimplemented`] to that xid,
///   then close (docs/client-protocol.md, "Opcodes").
#[derive(Debug)]
pub enum Incoming {
    /// The first frame of a session connection.
    Connect(ConnectRequest),
    /// The first 4 bytes were a four-letter word: run it, write its text and
    /// close. The codec ignores everything after it.
    FourLetterWord(FourLetterWord),
    /// A request.
    Request(RequestFrame),
    /// A request whose record could not be decoded.
    Malformed {
        /// The request's xid.
        xid: Xid,
        /// Its opcode (a known one).
        opcode: OpCode,
        /// What was wrong, and where.
        error: WireError,
    },
    /// A request with an opcode that is not a client request.
    UnknownOpCode {
        /// The request's xid.
        xid: Xid,
        /// The raw opcode.
        opcode: i32,
    },
}

/// One thing a server sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outgoing {
    /// The answer to the ConnectRequest.
    Connect(ConnectResponse),
    /// A reply to a request.
    Reply(Reply),
    /// A watch notification.
    Notification(Notification),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing read yet: a ConnectRequest or a four-letter word comes next.
    AwaitingConnect,
    /// After the ConnectRequest: request frames.
    Session,
    /// A four-letter word was read; the rest of the input is ignored.
    Done,
    /// The decoder returned an error; the connection must close.
    Failed,
}

/// The server's codec for one connection.
///
/// Decoding follows the connection's life: the first bytes are a ConnectRequest
/// (with or without its trailing readOnly byte; [`ConnectRequest::read_only`]
/// says which, and [`ConnectRequest::accept`] builds a response that matches)
/// or a four-letter word; then request frames. Request records are decoded
/// leniently, like ZooKeeper: trailing bytes after a record are ignored, any
/// non-zero boolean byte is true.
///
/// Encoding takes [`ConnectResponse`], [`Reply`], [`Notification`] or
/// [`Outgoing`]; the ConnectResponse's readOnly byte follows the request's. Replies are not size-limited (ZooKeeper does not limit them
/// either) beyond the 2 GiB a length prefix can express.
#[derive(Debug)]
pub struct ServerCodec {
    state: State,
    /// Largest request payload accepted; see [`REQUEST_FRAME_BYTES_MAX_DEFAULT`].
    frame_bytes_max: usize,
    /// Whether the decoded ConnectRequest carried the readOnly byte (`None`
    /// until one is decoded). The ConnectResponse must carry it exactly then.
    connect_had_read_only_byte: Option<bool>,
}

impl Default for ServerCodec {
    fn default() -> Self {
        ServerCodec::new()
    }
}

impl ServerCodec {
    /// A codec for a fresh connection with the default frame limit
    /// ([`REQUEST_FRAME_BYTES_MAX_DEFAULT`], ZooKeeper's `jute.maxbuffer`).
    pub fn new() -> ServerCodec {
        ServerCodec::with_frame_bytes_max(REQUEST_FRAME_BYTES_MAX_DEFAULT)
    }

    /// A codec for a fresh connection accepting request payloads of up to
    /// `frame_bytes_max` bytes (the 4-byte length prefix not counted).
    pub fn with_frame_bytes_max(frame_bytes_max: usize) -> ServerCodec {
        ServerCodec {
            state: State::AwaitingConnect,
            frame_bytes_max: frame_bytes_max.min(FRAME_BYTES_MAX_ABSOLUTE),
            connect_had_read_only_byte: None,
        }
    }

    /// The frame limit in force.
    pub fn frame_bytes_max(&self) -> usize {
        self.frame_bytes_max
    }

    /// Whether the decoded ConnectRequest carried the trailing readOnly byte, or
    /// `None` before one is decoded.
    pub fn connect_had_read_only_byte(&self) -> Option<bool> {
        self.connect_had_read_only_byte
    }

    /// Whether the ConnectRequest has been decoded (four-letter words are no
    /// longer recognised after it).
    pub fn is_connected(&self) -> bool {
        self.state == State::Session
    }

    fn decode_first(&mut self, src: &mut BytesMut) -> Result<Option<Incoming>, WireError> {
        if src.len() < 4 {
            return Ok(None);
        }
        match four_letter::recognise(src) {
            Recognised::NeedMore => return Ok(None),
            Recognised::Word(word, _) => {
                self.state = State::Done;
                src.clear();
                return Ok(Some(Incoming::FourLetterWord(word)));
            }
            Recognised::No => {}
        }
        let Some(payload) = frame::take_frame(src, self.frame_bytes_max)? else {
            return Ok(None);
        };
        let connect = ConnectRequest::decode_from(&payload, Strictness::Lenient)?;
        self.state = State::Session;
        self.connect_had_read_only_byte = Some(connect.read_only.is_some());
        Ok(Some(Incoming::Connect(connect)))
    }

    fn decode_request(&mut self, src: &mut BytesMut) -> Result<Option<Incoming>, WireError> {
        let Some(payload) = frame::take_frame(src, self.frame_bytes_max)? else {
            return Ok(None);
        };
        Ok(Some(classify_request(&payload)?))
    }
}

/// Decodes one request payload into the [`Incoming`] the server acts on. Only
/// a payload too short for its RequestHeader is an `Err` (a framing error:
/// ZooKeeper closes the connection on it).
pub fn classify_request(payload: &Bytes) -> Result<Incoming, WireError> {
    let mut r = Reader::new(payload, Strictness::Lenient);
    let xid = Xid(r.i32("RequestHeader.xid")?);
    let opcode = r.i32("RequestHeader.type")?;
    let Some(op) = OpCode::from_i32(opcode).filter(|op| op.is_client_request()) else {
        return Ok(Incoming::UnknownOpCode { xid, opcode });
    };
    // Trailing bytes after the record are ignored, as ZooKeeper ignores them
    // (docs/client-protocol.md, "Encoding"); the lenient reader's `finish`
    // would accept them anyway.
    match Request::decode(op, &mut r) {
        Ok(request) => Ok(Incoming::Request(RequestFrame { xid, request })),
        Err(error) => Ok(Incoming::Malformed {
            xid,
            opcode: op,
            error,
        }),
    }
}

impl Decoder for ServerCodec {
    type Item = Incoming;
    type Error = WireError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Incoming>, WireError> {
        let result = match self.state {
            State::AwaitingConnect => self.decode_first(src),
            State::Session => self.decode_request(src),
            State::Done | State::Failed => {
                src.clear();
                Ok(None)
            }
        };
        if result.is_err() {
            self.state = State::Failed;
        }
        result
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Incoming>, WireError> {
        if let Some(item) = self.decode(src)? {
            return Ok(Some(item));
        }
        if src.is_empty() {
            return Ok(None);
        }
        self.state = State::Failed;
        Err(WireError::ClosedMidFrame {
            buffered: src.len(),
        })
    }
}

impl Encoder<ConnectResponse> for ServerCodec {
    type Error = WireError;

    /// Once this codec has decoded a ConnectRequest, the response carries the
    /// readOnly byte exactly when the request did (docs/client-protocol.md,
    /// "Connect request and response"), whatever `item.read_only` says about
    /// presence: its value is written if it has one, `false` otherwise. Before
    /// that, `item.read_only` decides alone.
    fn encode(&mut self, mut item: ConnectResponse, dst: &mut BytesMut) -> Result<(), WireError> {
        item.read_only = match self.connect_had_read_only_byte {
            Some(true) => Some(item.read_only.unwrap_or(false)),
            Some(false) => None,
            None => item.read_only,
        };
        frame::write_frame(dst, FRAME_BYTES_MAX_ABSOLUTE, |d| item.encode(d))
    }
}

impl Encoder<Reply> for ServerCodec {
    type Error = WireError;

    fn encode(&mut self, item: Reply, dst: &mut BytesMut) -> Result<(), WireError> {
        self.encode(&item, dst)
    }
}

impl Encoder<&Reply> for ServerCodec {
    type Error = WireError;

    /// Encodes without taking ownership.
    fn encode(&mut self, item: &Reply, dst: &mut BytesMut) -> Result<(), WireError> {
        frame::write_frame(dst, FRAME_BYTES_MAX_ABSOLUTE, |d| item.encode_payload(d))
    }
}

impl Encoder<Notification> for ServerCodec {
    type Error = WireError;

    fn encode(&mut self, item: Notification, dst: &mut BytesMut) -> Result<(), WireError> {
        self.encode(&item, dst)
    }
}

impl Encoder<&Notification> for ServerCodec {
    type Error = WireError;

    /// Encodes without taking ownership (one event sent to many connections).
    fn encode(&mut self, item: &Notification, dst: &mut BytesMut) -> Result<(), WireError> {
        frame::write_frame(dst, FRAME_BYTES_MAX_ABSOLUTE, |d| item.encode_payload(d))
    }
}

impl Encoder<Outgoing> for ServerCodec {
    type Error = WireError;

    fn encode(&mut self, item: Outgoing, dst: &mut BytesMut) -> Result<(), WireError> {
        match item {
            Outgoing::Connect(c) => self.encode(c, dst),
            Outgoing::Reply(r) => self.encode(r, dst),
            Outgoing::Notification(n) => self.encode(n, dst),
        }
    }
}
