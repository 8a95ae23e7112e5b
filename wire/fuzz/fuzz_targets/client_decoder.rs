//! Fuzzes the client-side decoder: arbitrary bytes from a server must never
//! make it panic; every reply it accepts (for any opcode) and every
//! notification must re-encode to bytes that decode to the same value. (Not
//! always the same bytes: a null string or vector is accepted and re-encoded
//! as empty.)
//!
//! Input: byte 0 bit 0 set = a valid ConnectResponse frame is received first
//! (so the rest is read as reply frames); byte 1 = chunk size (0 = all at once);
//! then the server's byte stream.

#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use rzk_wire::{client, ClientCodec, ConnectResponse, OpCode, ServerCodec, SessionId};
use tokio_util::codec::{Decoder, Encoder};

fn connect_frame() -> BytesMut {
    let mut dst = BytesMut::new();
    ServerCodec::new()
        .encode(
            ConnectResponse {
                protocol_version: 0,
                timeout_ms: 30_000,
                session_id: SessionId(1),
                passwd: Bytes::from_static(&[0; 16]),
                read_only: Some(false),
            },
            &mut dst,
        )
        .expect("connect frame encodes");
    dst
}

fn check(item: &client::Incoming) {
    match item {
        client::Incoming::Reply(raw) => {
            for &op in OpCode::ALL {
                let Ok(reply) = raw.decode(op) else {
                    continue;
                };
                let mut payload = BytesMut::new();
                reply.encode_payload(&mut payload);
                let again = match client::decode_reply(&payload.freeze()) {
                    Ok(client::Incoming::Reply(again)) => again,
                    other => panic!("{op:?}: re-encoded reply decodes as {other:?}"),
                };
                assert_eq!(again.decode(op).expect("re-encoded reply decodes"), reply);
            }
        }
        client::Incoming::Notification(note) => {
            let mut payload = BytesMut::new();
            note.encode_payload(&mut payload);
            let again = client::decode_reply(&payload.freeze()).expect("re-encoded event decodes");
            assert_eq!(again, client::Incoming::Notification(note.clone()));
        }
        client::Incoming::Connect(_) => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let [flags, chunk, stream @ ..] = data else {
        return;
    };
    let mut codec = ClientCodec::with_limits(64 * 1024, 64 * 1024);
    let mut src = if flags & 1 == 1 {
        connect_frame()
    } else {
        BytesMut::new()
    };
    let chunk = if *chunk == 0 {
        stream.len().max(1)
    } else {
        usize::from(*chunk)
    };
    for piece in stream.chunks(chunk) {
        src.extend_from_slice(piece);
        loop {
            match codec.decode(&mut src) {
                Ok(Some(item)) => check(&item),
                Ok(None) | Err(_) => break,
            }
        }
    }
    while let Ok(Some(item)) = codec.decode_eof(&mut src) {
        check(&item);
    }
});
