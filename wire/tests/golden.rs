//! Golden bytes (design, testing layer 2): every frame captured from ZooKeeper
//! 3.8.0 in Appendix A of the protocol reference is decoded by the codec of the
//! side that receives it, checked field by field against the doc's annotation,
//! and re-encoded by the codec of the side that sends it, byte for byte.

use bytes::{Bytes, BytesMut};
use rzk_wire::{
    client, server, Acl, ClientCodec, ConnectRequest, ConnectResponse, CreateRequest, ErrorCode,
    EventType, KeeperState, MultiOp, MultiResult, OpCode, Perms, Reply, Request, RequestFrame,
    Response, ServerCodec, SessionId, SetDataRequest, Stat, Xid,
};
use rzk_zxid::Zxid;
use tokio_util::codec::{Decoder, Encoder};

/// One frame of `tests/data/appendix_a.txt`.
struct Golden {
    id: String,
    to_server: bool,
    bytes: Bytes,
}

fn load() -> Vec<Golden> {
    let text = include_str!("data/appendix_a.txt");
    let mut frames: Vec<Golden> = Vec::new();
    let mut current: Option<(String, bool, Vec<u8>)> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("== ") {
            if let Some((id, to_server, bytes)) = current.take() {
                frames.push(Golden {
                    id,
                    to_server,
                    bytes: bytes.into(),
                });
            }
            let (id, dir) = rest.split_once(' ').expect("`== id dir`");
            current = Some((id.to_owned(), dir == "C->S", Vec::new()));
        } else if line.len() > 6 && line.as_bytes()[0].is_ascii_hexdigit() {
            let hex = &line[6..line.len().min(53)];
            let (_, _, bytes) = current.as_mut().expect("dump line before a `==` line");
            for byte in hex.split_whitespace() {
                bytes.push(u8::from_str_radix(byte, 16).expect("hex byte"));
            }
        }
    }
    if let Some((id, to_server, bytes)) = current {
        frames.push(Golden {
            id,
            to_server,
            bytes: bytes.into(),
        });
    }
    frames
}

fn frame(id: &str) -> Bytes {
    load()
        .into_iter()
        .find(|g| g.id == id)
        .unwrap_or_else(|| panic!("no frame {id}"))
        .bytes
}

/// Decodes a client→server frame; the connect frames with a fresh codec, the
/// others after A.1's ConnectRequest.
fn server_decode(g: &Golden) -> server::Incoming {
    let mut codec = ServerCodec::new();
    let mut src = BytesMut::new();
    let is_connect = g.id.starts_with("A.1.") || g.id.starts_with("A.12.1");
    if !is_connect {
        src.extend_from_slice(&frame("A.1.1"));
        assert!(matches!(
            codec.decode(&mut src).unwrap(),
            Some(server::Incoming::Connect(_))
        ));
    }
    src.extend_from_slice(&g.bytes);
    let item = codec
        .decode(&mut src)
        .unwrap()
        .unwrap_or_else(|| panic!("{}: incomplete", g.id));
    assert!(src.is_empty(), "{}: bytes left over", g.id);
    item
}

/// Decodes a server→client frame; connect responses with a fresh codec, the
/// others after A.2's ConnectResponse.
fn client_decode(g: &Golden) -> client::Incoming {
    let mut codec = ClientCodec::new();
    let mut src = BytesMut::new();
    let is_connect = g.id.starts_with("A.2.") || g.id.starts_with("A.12.2");
    if !is_connect {
        src.extend_from_slice(&frame("A.2.1"));
        assert!(matches!(
            codec.decode(&mut src).unwrap(),
            Some(client::Incoming::Connect(_))
        ));
    }
    src.extend_from_slice(&g.bytes);
    let item = codec
        .decode(&mut src)
        .unwrap()
        .unwrap_or_else(|| panic!("{}: incomplete", g.id));
    assert!(src.is_empty(), "{}: bytes left over", g.id);
    item
}

