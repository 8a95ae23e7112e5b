//! `rzk-wire`: the Apache ZooKeeper client wire protocol, both directions.
//!
//! This is the only crate of rzk that knows the client byte format
//! (`docs/client-protocol.md`). It has:
//! - every jute record of the protocol ([`records`], [`multi`]) with a
//!   zero-copy [`jute::Reader`] and in-place writers;
//! - the protocol's numbers as types: [`OpCode`], [`ErrorCode`], [`EventType`],
//!   [`KeeperState`], [`CreateMode`], [`WatcherType`], [`AddWatchMode`],
//!   [`Perms`], [`Xid`], [`SessionId`];
//! - typed [`Request`]s and [`Response`]s, keyed by opcode;
//! - two `tokio_util::codec` codecs: [`ServerCodec`] (decodes ConnectRequests,
//!   four-letter words and requests; encodes ConnectResponses, replies and
//!   notifications) and [`ClientCodec`] (the reverse); and [`FrameCodec`], the
//!   bare length-prefix layer for code that moves frames without decoding them.
//!
//! ```
//! use bytes::BytesMut;
//! use rzk_wire::{client, server, ClientCodec, ServerCodec, Request, RequestFrame, Response,
//!     Reply, GetDataRequest, GetDataResponse, Stat, Xid, OpCode};
//! use rzk_zxid::Zxid;
//! use tokio_util::codec::{Decoder, Encoder};
//!
//! # fn main() -> Result<(), rzk_wire::WireError> {
//! let (mut client, mut server) = (ClientCodec::new(), ServerCodec::new());
//! let mut wire = BytesMut::new();
//!
//! // The client connects and asks for /demo's data.
//! let connect = rzk_wire::ConnectRequest { protocol_version: 0, last_zxid_seen: Zxid::ZERO,
//!     timeout_ms: 30_000, session_id: rzk_wire::SessionId::NONE,
//!     passwd: vec![0; 16].into(), read_only: Some(false) };
//! client.encode(connect, &mut wire)?;
//! let get = Request::GetData(GetDataRequest { path: "/demo".into(), watch: true });
//! client.encode(RequestFrame { xid: Xid(1), request: get }, &mut wire)?;
//!
//! // The server reads both frames and answers the request.
//! let Some(server::Incoming::Connect(req)) = server.decode(&mut wire)? else { panic!() };
//! let Some(server::Incoming::Request(frame)) = server.decode(&mut wire)? else { panic!() };
//! assert_eq!(frame.request.opcode(), OpCode::GetData);
//! server.encode(req.accept(30_000, rzk_wire::SessionId(7), vec![9; 16].into()), &mut wire)?;
//! let data = GetDataResponse { data: Some("hi".into()), stat: Stat::default() };
//! server.encode(Reply::ok(frame.xid, Zxid::from_u64(0xa8), Response::GetData(data.clone())), &mut wire)?;
//!
//! // The client decodes the reply body with the opcode it remembers for xid 1.
//! let Some(client::Incoming::Connect(_)) = client.decode(&mut wire)? else { panic!() };
//! let Some(client::Incoming::Reply(raw)) = client.decode(&mut wire)? else { panic!() };
//! assert_eq!(raw.decode(OpCode::GetData)?.result, Ok(Response::GetData(data)));
//! # Ok(()) }
//! ```
//!
//! What it guarantees:
//! - **No panic and no unchecked allocation on input.** Every length and count
//!   is checked against the bytes actually present before anything is reserved;
//!   frames are checked against a limit before they are buffered (default
//!   [`REQUEST_FRAME_BYTES_MAX_DEFAULT`] = `0xfffff`, ZooKeeper's
//!   `jute.maxbuffer`). Both decoders are fuzzed (`wire/fuzz`).
//! - **Server decoding is as lenient as ZooKeeper**: trailing bytes after a
//!   request record are ignored; any non-zero boolean is true; null strings,
//!   buffers and vectors are accepted everywhere (kazoo sends `''` as null), and
//!   null data stays null. The three failure kinds a server must tell apart are
//!   distinct: framing error (`Err`, close), [`server::Incoming::Malformed`]
//!   (reply MARSHALLINGERROR, continue), [`server::Incoming::UnknownOpCode`]
//!   (reply UNIMPLEMENTED, close).
//! - **Client decoding is strict**: whatever ZooKeeper never sends is an error.
//! - **Zero-copy payloads**: data, paths and names are [`bytes::Bytes`] /
//!   [`ByteString`] slices of the received frame. Encoders write straight into
//!   the codec's `BytesMut` and patch the length prefix in place.
//! - **Never a null string in a response**: the writers never produce one.

#![deny(missing_docs)]

pub mod client;
pub mod codes;
mod error;
mod four_letter;
pub mod frame;
pub mod jute;
pub mod multi;
pub mod records;
mod request;
mod response;
pub mod server;

#[cfg(test)]
mod proptests;

pub use bytestring::ByteString;

pub use client::ClientCodec;
pub use codes::{
    AddWatchMode, CreateMode, ErrorCode, EventType, KeeperState, OpCode, Perms, SessionId,
    WatcherType, Xid,
};
pub use error::WireError;
pub use four_letter::FourLetterWord;
pub use frame::{FrameCodec, REPLY_FRAME_BYTES_MAX_DEFAULT, REQUEST_FRAME_BYTES_MAX_DEFAULT};
pub use jute::Record;
pub use multi::{MultiOp, MultiReadOp, MultiReadRequest, MultiRequest, MultiResponse, MultiResult};
pub use records::{
    Acl, AddWatchRequest, AuthPacket, CheckVersionRequest, CheckWatchesRequest, ClientInfo,
    ConnectRequest, ConnectResponse, Create2Response, CreateRequest, CreateResponse,
    CreateTtlRequest, DeleteRequest, ErrorResponse, ExistsRequest, GetAclRequest, GetAclResponse,
    GetAllChildrenNumberRequest, GetAllChildrenNumberResponse, GetChildren2Request,
    GetChildren2Response, GetChildrenRequest, GetChildrenResponse, GetDataRequest, GetDataResponse,
    GetEphemeralsRequest, GetEphemeralsResponse, GetSaslRequest, Id, ReconfigRequest,
    RemoveWatchesRequest, ReplyHeader, RequestHeader, SetAclRequest, SetDataRequest,
    SetSaslResponse, SetWatches, SetWatches2, Stat, SyncRequest, SyncResponse, WatcherEvent,
    WhoAmIResponse,
};
pub use request::{Request, RequestFrame};
pub use response::{Notification, RawReply, Reply, Response};
pub use server::ServerCodec;

/// The README's example is compiled as a doctest so that it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
