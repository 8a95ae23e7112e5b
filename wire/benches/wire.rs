//! Encode and decode costs of the commonest requests and replies, through the
//! codecs as a server and a client use them (frame split, header, record).
//!
//! Run: `cargo bench -p rzk-wire`. Encode figures are per frame; decode
//! figures (`*_decode_x32`) are per 32 pipelined frames, and criterion's
//! throughput line gives frames per second.

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rzk_wire::{
    client, server, Acl, CheckVersionRequest, ClientCodec, ConnectRequest, Create2Response,
    CreateRequest, CreateResponse, DeleteRequest, GetDataRequest, GetDataResponse, MultiOp,
    MultiRequest, MultiResponse, MultiResult, OpCode, Reply, Request, RequestFrame, Response,
    ServerCodec, SessionId, SetDataRequest, Stat, Xid,
};
use rzk_zxid::Zxid;
use std::hint::black_box;
use tokio_util::codec::{Decoder, Encoder};

const DATA_128: &[u8; 128] = &[0x5a; 128];

fn stat() -> Stat {
    Stat {
        czxid: Zxid::from_u64(0x1_0000_00a8),
        mzxid: Zxid::from_u64(0x1_0000_00a9),
        ctime: 1_700_000_000_000,
        mtime: 1_700_000_000_123,
        version: 3,
        cversion: 1,
        aversion: 0,
        ephemeral_owner: SessionId::NONE,
        data_length: 128,
        num_children: 1,
        pzxid: Zxid::from_u64(0x1_0000_00a8),
    }
}

fn create(i: usize) -> CreateRequest {
    CreateRequest {
        path: format!("/bench/node-{i:010}").into(),
        data: Some(Bytes::from_static(DATA_128)),
        acl: Acl::open_unsafe(),
        flags: 0,
    }
}

fn set_data() -> SetDataRequest {
    SetDataRequest {
        path: "/bench/node-0000000001".into(),
        data: Some(Bytes::from_static(DATA_128)),
        version: -1,
    }
}

/// 10 ops: creates, setData, check and delete, as a recipe's batch would mix.
fn multi() -> (MultiRequest, MultiResponse) {
    let mut ops = Vec::new();
    let mut results = Vec::new();
    for i in 0..10 {
        match i % 4 {
            0 => {
                ops.push(MultiOp::Create(create(i)));
                results.push(MultiResult::Create(CreateResponse {
                    path: format!("/bench/node-{i:010}").into(),
                }));
            }
            1 => {
                ops.push(MultiOp::SetData(set_data()));
                results.push(MultiResult::SetData(stat()));
            }
            2 => {
                ops.push(MultiOp::Check(CheckVersionRequest {
                    path: "/bench".into(),
                    version: 3,
                }));
                results.push(MultiResult::Check);
            }
            _ => {
                ops.push(MultiOp::Delete(DeleteRequest {
                    path: format!("/bench/old-{i}").into(),
                    version: -1,
                }));
                results.push(MultiResult::Delete);
            }
        }
    }
    (MultiRequest { ops }, MultiResponse { results })
}

struct Case {
    name: &'static str,
    request: RequestFrame,
    reply: Reply,
}

fn cases() -> Vec<Case> {
    let (multi_request, multi_response) = multi();
    let zxid = Zxid::from_u64(0x1_0000_00a9);
    vec![
        Case {
            name: "getData",
            request: RequestFrame {
                xid: Xid(17),
                request: Request::GetData(GetDataRequest {
                    path: "/bench/node-0000000001".into(),
                    watch: true,
                }),
            },
            reply: Reply::ok(
                Xid(17),
                zxid,
                Response::GetData(GetDataResponse {
                    data: Some(Bytes::from_static(DATA_128)),
                    stat: stat(),
                }),
            ),
        },
        Case {
            name: "create",
            request: RequestFrame {
                xid: Xid(18),
                request: Request::Create(create(1)),
            },
            reply: Reply::ok(
                Xid(18),
                zxid,
                Response::Create(CreateResponse {
                    path: "/bench/node-0000000001".into(),
                }),
            ),
        },
        Case {
            name: "create2",
            request: RequestFrame {
                xid: Xid(19),
                request: Request::Create2(create(1)),
            },
            reply: Reply::ok(
                Xid(19),
                zxid,
                Response::Create2(Create2Response {
                    path: "/bench/node-0000000001".into(),
                    stat: stat(),
                }),
            ),
        },
        Case {
            name: "setData_128B",
            request: RequestFrame {
                xid: Xid(20),
                request: Request::SetData(set_data()),
            },
            reply: Reply::ok(Xid(20), zxid, Response::Stat(stat())),
        },
        Case {
            name: "multi_10_ops",
            request: RequestFrame {
                xid: Xid(21),
                request: Request::Multi(multi_request),
            },
            reply: Reply::ok(Xid(21), zxid, Response::Multi(multi_response)),
        },
    ]
}