/// The opcode of the request each captured reply answers (from the doc's text).
fn reply_opcode(id: &str) -> OpCode {
    match id {
        "A.3.2" => OpCode::Ping,
        "A.4.2" => OpCode::Create,
        "A.5.2" | "A.8.2" => OpCode::GetData,
        "A.6.2" => OpCode::SetData,
        "A.9.2" | "A.10.2" => OpCode::Multi,
        "A.11.2" => OpCode::Auth,
        "A.11.4" => OpCode::CloseSession,
        other => panic!("{other} is not a reply"),
    }
}

fn encode_from_client(item: client::Outgoing) -> Bytes {
    let mut dst = BytesMut::new();
    ClientCodec::new().encode(item, &mut dst).unwrap();
    dst.freeze()
}

fn encode_from_server(item: server::Outgoing) -> Bytes {
    let mut dst = BytesMut::new();
    ServerCodec::new().encode(item, &mut dst).unwrap();
    dst.freeze()
}

#[test]
fn the_data_file_holds_every_dump_of_appendix_a() {
    let frames = load();
    let ids: Vec<&str> = frames.iter().map(|g| g.id.as_str()).collect();
    assert_eq!(frames.len(), 23, "{ids:?}");
    for section in 1..=12 {
        assert!(
            ids.iter()
                .any(|id| id.starts_with(&format!("A.{section}."))),
            "A.{section}"
        );
    }
    // Each frame's length prefix matches the bytes transcribed after it, which
    // catches a dropped or doubled dump line.
    for g in &frames {
        let declared = u32::from_be_bytes(g.bytes[..4].try_into().unwrap()) as usize;
        assert_eq!(declared, g.bytes.len() - 4, "{}", g.id);
    }
}

#[test]
fn every_client_frame_decodes_and_re_encodes_byte_for_byte() {
    for g in load().iter().filter(|g| g.to_server) {
        let outgoing = match server_decode(g) {
            server::Incoming::Connect(c) => client::Outgoing::Connect(c),
            server::Incoming::Request(r) => client::Outgoing::Request(r),
            other => panic!("{}: decoded as {other:?}", g.id),
        };
        assert_eq!(encode_from_client(outgoing), g.bytes, "{}", g.id);
    }
}

#[test]
fn every_server_frame_decodes_and_re_encodes_byte_for_byte() {
    for g in load().iter().filter(|g| !g.to_server) {
        let outgoing = match client_decode(g) {
            client::Incoming::Connect(c) => server::Outgoing::Connect(c),
            client::Incoming::Notification(n) => server::Outgoing::Notification(n),
            client::Incoming::Reply(raw) => {
                server::Outgoing::Reply(raw.decode(reply_opcode(&g.id)).unwrap())
            }
        };
        assert_eq!(encode_from_server(outgoing), g.bytes, "{}", g.id);
    }
}

fn request(id: &str) -> RequestFrame {
    let g = load().into_iter().find(|g| g.id == id).unwrap();
    match server_decode(&g) {
        server::Incoming::Request(r) => r,
        other => panic!("{id}: {other:?}"),
    }
}

fn reply(id: &str) -> Reply {
    let g = load().into_iter().find(|g| g.id == id).unwrap();
    match client_decode(&g) {
        client::Incoming::Reply(raw) => raw.decode(reply_opcode(id)).unwrap(),
        other => panic!("{id}: {other:?}"),
    }
}

fn connect_request(id: &str) -> ConnectRequest {
    let g = load().into_iter().find(|g| g.id == id).unwrap();
    match server_decode(&g) {
        server::Incoming::Connect(c) => c,
        other => panic!("{id}: {other:?}"),
    }
}

fn connect_response(id: &str) -> ConnectResponse {
    let g = load().into_iter().find(|g| g.id == id).unwrap();
    match client_decode(&g) {
        client::Incoming::Connect(c) => c,
        other => panic!("{id}: {other:?}"),
    }
}

