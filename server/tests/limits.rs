//! Limits (issue item 9, I7): each one is reached, and harms no one else.
mod support;

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use rzk_wire::client::Incoming;
use rzk_wire::{ErrorCode, OpCode, Request, Response};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn a_frame_over_jute_maxbuffer_closes_that_connection_only() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[("jute.maxbuffer", "4096")]).await;
    let (mut bystander, _) = Raw::connect(server.addr, 4000).await;
    let (mut raw, resp) = Raw::connect(server.addr, 4000).await;
    assert!(raw.call(create_req("/e", b"", 1)).await.result.is_ok());
    // A well-formed create one byte over the limit (the length prefix counts the
    // payload, as jute.maxbuffer does): the connection is closed, no reply.
    let over = create_of_payload(rzk_wire::Xid(7), "/over", 4097);
    raw.send_with_xid(over.xid, over.request).await;
    assert!(raw.closed().await);
    // The bystander is fine, and the session survives: it can be resumed.
    assert!(bystander.call(Request::Ping).await.result.is_ok());
    let mut req = Raw::new_session(4000);
    req.session_id = resp.session_id;
    req.passwd = resp.passwd;
    let mut again = Raw::open(server.addr, req).await;
    let Some(Incoming::Connect(ok)) = again.recv().await else {
        panic!()
    };
    assert_eq!(ok.session_id, resp.session_id);
    // A frame of exactly the limit is accepted.
    let exact = create_of_payload(rzk_wire::Xid(8), "/big", 4096);
    again.send_with_xid(exact.xid, exact.request).await;
    let r = again.reply(OpCode::Create).await;
    assert_eq!((r.xid, r.result.is_ok()), (rzk_wire::Xid(8), true));
    server.stop().await.unwrap();
}

/// A create of `path` whose request payload (the frame without its 4-byte length
/// prefix) is exactly `payload_bytes` long.
fn create_of_payload(
    xid: rzk_wire::Xid,
    path: &str,
    payload_bytes: usize,
) -> rzk_wire::RequestFrame {
    let frame = |data: usize| rzk_wire::RequestFrame {
        xid,
        request: create_req(path, &vec![7u8; data], 0),
    };
    let mut empty = BytesMut::new();
    frame(0).encode_payload(&mut empty);
    let f = frame(payload_bytes - empty.len());
    let mut check = BytesMut::new();
    f.encode_payload(&mut check);
    assert_eq!(check.len(), payload_bytes);
    f
}

#[tokio::test]
async fn max_client_cnxns_per_ip() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[("maxClientCnxns", "2")]).await;
    let (mut a, _) = Raw::connect(server.addr, 4000).await;
    let (_b, _) = Raw::connect(server.addr, 4000).await;
    let mut c = Raw::open(server.addr, Raw::new_session(4000)).await;
    assert!(
        c.closed().await,
        "the third connection from 127.0.0.1 is closed"
    );
    assert!(a.call(Request::Ping).await.result.is_ok());
    drop(a);
    // A slot frees up once a connection ends.
    let srv = &server;
    eventually(
        Duration::from_secs(10),
        "a new connection is accepted",
        || async move {
            let mut d = Raw::open(srv.addr, Raw::new_session(4000)).await;
            matches!(d.recv().await, Some(Incoming::Connect(_)))
        },
    )
    .await;
    server.stop().await.unwrap();
}

/// Pipelines 150 creates and 150 exists on `raw` and checks every reply, in order.
async fn pipeline_and_check(raw: &mut Raw, prefix: &str) {
    use futures::SinkExt;
    for i in 0..150 {
        let p = format!("/{prefix}{i}");
        raw.framed
            .feed(rzk_wire::RequestFrame {
                xid: rzk_wire::Xid(2 * i + 1),
                request: create_req(&p, b"", 0),
            })
            .await
            .unwrap();
        raw.framed
            .feed(rzk_wire::RequestFrame {
                xid: rzk_wire::Xid(2 * i + 2),
                request: Request::Exists(rzk_wire::ExistsRequest {
                    path: p.into(),
                    watch: false,
                }),
            })
            .await
            .unwrap();
    }
    SinkExt::<rzk_wire::RequestFrame>::flush(&mut raw.framed)
        .await
        .unwrap();
    for i in 0..300 {
        let op = if i % 2 == 0 {
            OpCode::Create
        } else {
            OpCode::Exists
        };
        let r = raw.reply(op).await;
        assert_eq!(r.xid, rzk_wire::Xid(i + 1));
        assert!(r.result.is_ok(), "{r:?}");
    }
}

