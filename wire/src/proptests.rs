//! Round-trip property tests for every record, every request, every response
//! and the frames built from them; and "never panics" properties for both
//! decoders on arbitrary bytes.
//!
//! The seed is fixed so that a run is reproducible (STYLE rule 10); proptest
//! prints the failing case and its minimal form.

use bytes::{Bytes, BytesMut};
use bytestring::ByteString;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use rzk_zxid::Zxid;
use tokio_util::codec::{Decoder, Encoder};

use crate::codes::*;
use crate::jute::{Record, Strictness};
use crate::multi::*;
use crate::records::*;
use crate::request::{Request, RequestFrame};
use crate::response::{Notification, Reply, Response};
use crate::{client, server, ClientCodec, ServerCodec};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        rng_seed: RngSeed::Fixed(0x7a6b_7769_7265),
        ..ProptestConfig::default()
    }
}

// ---- strategies ----

fn string() -> impl Strategy<Value = ByteString> {
    // Any Unicode, multi-byte characters included.
    ".{0,12}".prop_map(ByteString::from)
}

fn opt_string() -> impl Strategy<Value = Option<ByteString>> {
    proptest::option::of(string())
}

fn strings() -> impl Strategy<Value = Vec<ByteString>> {
    proptest::collection::vec(string(), 0..5)
}

fn bytes() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..40).prop_map(Bytes::from)
}

fn opt_bytes() -> impl Strategy<Value = Option<Bytes>> {
    proptest::option::of(bytes())
}

fn zxid() -> impl Strategy<Value = Zxid> {
    any::<i64>().prop_map(Zxid::from_i64)
}

fn session() -> impl Strategy<Value = SessionId> {
    any::<i64>().prop_map(SessionId)
}

fn error_code() -> impl Strategy<Value = ErrorCode> {
    proptest::sample::select(ErrorCode::ALL)
}

fn id() -> impl Strategy<Value = Id> {
    (string(), string()).prop_map(|(scheme, id)| Id { scheme, id })
}

fn acl() -> impl Strategy<Value = Acl> {
    (any::<i32>(), id()).prop_map(|(perms, id)| Acl {
        perms: Perms(perms),
        id,
    })
}

fn acls() -> impl Strategy<Value = Vec<Acl>> {
    proptest::collection::vec(acl(), 0..4)
}

prop_compose! {
    fn stat()(czxid in zxid(), mzxid in zxid(), ctime in any::<i64>(), mtime in any::<i64>(),
              version in any::<i32>(), cversion in any::<i32>(), aversion in any::<i32>(),
              ephemeral_owner in session(), data_length in any::<i32>(),
              num_children in any::<i32>(), pzxid in zxid()) -> Stat {
        Stat { czxid, mzxid, ctime, mtime, version, cversion, aversion, ephemeral_owner,
               data_length, num_children, pzxid }
    }
}

fn client_info() -> impl Strategy<Value = ClientInfo> {
    (string(), string()).prop_map(|(auth_scheme, user)| ClientInfo { auth_scheme, user })
}

fn create() -> impl Strategy<Value = CreateRequest> {
    (string(), opt_bytes(), acls(), any::<i32>()).prop_map(|(path, data, acl, flags)| {
        CreateRequest {
            path,
            data,
            acl,
            flags,
        }
    })
}

fn create_ttl() -> impl Strategy<Value = CreateTtlRequest> {
    (string(), opt_bytes(), acls(), any::<i32>(), any::<i64>()).prop_map(
        |(path, data, acl, flags, ttl_ms)| CreateTtlRequest {
            path,
            data,
            acl,
            flags,
            ttl_ms,
        },
    )
}

fn delete() -> impl Strategy<Value = DeleteRequest> {
    (string(), any::<i32>()).prop_map(|(path, version)| DeleteRequest { path, version })
}

fn set_data() -> impl Strategy<Value = SetDataRequest> {
    (string(), opt_bytes(), any::<i32>()).prop_map(|(path, data, version)| SetDataRequest {
        path,
        data,
        version,
    })
}