#[test]
fn a1_a2_a12_connect_handshakes_match_the_annotations() {
    let req = connect_request("A.1.1");
    assert_eq!(req.protocol_version, 0);
    assert_eq!(req.last_zxid_seen, Zxid::ZERO);
    assert_eq!(req.timeout_ms, 30_000);
    assert_eq!(req.session_id, SessionId::NONE);
    assert_eq!(&req.passwd[..], &[0u8; 16]);
    assert_eq!(req.read_only, Some(false));

    let resp = connect_response("A.2.1");
    assert_eq!(resp.timeout_ms, 30_000);
    assert_eq!(resp.session_id, SessionId(0x0100_0006_ed6f_0024));
    assert_eq!(resp.passwd.len(), 16);
    assert_eq!(resp.read_only, Some(false));

    let resume = connect_request("A.12.1");
    assert_eq!(resume.timeout_ms, 4000);
    assert_eq!(resume.session_id, SessionId(0x0100_0006_ed6f_0017));
    let expired = connect_response("A.12.2");
    assert_eq!(expired.timeout_ms, 0);
    assert_eq!(expired.session_id, SessionId::NONE);
    // The helper a server uses for this answer produces exactly these bytes.
    assert_eq!(
        encode_from_server(server::Outgoing::Connect(resume.reject())),
        frame("A.12.2")
    );
}

#[test]
fn a3_ping_and_its_reply() {
    assert_eq!(request("A.3.1"), RequestFrame::ping());
    let r = reply("A.3.2");
    assert_eq!(
        (r.xid, r.zxid, r.result),
        (Xid::PING, Zxid::from_u64(0xa7), Ok(Response::Empty))
    );
}

#[test]
fn a4_create_and_its_reply() {
    let create = request("A.4.1");
    assert_eq!(create.xid, Xid(1));
    let Request::Create(c) = create.request else {
        panic!("{create:?}")
    };
    assert_eq!(&c.path, "/demo");
    assert_eq!(c.data.as_deref(), Some(&b"hi"[..]));
    assert_eq!(c.acl, Acl::open_unsafe());
    assert_eq!(c.flags, 0);
    let r = reply("A.4.2");
    assert_eq!(r.zxid, Zxid::from_u64(0xa8));
    let Ok(Response::Create(created)) = r.result else {
        panic!("{r:?}")
    };
    assert_eq!(&created.path, "/demo");
}

fn stat_a5() -> Stat {
    Stat {
        czxid: Zxid::from_u64(0xa8),
        mzxid: Zxid::from_u64(0xa8),
        ctime: 0x1a2_36fc_0532,
        mtime: 0x1a2_36fc_0532,
        version: 0,
        cversion: 0,
        aversion: 0,
        ephemeral_owner: SessionId::NONE,
        data_length: 2,
        num_children: 0,
        pzxid: Zxid::from_u64(0xa8),
    }
}

#[test]
fn a5_get_data_with_watch_and_its_reply() {
    let get = request("A.5.1");
    let Request::GetData(g) = get.request else {
        panic!("{get:?}")
    };
    assert_eq!((&*g.path, g.watch), ("/demo", true));
    let r = reply("A.5.2");
    let Ok(Response::GetData(data)) = r.result else {
        panic!("{r:?}")
    };
    assert_eq!(data.data.as_deref(), Some(&b"hi"[..]));
    assert_eq!(data.stat, stat_a5());
}

#[test]
fn a6_set_data_and_its_reply() {
    let set = request("A.6.1");
    let Request::SetData(s) = set.request else {
        panic!("{set:?}")
    };
    assert_eq!(
        (&*s.path, s.data.as_deref(), s.version),
        ("/demo", Some(&b"ho"[..]), 0)
    );
    let r = reply("A.6.2");
    assert_eq!(r.zxid, Zxid::from_u64(0xa9));
    let Ok(Response::Stat(stat)) = r.result else {
        panic!("{r:?}")
    };
    let expected = Stat {
        mzxid: Zxid::from_u64(0xa9),
        mtime: 0x1a2_36fc_0534,
        version: 1,
        ..stat_a5()
    };
    assert_eq!(stat, expected);
}

