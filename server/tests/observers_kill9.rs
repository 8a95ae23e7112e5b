//! Observers with real `rzk` processes on loopback: three voters and two
//! observers (`:observer` lines, `peerType=observer`), clients of the
//! `zookeeper-client` crate.
//!
//! - Under a write load (sessions on the voters and on the observers, whose
//!   writes and sessions the observers forward), one observer is killed with
//!   SIGKILL and restarted, then one follower. A reader on each observer
//!   checks, all along, that what it reads of a chain of znodes written one
//!   after another is always a prefix of the chain: no gap, no reordering.
//!   At the end each observer's tree equals the leader's (the number of
//!   znodes under the written parents and the data of every znode there) and
//!   holds every acknowledged write.
//! - Observers never make a quorum: with two of three voters dead, writes fail
//!   and the observers stop serving (as ZooKeeper 3.8's observers do without
//!   read-only mode: they drop their clients and take none until they follow
//!   a leader again); once one voter returns, everything serves again.
mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::clients::{connect, open, Acked};
use support::eventually;
use support::procs::{procs, Ensemble, Layout, Role};
use zookeeper_client as zk;

/// Whether an error means "no answer" (the connection broke or the member
/// stopped serving): the write may or may not have applied.
fn no_answer(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::ConnectionLoss
            | zk::Error::Timeout
            | zk::Error::NoHosts
            | zk::Error::UnexpectedError(_)
            | zk::Error::Custom(_)
    )
}

/// Writers: `per` sessions on each of `targets`; a create is acknowledged only
/// when its reply came.
fn writers(
    targets: Vec<String>,
    stop: Arc<AtomicBool>,
    acked: Acked,
) -> Vec<tokio::task::JoinHandle<()>> {
    targets
        .into_iter()
        .enumerate()
        .map(|(w, target)| {
            let (stop, acked) = (stop.clone(), acked.clone());
            tokio::spawn(async move {
                let c = connect(&target).await;
                let opts = zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let data = format!("w{w}-{i}").into_bytes();
                    i += 1;
                    match c.create(&format!("/load/w{w}-"), &data, &opts).await {
                        Ok((_, seq)) => acked
                            .lock()
                            .unwrap()
                            .push((format!("/load/w{w}-{seq}"), data)),
                        Err(e) if no_answer(&e) => {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => return,
                        Err(e) => panic!("writer {w} on {target}: unexpected {e}"),
                    }
                }
            })
        })
        .collect()
}

/// The chain: `/chain/n<i>` for i = 1, 2, ... created one after another
/// (each after the previous one's reply), on the leader's client port.
fn chain_writer(
    target: String,
    stop: Arc<AtomicBool>,
    written: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let c = connect(&target).await;
        let mut i = 1u64;
        while !stop.load(Ordering::Relaxed) {
            match c
                .create(
                    &format!("/chain/n{i:010}"),
                    i.to_string().as_bytes(),
                    &open(),
                )
                .await
            {
                Ok(_) => {
                    written.store(i, Ordering::Release);
                    i += 1;
                }
                // A create whose answer was lost may have applied: the next
                // attempt of the same name then finds it.
                Err(zk::Error::NodeExists) => {
                    written.store(i, Ordering::Release);
                    i += 1;
                }
                Err(e) if no_answer(&e) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => panic!("chain writer: unexpected {e}"),
            }
        }
    })
}

/// A reader on one observer: each read of `/chain`'s children must be
/// n1..nk for some k (a prefix of the chain: an observer that skipped or
/// reordered a txn would show a hole), and k never shrinks within a session.
/// Returns how many reads it checked.
fn chain_reader(
    target: String,
    stop: Arc<AtomicBool>,
    violations: Arc<Mutex<Vec<String>>>,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let c = connect(&target).await;
        let (mut reads, mut last) = (0u64, 0usize);
        while !stop.load(Ordering::Relaxed) {
            let mut children = match c.get_children("/chain").await {
                Ok((children, _)) => children,
                Err(e) if no_answer(&e) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                Err(zk::Error::SessionExpired) => {
                    // The session ended while its observer was dead: read on
                    // with a new one (monotonic reads hold per session).
                    return reads
                        + Box::pin(chain_reader(target, stop, violations))
                            .await
                            .unwrap();
                }
                Err(e) => panic!("reader on {target}: unexpected {e}"),
            };
            children.sort();
            reads += 1;
            let k = children.len();
            let prefix = (1..=k).all(|i| children[i - 1] == format!("n{i:010}"));
            if !prefix {
                let first_bad = (1..=k)
                    .find(|i| children[i - 1] != format!("n{i:010}"))
                    .unwrap();
                violations.lock().unwrap().push(format!(
                    "{target}: {k} children, not a prefix of the chain at n{first_bad:010} \
                     (found {})",
                    children[first_bad - 1]
                ));
            }
            if k < last {
                violations
                    .lock()
                    .unwrap()
                    .push(format!("{target}: the chain shrank from {last} to {k}"));
            }
            last = k;
        }
        reads
    })
}