fn check() -> impl Strategy<Value = CheckVersionRequest> {
    (string(), any::<i32>()).prop_map(|(path, version)| CheckVersionRequest { path, version })
}

fn get_data() -> impl Strategy<Value = GetDataRequest> {
    (string(), any::<bool>()).prop_map(|(path, watch)| GetDataRequest { path, watch })
}

fn get_children() -> impl Strategy<Value = GetChildrenRequest> {
    (string(), any::<bool>()).prop_map(|(path, watch)| GetChildrenRequest { path, watch })
}

fn set_watches() -> impl Strategy<Value = SetWatches> {
    (zxid(), strings(), strings(), strings()).prop_map(|(z, d, e, c)| SetWatches {
        relative_zxid: z,
        data_watches: d,
        exist_watches: e,
        child_watches: c,
    })
}

fn set_watches2() -> impl Strategy<Value = SetWatches2> {
    (
        zxid(),
        strings(),
        strings(),
        strings(),
        strings(),
        strings(),
    )
        .prop_map(|(z, d, e, c, p, r)| SetWatches2 {
            relative_zxid: z,
            data_watches: d,
            exist_watches: e,
            child_watches: c,
            persistent_watches: p,
            persistent_recursive_watches: r,
        })
}

fn reconfig() -> impl Strategy<Value = ReconfigRequest> {
    (opt_string(), opt_string(), opt_string(), any::<i64>()).prop_map(|(j, l, n, c)| {
        ReconfigRequest {
            joining_servers: j,
            leaving_servers: l,
            new_members: n,
            cur_config_id: c,
        }
    })
}

fn multi_op() -> impl Strategy<Value = MultiOp> {
    prop_oneof![
        create().prop_map(MultiOp::Create),
        create().prop_map(MultiOp::Create2),
        create().prop_map(MultiOp::CreateContainer),
        create_ttl().prop_map(MultiOp::CreateTtl),
        delete().prop_map(MultiOp::Delete),
        set_data().prop_map(MultiOp::SetData),
        check().prop_map(MultiOp::Check),
    ]
}

fn multi_read_op() -> impl Strategy<Value = MultiReadOp> {
    prop_oneof![
        get_children().prop_map(MultiReadOp::GetChildren),
        get_data().prop_map(MultiReadOp::GetData),
    ]
}

fn multi() -> impl Strategy<Value = MultiRequest> {
    proptest::collection::vec(multi_op(), 0..6).prop_map(|ops| MultiRequest { ops })
}

fn multi_read() -> impl Strategy<Value = MultiReadRequest> {
    proptest::collection::vec(multi_read_op(), 0..6).prop_map(|ops| MultiReadRequest { ops })
}

fn get_data_response() -> impl Strategy<Value = GetDataResponse> {
    (opt_bytes(), stat()).prop_map(|(data, stat)| GetDataResponse { data, stat })
}

fn multi_result() -> impl Strategy<Value = MultiResult> {
    prop_oneof![
        string().prop_map(|path| MultiResult::Create(CreateResponse { path })),
        (string(), stat())
            .prop_map(|(path, stat)| MultiResult::Create2(Create2Response { path, stat })),
        Just(MultiResult::Delete),
        stat().prop_map(MultiResult::SetData),
        Just(MultiResult::Check),
        strings().prop_map(|children| MultiResult::GetChildren(GetChildrenResponse { children })),
        get_data_response().prop_map(MultiResult::GetData),
        error_code().prop_map(MultiResult::Error),
    ]
}