#[test]
fn a7_notification() {
    let g = load().into_iter().find(|g| g.id == "A.7.1").unwrap();
    let client::Incoming::Notification(n) = client_decode(&g) else {
        panic!()
    };
    assert_eq!(n.zxid, Zxid::from_i64(-1));
    assert_eq!(n.event.event_type, EventType::NodeDataChanged);
    assert_eq!(n.event.state, KeeperState::SyncConnected);
    assert_eq!(&n.event.path, "/demo");
}

#[test]
fn a8_error_reply_has_no_body() {
    let get = request("A.8.1");
    assert_eq!(get.request.path(), Some("/demo/missing"));
    let r = reply("A.8.2");
    assert_eq!(
        (r.xid, r.zxid, r.result),
        (Xid(3), Zxid::from_u64(0xa9), Err(ErrorCode::NoNode))
    );
}

#[test]
fn a9_multi_that_succeeds_keeps_null_data_null() {
    let multi = request("A.9.1");
    let Request::Multi(m) = multi.request else {
        panic!("{multi:?}")
    };
    assert_eq!(
        m.ops,
        vec![
            MultiOp::Create(CreateRequest {
                path: "/demo/k".into(),
                data: None,
                acl: Acl::open_unsafe(),
                flags: 0,
            }),
            MultiOp::SetData(SetDataRequest {
                path: "/demo".into(),
                data: Some(Bytes::from_static(b"x")),
                version: -1,
            }),
        ]
    );
    let r = reply("A.9.2");
    assert_eq!(r.zxid, Zxid::from_u64(0xaa));
    let Ok(Response::Multi(results)) = r.result else {
        panic!("{r:?}")
    };
    let [MultiResult::Create(created), MultiResult::SetData(stat)] = &results.results[..] else {
        panic!("{results:?}")
    };
    assert_eq!(&created.path, "/demo/k");
    assert_eq!(
        (
            stat.version,
            stat.cversion,
            stat.data_length,
            stat.num_children
        ),
        (2, 1, 1, 1)
    );
    assert_eq!(
        (stat.mzxid, stat.pzxid),
        (Zxid::from_u64(0xaa), Zxid::from_u64(0xaa))
    );
}

#[test]
fn a10_failed_multi_reports_rolled_back_and_failing_ops() {
    let multi = request("A.10.1");
    let Request::Multi(m) = multi.request else {
        panic!("{multi:?}")
    };
    assert_eq!(m.ops.len(), 2);
    assert_eq!(m.ops[0].opcode(), OpCode::Delete);
    let MultiOp::Check(check) = &m.ops[1] else {
        panic!("{m:?}")
    };
    assert_eq!((&*check.path, check.version), ("/demo", 7));
    let r = reply("A.10.2");
    let Ok(Response::Multi(results)) = r.result else {
        panic!("{r:?}")
    };
    assert_eq!(
        results.results,
        vec![
            MultiResult::Error(ErrorCode::Ok),
            MultiResult::Error(ErrorCode::BadVersion)
        ]
    );
    assert_eq!(results.first_error(), Some(ErrorCode::BadVersion));
}

#[test]
fn a11_auth_and_close_session() {
    let auth = request("A.11.1");
    assert_eq!(auth.xid, Xid::AUTH);
    let Request::Auth(a) = auth.request else {
        panic!("{auth:?}")
    };
    assert_eq!(
        (a.auth_type, &*a.scheme, &a.auth[..]),
        (0, "digest", &b"u:p"[..])
    );
    let r = reply("A.11.2");
    assert_eq!(
        (r.xid, r.zxid, r.result),
        (Xid::AUTH, Zxid::ZERO, Ok(Response::Empty))
    );
    let close = request("A.11.3");
    assert_eq!((close.xid, close.request), (Xid(6), Request::CloseSession));
    let r = reply("A.11.4");
    assert_eq!((r.xid, r.zxid), (Xid(6), Zxid::from_u64(0xac)));
}

#[test]
fn perms_of_open_acl_are_all() {
    // A.4's ACL entry carries perms 0x1f.
    assert_eq!(Acl::open_unsafe()[0].perms, Perms::ALL);
}