async fn grows_by(acked: &Acked, n: usize, what: &str) {
    let start = acked.lock().unwrap().len();
    eventually(Duration::from_secs(60), what, || {
        let len = acked.lock().unwrap().len();
        async move { len >= start + n }
    })
    .await;
}

/// Every child of `parent` with its data, read after a `sync` on `target`.
async fn tree_of(target: &str, parent: &str) -> BTreeMap<String, Vec<u8>> {
    let c = connect(target).await;
    c.sync(parent).await.unwrap();
    let (children, _) = c.get_children(parent).await.unwrap();
    let mut out = BTreeMap::new();
    for child in children {
        let path = format!("{parent}/{child}");
        let (data, _) = c.get_data(&path).await.unwrap();
        out.insert(path, data);
    }
    assert_eq!(
        all_children_number(target, parent).await as usize,
        out.len(),
        "{target}: getAllChildrenNumber({parent})"
    );
    out
}

/// getAllChildrenNumber (op 104, which the `zookeeper-client` crate does not
/// offer) on a raw session; the caller synced `target` first.
async fn all_children_number(target: &str, path: &str) -> i32 {
    use rzk_wire::{GetAllChildrenNumberRequest, Request, Response};
    let (mut raw, _) = support::Raw::connect(target.parse().unwrap(), 10_000).await;
    let r = raw
        .call(Request::GetAllChildrenNumber(GetAllChildrenNumberRequest {
            path: path.into(),
        }))
        .await;
    match r.result {
        Ok(Response::GetAllChildrenNumber(n)) => n.total_number,
        other => panic!("{target}: getAllChildrenNumber({path}): {other:?}"),
    }
}

/// Creates `/load`, `/chain` and `/barrier` on the leader (through `setup`),
/// then checks that `sync` on every observer is a barrier (I6b): `rounds`
/// times, a read after it sees the value the leader acknowledged before it.
async fn parents_and_barrier(ens: &Ensemble, setup: &zk::Client, observers: &[usize], rounds: u32) {
    setup.create("/load", b"", &open()).await.unwrap();
    setup.create("/chain", b"", &open()).await.unwrap();
    setup.create("/barrier", b"0", &open()).await.unwrap();
    for o in observers {
        let reader = connect(&ens.members[*o].addr()).await;
        for i in 1..=rounds {
            let value = i.to_string().into_bytes();
            setup.set_data("/barrier", &value, None).await.unwrap();
            reader.sync("/barrier").await.unwrap();
            let (got, _) = reader.get_data("/barrier").await.unwrap();
            assert_eq!(
                got, value,
                "observer {}: a read after sync",
                ens.members[*o].id
            );
        }
    }
}

/// A running write load: [`writers`] on `targets`, the [`chain_writer`] on the
/// leader and a [`chain_reader`] on every observer.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Acked,
    written: Arc<AtomicU64>,
    violations: Arc<Mutex<Vec<String>>>,
    writers: Vec<tokio::task::JoinHandle<()>>,
    chain: tokio::task::JoinHandle<()>,
    readers: Vec<tokio::task::JoinHandle<u64>>,
}

