//! The gRPC transport on loopback: codec round trip, identity checks, and a
//! three-replica ensemble with a leader failover.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rzk_quorum::core::Config;
use rzk_quorum::grpc::{from_proto, pb, to_proto, DecodeError, GrpcConfig, GrpcTransport};
use rzk_quorum::message::{
    Entry, LearnerKind, LinkId, Message, Notification, PeerState, RejectReason, SessionMsg, Vote,
};
use rzk_quorum::storage::MemStorage;
use rzk_quorum::transport::{Inbound, Inbox};
use rzk_quorum::{Committed, DriverConfig, PeerId, Replicator, Role, ZabReplicator};
use rzk_zxid::{Epoch, Zxid};
use tokio::net::TcpListener;

fn all_messages() -> Vec<Message> {
    let e = Entry {
        zxid: Zxid::from_u64(0x1_0000_0002),
        payload: Bytes::from_static(b"txn"),
    };
    let z = Zxid::from_u64(0x3_0000_0001);
    let msgs = vec![
        SessionMsg::FollowerInfo {
            kind: LearnerKind::Participant,
            accepted_epoch: Epoch(3),
        },
        SessionMsg::FollowerInfo {
            kind: LearnerKind::Observer,
            accepted_epoch: Epoch(0),
        },
        SessionMsg::LeaderInfo {
            epoch: Epoch(4),
            established: true,
        },
        SessionMsg::AckEpoch {
            current_epoch: Epoch(3),
            last_zxid: z,
            epoch_ends: vec![z, Zxid::ZERO],
        },
        SessionMsg::Diff { leader_last: z },
        SessionMsg::Trunc { to: z },
        SessionMsg::Snap {
            zxid: z,
            size_bytes: 1 << 33,
            crc: 0xdead_beef,
        },
        SessionMsg::SnapChunk {
            offset: 1 << 32,
            data: Bytes::from_static(b"state"),
        },
        SessionMsg::SnapAck { received: 77 },
        SessionMsg::Proposal {
            entries: vec![e.clone(), e.clone()],
        },
        SessionMsg::Commit { upto: z },
        SessionMsg::NewLeader { epoch: Epoch(4) },
        SessionMsg::AckNewLeader { epoch: Epoch(4) },
        SessionMsg::UpToDate { committed: z },
        SessionMsg::Ack { upto: z },
        SessionMsg::Inform {
            prev: Zxid::from_u64(0x1_0000_0001),
            entries: vec![e],
        },
        SessionMsg::Ping { id: 7 },
        SessionMsg::Pong { id: 7 },
        SessionMsg::SyncRequest { id: 9 },
        SessionMsg::SyncReply { id: 9, zxid: z },
        SessionMsg::Reject {
            reason: RejectReason::AheadOfLeader,
        },
        SessionMsg::Reject {
            reason: RejectReason::Protocol,
        },
    ];
    let mut out: Vec<Message> = msgs
        .into_iter()
        .enumerate()
        .map(|(i, msg)| Message::Session {
            session: LinkId(42),
            seq: i as u64,
            msg,
        })
        .collect();
    out.push(Message::Notification(Notification {
        state: PeerState::Following,
        vote: Vote {
            leader: PeerId(2),
            zxid: z,
            peer_epoch: Epoch(3),
        },
        round: 12,
    }));
    out
}

#[test]
fn every_message_round_trips() {
    for m in all_messages() {
        assert_eq!(from_proto(to_proto(&m)), Ok(m.clone()), "{m:?}");
    }
}

#[test]
fn malformed_messages_are_errors_not_panics() {
    assert_eq!(
        from_proto(pb::Msg { kind: None }),
        Err(DecodeError::Missing("Msg.kind"))
    );
    let no_vote = pb::Msg {
        kind: Some(pb::msg::Kind::Notification(pb::Notification {
            state: 0,
            vote: None,
            round: 1,
        })),
    };
    assert_eq!(
        from_proto(no_vote),
        Err(DecodeError::Missing("Notification.vote"))
    );
    let bad_state = pb::Msg {
        kind: Some(pb::msg::Kind::Notification(pb::Notification {
            state: 99,
            vote: Some(pb::Vote::default()),
            round: 1,
        })),
    };
    assert_eq!(
        from_proto(bad_state),
        Err(DecodeError::Invalid("Notification.state"))
    );
    let no_session_msg = pb::Msg {
        kind: Some(pb::msg::Kind::Session(pb::Session {
            session: 1,
            seq: 0,
            msg: None,
        })),
    };
    assert_eq!(
        from_proto(no_session_msg),
        Err(DecodeError::Missing("Session.msg"))
    );
}

