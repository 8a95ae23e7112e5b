//! Round-trip property tests for every record, every request, every response
//! and the frames built from them; and "never panics" properties for both
//! decoders: on arbitrary bytes (which mostly exercise the framing layer), and
//! on well-framed streams of valid, mutated and random bodies for every opcode
//! and every response type (which reach the record decoders), checking what the
//! codec does after each frame: one item per frame, and after an error either a
//! usable codec or the documented close.
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
use crate::response::{Notification, RawReply, Reply, Response};
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
    /// decoder panic. (Random lengths: this mostly exercises the framing layer;
    /// the well-framed properties below reach the record decoders.)
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

// ---- well-framed streams: valid, mutated and random bodies ----

/// How a frame's payload is altered before it is framed (the length prefix is
/// always the payload's true length).
#[derive(Clone, Debug)]
enum Mutation {
    None,
    /// Cut the payload to this fraction (in 1/256) of its length.
    Truncate(u8),
    /// XOR `mask` into the byte at this fraction (in 1/256) of the payload.
    Flip(Vec<(u8, u8)>),
    /// Append bytes after the record.
    Append(Vec<u8>),
    /// Keep the header, replace the body with random bytes.
    RandomBody(Vec<u8>),
    /// Keep the body, change the header's opcode (server side) or decode the
    /// reply as another opcode (client side).
    OtherOpcode(i32),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let some_bytes = || proptest::collection::vec(any::<u8>(), 0..48);
    let opcode = prop_oneof![
        proptest::sample::select(OpCode::ALL).prop_map(OpCode::as_i32),
        any::<i32>(),
    ];
    prop_oneof![
        2 => Just(Mutation::None),
        1 => any::<u8>().prop_map(Mutation::Truncate),
        2 => proptest::collection::vec((any::<u8>(), 1u8..), 1..4).prop_map(Mutation::Flip),
        1 => proptest::collection::vec(any::<u8>(), 1..16).prop_map(Mutation::Append),
        2 => some_bytes().prop_map(Mutation::RandomBody),
        1 => opcode.prop_map(Mutation::OtherOpcode),
    ]
}

/// Applies `m` to `payload`, whose first `header` bytes are the header.
fn mutate(payload: &mut Vec<u8>, m: &Mutation, header: usize) {
    let at = |fraction: u8, len: usize| (usize::from(fraction) * len) / 256;
    match m {
        Mutation::None | Mutation::OtherOpcode(_) => {}
        Mutation::Truncate(f) => payload.truncate(at(*f, payload.len())),
        Mutation::Flip(flips) => {
            for (f, mask) in flips {
                if !payload.is_empty() {
                    let i = at(*f, payload.len());
                    payload[i] ^= mask;
                }
            }
        }
        Mutation::Append(extra) => payload.extend_from_slice(extra),
        Mutation::RandomBody(body) => {
            payload.truncate(header);
            payload.extend_from_slice(body);
        }
    }
}

/// One request frame's payload, and what it was made from.
#[derive(Clone, Debug)]
struct RequestCase {
    original: RequestFrame,
    mutation: Mutation,
    payload: Vec<u8>,
}

fn request_case() -> impl Strategy<Value = RequestCase> {
    (any::<i32>(), request(), mutation()).prop_map(|(xid, request, mutation)| {
        let original = RequestFrame {
            xid: Xid(xid),
            request,
        };
        let mut b = BytesMut::new();
        original.encode_payload(&mut b);
        let mut payload = b.to_vec();
        if let Mutation::OtherOpcode(op) = mutation {
            payload[4..8].copy_from_slice(&op.to_be_bytes());
        }
        mutate(&mut payload, &mutation, 8);
        RequestCase {
            original,
            mutation,
            payload,
        }
    })
}

/// What the server decoder made of one frame.
#[derive(Debug, PartialEq, Eq, Clone, Copy, Hash)]
enum ServerOutcome {
    Request(OpCode),
    Malformed(OpCode),
    Unknown,
    /// A framing error: the codec is failed and the connection must close.
    Closed,
}

const REQUEST_FRAME_MAX: usize = 4096;

