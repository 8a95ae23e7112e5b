//! Observers as non-voting members of the quorum, with the real driver and the
//! gRPC transport on 127.0.0.1: three voters and one observer.
//!
//! What each test pins, and how it was checked to fail (by hand, once):
//! - `writes_reach_the_observer_in_order_and_it_is_not_a_voter`: the observer
//!   applies exactly the leader's sequence, is reported as a non-voting
//!   learner, serves a `sync` barrier, forwards to the leader in order;
//!   killing it does not stop commits (fails when the leader sends no
//!   INFORM; fails when an observer drops what it forwards).
//! - `two_of_three_voters_commit_and_one_voter_with_the_observer_does_not`:
//!   with one voter dead the other two commit; with two dead the last voter
//!   and the observer commit nothing (fails when the leader counts the
//!   observer among the synced members that keep it leading). Counting an
//!   observer's ACK alone changes nothing: it is sent committed transactions
//!   only, so it never acknowledges beyond the commit point.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rzk_quorum::core::Config;
use rzk_quorum::grpc::{GrpcConfig, GrpcTransport};
use rzk_quorum::storage::MemStorage;
use rzk_quorum::{Committed, DriverConfig, PeerId, Replicator, Role, ZabReplicator};
use rzk_zxid::Zxid;
use tokio::net::TcpListener;

const VOTERS: [PeerId; 3] = [PeerId(1), PeerId(2), PeerId(3)];
const OBSERVER: PeerId = PeerId(4);

