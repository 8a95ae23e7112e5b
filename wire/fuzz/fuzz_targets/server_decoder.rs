//! Fuzzes the server-side decoder: arbitrary bytes from a client must never
//! make it panic, and every request it accepts must re-encode to bytes that
//! decode to the same request.
//!
//! Input: byte 0 bit 0 set = a valid ConnectRequest frame is sent first (so the
//! rest is read as request frames); byte 1 = the size of the chunks the rest
//! arrives in (0 = all at once); then the client's byte stream.

#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use rzk_wire::{server, ClientCodec, ConnectRequest, RequestFrame, ServerCodec, SessionId};
use rzk_zxid::Zxid;
use tokio_util::codec::{Decoder, Encoder};

fn connect_frame() -> BytesMut {
    let mut dst = BytesMut::new();
    ClientCodec::new()
        .encode(
            ConnectRequest {
                protocol_version: 0,
                last_zxid_seen: Zxid::ZERO,
                timeout_ms: 30_000,
                session_id: SessionId::NONE,
                passwd: Bytes::from_static(&[0; 16]),
                read_only: Some(false),
            },
            &mut dst,
        )
        .expect("connect frame encodes");
    dst
}

fn check(item: &server::Incoming) {
    let server::Incoming::Request(frame) = item else {
        return;
    };
    // Lenient decoding normalises (null strings become empty, trailing bytes
    // are dropped); the normal form must be a fixed point.
    let mut payload = BytesMut::new();
    frame.encode_payload(&mut payload);
    let again =
        RequestFrame::decode_payload(&payload.freeze()).expect("re-encoded request decodes");
    assert_eq!(&again, frame);
}

fuzz_target!(|data: &[u8]| {
    let [flags, chunk, stream @ ..] = data else {
        return;
    };
    // A small limit keeps the fuzzer in interesting territory.
    let mut codec = ServerCodec::with_frame_bytes_max(64 * 1024);
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