#[tokio::test]
async fn per_connection_outstanding_limit_applies_backpressure_without_losing_order() {
    let dir = tempfile::tempdir().unwrap();
    // One slot per connection: the server reads one request at a time.
    let server = TestServer::start(dir.path(), &[("rzk.connection.outstandingMax", "1")]).await;
    let (mut raw, _) = Raw::connect(server.addr, 4000).await;
    pipeline_and_check(&mut raw, "n").await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn global_outstanding_limit_applies_backpressure_across_connections() {
    let dir = tempfile::tempdir().unwrap();
    // One slot for the whole server, two connections pipelining at once.
    let server = TestServer::start(dir.path(), &[("globalOutstandingLimit", "1")]).await;
    let (mut a, _) = Raw::connect(server.addr, 4000).await;
    let (mut b, _) = Raw::connect(server.addr, 4000).await;
    tokio::join!(
        pipeline_and_check(&mut a, "a"),
        pipeline_and_check(&mut b, "b")
    );
    server.stop().await.unwrap();
}

/// A connection whose own slot is free but the server's is not must wait
/// without keeping that slot: with one slot per connection it would otherwise
/// wait for itself forever.
#[tokio::test]
async fn waiting_for_the_global_limit_keeps_no_connection_slot() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(
        dir.path(),
        &[
            ("globalOutstandingLimit", "1"),
            ("rzk.connection.outstandingMax", "1"),
        ],
    )
    .await;
    let (mut a, _) = Raw::connect(server.addr, 4000).await;
    let (mut b, _) = Raw::connect(server.addr, 4000).await;
    let both = async {
        tokio::join!(
            pipeline_and_check(&mut a, "a"),
            pipeline_and_check(&mut b, "b")
        )
    };
    tokio::time::timeout(Duration::from_secs(60), both)
        .await
        .expect("both connections are served to the end");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_client_that_does_not_read_is_disconnected() {
    let dir = tempfile::tempdir().unwrap();
    let server =
        TestServer::start(dir.path(), &[("rzk.connection.outgoingBytesMax", "200000")]).await;
    // This end's receive buffer is set small (64 KiB, which Linux doubles), so that
    // what the kernel holds for the client is known; set before connecting, it also
    // turns off receive-buffer autotuning.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(64 * 1024).unwrap();
    let rcvbuf = socket.recv_buffer_size().unwrap() as usize;
    let stream = socket.connect(server.addr).await.unwrap();
    let mut raw = Raw::open_stream(stream, Raw::new_session(30000)).await;
    assert!(matches!(raw.recv().await, Some(Incoming::Connect(_))));
    assert!(raw
        .call(create_req("/big", &vec![1u8; 100_000], 0))
        .await
        .result
        .is_ok());
    let (mut bystander, _) = Raw::connect(server.addr, 4000).await;
    // Ask for 100 KB 2000 times and never read: 200 MB the server may not buffer.
    let mut stream = raw.framed.into_inner();
    let mut buf = BytesMut::new();
    for i in 0..2000 {
        let frame = rzk_wire::RequestFrame {
            xid: rzk_wire::Xid(10 + i),
            request: Request::GetData(rzk_wire::GetDataRequest {
                path: "/big".into(),
                watch: false,
            }),
        };
        let start = buf.len();
        buf.put_i32(0);
        frame.encode_payload(&mut buf);
        let len = (buf.len() - start - 4) as i32;
        buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
    }
    // The server reads these 2000 small requests, or closes the connection once its
    // replies exceed the limit (then the write may fail with a reset): either is
    // right. Neither within 10 s is not.
    let wrote = tokio::time::timeout(Duration::from_secs(10), stream.write_all(&buf)).await;
    assert!(
        wrote.is_ok(),
        "the server neither read the requests nor closed the connection"
    );
    // The bystander is served meanwhile.
    assert!(bystander.call(Request::Ping).await.result.is_ok());
    // Now read: the stream ends long before 200 MB arrive. What can arrive before
    // the close: what the kernel held (this end's receive buffer and the server's
    // send buffer, at most tcp_wmem's maximum) plus, at most, one queue's worth
    // (outgoingBytesMax) and one reply that was being written when the queue
    // overflowed. A server that buffered without limit would deliver all 200 MB.
    // (Usually 0 arrive: the server closes with our requests unread, so the close is
    // a reset, which discards what this end's kernel held. The exact queue limit is
    // checked by outbox.rs's unit tests.)
    let wmem_max = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .ok()
        .and_then(|s| s.split_whitespace().nth(2)?.parse::<usize>().ok())
        .unwrap_or(4 << 20);
    let bound = rcvbuf + wmem_max + 200_000 + 100_100 + 64 * 1024;
    let mut total = 0usize;
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => total += n,
            Err(_) => panic!("the server neither closed nor sent; read {total} bytes"),
        }
        assert!(
            total <= bound,
            "read {total} bytes, more than {bound} (receive buffer {rcvbuf}, tcp_wmem max {wmem_max}, limit 200000), and the connection is still open"
        );
    }
    println!("read {total} bytes before the close (bound {bound})");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_connection_without_connect_request_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(
        dir.path(),
        &[("zookeeper.nio.sessionlessCnxnTimeout", "300")],
    )
    .await;
    let mut s = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let mut b = [0u8; 1];
    let r = tokio::time::timeout(Duration::from_secs(10), s.read(&mut b)).await;
    assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "closed: {r:?}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn unknown_opcode_and_malformed_records() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let (mut raw, _) = Raw::connect(server.addr, 4000).await;
    let stream = raw.framed.get_mut();
    // getData (4) with a truncated record: MARSHALLINGERROR, connection stays.
    let mut f = BytesMut::new();
    f.put_i32(12);
    f.put_i32(5);
    f.put_i32(4);
    f.put_i32(100); // a string length with no bytes after it
    stream.write_all(&f).await.unwrap();
    let r = raw.reply(OpCode::GetData).await;
    assert_eq!(
        (r.xid, r.result),
        (rzk_wire::Xid(5), Err(ErrorCode::MarshallingError))
    );
    assert!(raw.call(Request::Ping).await.result.is_ok());
    // opcode 999: UNIMPLEMENTED with zxid -1, then close.
    let stream = raw.framed.get_mut();
    let mut f = BytesMut::new();
    f.put_i32(8);
    f.put_i32(6);
    f.put_i32(999);
    stream.write_all(&f).await.unwrap();
    let r = raw.reply(OpCode::Ping).await;
    assert_eq!(
        (r.xid, r.zxid.as_i64(), r.result),
        (rzk_wire::Xid(6), -1, Err(ErrorCode::Unimplemented))
    );
    assert!(raw.closed().await);
    let _ = Response::Empty;
    server.stop().await.unwrap();
}