fn config(id: PeerId) -> DriverConfig {
    let mut c = Config::new(id, VOTERS).with_observers([OBSERVER]);
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

/// One member: its replicator, its transport, and the transactions its commit
/// stream delivered, in order.
struct Member {
    rep: Arc<ZabReplicator>,
    transport: GrpcTransport,
    txns: Arc<Mutex<Vec<(Zxid, Bytes)>>>,
    /// Messages forwarded to this member while it led: (sender, payload).
    forwarded: Arc<Mutex<Vec<(PeerId, Bytes)>>>,
}

impl Member {
    fn kill(&self) {
        self.rep.abort();
        self.transport.shutdown();
    }
}

/// Members 1-3 (voters) and 4 (the observer), index = id - 1.
async fn ensemble() -> Vec<Member> {
    let mut ls = Vec::new();
    let mut addrs: BTreeMap<PeerId, SocketAddr> = BTreeMap::new();
    for i in 0..4u64 {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.insert(PeerId(i + 1), l.local_addr().unwrap());
        ls.push(l);
    }
    let mut members = Vec::new();
    for (i, l) in ls.into_iter().enumerate() {
        let id = PeerId(i as u64 + 1);
        let (transport, inbox) =
            GrpcTransport::start(GrpcConfig::new(id, addrs.clone()), l).unwrap();
        let rep = Arc::new(
            ZabReplicator::start(config(id), MemStorage::new(), transport.clone(), inbox)
                .await
                .unwrap(),
        );
        let txns = Arc::new(Mutex::new(Vec::new()));
        let forwarded = Arc::new(Mutex::new(Vec::new()));
        let mut stream = rep.take_commits().unwrap();
        let (t2, f2) = (txns.clone(), forwarded.clone());
        tokio::spawn(async move {
            while let Some(c) = stream.next().await {
                match c {
                    Committed::Txn { zxid, payload } => t2.lock().unwrap().push((zxid, payload)),
                    Committed::Forwarded { from, payload } => {
                        f2.lock().unwrap().push((from, payload))
                    }
                    Committed::Snapshot { .. } | Committed::Role { .. } => {}
                }
            }
        });
        members.push(Member {
            rep,
            transport,
            txns,
            forwarded,
        });
    }
    members
}

fn leader(ms: &[Member], alive: &[usize]) -> Option<usize> {
    alive
        .iter()
        .copied()
        .find(|i| ms[*i].rep.role() == Role::Leader)
}

async fn settled(ms: &[Member]) -> usize {
    let all = [0, 1, 2, 3];
    wait_for("a leader and a synced observer", || {
        leader(ms, &all).is_some() && ms[3].rep.role() == Role::Observer
    })
    .await;
    leader(ms, &all).unwrap()
}

async fn write(m: &Member, n: usize, tag: &str) -> Vec<(Zxid, Bytes)> {
    let futs: Vec<_> = (0..n)
        .map(|i| {
            let p = Bytes::from(format!("{tag}{i}"));
            (m.rep.propose(p.clone()), p)
        })
        .collect();
    let mut acked = Vec::new();
    for (f, p) in futs {
        acked.push((f.await.expect("committed"), p));
    }
    acked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_reach_the_observer_in_order_and_it_is_not_a_voter() {
    let ms = ensemble().await;
    let l = settled(&ms).await;
    assert_eq!(ms[3].rep.leader(), Some(PeerId(l as u64 + 1)));
    let acked = write(&ms[l], 100, "w").await;
    wait_for("the observer applies 100", || {
        ms[3].txns.lock().unwrap().len() == 100
    })
    .await;
    // The leader's own commit stream is read by a task of its own too.
    wait_for("the leader applies 100", || {
        ms[l].txns.lock().unwrap().len() == 100
    })
    .await;
    // The leader's sequence, in order, with each payload under its zxid.
    assert_eq!(*ms[3].txns.lock().unwrap(), acked);
    assert_eq!(*ms[l].txns.lock().unwrap(), acked);

    let stats = ms[l].rep.stats();
    let obs = stats
        .learners
        .iter()
        .find(|s| s.id == OBSERVER)
        .expect("the observer is a learner of the leader");
    assert!(!obs.voting && obs.synced, "{stats:?}");
    assert_eq!(
        stats.learners.iter().filter(|s| s.voting).count(),
        2,
        "{stats:?}"
    );

    // An observer proposes nothing itself, and its sync barrier goes through
    // the leader (I6b): it covers every write acknowledged before it.
    assert!(ms[3].rep.propose(Bytes::from_static(b"x")).await.is_err());
    let barrier = ms[3].rep.sync().await.expect("sync on the observer");
    assert!(barrier >= acked.last().unwrap().0);
    // Writes and session traffic go to the leader, in the observer's order.
    for i in 0..3 {
        ms[3]
            .rep
            .forward(Bytes::from(format!("fwd{i}")))
            .expect("the observer knows its leader");
    }
    wait_for("the leader gets the forwarded messages", || {
        ms[l].forwarded.lock().unwrap().len() == 3
    })
    .await;
    let expected: Vec<(PeerId, Bytes)> = (0..3)
        .map(|i| (OBSERVER, Bytes::from(format!("fwd{i}"))))
        .collect();
    assert_eq!(*ms[l].forwarded.lock().unwrap(), expected);

    // Without the observer, the voters commit on.
    ms[3].kill();
    let more = write(&ms[l], 10, "after").await;
    assert!(more[0].0 > acked.last().unwrap().0);
    for m in &ms[..3] {
        m.kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_three_voters_commit_and_one_voter_with_the_observer_does_not() {
    let ms = ensemble().await;
    let l = settled(&ms).await;
    let followers: Vec<usize> = (0..3).filter(|i| *i != l).collect();
    let first = write(&ms[l], 20, "a").await;

    // One voter dies: the leader and the other voter are a quorum.
    ms[followers[0]].kill();
    let second = write(&ms[l], 20, "b").await;
    wait_for("the observer applies 40", || {
        ms[3].txns.lock().unwrap().len() == 40
    })
    .await;
    let both: Vec<_> = first.iter().chain(second.iter()).cloned().collect();
    assert_eq!(*ms[3].txns.lock().unwrap(), both);

    // A second voter dies: one voter and the observer are no quorum. The
    // proposal must fail (the leader steps down), never commit.
    ms[followers[1]].kill();
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        ms[l].rep.propose(Bytes::from_static(b"lost")),
    )
    .await
    .expect("the proposal resolves (the leader steps down)");
    assert!(
        outcome.is_err(),
        "committed with one voter of three and an observer: {outcome:?}"
    );
    wait_for("no leader", || {
        ms[l].rep.role() != Role::Leader && ms[3].rep.role() != Role::Observer
    })
    .await;
    assert_eq!(ms[3].txns.lock().unwrap().len(), 40, "nothing more applied");
    ms[l].kill();
    ms[3].kill();
}