impl Load {
    fn start(ens: &Ensemble, targets: Vec<String>, leader: usize, observers: &[usize]) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Acked = Arc::default();
        let written = Arc::new(AtomicU64::new(0));
        let violations = Arc::new(Mutex::new(Vec::new()));
        Load {
            writers: writers(targets, stop.clone(), acked.clone()),
            chain: chain_writer(ens.members[leader].addr(), stop.clone(), written.clone()),
            readers: observers
                .iter()
                .map(|o| chain_reader(ens.members[*o].addr(), stop.clone(), violations.clone()))
                .collect(),
            stop,
            acked,
            written,
            violations,
        }
    }

    /// Stops the load and asserts that every chain read on the observers was
    /// a prefix of the chain and that every reader checked some.
    async fn finish(self) -> (Acked, Arc<AtomicU64>) {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.writers {
            w.await.expect("a writer panicked");
        }
        self.chain.await.expect("the chain writer panicked");
        let mut reads = Vec::new();
        for r in self.readers {
            reads.push(r.await.expect("a reader panicked"));
        }
        let violations = self.violations.lock().unwrap().clone();
        assert!(
            violations.is_empty(),
            "{} reads were not a prefix of the chain; the first: {:?}",
            violations.len(),
            &violations[..violations.len().min(5)]
        );
        eprintln!(
            "{} writes acknowledged, chain of {}, prefix reads per observer {reads:?}",
            self.acked.lock().unwrap().len(),
            self.written.load(Ordering::Acquire)
        );
        assert!(
            reads.iter().all(|r| *r > 0),
            "every reader checked: {reads:?}"
        );
        (self.acked, self.written)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_get_every_write_in_order_through_kill_9_of_an_observer_and_a_follower() {
    let dir = tempfile::tempdir().unwrap();
    let mut ens = procs(
        dir.path(),
        &Layout::voters(3).observers(2).set("snapCount", 400),
    );
    ens.spawn_all();
    let leader = ens.settled().await;
    let observers = ens.observers();
    assert_eq!(observers, vec![3, 4]);
    for o in &observers {
        assert_eq!(ens.members[*o].mode().await.as_deref(), Some("observer"));
    }
    assert_eq!(
        ens.members[leader]
            .mntr_row("synced_observers")
            .await
            .as_deref(),
        Some("2"),
        "the leader reports both observers synced"
    );

    let setup = connect(&ens.members[leader].addr()).await;
    parents_and_barrier(&ens, &setup, &observers, 50).await;

    // Two writers on every member: those on the observers are forwarded.
    let targets: Vec<String> = ens
        .members
        .iter()
        .flat_map(|m| [m.addr(), m.addr()])
        .collect();
    let load = Load::start(&ens, targets, leader, &observers);
    let acked = load.acked.clone();
    grows_by(&acked, 300, "writes under load").await;

    // An observer dies and comes back while the load runs.
    let o = observers[0];
    ens.members[o].kill9();
    grows_by(&acked, 300, "writes while an observer is dead").await;
    ens.members[o].spawn();
    grows_by(&acked, 300, "writes while the observer rejoins").await;
    ens.settled().await;

    // The same for a follower.
    let leader = ens.settled().await;
    let follower = (0..3).find(|i| *i != leader).unwrap();
    ens.members[follower].kill9();
    grows_by(&acked, 300, "writes while a follower is dead").await;
    ens.members[follower].spawn();
    grows_by(&acked, 300, "writes while the follower rejoins").await;
    let leader = ens.settled().await;

    let (acked, written) = load.finish().await;
    same_as_leader(&ens, leader, &observers, &acked, &written).await;
    drop(setup);
}

/// At the end: each observer's tree under the written parents equals the
/// leader's (count and data), holds every acknowledged write, and the whole
/// tree has as many znodes as the leader's.
async fn same_as_leader(
    ens: &Ensemble,
    leader: usize,
    observers: &[usize],
    acked: &Acked,
    written: &AtomicU64,
) {
    let leader_addr = ens.members[leader].addr();
    for parent in ["/load", "/chain"] {
        let expected = tree_of(&leader_addr, parent).await;
        for o in observers {
            let got = tree_of(&ens.members[*o].addr(), parent).await;
            assert_eq!(
                got.len(),
                expected.len(),
                "observer {}: znodes under {parent}",
                ens.members[*o].id
            );
            assert!(
                got == expected,
                "observer {}: the data under {parent} differs from the leader's",
                ens.members[*o].id
            );
        }
        if parent == "/load" {
            for (path, data) in acked.lock().unwrap().iter() {
                assert_eq!(
                    expected.get(path),
                    Some(data),
                    "acknowledged {path} on the leader"
                );
            }
        }
    }
    // The whole tree, by count, is the same on the leader and the observers.
    let leader_total = all_children_number(&leader_addr, "/").await;
    for o in observers {
        let addr = ens.members[*o].addr();
        connect(&addr).await.sync("/").await.unwrap();
        assert_eq!(
            all_children_number(&addr, "/").await,
            leader_total,
            "observer {}: getAllChildrenNumber(/)",
            ens.members[*o].id
        );
    }
    let chain_len = written.load(Ordering::Acquire) as usize;
    let leader_chain = tree_of(&leader_addr, "/chain").await.len();
    assert!(leader_chain >= chain_len, "{leader_chain} < {chain_len}");
}

/// Waits until `srvr` on `m` says it is not serving.
async fn stops_serving(m: &support::procs::Member) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let srvr = m.four_letter("srvr").await;
        if srvr.contains("not currently serving") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "member {} still serves without a quorum:\n{srvr}",
            m.id
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_never_make_a_quorum() {
    let dir = tempfile::tempdir().unwrap();
    let mut ens = procs(dir.path(), &Layout::voters(3).observers(2));
    ens.spawn_all();
    let leader = ens.settled().await;
    let observers = ens.observers();
    let before = connect(&ens.members[leader].addr()).await;
    before.create("/before", b"x", &open()).await.unwrap();
    drop(before);
    // A session on an observer, open before the quorum is lost.
    let on_observer = connect(&ens.members[observers[0]].addr()).await;
    on_observer.sync("/").await.unwrap();
    assert_eq!(on_observer.get_data("/before").await.unwrap().0, b"x");

    // Two voters die (the leader among them): one voter and two observers
    // are left, three of five members but one of three votes.
    let survivor = (0..3).find(|i| *i != leader).unwrap();
    let other = (0..3).find(|i| *i != leader && *i != survivor).unwrap();
    ens.members[leader].kill9();
    ens.members[other].kill9();
    stops_serving(&ens.members[survivor]).await;
    for o in &observers {
        stops_serving(&ens.members[*o]).await;
    }
    // The session on the observer gets neither a write nor a read answered
    // (bounded: the client's own timeouts end each attempt).
    let write = tokio::time::timeout(
        Duration::from_secs(15),
        on_observer.create("/during", b"", &open()),
    )
    .await;
    assert!(
        !matches!(write, Ok(Ok(_))),
        "a write committed with one of three voters: {write:?}"
    );
    let read = tokio::time::timeout(Duration::from_secs(15), on_observer.get_data("/before")).await;
    assert!(
        !matches!(read, Ok(Ok(_))),
        "an observer without a quorum answered a read: {read:?}"
    );
    drop(on_observer);
    // No member answers a new client: a connect through an observer gets no
    // session, so neither a read nor a write is served.
    for m in [survivor, observers[0], observers[1]] {
        let addr = ens.members[m].addr();
        let attempt = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(2))
            .with_connection_timeout(Duration::from_secs(2))
            .connect(&addr);
        let got = tokio::time::timeout(Duration::from_secs(5), attempt).await;
        assert!(
            !matches!(got, Ok(Ok(_))),
            "member {} took a session without a quorum",
            ens.members[m].id
        );
    }
    // Still not serving: the observers did not elect anything meanwhile.
    for o in &observers {
        assert_eq!(ens.members[*o].role, Role::Observer);
        stops_serving(&ens.members[*o]).await;
    }

    // One voter back: a quorum of two, and everything serves again.
    ens.members[other].spawn();
    let leader = ens.settled().await;
    assert_ne!(ens.members[leader].role, Role::Observer);
    let c = connect(&ens.members[observers[1]].addr()).await;
    c.create("/after", b"y", &open()).await.unwrap();
    c.sync("/").await.unwrap();
    assert_eq!(c.get_data("/before").await.unwrap().0, b"x");
    assert_eq!(c.get_data("/after").await.unwrap().0, b"y");
}