/// Appends each payload to `stream` as a frame (4-byte length first), feeds the
/// stream to `codec` in chunks of `chunk` bytes (0 = all at once), and returns
/// every item and error in order. Checks what holds for both codecs: nothing
/// after the first error (a failed codec ignores everything and keeps nothing
/// buffered) and nothing left over at the end.
fn decode_frames<'a, C>(
    mut codec: C,
    mut stream: BytesMut,
    payloads: impl Iterator<Item = &'a [u8]>,
    chunk: usize,
) -> Vec<Result<C::Item, C::Error>>
where
    C: Decoder,
    C::Item: std::fmt::Debug,
    C::Error: std::fmt::Display,
{
    for p in payloads {
        stream.extend_from_slice(&(p.len() as i32).to_be_bytes());
        stream.extend_from_slice(p);
    }
    let mut items = Vec::new();
    let mut src = BytesMut::new();
    let step = if chunk == 0 { stream.len() } else { chunk };
    let mut failed = false;
    for piece in stream.chunks(step) {
        src.extend_from_slice(piece);
        loop {
            match codec.decode(&mut src) {
                Ok(Some(item)) => {
                    assert!(!failed, "an item after the codec failed: {item:?}");
                    items.push(Ok(item));
                }
                Ok(None) => break,
                Err(e) => {
                    assert!(!failed, "a second error: {e}");
                    failed = true;
                    items.push(Err(e));
                }
            }
        }
        if failed {
            assert!(src.is_empty(), "a failed codec keeps nothing buffered");
        }
    }
    assert!(
        matches!(codec.decode_eof(&mut src), Ok(None)),
        "nothing left over"
    );
    items
}

/// Feeds a ConnectRequest and then `cases` (framed, in chunks of `chunk` bytes,
/// 0 = all at once) to a ServerCodec and checks, frame by frame: exactly one item
/// per frame, with the frame's xid and opcode; an accepted request re-encodes to
/// the same request (and is the original when unmutated); a Malformed or unknown
/// opcode leaves the codec decoding the next frame; a framing error (a payload
/// shorter than the 8-byte header, or over the limit) fails the codec, which then
/// ignores everything (the connection closes: docs/client-protocol.md, "Frame
/// size limit"). Returns the outcome of each frame decoded.
fn check_server_stream(cases: &[RequestCase], chunk: usize) -> Vec<ServerOutcome> {
    let mut stream = BytesMut::new();
    ClientCodec::new()
        .encode(
            ConnectRequest {
                protocol_version: 0,
                last_zxid_seen: Zxid::ZERO,
                timeout_ms: 0,
                session_id: SessionId::NONE,
                passwd: Bytes::from_static(&[0; 16]),
                read_only: Some(false),
            },
            &mut stream,
        )
        .unwrap();
    let payloads = cases.iter().map(|c| &c.payload[..]);
    let codec = ServerCodec::with_frame_bytes_max(REQUEST_FRAME_MAX);
    let mut items = decode_frames(codec, stream, payloads, chunk).into_iter();
    assert!(matches!(
        items.next(),
        Some(Ok(server::Incoming::Connect(_)))
    ));
    let mut outcomes = Vec::new();
    for c in cases {
        let item = items.next().expect("one item per frame");
        let header_ok = c.payload.len() >= 8 && c.payload.len() <= REQUEST_FRAME_MAX;
        let xid = header_ok.then(|| Xid(i32::from_be_bytes(c.payload[0..4].try_into().unwrap())));
        let opcode = header_ok.then(|| i32::from_be_bytes(c.payload[4..8].try_into().unwrap()));
        let outcome = match item {
            Err(_) => {
                assert!(!header_ok, "a framing error on a well-framed {c:?}");
                ServerOutcome::Closed
            }
            Ok(server::Incoming::Request(frame)) => {
                assert_eq!(Some(frame.xid), xid);
                assert_eq!(Some(frame.request.opcode().as_i32()), opcode);
                let mut again = BytesMut::new();
                frame.encode_payload(&mut again);
                let again = RequestFrame::decode_payload(&again.freeze())
                    .expect("re-encoded request decodes");
                assert_eq!(again, frame);
                if matches!(c.mutation, Mutation::None) {
                    assert_eq!(frame, c.original);
                }
                ServerOutcome::Request(frame.request.opcode())
            }
            Ok(server::Incoming::Malformed {
                xid: x, opcode: op, ..
            }) => {
                assert_eq!((Some(x), Some(op.as_i32())), (xid, opcode));
                assert!(
                    !matches!(c.mutation, Mutation::None),
                    "a valid request is malformed: {c:?}"
                );
                ServerOutcome::Malformed(op)
            }
            Ok(server::Incoming::UnknownOpCode { xid: x, opcode: op }) => {
                assert_eq!((Some(x), Some(op)), (xid, opcode));
                assert!(OpCode::from_i32(op).is_none_or(|o| !o.is_client_request()));
                ServerOutcome::Unknown
            }
            Ok(other) => panic!("{other:?} for {c:?}"),
        };
        outcomes.push(outcome);
        if outcome == ServerOutcome::Closed {
            break;
        }
    }
    assert!(items.next().is_none(), "more items than frames");
    outcomes
}