async fn listeners(n: usize) -> (Vec<TcpListener>, BTreeMap<PeerId, SocketAddr>) {
    let mut ls = Vec::new();
    let mut addrs = BTreeMap::new();
    for i in 0..n {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.insert(PeerId(i as u64 + 1), l.local_addr().unwrap());
        ls.push(l);
    }
    (ls, addrs)
}

#[tokio::test]
async fn a_stream_from_an_unknown_server_id_is_refused() {
    let (mut ls, addrs) = listeners(2).await;
    let l1 = ls.remove(0);
    let (_t, _inbox) = GrpcTransport::start(GrpcConfig::new(PeerId(1), addrs.clone()), l1).unwrap();
    let mut client =
        pb::quorum_client::QuorumClient::connect(format!("http://{}", addrs[&PeerId(1)]))
            .await
            .unwrap();
    let hello = pb::Batch {
        from: 9,
        to: 1,
        msgs: vec![],
    };
    let status = client
        .exchange(futures::stream::iter(vec![hello]))
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status}");
}

fn config(id: PeerId) -> DriverConfig {
    let mut c = Config::new(id, [PeerId(1), PeerId(2), PeerId(3)]);
    c.finalize_wait_ticks = 30;
    c.notification_interval_ticks_min = 30;
    c.notification_interval_ticks_max = 300;
    c.ping_interval_ticks = 30;
    c.init_limit_ticks = 2_000;
    c.sync_limit_ticks = 600;
    DriverConfig::new(c)
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_over_grpc_commit_and_fail_over() {
    let (ls, addrs) = listeners(3).await;
    let mut reps = Vec::new();
    let mut transports = Vec::new();
    let mut seen = Vec::new();
    for (i, l) in ls.into_iter().enumerate() {
        let id = PeerId(i as u64 + 1);
        let (t, inbox) = GrpcTransport::start(GrpcConfig::new(id, addrs.clone()), l).unwrap();
        let rep = Arc::new(
            ZabReplicator::start(config(id), MemStorage::new(), t.clone(), inbox)
                .await
                .unwrap(),
        );
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut stream = rep.take_commits().unwrap();
        let l2 = log.clone();
        tokio::spawn(async move {
            while let Some(c) = stream.next().await {
                if let Committed::Txn { zxid, payload } = c {
                    l2.lock().unwrap().push((zxid, payload));
                }
            }
        });
        reps.push(rep);
        transports.push(t);
        seen.push(log);
    }
    let leader = |reps: &[Arc<ZabReplicator>]| reps.iter().position(|r| r.role() == Role::Leader);
    wait_for("a leader", || leader(&reps).is_some()).await;
    let l = leader(&reps).unwrap();
    let futs: Vec<_> = (0..100)
        .map(|i| reps[l].propose(Bytes::from(format!("p{i}"))))
        .collect();
    let mut acked = Vec::new();
    for f in futs {
        acked.push(f.await.expect("committed"));
    }
    wait_for("every replica applies 100", || {
        seen.iter().all(|s| s.lock().unwrap().len() == 100)
    })
    .await;
    // The same sequence everywhere: the acknowledged zxids in order, each with the
    // payload proposed under it.
    let expected: Vec<(Zxid, Bytes)> = acked
        .iter()
        .enumerate()
        .map(|(i, z)| (*z, Bytes::from(format!("p{i}"))))
        .collect();
    for (i, s) in seen.iter().enumerate() {
        assert_eq!(*s.lock().unwrap(), expected, "replica {}", i + 1);
    }

    // Stop the leader and its transport: the other two elect a new leader.
    reps[l].abort();
    transports[l].shutdown();
    let rest: Vec<Arc<ZabReplicator>> = (0..3)
        .filter(|i| *i != l)
        .map(|i| reps[i].clone())
        .collect();
    wait_for("a new leader", || leader(&rest).is_some()).await;
    let nl = leader(&rest).unwrap();
    let z = rest[nl]
        .propose(Bytes::from_static(b"after"))
        .await
        .expect("committed");
    assert!(z > *acked.last().unwrap());
}

#[test]
fn too_many_epoch_ends_are_refused() {
    let m = pb::Msg {
        kind: Some(pb::msg::Kind::Session(pb::Session {
            session: 1,
            seq: 0,
            msg: Some(pb::session::Msg::AckEpoch(pb::AckEpoch {
                current_epoch: 1,
                last_zxid: 1,
                epoch_ends: vec![1; rzk_quorum::message::EPOCH_ENDS_MAX + 1],
            })),
        })),
    };
    assert_eq!(
        from_proto(m),
        Err(DecodeError::Invalid("AckEpoch.epoch_ends"))
    );
}

/// `message_bytes_max`: a message over the limit is dropped by its sender (the
/// session it belongs to resynchronises), and the connection goes on carrying
/// the rest. (A peer that sends one anyway: `tests/bad_peers.rs`.)
#[tokio::test]
async fn a_message_over_the_size_limit_is_dropped_and_traffic_continues() {
    use rzk_quorum::transport::Transport;
    let (mut ls, addrs) = listeners(2).await;
    let mut cfg1 = GrpcConfig::new(PeerId(1), addrs.clone());
    let mut cfg2 = GrpcConfig::new(PeerId(2), addrs.clone());
    cfg1.message_bytes_max = 4096;
    cfg2.message_bytes_max = 4096;
    let (_t1, mut inbox1) = GrpcTransport::start(cfg1, ls.remove(0)).unwrap();
    let (t2, _inbox2) = GrpcTransport::start(cfg2, ls.remove(0)).unwrap();
    let small = |seq| Message::Session {
        session: LinkId(1),
        seq,
        msg: SessionMsg::Ping { id: seq },
    };
    // Wait until the stream is up (peer 2 dials peer 1).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        t2.send(PeerId(1), small(0));
        if let Ok(Some(Inbound::Message { from, .. })) =
            tokio::time::timeout(Duration::from_millis(50), inbox1.recv()).await
        {
            assert_eq!(from, PeerId(2));
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no connection");
    }
    let big = Message::Session {
        session: LinkId(1),
        seq: 1,
        msg: SessionMsg::SnapChunk {
            offset: 0,
            data: Bytes::from(vec![0u8; 64 * 1024]),
        },
    };
    t2.send(PeerId(1), big);
    // The sender drops it (sent, it would break the stream and everything
    // queued behind it); later messages flow on the same stream.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        t2.send(PeerId(1), small(2));
        match tokio::time::timeout(Duration::from_millis(50), inbox1.recv()).await {
            // Copies of the probe above may still arrive (it was sent until one got
            // through); anything else must be the message after the oversized one.
            Ok(Some(Inbound::Message { msg, .. })) if msg == small(0) => continue,
            Ok(Some(Inbound::Message { msg, .. })) => {
                assert_eq!(msg, small(2), "the oversized message is never delivered");
                break;
            }
            Ok(Some(Inbound::Disconnected { .. })) => panic!("the stream broke"),
            Ok(None) | Err(_) => {}
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "traffic did not resume"
        );
    }
}