/// The member an observer takes its committed stream from (`mntr`'s
/// `observer_master_id`, ZooKeeper 3.8's name), once it reports one.
async fn observer_master_of(m: &support::procs::Member) -> Option<u64> {
    m.mntr_row("observer_master_id")
        .await
        .and_then(|v| v.parse().ok())
}

/// Waits (60 s at most) until observer `o` follows a member that `ok` accepts;
/// returns that member's server id.
async fn follows(ens: &Ensemble, o: usize, what: &str, ok: impl Fn(u64) -> bool) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(id) = observer_master_of(&ens.members[o])
            .await
            .filter(|id| ok(*id))
        {
            return id;
        }
        assert!(
            Instant::now() < deadline,
            "observer {} never followed {what}; log tail:\n{}",
            ens.members[o].id,
            ens.members[o].log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `observerMasterPort`, both ways an observer finds its master: three voters
/// that serve observers on their observer-master ports, one observer whose
/// zoo.cfg names those ports (it follows a follower's relay) and one whose
/// zoo.cfg has none (it follows the leader), asserted from each observer's
/// `mntr` `observer_master_id` and the follower's `synced_observers`. Under a
/// write load with chain readers on both observers, the follower that serves
/// the first observer is killed with SIGKILL and started again: that observer
/// moves on (another follower or the leader) and resyncs while writes are in
/// flight, without a gap; the other stays on the leader; both end with exactly
/// the leader's data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_on_a_followers_observer_master_and_on_the_leader_through_its_restart() {
    let dir = tempfile::tempdir().unwrap();
    // One host, three ports: rzk's observerMasterPort.N names each voter's
    // (ZooKeeper uses one port on every voter's host). Held for the whole
    // test (rzk_testkit::ports: nothing else takes them while a follower is
    // down).
    let ports: Vec<_> = (0..3).map(|_| rzk_testkit::ports::reserve()).collect();
    // The voters (1..=3) and observer 4 read the ports; observer 5 does not.
    let mut layout = Layout::voters(3).observers(2).set("snapCount", 400);
    for member in 1..=4 {
        for (id, port) in (1..=3).zip(&ports) {
            layout = layout.set_for(member, &format!("observerMasterPort.{id}"), port);
        }
    }
    let mut ens = procs(dir.path(), &layout);
    ens.spawn_all();
    let leader = ens.settled().await;
    let leader_id = ens.members[leader].id;
    let observers = ens.observers();
    let (relayed, direct) = (observers[0], observers[1]);
    assert_eq!((ens.members[relayed].id, ens.members[direct].id), (4, 5));
    let first = follows(&ens, relayed, "a follower", |id| id != leader_id && id <= 3).await;
    follows(&ens, direct, "the leader", |id| id == leader_id).await;
    // The follower that serves the relayed observer reports it, and only it.
    let served = (0..3).find(|i| ens.members[*i].id == first).unwrap();
    eventually(
        Duration::from_secs(30),
        "the follower's mntr counts its observer",
        || {
            let m = &ens.members[served];
            async move { m.mntr_row("synced_observers").await.as_deref() == Some("1") }
        },
    )
    .await;

    let setup = connect(&ens.members[leader].addr()).await;
    // sync through a relayed observer is still a barrier (I6b).
    parents_and_barrier(&ens, &setup, &observers, 20).await;

    let targets: Vec<String> = ens.members.iter().map(|m| m.addr()).collect();
    let load = Load::start(&ens, targets, leader, &observers);
    let acked = load.acked.clone();
    grows_by(&acked, 200, "writes under load").await;

    // The follower serving the relayed observer dies under the load and
    // starts again; the observer resyncs while writes are in flight.
    ens.members[served].kill9();
    let next = follows(&ens, relayed, "another member", |id| id != first).await;
    eprintln!(
        "observer {} moved from {first} to {next}",
        ens.members[relayed].id
    );
    grows_by(&acked, 200, "writes after the observer moved").await;
    ens.members[served].spawn();
    ens.members[served]
        .wait_mode("follower", Duration::from_secs(60))
        .await;
    grows_by(&acked, 200, "writes after the follower restarted").await;
    let leader = ens.settled().await;
    assert_eq!(
        ens.members[leader].id, leader_id,
        "a follower's restart kept the leader"
    );
    // The observer without the ports never left the leader.
    assert_eq!(
        observer_master_of(&ens.members[direct]).await,
        Some(leader_id),
        "observer {} follows the leader",
        ens.members[direct].id
    );

    let (acked, written) = load.finish().await;
    same_as_leader(&ens, leader, &observers, &acked, &written).await;
    drop(setup);
    drop(ports);
}