/// One reply frame's payload, the opcode it is decoded with, and what it was
/// made from.
#[derive(Clone, Debug)]
struct ReplyCase {
    original: client::Incoming,
    op: OpCode,
    mutation: Mutation,
    payload: Vec<u8>,
}

fn reply_case() -> impl Strategy<Value = ReplyCase> {
    let reply = prop_oneof![
        3 => (any::<i32>().prop_filter("not a notification", |x| *x != -1), zxid(), response())
            .prop_map(|(xid, zxid, (op, r))| (op, client::Incoming::Reply(raw_of(&Reply::ok(Xid(xid), zxid, r))))),
        1 => (any::<i32>().prop_filter("not a notification", |x| *x != -1), zxid(), error_code().prop_filter("an error", |c| *c != ErrorCode::Ok), proptest::sample::select(OpCode::ALL))
            .prop_map(|(xid, zxid, code, op)| (op, client::Incoming::Reply(raw_of(&Reply::error(Xid(xid), zxid, code))))),
        1 => (zxid(), watcher_event())
            .prop_map(|(zxid, event)| (OpCode::Ping, client::Incoming::Notification(Notification { zxid, event }))),
    ];
    (reply, mutation()).prop_map(|((op, original), mutation)| {
        let mut b = BytesMut::new();
        match &original {
            client::Incoming::Reply(raw) => {
                raw.header.encode(&mut b);
                b.extend_from_slice(&raw.body);
            }
            client::Incoming::Notification(n) => n.encode_payload(&mut b),
            client::Incoming::Connect(_) => unreachable!("not generated"),
        }
        let mut payload = b.to_vec();
        mutate(&mut payload, &mutation, 16);
        let op = match mutation {
            Mutation::OtherOpcode(o) => OpCode::from_i32(o).unwrap_or(op),
            _ => op,
        };
        ReplyCase {
            original,
            op,
            mutation,
            payload,
        }
    })
}

fn raw_of(reply: &Reply) -> RawReply {
    let mut b = BytesMut::new();
    reply.encode_payload(&mut b);
    match client::decode_reply(&b.freeze()).expect("an encoded reply decodes") {
        client::Incoming::Reply(raw) => raw,
        other => panic!("{other:?}"),
    }
}

/// What the client decoder made of one frame.
#[derive(Debug, PartialEq, Eq, Clone, Copy, Hash)]
enum ClientOutcome {
    Decoded(OpCode),
    BodyError(OpCode),
    Notification,
    /// An error from the codec (a bad header or notification): decoding ends.
    Closed,
}