fn multi_response() -> impl Strategy<Value = MultiResponse> {
    proptest::collection::vec(multi_result(), 0..6).prop_map(|results| MultiResponse { results })
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        create().prop_map(Request::Create),
        delete().prop_map(Request::Delete),
        (string(), any::<bool>())
            .prop_map(|(path, watch)| Request::Exists(ExistsRequest { path, watch })),
        get_data().prop_map(Request::GetData),
        set_data().prop_map(Request::SetData),
        string().prop_map(|path| Request::GetAcl(GetAclRequest { path })),
        (string(), acls(), any::<i32>())
            .prop_map(|(path, acl, version)| Request::SetAcl(SetAclRequest { path, acl, version })),
        get_children().prop_map(Request::GetChildren),
        string().prop_map(|path| Request::Sync(SyncRequest { path })),
        Just(Request::Ping),
        (string(), any::<bool>())
            .prop_map(|(path, watch)| Request::GetChildren2(GetChildren2Request { path, watch })),
        check().prop_map(Request::Check),
        multi().prop_map(Request::Multi),
        create().prop_map(Request::Create2),
        reconfig().prop_map(Request::Reconfig),
        (string(), proptest::sample::select(WatcherType::ALL)).prop_map(|(path, watcher_type)| {
            Request::CheckWatches(CheckWatchesRequest { path, watcher_type })
        }),
        (string(), proptest::sample::select(WatcherType::ALL)).prop_map(|(path, watcher_type)| {
            Request::RemoveWatches(RemoveWatchesRequest { path, watcher_type })
        }),
        create().prop_map(Request::CreateContainer),
        create_ttl().prop_map(Request::CreateTtl),
        multi_read().prop_map(Request::MultiRead),
        (any::<i32>(), string(), bytes()).prop_map(|(auth_type, scheme, auth)| {
            Request::Auth(AuthPacket {
                auth_type,
                scheme,
                auth,
            })
        }),
        set_watches().prop_map(Request::SetWatches),
        bytes().prop_map(|token| Request::Sasl(GetSaslRequest { token })),
        string()
            .prop_map(|prefix_path| Request::GetEphemerals(GetEphemeralsRequest { prefix_path })),
        string()
            .prop_map(|path| Request::GetAllChildrenNumber(GetAllChildrenNumberRequest { path })),
        set_watches2().prop_map(Request::SetWatches2),
        (string(), proptest::sample::select(AddWatchMode::ALL))
            .prop_map(|(path, mode)| Request::AddWatch(AddWatchRequest { path, mode })),
        Just(Request::WhoAmI),
        Just(Request::CloseSession),
    ]
}

/// A successful response together with an opcode whose reply has its shape.
fn response() -> impl Strategy<Value = (OpCode, Response)> {
    use OpCode as Op;
    const EMPTY_OPS: [OpCode; 9] = [
        OpCode::Delete,
        OpCode::Ping,
        OpCode::Check,
        OpCode::CheckWatches,
        OpCode::RemoveWatches,
        OpCode::Auth,
        OpCode::SetWatches,
        OpCode::SetWatches2,
        OpCode::CloseSession,
    ];
    prop_oneof![
        proptest::sample::select(&EMPTY_OPS[..]).prop_map(|op| (op, Response::Empty)),
        string().prop_map(|path| (Op::Create, Response::Create(CreateResponse { path }))),
        (
            proptest::sample::select(&[Op::Create2, Op::CreateContainer, Op::CreateTtl][..]),
            string(),
            stat()
        )
            .prop_map(|(op, path, stat)| (op, Response::Create2(Create2Response { path, stat }))),
        (
            proptest::sample::select(&[Op::Exists, Op::SetData, Op::SetAcl][..]),
            stat()
        )
            .prop_map(|(op, stat)| (op, Response::Stat(stat))),
        (
            proptest::sample::select(&[Op::GetData, Op::Reconfig][..]),
            get_data_response()
        )
            .prop_map(|(op, r)| (op, Response::GetData(r))),
        (acls(), stat())
            .prop_map(|(acl, stat)| (Op::GetAcl, Response::GetAcl(GetAclResponse { acl, stat }))),
        strings().prop_map(|children| (
            Op::GetChildren,
            Response::GetChildren(GetChildrenResponse { children })
        )),
        (strings(), stat()).prop_map(|(children, stat)| {
            (
                Op::GetChildren2,
                Response::GetChildren2(GetChildren2Response { children, stat }),
            )
        }),
        string().prop_map(|path| (Op::Sync, Response::Sync(SyncResponse { path }))),
        (
            proptest::sample::select(&[Op::Multi, Op::MultiRead][..]),
            multi_response()
        )
            .prop_map(|(op, r)| (op, Response::Multi(r))),
        opt_bytes().prop_map(|token| (Op::Sasl, Response::Sasl(SetSaslResponse { token }))),
        strings().prop_map(|ephemerals| {
            (
                Op::GetEphemerals,
                Response::GetEphemerals(GetEphemeralsResponse { ephemerals }),
            )
        }),
        any::<i32>().prop_map(|total_number| {
            (
                Op::GetAllChildrenNumber,
                Response::GetAllChildrenNumber(GetAllChildrenNumberResponse { total_number }),
            )
        }),
        Just((Op::AddWatch, Response::AddWatch)),
        proptest::collection::vec(client_info(), 0..4)
            .prop_map(|client_info| (Op::WhoAmI, Response::WhoAmI(WhoAmIResponse { client_info }))),
    ]
}

