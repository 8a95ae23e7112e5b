//! The codecs' behaviour at every limit and on every kind of bad input (I7:
//! a clear error, never a panic), and end to end over a tokio stream.

use bytes::{BufMut, Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use rzk_wire::{
    client, server, ClientCodec, ConnectRequest, ConnectResponse, ErrorCode, EventType,
    FourLetterWord, GetDataRequest, GetDataResponse, KeeperState, Notification, OpCode, Reply,
    Request, RequestFrame, Response, ServerCodec, SessionId, SetDataRequest, Stat, WatcherEvent,
    WireError, Xid, REPLY_FRAME_BYTES_MAX_DEFAULT, REQUEST_FRAME_BYTES_MAX_DEFAULT,
};
use rzk_zxid::Zxid;
use tokio_util::codec::{Decoder, Encoder, Framed};

fn connect_request(read_only: Option<bool>) -> ConnectRequest {
    ConnectRequest {
        protocol_version: 0,
        last_zxid_seen: Zxid::ZERO,
        timeout_ms: 30_000,
        session_id: SessionId::NONE,
        passwd: Bytes::from_static(&[0; 16]),
        read_only,
    }
}

/// A server codec that has already read a ConnectRequest.
fn connected_server() -> ServerCodec {
    let mut codec = ServerCodec::new();
    let mut src = client_bytes(|c, d| c.encode(connect_request(Some(false)), d));
    assert!(matches!(
        codec.decode(&mut src),
        Ok(Some(server::Incoming::Connect(_)))
    ));
    codec
}

/// A client codec that has sent a ConnectRequest with the readOnly byte and
/// read its response.
fn connected_client() -> ClientCodec {
    let mut codec = ClientCodec::new();
    codec
        .encode(connect_request(Some(false)), &mut BytesMut::new())
        .unwrap();
    let mut src = server_bytes(|s, d| s.encode(connect_request(Some(false)).reject(), d));
    assert!(matches!(
        codec.decode(&mut src),
        Ok(Some(client::Incoming::Connect(_)))
    ));
    codec
}

fn client_bytes(
    f: impl FnOnce(&mut ClientCodec, &mut BytesMut) -> Result<(), WireError>,
) -> BytesMut {
    let mut dst = BytesMut::new();
    f(&mut ClientCodec::new(), &mut dst).unwrap();
    dst
}

fn server_bytes(
    f: impl FnOnce(&mut ServerCodec, &mut BytesMut) -> Result<(), WireError>,
) -> BytesMut {
    let mut dst = BytesMut::new();
    f(&mut ServerCodec::new(), &mut dst).unwrap();
    dst
}

/// A raw frame: length prefix, xid, opcode, then `body`.
fn raw_request(xid: i32, opcode: i32, body: &[u8]) -> BytesMut {
    let mut dst = BytesMut::new();
    dst.put_i32(8 + body.len() as i32);
    dst.put_i32(xid);
    dst.put_i32(opcode);
    dst.put_slice(body);
    dst
}

fn string(s: &[u8]) -> Vec<u8> {
    let mut out = (s.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(s);
    out
}

fn get_data(xid: i32, path: &str) -> RequestFrame {
    RequestFrame {
        xid: Xid(xid),
        request: Request::GetData(GetDataRequest {
            path: path.into(),
            watch: false,
        }),
    }
}

// ---- server side: framing errors close the connection ----

#[test]
fn negative_frame_length_is_a_framing_error_and_the_codec_stays_failed() {
    let mut codec = connected_server();
    let mut src = BytesMut::from(&[0xff, 0xff, 0xff, 0xf0, 0, 0, 0, 0][..]);
    let err = codec.decode(&mut src).unwrap_err();
    assert!(
        matches!(err, WireError::NegativeFrameLength { length: -16 }),
        "{err:?}"
    );
    // Whatever follows is ignored: the server must close.
    src.extend_from_slice(&client_bytes(|c, d| c.encode(get_data(1, "/a"), d)));
    assert!(codec.decode(&mut src).unwrap().is_none());
}

#[test]
fn request_frame_at_the_default_limit_is_accepted() {
    // 0xfffff bytes of payload: header 8 + path "/" 5 + data length 4 + version 4.
    let data = vec![7u8; REQUEST_FRAME_BYTES_MAX_DEFAULT - 21];
    let set = RequestFrame {
        xid: Xid(9),
        request: Request::SetData(SetDataRequest {
            path: "/".into(),
            data: Some(data.into()),
            version: -1,
        }),
    };
    let mut src = client_bytes(|c, d| c.encode(set.clone(), d));
    assert_eq!(src.len(), 4 + REQUEST_FRAME_BYTES_MAX_DEFAULT);
    let Some(server::Incoming::Request(got)) = connected_server().decode(&mut src).unwrap() else {
        panic!()
    };
    assert_eq!(got, set);
}

#[test]
fn request_frame_one_byte_over_the_limit_is_refused_from_its_prefix_alone() {
    let mut codec = connected_server();
    // Only the prefix has arrived: the check must not wait for (or buffer) 1 MiB.
    let mut src = BytesMut::from(&(REQUEST_FRAME_BYTES_MAX_DEFAULT as u32 + 1).to_be_bytes()[..]);
    let err = codec.decode(&mut src).unwrap_err();
    assert!(
        matches!(
            err,
            WireError::FrameTooLarge {
                length: 0x100000,
                max: 0xfffff
            }
        ),
        "{err:?}"
    );
}

#[test]
fn the_frame_limit_is_configurable() {
    let mut codec = ServerCodec::with_frame_bytes_max(100);
    let mut src = client_bytes(|c, d| c.encode(connect_request(Some(false)), d));
    assert!(matches!(
        codec.decode(&mut src),
        Ok(Some(server::Incoming::Connect(_)))
    ));
    let mut src = client_bytes(|c, d| c.encode(get_data(1, &"x".repeat(100)), d));
    let err = codec.decode(&mut src).unwrap_err();
    assert!(
        matches!(err, WireError::FrameTooLarge { max: 100, .. }),
        "{err:?}"
    );
}

#[test]
fn a_frame_too_short_for_its_request_header_is_a_framing_error() {
    let mut codec = connected_server();
    let mut src = BytesMut::from(&[0, 0, 0, 4, 0, 0, 0, 1][..]);
    let err = codec.decode(&mut src).unwrap_err();
    assert!(
        matches!(
            err,
            WireError::Truncated {
                field: "RequestHeader.type",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_truncated_connect_request_is_a_framing_error() {
    let mut codec = ServerCodec::new();
    let mut src = BytesMut::from(&[0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..]);
    let err = codec.decode(&mut src).unwrap_err();
    assert!(matches!(
        err,
        WireError::Truncated {
            field: "ConnectRequest.lastZxidSeen",
            ..
        }
    ));
}

#[test]
fn eof_in_the_middle_of_a_frame_is_an_error_and_at_a_boundary_is_not() {
    let mut codec = connected_server();
    let whole = client_bytes(|c, d| c.encode(get_data(1, "/a"), d));
    let mut src = BytesMut::from(&whole[..whole.len() - 1]);
    let err = codec.decode_eof(&mut src).unwrap_err();
    assert!(
        matches!(err, WireError::ClosedMidFrame { buffered: 18 }),
        "{err:?}"
    );
    let mut codec = connected_server();
    let mut src = whole;
    assert!(codec.decode_eof(&mut src).unwrap().is_some());
    assert!(codec.decode_eof(&mut src).unwrap().is_none());
}

// ---- server side: a bad record is MARSHALLINGERROR for that xid, and the
// connection goes on ----

fn expect_malformed(item: Option<server::Incoming>, xid: i32, op: OpCode) -> WireError {
    match item {
        Some(server::Incoming::Malformed {
            xid: x,
            opcode,
            error,
        }) => {
            assert_eq!((x, opcode), (Xid(xid), op));
            error
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
}

#[test]
fn a_truncated_body_is_malformed_with_its_xid_and_the_next_request_still_decodes() {
    let mut codec = connected_server();
    // getData whose path declares 5 bytes but carries 2, then a valid request.
    let mut body = 5i32.to_be_bytes().to_vec();
    body.extend_from_slice(b"/d");
    let mut src = raw_request(42, 4, &body);
    src.extend_from_slice(&client_bytes(|c, d| c.encode(get_data(43, "/ok"), d)));
    let err = expect_malformed(codec.decode(&mut src).unwrap(), 42, OpCode::GetData);
    assert!(
        matches!(
            err,
            WireError::Truncated {
                field: "GetDataRequest.path",
                offset: 8,
                needed: 5,
                remaining: 2
            }
        ),
        "{err:?}"
    );
    let Some(server::Incoming::Request(next)) = codec.decode(&mut src).unwrap() else {
        panic!()
    };
    assert_eq!(next, get_data(43, "/ok"));
}

#[test]
fn an_empty_body_for_an_op_that_needs_one_is_malformed() {
    let mut codec = connected_server();
    let err = expect_malformed(
        codec.decode(&mut raw_request(5, 1, &[])).unwrap(),
        5,
        OpCode::Create,
    );
    assert!(
        matches!(
            err,
            WireError::Truncated {
                field: "CreateRequest.path",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_path_that_is_not_utf8_is_malformed() {
    let mut codec = connected_server();
    let mut body = string(&[b'/', 0xff, 0xfe]);
    body.push(0);
    let err = expect_malformed(
        codec.decode(&mut raw_request(3, 3, &body)).unwrap(),
        3,
        OpCode::Exists,
    );
    assert!(
        matches!(
            err,
            WireError::InvalidUtf8 {
                field: "ExistsRequest.path",
                offset: 12,
                length: 3
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_string_length_below_minus_one_is_malformed() {
    let mut codec = connected_server();
    let body = (-2i32).to_be_bytes();
    let err = expect_malformed(
        codec.decode(&mut raw_request(3, 9, &body)).unwrap(),
        3,
        OpCode::Sync,
    );
    assert!(
        matches!(err, WireError::NegativeLength { length: -2, .. }),
        "{err:?}"
    );
}

#[test]
fn a_vector_count_of_two_to_the_31_is_malformed_without_reserving_it() {
    let mut codec = connected_server();
    // setWatches: relativeZxid, then dataWatches declaring i32::MAX paths.
    let mut body = 0i64.to_be_bytes().to_vec();
    body.extend_from_slice(&i32::MAX.to_be_bytes());
    body.extend_from_slice(&string(b"/a"));
    let err = expect_malformed(
        codec.decode(&mut raw_request(-8, 101, &body)).unwrap(),
        -8,
        OpCode::SetWatches,
    );
    assert!(
        matches!(
            err,
            WireError::CountTooLarge {
                field: "SetWatches.data_watches",
                count: i32::MAX,
                ..
            }
        ),
        "{err:?}"
    );
    // And an ACL vector (12 bytes an element at least).
    let mut body = string(b"/n");
    body.extend_from_slice(&(-1i32).to_be_bytes()); // null data
    body.extend_from_slice(&i32::MAX.to_be_bytes());
    let err = expect_malformed(
        codec.decode(&mut raw_request(1, 1, &body)).unwrap(),
        1,
        OpCode::Create,
    );
    assert!(
        matches!(
            err,
            WireError::CountTooLarge {
                element_bytes_min: 12,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn an_add_watch_mode_other_than_0_or_1_is_malformed() {
    let mut codec = connected_server();
    let mut body = string(b"/w");
    body.extend_from_slice(&2i32.to_be_bytes());
    let err = expect_malformed(
        codec.decode(&mut raw_request(7, 106, &body)).unwrap(),
        7,
        OpCode::AddWatch,
    );
    assert!(matches!(
        err,
        WireError::InvalidValue {
            field: "AddWatchRequest.mode",
            value: 2,
            ..
        }
    ));
}

fn multi_header(op: i32, done: bool) -> Vec<u8> {
    let mut out = op.to_be_bytes().to_vec();
    out.push(u8::from(done));
    out.extend_from_slice(&(-1i32).to_be_bytes());
    out
}

#[test]
fn a_multi_with_a_read_op_and_a_multi_read_with_a_write_op_are_malformed() {
    let mut codec = connected_server();
    let mut body = multi_header(4, false);
    body.extend_from_slice(&string(b"/a"));
    body.push(0);
    body.extend_from_slice(&multi_header(-1, true));
    let err = expect_malformed(
        codec.decode(&mut raw_request(1, 14, &body)).unwrap(),
        1,
        OpCode::Multi,
    );
    assert!(
        matches!(
            err,
            WireError::InvalidValue {
                field: "MultiHeader.type",
                offset: 8,
                value: 4
            }
        ),
        "{err:?}"
    );
    // The same op under multiRead is fine...
    let Some(server::Incoming::Request(ok)) = codec.decode(&mut raw_request(2, 22, &body)).unwrap()
    else {
        panic!()
    };
    assert_eq!(ok.request.opcode(), OpCode::MultiRead);
    // ...and a delete under multiRead is not.
    let mut body = multi_header(2, false);
    body.extend_from_slice(&string(b"/a"));
    body.extend_from_slice(&(-1i32).to_be_bytes());
    body.extend_from_slice(&multi_header(-1, true));
    let err = expect_malformed(
        codec.decode(&mut raw_request(3, 22, &body)).unwrap(),
        3,
        OpCode::MultiRead,
    );
    assert!(
        matches!(err, WireError::InvalidValue { value: 2, .. }),
        "{err:?}"
    );
    // An unknown sub-op type, and a multi without its terminator.
    let err = expect_malformed(
        codec
            .decode(&mut raw_request(4, 14, &multi_header(77, false)))
            .unwrap(),
        4,
        OpCode::Multi,
    );
    assert!(
        matches!(err, WireError::InvalidValue { value: 77, .. }),
        "{err:?}"
    );
    let err = expect_malformed(
        codec.decode(&mut raw_request(5, 14, &[])).unwrap(),
        5,
        OpCode::Multi,
    );
    assert!(
        matches!(
            err,
            WireError::Truncated {
                field: "MultiHeader.type",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn an_empty_multi_is_legal() {
    let mut codec = connected_server();
    let Some(server::Incoming::Request(r)) = codec
        .decode(&mut raw_request(1, 14, &multi_header(-1, true)))
        .unwrap()
    else {
        panic!()
    };
    let Request::Multi(m) = r.request else {
        panic!()
    };
    assert!(m.ops.is_empty());
}

// ---- server side: unknown opcodes are UNIMPLEMENTED and close ----

#[test]
fn unknown_and_server_internal_opcodes_are_reported_with_their_xid() {
    let mut codec = connected_server();
    for opcode in [999, 10, 0, 20, -10, -1] {
        match codec
            .decode(&mut raw_request(11, opcode, b"whatever"))
            .unwrap()
        {
            Some(server::Incoming::UnknownOpCode { xid, opcode: op }) => {
                assert_eq!((xid, op), (Xid(11), opcode))
            }
            other => panic!("{opcode}: {other:?}"),
        }
    }
    // The reply ZooKeeper sends: xid, zxid -1, UNIMPLEMENTED, no body.
    let bytes = server_bytes(|s, d| s.encode(Reply::unimplemented(Xid(11)), d));
    assert_eq!(
        &bytes[..],
        &[
            0, 0, 0, 16, 0, 0, 0, 11, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xff, 0xfa
        ]
    );
}

// ---- server side: leniency where ZooKeeper is lenient ----

#[test]
fn trailing_bytes_after_a_request_record_are_ignored_like_zookeeper() {
    let mut codec = connected_server();
    let mut body = string(b"/t");
    body.push(1);
    body.extend_from_slice(b"trailing garbage");
    let Some(server::Incoming::Request(r)) = codec.decode(&mut raw_request(8, 4, &body)).unwrap()
    else {
        panic!()
    };
    assert_eq!(
        r,
        RequestFrame {
            xid: Xid(8),
            request: Request::GetData(GetDataRequest {
                path: "/t".into(),
                watch: true
            })
        }
    );
}

#[test]
fn null_strings_buffers_and_vectors_are_accepted_and_null_data_stays_null() {
    let mut codec = connected_server();
    // create: path null, data null, acl null, flags 0.
    let mut body = Vec::new();
    for _ in 0..3 {
        body.extend_from_slice(&(-1i32).to_be_bytes());
    }
    body.extend_from_slice(&0i32.to_be_bytes());
    let Some(server::Incoming::Request(r)) = codec.decode(&mut raw_request(1, 1, &body)).unwrap()
    else {
        panic!()
    };
    let Request::Create(c) = r.request else {
        panic!()
    };
    assert_eq!((&*c.path, c.data, c.acl.len()), ("", None, 0));
}

#[test]
fn connect_request_with_and_without_the_read_only_byte() {
    for read_only in [None, Some(false), Some(true)] {
        let mut codec = ServerCodec::new();
        let mut src = client_bytes(|c, d| c.encode(connect_request(read_only), d));
        assert_eq!(src.len(), if read_only.is_some() { 49 } else { 48 });
        let Some(server::Incoming::Connect(req)) = codec.decode(&mut src).unwrap() else {
            panic!()
        };
        assert_eq!(req.read_only, read_only);
        assert!(codec.is_connected());
        // The response carries the byte exactly when the request did: 41 or 40
        // bytes on the wire (docs/client-protocol.md, "Connect request and
        // response").
        let resp = req.accept(30_000, SessionId(1), Bytes::from_static(&[1; 16]));
        let bytes = server_bytes(|s, d| s.encode(resp, d));
        assert_eq!(bytes.len(), if read_only.is_some() { 41 } else { 40 });
    }
}

#[test]
fn the_server_codec_writes_the_read_only_byte_exactly_when_the_request_had_it() {
    let response = |read_only| ConnectResponse {
        protocol_version: 0,
        timeout_ms: 4000,
        session_id: SessionId(5),
        passwd: Bytes::from_static(&[3; 16]),
        read_only,
    };
    for (sent, given, expected_len) in [
        (None, Some(true), 40),
        (Some(true), None, 41),
        (Some(true), Some(true), 41),
        (None, None, 40),
    ] {
        let mut codec = ServerCodec::new();
        let mut src = client_bytes(|c, d| c.encode(connect_request(sent), d));
        codec.decode(&mut src).unwrap();
        assert_eq!(codec.connect_had_read_only_byte(), Some(sent.is_some()));
        let mut dst = BytesMut::new();
        codec.encode(response(given), &mut dst).unwrap();
        assert_eq!(dst.len(), expected_len, "sent {sent:?}, given {given:?}");
        if expected_len == 41 {
            assert_eq!(dst[40], u8::from(given.unwrap_or(false)));
        }
    }
}

#[test]
fn frames_split_at_every_byte_boundary_decode_the_same() {
    let mut stream = client_bytes(|c, d| {
        c.encode(connect_request(Some(false)), d)?;
        c.encode(get_data(1, "/a"), d)?;
        c.encode(RequestFrame::ping(), d)
    });
    stream.extend_from_slice(&raw_request(2, 999, &[]));
    let mut codec = ServerCodec::new();
    let mut src = BytesMut::new();
    let mut items = Vec::new();
    for byte in stream.iter() {
        src.put_u8(*byte);
        while let Some(item) = codec.decode(&mut src).unwrap() {
            items.push(item);
        }
    }
    assert_eq!(items.len(), 4);
    assert!(matches!(items[0], server::Incoming::Connect(_)));
    assert!(matches!(&items[1], server::Incoming::Request(r) if *r == get_data(1, "/a")));
    assert!(matches!(&items[2], server::Incoming::Request(r) if *r == RequestFrame::ping()));
    assert!(matches!(
        items[3],
        server::Incoming::UnknownOpCode { opcode: 999, .. }
    ));
}

// ---- server side: four-letter words ----

#[test]
fn a_four_letter_word_instead_of_a_connect_request_is_recognised() {
    let mut codec = ServerCodec::new();
    let mut src = BytesMut::from(&b"ruokextra bytes are ignored"[..]);
    let item = codec.decode(&mut src).unwrap();
    assert!(matches!(
        item,
        Some(server::Incoming::FourLetterWord(FourLetterWord::Ruok))
    ));
    assert!(codec.decode_eof(&mut src).unwrap().is_none());
}

#[test]
fn stmk_waits_for_its_eight_byte_mask() {
    let mut codec = ServerCodec::new();
    let mut src = BytesMut::from(&b"stmk\0\0\0\0"[..]);
    assert!(codec.decode(&mut src).unwrap().is_none());
    src.extend_from_slice(&[0, 0, 1, 50]);
    let item = codec.decode(&mut src).unwrap();
    assert!(
        matches!(
            item,
            Some(server::Incoming::FourLetterWord(FourLetterWord::Stmk {
                trace_mask: 306
            }))
        ),
        "{item:?}"
    );
}

#[test]
fn an_unknown_word_is_a_huge_length_and_words_after_connect_are_lengths() {
    let err = ServerCodec::new()
        .decode(&mut BytesMut::from(&b"xxxx"[..]))
        .unwrap_err();
    assert!(matches!(err, WireError::FrameTooLarge { .. }), "{err:?}");
    let err = connected_server()
        .decode(&mut BytesMut::from(&b"ruok"[..]))
        .unwrap_err();
    assert!(
        matches!(
            err,
            WireError::FrameTooLarge {
                length: 0x72756f6b,
                ..
            }
        ),
        "{err:?}"
    );
}

// ---- client side: strict ----

fn reply_bytes(reply: Reply) -> BytesMut {
    server_bytes(|s, d| s.encode(reply, d))
}

fn raw_reply(codec: &mut ClientCodec, src: &mut BytesMut) -> rzk_wire::RawReply {
    match codec.decode(src).unwrap() {
        Some(client::Incoming::Reply(raw)) => raw,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_reply_with_trailing_bytes_is_an_error_for_the_client() {
    let data = GetDataResponse {
        data: Some(Bytes::from_static(b"v")),
        stat: Stat::default(),
    };
    let mut src = reply_bytes(Reply::ok(Xid(1), Zxid::ZERO, Response::GetData(data)));
    src.put_u8(0);
    src[3] += 1;
    let raw = raw_reply(&mut connected_client(), &mut src);
    let err = raw.decode(OpCode::GetData).unwrap_err();
    assert!(
        matches!(err, WireError::TrailingBytes { trailing: 1, .. }),
        "{err:?}"
    );
}

#[test]
fn an_error_reply_with_a_body_is_an_error_for_the_client() {
    let mut src = reply_bytes(Reply::error(Xid(1), Zxid::ZERO, ErrorCode::NoNode));
    src.put_i32(0);
    src[3] += 4;
    let raw = raw_reply(&mut connected_client(), &mut src);
    let err = raw.decode(OpCode::GetData).unwrap_err();
    assert!(matches!(
        err,
        WireError::TrailingBytes {
            record: "ReplyHeader",
            offset: 16,
            trailing: 4
        }
    ));
}

#[test]
fn an_unknown_error_code_is_an_error_for_the_client() {
    let mut src = reply_bytes(Reply::error(Xid(1), Zxid::ZERO, ErrorCode::NoNode));
    src[16..20].copy_from_slice(&(-126i32).to_be_bytes());
    let err = connected_client().decode(&mut src).unwrap_err();
    assert!(matches!(
        err,
        WireError::InvalidValue {
            field: "ReplyHeader.err",
            value: -126,
            ..
        }
    ));
}

#[test]
fn a_body_decoded_with_the_wrong_opcode_is_an_error() {
    let data = GetDataResponse {
        data: Some(Bytes::from_static(b"v")),
        stat: Stat::default(),
    };
    let mut src = reply_bytes(Reply::ok(Xid(1), Zxid::ZERO, Response::GetData(data)));
    let raw = raw_reply(&mut connected_client(), &mut src);
    assert!(raw.decode(OpCode::Create).is_err());
    assert!(raw.decode(OpCode::Delete).is_err());
    assert!(raw.decode(OpCode::AddWatch).is_err());
    assert!(matches!(
        raw.decode(OpCode::Notification),
        Err(WireError::UnknownOpCode { opcode: 0 })
    ));
}

#[test]
fn add_watch_reply_has_its_four_byte_body() {
    let mut src = reply_bytes(Reply::ok(Xid(5), Zxid::from_u64(9), Response::AddWatch));
    assert_eq!(src.len(), 4 + 16 + 4);
    let raw = raw_reply(&mut connected_client(), &mut src);
    assert_eq!(
        raw.decode(OpCode::AddWatch).unwrap().result,
        Ok(Response::AddWatch)
    );
    // A missing body is an error (the Java client treats it as one too).
    let mut src = reply_bytes(Reply::ok(Xid(5), Zxid::from_u64(9), Response::Empty));
    let raw = raw_reply(&mut connected_client(), &mut src);
    assert!(matches!(
        raw.decode(OpCode::AddWatch),
        Err(WireError::Truncated { .. })
    ));
}

#[test]
fn a_notification_with_trailing_bytes_or_an_unknown_event_type_is_an_error() {
    let note = Notification {
        zxid: Zxid::from_i64(-1),
        event: WatcherEvent {
            event_type: EventType::NodeCreated,
            state: KeeperState::SyncConnected,
            path: "/n".into(),
        },
    };
    let mut src = server_bytes(|s, d| s.encode(note.clone(), d));
    assert_eq!(
        connected_client().decode(&mut src.clone()).unwrap(),
        Some(client::Incoming::Notification(note))
    );
    src[23] = 9; // event type 9 (prefix 4 + header 16, big-endian int)
    let err = connected_client().decode(&mut src.clone()).unwrap_err();
    assert!(matches!(
        err,
        WireError::InvalidValue {
            field: "WatcherEvent.event_type",
            value: 9,
            ..
        }
    ));
    src[23] = 1;
    src.put_u8(0);
    src[3] += 1;
    let err = connected_client().decode(&mut src).unwrap_err();
    assert!(
        matches!(
            err,
            WireError::TrailingBytes {
                record: "WatcherEvent",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn connect_response_must_match_the_requests_read_only_byte() {
    let response = |read_only| ConnectResponse {
        protocol_version: 0,
        timeout_ms: 4000,
        session_id: SessionId(5),
        passwd: Bytes::from_static(&[3; 16]),
        read_only,
    };
    for (sent, got, ok) in [
        (Some(false), Some(false), true),
        (None, None, true),
        (Some(false), None, false),
        (None, Some(false), false),
    ] {
        let mut codec = ClientCodec::new();
        codec
            .encode(connect_request(sent), &mut BytesMut::new())
            .unwrap();
        let mut src = server_bytes(|s, d| s.encode(response(got), d));
        assert_eq!(
            codec.decode(&mut src).is_ok(),
            ok,
            "sent {sent:?}, got {got:?}"
        );
    }
    // A codec that did not encode the request accepts either form.
    let mut src = server_bytes(|s, d| s.encode(response(None), d));
    assert!(ClientCodec::new().decode(&mut src).is_ok());
}

#[test]
fn a_strict_client_refuses_boolean_bytes_other_than_0_and_1() {
    let mut src = server_bytes(|s, d| s.encode(connect_request(Some(false)).reject(), d));
    let last = src.len() - 1;
    src[last] = 2;
    let err = ClientCodec::new().decode(&mut src).unwrap_err();
    assert!(matches!(
        err,
        WireError::InvalidValue {
            field: "ConnectResponse.readOnly",
            value: 2,
            ..
        }
    ));
}

#[test]
fn reply_frame_limit_default_has_headroom_over_the_request_limit() {
    // The getData reply of the largest data a default server accepts fits.
    let data = vec![1u8; REQUEST_FRAME_BYTES_MAX_DEFAULT - 21];
    let reply = Reply::ok(
        Xid(1),
        Zxid::ZERO,
        Response::GetData(GetDataResponse {
            data: Some(data.into()),
            stat: Stat::default(),
        }),
    );
    let mut src = reply_bytes(reply.clone());
    assert!(src.len() - 4 > REQUEST_FRAME_BYTES_MAX_DEFAULT);
    let raw = raw_reply(&mut connected_client(), &mut src);
    assert_eq!(raw.decode(OpCode::GetData).unwrap(), reply);
    // One byte over the reply limit is refused from the prefix alone.
    let mut src = BytesMut::from(&(REPLY_FRAME_BYTES_MAX_DEFAULT as u32 + 1).to_be_bytes()[..]);
    let err = connected_client().decode(&mut src).unwrap_err();
    assert!(matches!(
        err,
        WireError::FrameTooLarge {
            max: REPLY_FRAME_BYTES_MAX_DEFAULT,
            ..
        }
    ));
}

#[test]
fn a_request_over_the_clients_limit_is_refused_and_leaves_the_buffer_intact() {
    let mut codec = ClientCodec::with_limits(1000, 64);
    let mut dst = BytesMut::new();
    codec.encode(get_data(1, "/fits"), &mut dst).unwrap();
    let before = dst.clone();
    let err = codec
        .encode(get_data(2, &"p".repeat(64)), &mut dst)
        .unwrap_err();
    assert!(
        matches!(err, WireError::FrameTooLarge { max: 64, .. }),
        "{err:?}"
    );
    assert_eq!(dst, before);
}

#[test]
fn a_reply_frame_too_short_for_its_header_is_an_error() {
    let mut src = BytesMut::from(&[0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0][..]);
    let err = connected_client().decode(&mut src).unwrap_err();
    assert!(
        matches!(
            err,
            WireError::Truncated {
                field: "ReplyHeader.zxid",
                ..
            }
        ),
        "{err:?}"
    );
}

// ---- end to end over a stream ----

#[tokio::test]
async fn client_and_server_codecs_talk_over_a_stream() {
    let (a, b) = tokio::io::duplex(64);
    let mut client = Framed::new(a, ClientCodec::new());
    let mut server = Framed::new(b, ServerCodec::new());
    let server_task = tokio::spawn(async move {
        let Some(Ok(server::Incoming::Connect(req))) = server.next().await else {
            panic!()
        };
        server
            .send(req.accept(10_000, SessionId(0x42), Bytes::from_static(&[5; 16])))
            .await
            .unwrap();
        while let Some(item) = server.next().await {
            match item.unwrap() {
                server::Incoming::Request(RequestFrame {
                    xid,
                    request: Request::GetData(g),
                }) => {
                    let note = Notification {
                        zxid: Zxid::from_i64(-1),
                        event: WatcherEvent {
                            event_type: EventType::NodeDataChanged,
                            state: KeeperState::SyncConnected,
                            path: g.path.clone(),
                        },
                    };
                    server.send(note).await.unwrap();
                    let data = GetDataResponse {
                        data: None,
                        stat: Stat::default(),
                    };
                    server
                        .send(Reply::ok(xid, Zxid::from_u64(3), Response::GetData(data)))
                        .await
                        .unwrap();
                }
                server::Incoming::Request(RequestFrame {
                    xid,
                    request: Request::CloseSession,
                }) => {
                    server
                        .send(Reply::ok(xid, Zxid::from_u64(4), Response::Empty))
                        .await
                        .unwrap();
                    return;
                }
                other => panic!("{other:?}"),
            }
        }
    });
    client
        .send(client::Outgoing::Connect(connect_request(Some(false))))
        .await
        .unwrap();
    client.send(get_data(1, "/e2e")).await.unwrap();
    client
        .send(RequestFrame {
            xid: Xid(2),
            request: Request::CloseSession,
        })
        .await
        .unwrap();
    let Some(Ok(client::Incoming::Connect(resp))) = client.next().await else {
        panic!()
    };
    assert_eq!(
        (resp.session_id, resp.read_only),
        (SessionId(0x42), Some(false))
    );
    let Some(Ok(client::Incoming::Notification(n))) = client.next().await else {
        panic!()
    };
    assert_eq!(&n.event.path, "/e2e");
    let Some(Ok(client::Incoming::Reply(raw))) = client.next().await else {
        panic!()
    };
    let reply = raw.decode(OpCode::GetData).unwrap();
    assert_eq!(
        reply.result,
        Ok(Response::GetData(GetDataResponse {
            data: None,
            stat: Stat::default()
        }))
    );
    let Some(Ok(client::Incoming::Reply(raw))) = client.next().await else {
        panic!()
    };
    assert_eq!(
        raw.decode(OpCode::CloseSession).unwrap().result,
        Ok(Response::Empty)
    );
    server_task.await.unwrap();
    assert!(client.next().await.is_none());
}
