//! The client side of a connection: [`ClientCodec`] encodes what a client
//! sends ([`Outgoing`]) and decodes what a server sends ([`Incoming`]).

use bytes::{Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::codes::{ErrorCode, Xid};
use crate::error::WireError;
use crate::frame::{self, REPLY_FRAME_BYTES_MAX_DEFAULT, REQUEST_FRAME_BYTES_MAX_DEFAULT};
use crate::jute::{Reader, Record, Strictness};
use crate::records::{ConnectRequest, ConnectResponse, ReplyHeader, WatcherEvent};
use crate::request::RequestFrame;
use crate::response::{Notification, RawReply};

/// One thing a server sent, as a client sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incoming {
    /// The answer to the ConnectRequest.
    Connect(ConnectResponse),
    /// A watch notification (xid -1).
    Notification(Notification),
    /// Any other reply (including pings -2, auth -4 and setWatches -8). Its body
    /// is decoded once the client knows the opcode: [`RawReply::decode`].
    Reply(RawReply),
}

/// One thing a client sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outgoing {
    /// The first frame.
    Connect(ConnectRequest),
    /// A request.
    Request(RequestFrame),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    AwaitingConnect,
    Session,
    Failed,
}

/// The client's codec for one connection.
///
/// Decoding is strict: a reply that ZooKeeper would never send (bytes after a
/// record, an error reply with a body, a boolean byte other than 0/1, an
/// unknown error code or event type, a ConnectResponse whose readOnly byte does
/// not match the request's) is an error, so that a broken server is noticed at
/// once instead of being half-understood.
///
/// A reply's body shape depends on the opcode of the request it answers, which
/// only the client knows (from its FIFO of outstanding xids), so replies come
/// out as [`RawReply`] and are decoded with [`RawReply::decode`]. Notifications
/// need no such knowledge and come out decoded.
#[derive(Debug)]
pub struct ClientCodec {
    state: State,
    /// Largest reply payload accepted; see [`REPLY_FRAME_BYTES_MAX_DEFAULT`].
    reply_bytes_max: usize,
    /// Largest request payload sent: a larger one would make the server close
    /// the connection, so it is refused here with a clear error instead.
    request_bytes_max: usize,
    /// Whether the ConnectRequest encoded by this codec carried the readOnly
    /// byte (`None` until one is encoded; then the response is checked).
    read_only_sent: Option<bool>,
}

impl Default for ClientCodec {
    fn default() -> Self {
        ClientCodec::new()
    }
}

impl ClientCodec {
    /// A codec for a fresh connection with the default limits:
    /// [`REPLY_FRAME_BYTES_MAX_DEFAULT`] in, [`REQUEST_FRAME_BYTES_MAX_DEFAULT`]
    /// out.
    pub fn new() -> ClientCodec {
        ClientCodec::with_limits(
            REPLY_FRAME_BYTES_MAX_DEFAULT,
            REQUEST_FRAME_BYTES_MAX_DEFAULT,
        )
    }

    /// A codec with explicit limits on reply and request payloads (the 4-byte
    /// length prefix not counted).
    pub fn with_limits(reply_bytes_max: usize, request_bytes_max: usize) -> ClientCodec {
        ClientCodec {
            state: State::AwaitingConnect,
            reply_bytes_max: reply_bytes_max.min(frame::FRAME_BYTES_MAX_ABSOLUTE),
            request_bytes_max: request_bytes_max.min(frame::FRAME_BYTES_MAX_ABSOLUTE),
            read_only_sent: None,
        }
    }

    /// The limit on reply payloads.
    pub fn reply_bytes_max(&self) -> usize {
        self.reply_bytes_max
    }

    /// The limit on request payloads.
    pub fn request_bytes_max(&self) -> usize {
        self.request_bytes_max
    }

    fn decode_connect(&mut self, payload: &Bytes) -> Result<Incoming, WireError> {
        let response = ConnectResponse::decode_from(payload, Strictness::Strict)?;
        match (self.read_only_sent, response.read_only) {
            (Some(true), None) => {
                return Err(WireError::Truncated {
                    field: "ConnectResponse.readOnly",
                    offset: payload.len(),
                    needed: 1,
                    remaining: 0,
                })
            }
            (Some(false), Some(_)) => {
                return Err(WireError::TrailingBytes {
                    record: "ConnectResponse",
                    offset: payload.len() - 1,
                    trailing: 1,
                })
            }
            (Some(true), Some(_)) | (Some(false), None) | (None, _) => {}
        }
        self.state = State::Session;
        Ok(Incoming::Connect(response))
    }
}

/// Decodes one reply payload as a client does (strictly).
pub fn decode_reply(payload: &Bytes) -> Result<Incoming, WireError> {
    let mut r = Reader::new(payload, Strictness::Strict);
    let header = ReplyHeader::decode(&mut r)?;
    if header.xid != Xid::NOTIFICATION {
        return Ok(Incoming::Reply(RawReply {
            header,
            body: payload.slice(r.position()..),
        }));
    }
    if header.err != ErrorCode::Ok {
        return Err(WireError::InvalidValue {
            field: "ReplyHeader.err",
            offset: 12,
            value: i64::from(header.err.as_i32()),
        });
    }
    let event = WatcherEvent::decode(&mut r)?;
    r.finish(WatcherEvent::NAME)?;
    Ok(Incoming::Notification(Notification {
        zxid: header.zxid,
        event,
    }))
}

impl Decoder for ClientCodec {
    type Item = Incoming;
    type Error = WireError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Incoming>, WireError> {
        if self.state == State::Failed {
            src.clear();
            return Ok(None);
        }
        let result = frame::take_frame(src, self.reply_bytes_max).and_then(|payload| {
            let Some(payload) = payload else {
                return Ok(None);
            };
            match self.state {
                State::AwaitingConnect => self.decode_connect(&payload).map(Some),
                State::Session | State::Failed => decode_reply(&payload).map(Some),
            }
        });
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

impl Encoder<ConnectRequest> for ClientCodec {
    type Error = WireError;

    fn encode(&mut self, item: ConnectRequest, dst: &mut BytesMut) -> Result<(), WireError> {
        frame::write_frame(dst, self.request_bytes_max, |d| item.encode(d))?;
        self.read_only_sent = Some(item.read_only.is_some());
        Ok(())
    }
}

impl Encoder<RequestFrame> for ClientCodec {
    type Error = WireError;

    fn encode(&mut self, item: RequestFrame, dst: &mut BytesMut) -> Result<(), WireError> {
        Encoder::<&RequestFrame>::encode(self, &item, dst)
    }
}

impl Encoder<&RequestFrame> for ClientCodec {
    type Error = WireError;

    /// Encodes without taking ownership, for a client that keeps the request
    /// (to resend it, or to remember its opcode).
    fn encode(&mut self, item: &RequestFrame, dst: &mut BytesMut) -> Result<(), WireError> {
        frame::write_frame(dst, self.request_bytes_max, |d| item.encode_payload(d))
    }
}

impl Encoder<Outgoing> for ClientCodec {
    type Error = WireError;

    fn encode(&mut self, item: Outgoing, dst: &mut BytesMut) -> Result<(), WireError> {
        match item {
            Outgoing::Connect(c) => self.encode(c, dst),
            Outgoing::Request(r) => Encoder::<&RequestFrame>::encode(self, &r, dst),
        }
    }
}