fn watcher_event() -> impl Strategy<Value = WatcherEvent> {
    (
        proptest::sample::select(EventType::ALL),
        proptest::sample::select(KeeperState::ALL),
        string(),
    )
        .prop_map(|(event_type, state, path)| WatcherEvent {
            event_type,
            state,
            path,
        })
}

fn connect_request() -> impl Strategy<Value = ConnectRequest> {
    (
        any::<i32>(),
        zxid(),
        any::<i32>(),
        session(),
        bytes(),
        proptest::option::of(any::<bool>()),
    )
        .prop_map(
            |(protocol_version, last_zxid_seen, timeout_ms, session_id, passwd, read_only)| {
                ConnectRequest {
                    protocol_version,
                    last_zxid_seen,
                    timeout_ms,
                    session_id,
                    passwd,
                    read_only,
                }
            },
        )
}

fn connect_response() -> impl Strategy<Value = ConnectResponse> {
    (
        any::<i32>(),
        any::<i32>(),
        session(),
        bytes(),
        proptest::option::of(any::<bool>()),
    )
        .prop_map(
            |(protocol_version, timeout_ms, session_id, passwd, read_only)| ConnectResponse {
                protocol_version,
                timeout_ms,
                session_id,
                passwd,
                read_only,
            },
        )
}

// ---- properties ----

/// Encodes, checks the smallest-encoding bound, and decodes both strictly and
/// leniently.
fn assert_record_round_trips<T: Record + PartialEq + std::fmt::Debug>(value: &T) {
    let bytes = value.to_bytes();
    assert!(
        bytes.len() >= T::ENCODED_BYTES_MIN,
        "{} shorter than its minimum",
        T::NAME
    );
    assert_eq!(&T::decode_from(&bytes, Strictness::Strict).unwrap(), value);
    assert_eq!(&T::decode_from(&bytes, Strictness::Lenient).unwrap(), value);
}

macro_rules! record_round_trips {
    ($($name:ident: $strategy:expr;)*) => {
        proptest! {
            #![proptest_config(config())]
            $(
                #[test]
                fn $name(value in $strategy) {
                    assert_record_round_trips(&value);
                }
            )*
        }
    };
}