/// Feeds a ConnectResponse and then `cases` to a ClientCodec and checks, frame by
/// frame: one item per frame with the frame's xid; a reply's body decodes with
/// its opcode (to the original when unmutated) or fails with an error, and
/// decoding it as any other opcode never panics; after a codec error (a header
/// or notification ZooKeeper would never send) the codec ignores everything.
fn check_client_stream(cases: &[ReplyCase], chunk: usize) -> Vec<ClientOutcome> {
    let stream = encode_connect_response();
    let payloads = cases.iter().map(|c| &c.payload[..]);
    let codec = ClientCodec::with_limits(64 * 1024, 64 * 1024);
    let mut items = decode_frames(codec, stream, payloads, chunk).into_iter();
    assert!(matches!(
        items.next(),
        Some(Ok(client::Incoming::Connect(_)))
    ));
    let mut outcomes = Vec::new();
    for c in cases {
        let item = items.next().expect("one item per frame");
        let xid = (c.payload.len() >= 4)
            .then(|| Xid(i32::from_be_bytes(c.payload[0..4].try_into().unwrap())));
        let outcome = match item {
            Err(_) => {
                assert!(
                    !matches!(c.mutation, Mutation::None),
                    "a valid frame refused: {c:?}"
                );
                ClientOutcome::Closed
            }
            Ok(client::Incoming::Notification(n)) => {
                assert_eq!(xid, Some(Xid::NOTIFICATION));
                if matches!(c.mutation, Mutation::None) {
                    assert_eq!(client::Incoming::Notification(n), c.original);
                }
                ClientOutcome::Notification
            }
            Ok(client::Incoming::Reply(raw)) => {
                assert_eq!(Some(raw.header.xid), xid);
                for &op in OpCode::ALL {
                    let _ = raw.decode(op);
                }
                match raw.decode(c.op) {
                    Ok(reply) => {
                        if let (Mutation::None, client::Incoming::Reply(orig)) =
                            (&c.mutation, &c.original)
                        {
                            assert_eq!(reply, orig.decode(c.op).expect("the original decodes"));
                        }
                        ClientOutcome::Decoded(c.op)
                    }
                    Err(_) => {
                        assert!(
                            !matches!(c.mutation, Mutation::None),
                            "a valid reply refused: {c:?}"
                        );
                        ClientOutcome::BodyError(c.op)
                    }
                }
            }
            Ok(other) => panic!("{other:?} for {c:?}"),
        };
        outcomes.push(outcome);
        if outcome == ClientOutcome::Closed {
            break;
        }
    }
    assert!(items.next().is_none(), "more items than frames");
    outcomes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..config() })]

    /// I7: well-framed request frames (valid, mutated or random bodies, every
    /// opcode) never make the server decoder panic; each frame gives one item
    /// and the codec stays usable, or closes as documented.
    #[test]
    fn server_decoder_on_well_framed_requests(
        cases in proptest::collection::vec(request_case(), 1..8),
        chunk in prop_oneof![Just(0usize), 1usize..64],
    ) {
        check_server_stream(&cases, chunk);
    }

    /// The same for the client decoder: replies of every response type (and
    /// error replies, and notifications) with valid, mutated or random bodies.
    #[test]
    fn client_decoder_on_well_framed_replies(
        cases in proptest::collection::vec(reply_case(), 1..8),
        chunk in prop_oneof![Just(0usize), 1usize..64],
    ) {
        check_client_stream(&cases, chunk);
    }
}

/// The well-framed properties reach every body decoder: over a fixed-seed sample,
/// every client opcode is accepted and (where it has a body) refused as
/// malformed, and every reply opcode's body both decodes and fails to decode.
#[test]
fn well_framed_cases_reach_every_body_decoder() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use std::collections::HashSet;
    let mut runner = TestRunner::deterministic();
    let mut server_seen = HashSet::new();
    let requests = request_case();
    let mut client_seen = HashSet::new();
    let replies = reply_case();
    for _ in 0..3_000 {
        let c = requests.new_tree(&mut runner).unwrap().current();
        server_seen.extend(check_server_stream(std::slice::from_ref(&c), 0));
        let c = replies.new_tree(&mut runner).unwrap().current();
        client_seen.extend(check_client_stream(std::slice::from_ref(&c), 0));
    }
    let bodiless = [OpCode::Ping, OpCode::WhoAmI, OpCode::CloseSession];
    for &op in OpCode::ALL.iter().filter(|o| o.is_client_request()) {
        assert!(
            server_seen.contains(&ServerOutcome::Request(op)),
            "{op:?} never accepted"
        );
        if !bodiless.contains(&op) {
            assert!(
                server_seen.contains(&ServerOutcome::Malformed(op)),
                "{op:?} never malformed"
            );
        }
    }
    assert!(server_seen.contains(&ServerOutcome::Unknown));
    assert!(server_seen.contains(&ServerOutcome::Closed));
    let mut reply_ops: Vec<OpCode> = Vec::new();
    let mut r2 = TestRunner::deterministic();
    for _ in 0..2000 {
        reply_ops.push(response().new_tree(&mut r2).unwrap().current().0);
    }
    for op in reply_ops {
        assert!(
            client_seen.contains(&ClientOutcome::Decoded(op)),
            "{op:?} reply never decoded"
        );
        assert!(
            client_seen.contains(&ClientOutcome::BodyError(op)),
            "{op:?} reply body never refused"
        );
    }
    assert!(client_seen.contains(&ClientOutcome::Notification));
    assert!(client_seen.contains(&ClientOutcome::Closed));
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