/// A follower that stops answering without closing anything (SIGSTOP) must
/// not hold the observers that follow its observer master: their relay
/// connection's pings go unanswered, the follow ends, and they sync again and
/// follow another member, where writes keep arriving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_leaves_a_stopped_observer_master() {
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<_> = (0..3).map(|_| rzk_testkit::ports::reserve()).collect();
    let mut layout = Layout::voters(3).observers(1);
    for (id, port) in (1..=3).zip(&ports) {
        layout = layout.set(&format!("observerMasterPort.{id}"), port);
    }
    let mut ens = procs(dir.path(), &layout);
    ens.spawn_all();
    let leader = ens.settled().await;
    let leader_id = ens.members[leader].id;
    let o = ens.observers()[0];
    let first = follows(&ens, o, "a follower", |id| id != leader_id && id <= 3).await;
    let served = (0..3).find(|i| ens.members[*i].id == first).unwrap();
    ens.members[served].pause();
    let next = follows(&ens, o, "another member", |id| id != first).await;
    // Writes on the leader reach the observer again.
    let w = connect(&ens.members[leader].addr()).await;
    w.create("/after-stop", b"x", &open()).await.unwrap();
    let r = connect(&ens.members[o].addr()).await;
    r.sync("/after-stop").await.unwrap();
    assert_eq!(r.get_data("/after-stop").await.unwrap().0, b"x");
    eprintln!("observer moved from stopped {first} to {next}");
    ens.members[served].resume();
    drop(ports);
}