record_round_trips! {
    id_round_trips: id();
    acl_round_trips: acl();
    stat_round_trips: stat();
    client_info_round_trips: client_info();
    request_header_round_trips: (any::<i32>(), any::<i32>())
        .prop_map(|(x, opcode)| RequestHeader { xid: Xid(x), opcode });
    reply_header_round_trips: (any::<i32>(), zxid(), error_code())
        .prop_map(|(x, zxid, err)| ReplyHeader { xid: Xid(x), zxid, err });
    multi_header_round_trips: (any::<i32>(), any::<bool>(), any::<i32>())
        .prop_map(|(op, done, err)| MultiHeader { op, done, err });
    create_request_round_trips: create();
    create_ttl_request_round_trips: create_ttl();
    delete_request_round_trips: delete();
    exists_request_round_trips: (string(), any::<bool>()).prop_map(|(path, watch)| ExistsRequest { path, watch });
    get_data_request_round_trips: get_data();
    set_data_request_round_trips: set_data();
    get_acl_request_round_trips: string().prop_map(|path| GetAclRequest { path });
    set_acl_request_round_trips: (string(), acls(), any::<i32>())
        .prop_map(|(path, acl, version)| SetAclRequest { path, acl, version });
    get_children_request_round_trips: get_children();
    get_children2_request_round_trips: (string(), any::<bool>())
        .prop_map(|(path, watch)| GetChildren2Request { path, watch });
    sync_request_round_trips: string().prop_map(|path| SyncRequest { path });
    check_version_request_round_trips: check();
    reconfig_request_round_trips: reconfig();
    check_watches_request_round_trips: (string(), proptest::sample::select(WatcherType::ALL))
        .prop_map(|(path, watcher_type)| CheckWatchesRequest { path, watcher_type });
    remove_watches_request_round_trips: (string(), proptest::sample::select(WatcherType::ALL))
        .prop_map(|(path, watcher_type)| RemoveWatchesRequest { path, watcher_type });
    add_watch_request_round_trips: (string(), proptest::sample::select(AddWatchMode::ALL))
        .prop_map(|(path, mode)| AddWatchRequest { path, mode });
    set_watches_round_trips: set_watches();
    set_watches2_round_trips: set_watches2();
    auth_packet_round_trips: (any::<i32>(), string(), bytes())
        .prop_map(|(auth_type, scheme, auth)| AuthPacket { auth_type, scheme, auth });
    get_sasl_request_round_trips: bytes().prop_map(|token| GetSaslRequest { token });
    get_ephemerals_request_round_trips: string().prop_map(|prefix_path| GetEphemeralsRequest { prefix_path });
    get_all_children_number_request_round_trips: string()
        .prop_map(|path| GetAllChildrenNumberRequest { path });
    multi_request_round_trips: multi();
    multi_read_request_round_trips: multi_read();
    create_response_round_trips: string().prop_map(|path| CreateResponse { path });
    create2_response_round_trips: (string(), stat()).prop_map(|(path, stat)| Create2Response { path, stat });
    get_data_response_round_trips: get_data_response();
    get_acl_response_round_trips: (acls(), stat()).prop_map(|(acl, stat)| GetAclResponse { acl, stat });
    get_children_response_round_trips: strings().prop_map(|children| GetChildrenResponse { children });
    get_children2_response_round_trips: (strings(), stat())
        .prop_map(|(children, stat)| GetChildren2Response { children, stat });
    sync_response_round_trips: string().prop_map(|path| SyncResponse { path });
    error_response_round_trips: error_code().prop_map(|err| ErrorResponse { err });
    set_sasl_response_round_trips: opt_bytes().prop_map(|token| SetSaslResponse { token });
    get_ephemerals_response_round_trips: strings().prop_map(|ephemerals| GetEphemeralsResponse { ephemerals });
    get_all_children_number_response_round_trips: any::<i32>()
        .prop_map(|total_number| GetAllChildrenNumberResponse { total_number });
    who_am_i_response_round_trips: proptest::collection::vec(client_info(), 0..4)
        .prop_map(|client_info| WhoAmIResponse { client_info });
    multi_response_round_trips: multi_response();
    watcher_event_round_trips: watcher_event();
    connect_request_round_trips: connect_request();
    connect_response_round_trips: connect_response();
}