/// Two transports whose stream (peer 2 dials peer 1) carries traffic both ways.
async fn connected_pair() -> (GrpcTransport, Inbox, GrpcTransport, Inbox) {
    use rzk_quorum::transport::Transport;
    let (mut ls, addrs) = listeners(2).await;
    let (t1, mut inbox1) =
        GrpcTransport::start(GrpcConfig::new(PeerId(1), addrs.clone()), ls.remove(0)).unwrap();
    let (t2, mut inbox2) =
        GrpcTransport::start(GrpcConfig::new(PeerId(2), addrs.clone()), ls.remove(0)).unwrap();
    let ping = Message::Session {
        session: LinkId(1),
        seq: 0,
        msg: SessionMsg::Ping { id: 0 },
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut up = (false, false);
    while up != (true, true) {
        assert!(tokio::time::Instant::now() < deadline, "no connection");
        t2.send(PeerId(1), ping.clone());
        t1.send(PeerId(2), ping.clone());
        let wait = Duration::from_millis(50);
        if let Ok(Some(Inbound::Message { from, .. })) =
            tokio::time::timeout(wait, inbox1.recv()).await
        {
            assert_eq!(from, PeerId(2));
            up.0 = true;
        }
        if let Ok(Some(Inbound::Message { from, .. })) =
            tokio::time::timeout(wait, inbox2.recv()).await
        {
            assert_eq!(from, PeerId(1));
            up.1 = true;
        }
    }
    (t1, inbox1, t2, inbox2)
}

/// A stream that ends reaches the core at once as `Disconnected` (here the
/// dialing side goes away).
#[tokio::test]
async fn the_end_of_a_dialed_stream_is_reported_to_the_acceptor() {
    let (_t1, mut inbox1, t2, _inbox2) = connected_pair().await;
    t2.shutdown();
    disconnected(&mut inbox1, PeerId(2)).await;
}

/// The same, the other way: the accepting side goes away.
#[tokio::test]
async fn the_end_of_an_accepted_stream_is_reported_to_the_dialer() {
    let (t1, _inbox1, _t2, mut inbox2) = connected_pair().await;
    t1.shutdown();
    disconnected(&mut inbox2, PeerId(1)).await;
}

/// Waits (with a deadline) for `inbox` to report that its link to `peer` ended.
async fn disconnected(inbox: &mut Inbox, peer: PeerId) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, inbox.recv()).await {
            Ok(Some(Inbound::Disconnected { peer: p })) => {
                assert_eq!(p, peer);
                return;
            }
            Ok(Some(Inbound::Message { .. })) => continue,
            Ok(None) | Err(_) => panic!("no disconnect reported for {peer:?}"),
        }
    }
}
