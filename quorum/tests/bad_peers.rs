//! I7 at the gRPC level: bad input from a peer is refused with a log line that
//! names the peer, never a panic or a stall of the others.
//!
//! Peers 1 and 2 run real `ZabReplicator`s over the gRPC transport on
//! 127.0.0.1 (port 0) in an ensemble of three voters; "peer 3" is a raw tonic
//! client that connects as a server would and sends what a broken or hostile
//! peer might. After each, the two real peers must still commit, and the
//! captured log must hold the refusal with `peer=<id>`.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use prost::Message as _;
use rzk_quorum::core::Config;
use rzk_quorum::grpc::{pb, to_proto, GrpcConfig, GrpcTransport};
use rzk_quorum::message::{Entry, LinkId, Message, SessionMsg};
use rzk_quorum::storage::MemStorage;
use rzk_quorum::{Committed, DriverConfig, PeerId, Replicator, Role, ZabReplicator};
use rzk_zxid::Zxid;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Request, Status};

/// The log, captured: every line the test's subscriber writes.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Log {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Waits (with a deadline) for a line holding every one of `parts`.
    async fn wait_line(&self, parts: &[&str]) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(line) = self
                .text()
                .lines()
                .find(|l| parts.iter().all(|p| l.contains(p)))
            {
                return line.to_string();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no log line with {parts:?} in:\n{}",
                self.text()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Log {
    /// Waits (with a deadline) until `count` lines hold every one of `parts`.
    async fn wait_lines(&self, parts: &[&str], count: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let n = self
                .text()
                .lines()
                .filter(|l| parts.iter().all(|p| l.contains(p)))
                .count();
            if n >= count {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{n} of {count} log lines with {parts:?} in:\n{}",
                self.text()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sends everything this thread logs (the test runs on one thread) to a
/// [`Log`].
fn capture() -> (Log, tracing::subscriber::DefaultGuard) {
    let log = Log::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    (log, tracing::subscriber::set_default(subscriber))
}

struct Ensemble {
    addrs: BTreeMap<PeerId, SocketAddr>,
    reps: Vec<Arc<ZabReplicator>>,
    seen: Vec<Arc<Mutex<Vec<Bytes>>>>,
    _transports: Vec<GrpcTransport>,
}

impl Ensemble {
    /// Peers 1 and 2 of {1, 2, 3}, each with `message_bytes_max`.
    async fn start(message_bytes_max: usize) -> Ensemble {
        let mut listeners = Vec::new();
        let mut addrs = BTreeMap::new();
        for id in 1..=3 {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            addrs.insert(PeerId(id), l.local_addr().unwrap());
            listeners.push(l);
        }
        let mut e = Ensemble {
            addrs: addrs.clone(),
            reps: Vec::new(),
            seen: Vec::new(),
            _transports: Vec::new(),
        };
        for (i, l) in listeners.into_iter().take(2).enumerate() {
            let id = PeerId(i as u64 + 1);
            let mut g = GrpcConfig::new(id, addrs.clone());
            g.message_bytes_max = message_bytes_max;
            let (t, inbox) = GrpcTransport::start(g, l).unwrap();
            let mut c = Config::new(id, [PeerId(1), PeerId(2), PeerId(3)]);
            c.finalize_wait_ticks = 30;
            c.notification_interval_ticks_min = 30;
            c.notification_interval_ticks_max = 300;
            c.ping_interval_ticks = 30;
            c.init_limit_ticks = 4_000;
            c.sync_limit_ticks = 2_000;
            let rep = Arc::new(
                ZabReplicator::start(DriverConfig::new(c), MemStorage::new(), t.clone(), inbox)
                    .await
                    .unwrap(),
            );
            let seen = Arc::new(Mutex::new(Vec::new()));
            let mut stream = rep.take_commits().unwrap();
            let s2 = seen.clone();
            tokio::spawn(async move {
                while let Some(c) = stream.next().await {
                    if let Committed::Txn { payload, .. } = c {
                        s2.lock().unwrap().push(payload);
                    }
                }
            });
            e.reps.push(rep);
            e.seen.push(seen);
            e._transports.push(t);
        }
        e
    }

    /// Waits for a leader and commits `text` through it, on both peers.
    async fn commits(&self, text: &'static str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the ensemble stalled"
            );
            let leader = self.reps.iter().find(|r| r.role() == Role::Leader);
            if let Some(l) = leader {
                if l.propose(Bytes::from_static(text.as_bytes())).await.is_ok() {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{text} not applied everywhere"
            );
            if self
                .seen
                .iter()
                .all(|s| s.lock().unwrap().iter().any(|p| p == text.as_bytes()))
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// No real peer applied a payload containing `marker`.
    fn applied_nothing_with(&self, marker: &[u8]) {
        for s in &self.seen {
            assert!(
                !s.lock()
                    .unwrap()
                    .iter()
                    .any(|p| p.windows(marker.len()).any(|w| w == marker)),
                "a bad peer's payload was applied"
            );
        }
    }
}

/// Raw bytes in gRPC frames: what a broken peer could put on the wire.
#[derive(Default)]
struct RawCodec;
struct RawEncoder;
struct RawDecoder;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let v = src.chunk().to_vec();
        src.advance(v.len());
        Ok(Some(v))
    }
}

/// A connection to `addr` claiming to be server `from`; frames are sent raw.
struct FakePeer {
    frames: mpsc::Sender<Vec<u8>>,
    _call: tokio::task::JoinHandle<()>,
}

impl FakePeer {
    async fn connect(addr: SocketAddr, from: u64, to: u64) -> FakePeer {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .expect("the real peer listens");
        let (frames, rx) = mpsc::channel::<Vec<u8>>(16);
        let hello = pb::Batch {
            from,
            to,
            msgs: Vec::new(),
        };
        frames.send(hello.encode_to_vec()).await.unwrap();
        let outgoing =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
        let call = tokio::spawn(async move {
            let mut grpc = tonic::client::Grpc::new(channel).max_encoding_message_size(usize::MAX);
            if grpc.ready().await.is_err() {
                return;
            }
            let path = tonic::codegen::http::uri::PathAndQuery::from_static(
                "/rzk.quorum.v1.Quorum/Exchange",
            );
            if let Ok(resp) = grpc.streaming(Request::new(outgoing), path, RawCodec).await {
                let mut incoming = resp.into_inner();
                while let Ok(Some(_)) = incoming.message().await {}
            }
        });
        FakePeer {
            frames,
            _call: call,
        }
    }

    async fn send_msgs(&self, from: u64, to: u64, msgs: Vec<pb::Msg>) {
        let batch = pb::Batch { from, to, msgs };
        let _ = self.frames.send(batch.encode_to_vec()).await;
    }
}

#[tokio::test]
async fn a_stream_from_an_unknown_server_id_is_refused_and_logged() {
    let (log, _guard) = capture();
    let e = Ensemble::start(64 << 20).await;
    e.commits("before").await;
    let _fake = FakePeer::connect(e.addrs[&PeerId(1)], 9, 1).await;
    let line = log.wait_line(&["refused a quorum stream", "peer=9"]).await;
    assert!(line.contains("WARN"), "{line}");
    e.commits("after").await;
}

/// A deposed leader (an old epoch) goes on sending on its old session: the
/// real peers drop it, log it naming the sender, and apply none of it.
#[tokio::test]
async fn messages_of_an_old_epoch_are_refused_and_logged() {
    let (log, _guard) = capture();
    let e = Ensemble::start(64 << 20).await;
    e.commits("before").await;
    let old = |seq, msg| {
        to_proto(&Message::Session {
            session: LinkId(0x77),
            seq,
            msg,
        })
    };
    for to in [1, 2] {
        let fake = FakePeer::connect(e.addrs[&PeerId(to)], 3, to).await;
        let evil = Entry {
            zxid: Zxid::from_u64(0x1_0000_0001),
            payload: Bytes::from_static(b"evil-old-epoch"),
        };
        let msgs = vec![
            old(
                7,
                SessionMsg::Proposal {
                    entries: vec![evil.clone()],
                },
            ),
            old(8, SessionMsg::Commit { upto: evil.zxid }),
        ];
        fake.send_msgs(3, to, msgs).await;
        let parts = [
            "dropped a quorum message",
            "peer=3",
            "PROPOSAL",
            "not a current session",
        ];
        // One line per real peer (each reports the session once).
        log.wait_lines(&parts, to as usize).await;
        e.commits(if to == 1 { "after-1" } else { "after-2" }).await;
    }
    e.applied_nothing_with(b"evil");
}

/// A learner that acknowledges NEWLEADER for an epoch the leader did not offer
/// (its own old one) is refused with a warning naming it; the leader goes on.
#[tokio::test]
async fn an_acknowledgement_of_another_epoch_is_refused_and_logged() {
    let (log, _guard) = capture();
    let e = Ensemble::start(64 << 20).await;
    e.commits("before").await;
    let leader = e
        .reps
        .iter()
        .find(|r| r.role() == Role::Leader)
        .expect("a leader")
        .id();
    let fake = FakePeer::connect(e.addrs[&leader], 3, leader.0).await;
    let msg = |seq, msg| {
        to_proto(&Message::Session {
            session: LinkId(0x33),
            seq,
            msg,
        })
    };
    let msgs = vec![
        msg(
            0,
            SessionMsg::FollowerInfo {
                kind: rzk_quorum::message::LearnerKind::Participant,
                accepted_epoch: rzk_zxid::Epoch(0),
            },
        ),
        msg(
            1,
            SessionMsg::AckEpoch {
                current_epoch: rzk_zxid::Epoch(0),
                last_zxid: Zxid::ZERO,
                epoch_ends: vec![Zxid::ZERO],
            },
        ),
        msg(
            2,
            SessionMsg::AckNewLeader {
                epoch: rzk_zxid::Epoch(0),
            },
        ),
    ];
    fake.send_msgs(3, leader.0, msgs).await;
    let line = log
        .wait_line(&[
            "refused a quorum message",
            "peer=3",
            "ACKNEWLEADER",
            "epoch 0",
        ])
        .await;
    assert!(line.contains("WARN"), "{line}");
    e.commits("after").await;
}

/// A message over `message_bytes_max` ends the stream it came on, with a log
/// line naming the sender; the others go on.
#[tokio::test]
async fn an_oversized_message_is_refused_and_logged() {
    let (log, _guard) = capture();
    let e = Ensemble::start(256 << 10).await;
    e.commits("before").await;
    let fake = FakePeer::connect(e.addrs[&PeerId(1)], 3, 1).await;
    let big = to_proto(&Message::Session {
        session: LinkId(1),
        seq: 0,
        msg: SessionMsg::Proposal {
            entries: vec![Entry {
                zxid: Zxid::from_u64(1),
                payload: Bytes::from(vec![b'x'; 1 << 20]),
            }],
        },
    });
    fake.send_msgs(3, 1, vec![big]).await;
    let line = log.wait_line(&["refused a quorum message", "peer=3"]).await;
    assert!(line.contains("WARN"), "{line}");
    e.commits("after").await;
    e.applied_nothing_with(b"xxxxxxxx");
}

/// Malformed input: a message with missing fields or out-of-range values is
/// dropped; bytes that are not protobuf at all end the stream. Each is logged
/// with the peer's id, and the ensemble goes on.
#[tokio::test]
async fn malformed_messages_are_refused_and_logged() {
    let (log, _guard) = capture();
    let e = Ensemble::start(64 << 20).await;
    e.commits("before").await;
    let fake = FakePeer::connect(e.addrs[&PeerId(1)], 3, 1).await;
    let bad_state = pb::Msg {
        kind: Some(pb::msg::Kind::Notification(pb::Notification {
            state: 99,
            vote: Some(pb::Vote::default()),
            round: 1,
        })),
    };
    fake.send_msgs(3, 1, vec![pb::Msg { kind: None }, bad_state])
        .await;
    log.wait_line(&["dropped a malformed quorum message", "peer=3", "Msg.kind"])
        .await;
    log.wait_line(&[
        "dropped a malformed quorum message",
        "peer=3",
        "Notification.state",
    ])
    .await;
    e.commits("after-fields").await;

    // Not protobuf: a field header that promises more bytes than there are.
    let _ = fake
        .frames
        .send(vec![0x1a, 0xff, 0xff, 0xff, 0x0f, 1, 2])
        .await;
    let line = log.wait_line(&["refused a quorum message", "peer=3"]).await;
    assert!(line.contains("WARN"), "{line}");
    e.commits("after-garbage").await;

    // A batch that claims another sender on the stream of server 3.
    let fake = FakePeer::connect(e.addrs[&PeerId(1)], 3, 1).await;
    fake.send_msgs(2, 1, Vec::new()).await;
    log.wait_line(&["refused a quorum message", "peer=3", "batch from 2"])
        .await;
    e.commits("after-impostor").await;
}