proptest! {
    #![proptest_config(config())]

    /// Client encoder → server decoder gives back the same request.
    #[test]
    fn request_frames_round_trip_through_the_codecs(xid in any::<i32>(), request in request()) {
        let frame = RequestFrame { xid: Xid(xid), request };
        let mut client = ClientCodec::with_limits(usize::MAX, usize::MAX);
        let mut wire = BytesMut::new();
        client.encode(&frame, &mut wire).unwrap();
        let mut server = ServerCodec::new();
        let mut connect = BytesMut::new();
        ClientCodec::new().encode(ConnectRequest {
            protocol_version: 0, last_zxid_seen: Zxid::ZERO, timeout_ms: 0,
            session_id: SessionId::NONE, passwd: Bytes::new(), read_only: None,
        }, &mut connect).unwrap();
        prop_assert!(matches!(server.decode(&mut connect).unwrap(), Some(server::Incoming::Connect(_))));
        match server.decode(&mut wire).unwrap() {
            Some(server::Incoming::Request(got)) => prop_assert_eq!(got, frame),
            other => prop_assert!(false, "{:?}", other),
        }
        prop_assert!(wire.is_empty());
    }

    /// Server encoder → client decoder (with the request's opcode) gives back
    /// the same reply, for successful and error replies.
    #[test]
    fn replies_round_trip_through_the_codecs(
        xid in any::<i32>().prop_filter("not a notification", |x| *x != -1),
        zxid in zxid(),
        (op, response) in response(),
        err in proptest::option::of(error_code().prop_filter("an error", |c| *c != ErrorCode::Ok)),
    ) {
        let reply = match err {
            None => Reply::ok(Xid(xid), zxid, response),
            Some(code) => Reply::error(Xid(xid), zxid, code),
        };
        let mut wire = BytesMut::new();
        ServerCodec::new().encode(reply.clone(), &mut wire).unwrap();
        let mut client = ClientCodec::with_limits(usize::MAX, usize::MAX);
        client.decode(&mut encode_connect_response()).unwrap();
        match client.decode(&mut wire).unwrap() {
            Some(client::Incoming::Reply(raw)) => prop_assert_eq!(raw.decode(op).unwrap(), reply),
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn notifications_round_trip_through_the_codecs(zxid in zxid(), event in watcher_event()) {
        let note = Notification { zxid, event };
        let mut wire = BytesMut::new();
        ServerCodec::new().encode(note.clone(), &mut wire).unwrap();
        let mut client = ClientCodec::new();
        client.decode(&mut encode_connect_response()).unwrap();
        prop_assert_eq!(client.decode(&mut wire).unwrap(), Some(client::Incoming::Notification(note)));
    }

    /// I7: arbitrary bytes after a valid ConnectRequest never make the server
    /// decoder panic, and whatever it returns leaves it in a usable state.
    #[test]
    fn server_decoder_never_panics(chunks in proptest::collection::vec(
        proptest::collection::vec(any::<u8>(), 0..64), 0..8)) {
        let mut server = ServerCodec::with_frame_bytes_max(4096);
        let mut src = BytesMut::new();
        ClientCodec::new().encode(ConnectRequest {
            protocol_version: 0, last_zxid_seen: Zxid::ZERO, timeout_ms: 0,
            session_id: SessionId::NONE, passwd: Bytes::new(), read_only: Some(true),
        }, &mut src).unwrap();
        for chunk in chunks {
            src.extend_from_slice(&chunk);
            while let Ok(Some(_)) = server.decode(&mut src) {}
        }
        let _ = server.decode_eof(&mut src);
    }

    #[test]
    fn client_decoder_never_panics(chunks in proptest::collection::vec(
        proptest::collection::vec(any::<u8>(), 0..64), 0..8)) {
        let mut client = ClientCodec::with_limits(4096, 4096);
        let mut src = encode_connect_response();
        for chunk in chunks {
            src.extend_from_slice(&chunk);
            while let Ok(Some(item)) = client.decode(&mut src) {
                if let client::Incoming::Reply(raw) = item {
                    for &op in OpCode::ALL {
                        let _ = raw.decode(op);
                    }
                }
            }
        }
        let _ = client.decode_eof(&mut src);
    }
}

fn encode_connect_response() -> BytesMut {
    let mut dst = BytesMut::new();
    ServerCodec::new()
        .encode(
            ConnectResponse {
                protocol_version: 0,
                timeout_ms: 1,
                session_id: SessionId(1),
                passwd: Bytes::from_static(&[0; 16]),
                read_only: Some(false),
            },
            &mut dst,
        )
        .unwrap();
    dst
}