/// A server codec past its ConnectRequest.
fn connected_server() -> ServerCodec {
    let mut codec = ServerCodec::new();
    let mut src = BytesMut::new();
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
            &mut src,
        )
        .unwrap();
    let Ok(Some(server::Incoming::Connect(req))) = codec.decode(&mut src) else {
        unreachable!()
    };
    let _ = req;
    codec
}

/// A client codec past its ConnectResponse.
fn connected_client() -> ClientCodec {
    let mut codec = ClientCodec::new();
    let mut src = BytesMut::new();
    let req = ConnectRequest {
        protocol_version: 0,
        last_zxid_seen: Zxid::ZERO,
        timeout_ms: 30_000,
        session_id: SessionId::NONE,
        passwd: Bytes::from_static(&[0; 16]),
        read_only: Some(false),
    };
    ServerCodec::new()
        .encode(
            req.accept(30_000, SessionId(1), Bytes::from_static(&[1; 16])),
            &mut src,
        )
        .unwrap();
    let Ok(Some(client::Incoming::Connect(_))) = codec.decode(&mut src) else {
        unreachable!()
    };
    codec
}

/// Decode benchmarks read this many pipelined frames per iteration, so that
/// the one-off cost of a fresh read buffer is shared as it is on a connection.
const FRAMES_PER_BATCH: usize = 32;

fn repeat(frame: &BytesMut) -> BytesMut {
    let mut out = BytesMut::with_capacity(frame.len() * FRAMES_PER_BATCH);
    for _ in 0..FRAMES_PER_BATCH {
        out.extend_from_slice(frame);
    }
    out
}

fn bench(c: &mut Criterion) {
    for case in cases() {
        let mut group = c.benchmark_group(case.name);
        let op: OpCode = case.request.request.opcode();

        // Client: encode the request into a reused buffer (as Framed does).
        let mut client = ClientCodec::new();
        let mut dst = BytesMut::with_capacity(4096);
        group.bench_function("request_encode", |b| {
            b.iter(|| {
                dst.clear();
                client.encode(black_box(&case.request), &mut dst).unwrap();
            })
        });
        let request_bytes = {
            let mut d = BytesMut::new();
            ClientCodec::new().encode(&case.request, &mut d).unwrap();
            d
        };

        // Server: split the frames of a pipelined stream and decode header and
        // record (a fresh read buffer per batch, as a connection's first reads).
        group.throughput(Throughput::Elements(FRAMES_PER_BATCH as u64));
        group.bench_function("request_decode_x32", |b| {
            b.iter_batched(
                || (connected_server(), repeat(&request_bytes)),
                |(mut codec, mut src)| {
                    for _ in 0..FRAMES_PER_BATCH {
                        let item = codec.decode(&mut src).unwrap();
                        debug_assert!(matches!(item, Some(server::Incoming::Request(_))));
                        black_box(item);
                    }
                },
                BatchSize::SmallInput,
            )
        });
        group.throughput(Throughput::Elements(1));

        // Server: encode the reply.
        let mut server = ServerCodec::new();
        group.bench_function("reply_encode", |b| {
            b.iter(|| {
                dst.clear();
                server.encode(black_box(&case.reply), &mut dst).unwrap();
            })
        });
        let reply_bytes = {
            let mut d = BytesMut::new();
            ServerCodec::new().encode(&case.reply, &mut d).unwrap();
            d
        };

        // Client: split the frames, decode the header, then the body by opcode.
        group.throughput(Throughput::Elements(FRAMES_PER_BATCH as u64));
        group.bench_function("reply_decode_x32", |b| {
            b.iter_batched(
                || (connected_client(), repeat(&reply_bytes)),
                |(mut codec, mut src)| {
                    for _ in 0..FRAMES_PER_BATCH {
                        let Ok(Some(client::Incoming::Reply(raw))) = codec.decode(&mut src) else {
                            unreachable!()
                        };
                        black_box(raw.decode(op).unwrap());
                    }
                },
                BatchSize::SmallInput,
            )
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
