//! Epoch rollover (I3; docs/zab.md, "Rollover without an election") with three
//! `rzk` processes on loopback and an independent client (the
//! `zookeeper-client` crate, 32 sessions spread over all members): the leader
//! rolls over many times with no election and no client error; and kill -9 of
//! the leader at the two riskiest steps of a rollover, after which every
//! acknowledged write is on every member and every session's zxids still only
//! grow.
//!
//! The two crash points, and why they are the riskiest:
//! - **A: the rollover proposal R = (e, limit) is durable and fenced on the
//!   leader only** (its followers are stopped with SIGSTOP, so R cannot
//!   commit). The leader has persisted acceptedEpoch e+1, yet the survivors,
//!   who never saw R, elect a new leader *of epoch e+1*: the one case where a
//!   member's fenced epoch is reused by another leader. When the old leader
//!   comes back it must throw R away (TRUNC) under a leader whose epoch equals
//!   its own acceptedEpoch, and R must be nowhere. Three writes sent right
//!   after R must have been held in the leader's memory (never written before R
//!   commits, step 4 there): were they written, the old leader would return
//!   with zxids of epoch e+1 that the new leader gave to other txns.
//! - **B: R has committed and the leader has begun writing epoch e+1** (its
//!   durable log is past R when it dies). A quorum has fenced e+1, so the next
//!   leader must take e+2 or later; the old leader's e+1 proposals that no one
//!   else wrote must be truncated when it returns, and every e+1 write a client
//!   saw acknowledged must survive.
//!
//! `RZK_ROLLOVER_LIMIT` sets the counter limit (default 64; CI's rollover stage
//! runs 1000).
mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rzk_zxid::{CounterLimit, Zxid};
use support::procs::{procs, Ensemble, Layout, Member};
use support::rollover::{
    summarize, verify, wait_for_epoch, wait_for_epoch_clean, Phase, Progress, SessionLog, Workload,
};
use zookeeper_client as zk;

fn limit() -> u32 {
    std::env::var("RZK_ROLLOVER_LIMIT")
        .ok()
        .map(|v| v.parse().expect("RZK_ROLLOVER_LIMIT: a number"))
        .unwrap_or(64)
}

/// Three voters at the counter limit `limit`, all started.
fn start(root: &Path, limit: u32) -> Ensemble {
    let mut ens = procs(root, &Layout::voters(3).set("rzk.zxid.counterLimit", limit));
    ens.spawn_all();
    ens
}

fn row(mntr: &str, key: &str) -> Option<String> {
    mntr.lines()
        .find_map(|l| l.strip_prefix(&format!("zk_{key}\t")))
        .map(str::to_owned)
}

async fn looking_count(m: &Member) -> u64 {
    let mntr = m.four_letter("mntr").await;
    row(&mntr, "looking_count")
        .unwrap_or_else(|| panic!("no looking_count in mntr of member {}:\n{mntr}", m.id))
        .parse()
        .unwrap()
}

async fn last_durable(m: &Member) -> Option<Zxid> {
    row(&m.four_letter("mntr").await, "rzk_last_durable_zxid").and_then(|z| z.parse().ok())
}

/// Waits until `m`'s durable log reaches at least `z`.
async fn durable_at_least(m: &Member, z: Zxid, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if last_durable(m).await.is_some_and(|d| d >= z) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: member {} durable at {:?}, not {z}",
            m.id,
            last_durable(m).await
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits until `m` has persisted acceptedEpoch `epoch` (the fence of a
/// rollover proposal, I3).
async fn fenced(m: &Member, epoch: rzk_zxid::Epoch) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let accepted: Option<u32> =
            row(&m.four_letter("mntr").await, "rzk_accepted_epoch").and_then(|e| e.parse().ok());
        if accepted.is_some_and(|a| a >= epoch.0) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "member {} never fenced epoch {epoch} (acceptedEpoch {accepted:?})",
            m.id
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Creates `/probe/x<n>` nodes through `probe`, nobody else writing, until the
/// last one got the counter `limit - 1`: the next txn is the rollover proposal.
async fn write_up_to_the_rollover(probe: &zk::Client, limit: u32, n: &mut u32) -> Zxid {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        *n += 1;
        let (stat, _) = probe
            .create(&format!("/probe/x{n}"), b"", &support::rollover::open())
            .await
            .expect("a probe write");
        let z = Zxid::from_i64(stat.czxid);
        if z.counter().0 == limit - 1 {
            return z;
        }
        assert!(
            Instant::now() < deadline,
            "never reached counter {}",
            limit - 1
        );
    }
}

/// After the run: every acknowledged write on every member, zxids only grew
/// on every session, `/probe` the same everywhere, and `absent` nowhere.
async fn check_history(members: &[Member], logs: &[SessionLog], absent: &[&str]) {
    let s = summarize(logs, CounterLimit::new(limit()));
    eprintln!("{s:?}");
    assert_eq!(s.order_violations, 0, "zxids not increasing on a session");
    let lost = zk::Error::ConnectionLoss.to_string();
    for e in &s.errors {
        assert!(
            e.ends_with(&lost),
            "an error other than a lost connection: {e}"
        );
    }
    let mut probes = Vec::new();
    for m in members {
        let problems = verify(&m.client.to_string(), "/rollover", logs).await;
        assert!(problems.is_empty(), "member {}: {problems:?}", m.id);
        let c = support::rollover::connect(&m.client.to_string(), Duration::from_secs(10)).await;
        c.sync("/").await.unwrap();
        let mut children = match c.get_children("/probe").await {
            Ok((children, _)) => children,
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => panic!("member {}: /probe: {e}", m.id),
        };
        children.sort();
        for a in absent {
            assert!(
                !children.iter().any(|c| c == a),
                "member {}: /probe/{a} was never committed and is there",
                m.id
            );
        }
        probes.push(children);
    }
    assert!(
        probes.windows(2).all(|w| w[0] == w[1]),
        "the members disagree on /probe: {probes:?}"
    );
}

/// 32 sessions write across 20 rollovers of three processes: 0 errors, 0 lost
/// connections, the same leader and no election on any member, zxids
/// strictly increasing per session, every acknowledged write on every member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_roll_over_twenty_epochs_without_election_or_client_error() {
    let dir = tempfile::tempdir().unwrap();
    let limit = limit();
    let ens = start(dir.path(), limit);
    let leader = ens.settled().await;
    let mut elections = Vec::new();
    for m in &ens.members {
        elections.push(looking_count(m).await);
    }
    let progress = Arc::new(Progress::default());
    let running = Workload::new(&ens.connect_string(), 32)
        .start(progress.clone())
        .await;
    let start = running.start;
    wait_for_epoch_clean(&progress, start.epoch(), 20, Duration::from_secs(300)).await;
    progress.stop();
    let logs = running.join().await;
    let s = summarize(&logs, CounterLimit::new(limit));
    eprintln!("{s:?}");
    assert!(s.errors.is_empty(), "client errors: {:?}", s.errors);
    assert_eq!(s.disconnects, 0, "lost connections");
    assert_eq!(s.order_violations, 0, "zxids not increasing on a session");
    assert!(s.last.epoch().0 >= start.epoch().0 + 20, "{s:?}");
    assert_eq!(ens.settled().await, leader, "the leader changed");
    for (m, before) in ens.members.iter().zip(&elections) {
        assert_eq!(
            looking_count(m).await,
            *before,
            "member {} held an election",
            m.id
        );
    }
    check_history(&ens.members, &logs, &[]).await;
}

/// Kill -9 of the leader at crash points A and B (see the crate docs), each
/// under the 32-session load, each followed by the old leader's restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_leader_at_the_two_riskiest_rollover_steps_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let limit = limit();
    let mut ens = start(dir.path(), limit);
    ens.settled().await;
    let all = ens.connect_string();
    let setup = support::rollover::connect(&all, Duration::from_secs(10)).await;
    setup
        .create("/probe", b"", &support::rollover::open())
        .await
        .unwrap();
    let progress = Arc::new(Progress::default());
    let mut workload = Workload::new(&all, 32);
    workload.retry_lost = true;
    let running = workload.start(progress.clone()).await;
    wait_for_epoch(
        &progress,
        running.start.epoch(),
        2,
        Duration::from_secs(120),
    )
    .await;
    let mut n = 0;

    // A: R durable and fenced on the leader only. Its followers are stopped
    // before R is proposed and killed (with what their sockets hold unread)
    // after the leader, so no one else ever has R.
    progress.pause(32).await;
    let leader = ens.settled().await;
    let probe = support::rollover::connect(
        &ens.members[leader].client.to_string(),
        Duration::from_secs(10),
    )
    .await;
    let before = write_up_to_the_rollover(&probe, limit, &mut n).await;
    let r = Zxid::new(before.epoch(), limit.into());
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    for f in &followers {
        ens.members[*f].pause();
    }
    // R and three writes of the next epoch behind it, sent in this order on one
    // session (the client sends each request when it is called): the leader
    // must hold the three in memory until R commits (docs/zab.md, "Rollover
    // without an election", step 4), so they die with it.
    let pending = {
        let probe = probe.clone();
        tokio::spawn(async move {
            let o = support::rollover::open();
            let (r, a, b, c) = tokio::join!(
                probe.create("/probe/rollover-a", b"", &o),
                probe.create("/probe/next-a1", b"", &o),
                probe.create("/probe/next-a2", b"", &o),
                probe.create("/probe/next-a3", b"", &o),
            );
            [r.map(|_| ()), a.map(|_| ()), b.map(|_| ()), c.map(|_| ())]
        })
    };
    durable_at_least(&ens.members[leader], r, "crash point A").await;
    fenced(&ens.members[leader], r.epoch().next().unwrap()).await;
    eprintln!(
        "crash point A: R {r}, the leader durable at {:?}",
        last_durable(&ens.members[leader]).await
    );
    ens.members[leader].kill9();
    for f in &followers {
        ens.members[*f].kill9();
    }
    let unanswered = pending.await.unwrap();
    assert!(
        unanswered.iter().all(Result::is_err),
        "committed without a quorum: {unanswered:?}"
    );
    drop(probe);
    for f in &followers {
        ens.members[*f].spawn();
    }
    ens.settled().await;
    // The survivors never saw R: they lead epoch e+1, the epoch the old
    // leader fenced for itself.
    let fresh = support::rollover::connect(&all, Duration::from_secs(10)).await;
    let (stat, _) = fresh
        .create("/probe/after-a", b"", &support::rollover::open())
        .await
        .expect("a write after the failover");
    // Usually the survivors lead epoch e+1, the epoch only the dead leader
    // fenced (a failed first attempt of theirs can make it e+2: also allowed).
    let epoch_a = Zxid::from_i64(stat.czxid).epoch();
    assert!(epoch_a > r.epoch(), "{epoch_a} after R {r}");
    eprintln!(
        "crash point A: the survivors lead epoch {epoch_a}; the dead leader fenced {}",
        r.epoch().next().unwrap()
    );
    progress.set(Phase::Run);
    let resumed = progress.max_zxid();
    wait_for_epoch(&progress, resumed.epoch(), 2, Duration::from_secs(120)).await;
    ens.members[leader].spawn();
    ens.settled().await;
    let resumed = progress.max_zxid();
    wait_for_epoch(&progress, resumed.epoch(), 2, Duration::from_secs(120)).await;

    // B: R committed, the leader already writing the next epoch.
    progress.pause(32).await;
    let leader = ens.settled().await;
    let probe = support::rollover::connect(
        &ens.members[leader].client.to_string(),
        Duration::from_secs(10),
    )
    .await;
    write_up_to_the_rollover(&probe, limit, &mut n).await;
    let (stat, _) = probe
        .create("/probe/rollover-b", b"", &support::rollover::open())
        .await
        .expect("R");
    let r = Zxid::from_i64(stat.czxid);
    assert_eq!(r.counter().0, limit, "R is the write at the limit");
    let next = Zxid::first_of(r.epoch().next().unwrap());
    progress.set(Phase::Run);
    durable_at_least(&ens.members[leader], next, "crash point B").await;
    ens.members[leader].kill9();
    drop(probe);
    ens.settled().await;
    // A quorum fenced e+1 before R committed: the new leader's epoch is later.
    let after = progress.max_zxid();
    let (stat, _) = fresh
        .create("/probe/after-b", b"", &support::rollover::open())
        .await
        .expect("a write after the failover");
    assert!(
        Zxid::from_i64(stat.czxid).epoch() > next.epoch(),
        "epoch {} reused after a committed rollover to it (write {}, R {r})",
        next.epoch(),
        Zxid::from_i64(stat.czxid)
    );
    wait_for_epoch(&progress, after.epoch(), 2, Duration::from_secs(120)).await;
    ens.members[leader].spawn();
    ens.settled().await;
    let resumed = progress.max_zxid();
    wait_for_epoch(&progress, resumed.epoch(), 2, Duration::from_secs(120)).await;

    progress.stop();
    let logs = running.join().await;
    check_history(
        &ens.members,
        &logs,
        &["rollover-a", "next-a1", "next-a2", "next-a3"],
    )
    .await;
    drop((setup, fresh));
}

/// A counter limit below the minimum stops the binary with a clear message
/// and exit status 2, as any bad zoo.cfg value.
#[test]
fn a_counter_limit_below_the_minimum_exits_2_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("zoo.cfg");
    std::fs::write(
        &cfg,
        format!(
            "tickTime=200\ndataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\n\
             admin.enableServer=false\nrzk.zxid.counterLimit=15\n",
            dir.path().join("data").display(),
            rzk_testkit::ports::reserve()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rzk"))
        .arg(&cfg)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("rzk.zxid.counterLimit") && err.contains("from 16 to 0xffffffff"),
        "{err}"
    );
}

/// Latency quantiles of a set of writes, ms.
fn quantiles(mut ms: Vec<f64>) -> (usize, f64, f64, f64) {
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if ms.is_empty() {
        return (0, 0.0, 0.0, 0.0);
    }
    let at = |q: f64| ms[((ms.len() as f64 * q).ceil() as usize).clamp(1, ms.len()) - 1];
    (ms.len(), at(0.5), at(0.99), *ms.last().unwrap())
}

/// The write pause a rollover causes (BENCHMARKS.md): three processes, `in
/// flight` sessions each with one create outstanding, `RZK_PAUSE_WRITES`
/// writes (default 8000) at a counter limit of `RZK_ROLLOVER_LIMIT` (here
/// default 256, so about 30 rollovers) and again at the default limit (no
/// rollover). A write is *across* a rollover when its zxid is within `in
/// flight` of a rollover proposal R (R itself, the writes proposed just
/// before it, and the next epoch's writes held until R commits): every write
/// in flight while R is proposed and committed. A measurement, not a test:
/// run by hand with --ignored --nocapture.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement for BENCHMARKS.md (about 1 minute), run by hand"]
async fn rollover_pause_figures() {
    let limit: u32 = std::env::var("RZK_ROLLOVER_LIMIT")
        .ok()
        .map(|v| v.parse().unwrap())
        .unwrap_or(256);
    let writes: u64 = std::env::var("RZK_PAUSE_WRITES")
        .ok()
        .map(|v| v.parse().unwrap())
        .unwrap_or(8000);
    println!("| in flight | counter limit | writes | set | n | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|---|---|---|");
    for inflight in [1usize, 8] {
        for run_limit in [u32::MAX, limit] {
            let dir = tempfile::tempdir().unwrap();
            let ens = start(dir.path(), run_limit);
            let leader = ens.settled().await;
            let progress = Arc::new(Progress::default());
            let running = Workload::new(&ens.connect_string(), inflight)
                .start(progress.clone())
                .await;
            let deadline = Instant::now() + Duration::from_secs(600);
            while progress.acked.load(std::sync::atomic::Ordering::Acquire) < writes {
                assert!(Instant::now() < deadline, "too slow");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            progress.stop();
            let logs = running.join().await;
            let s = summarize(&logs, CounterLimit::new(run_limit));
            assert!(s.errors.is_empty() && s.disconnects == 0, "{s:?}");
            assert_eq!(ens.settled().await, leader, "the leader changed");
            let window = inflight as u32;
            let lim = CounterLimit::new(run_limit);
            let across = |z: Zxid| {
                let c = z.counter().0;
                run_limit != u32::MAX
                    && (z.is_last_with(lim)
                        || c > run_limit.saturating_sub(window)
                        || (1..=window).contains(&c))
            };
            let (mut near, mut rest) = (Vec::new(), Vec::new());
            for l in &logs {
                // The first writes of each session (connect, parent) are warm-up.
                for (_, took, z) in l.latencies.iter().skip(20) {
                    let ms = took.as_secs_f64() * 1000.0;
                    if across(*z) {
                        near.push(ms);
                    } else {
                        rest.push(ms);
                    }
                }
            }
            let name = if run_limit == u32::MAX {
                "default".to_owned()
            } else {
                run_limit.to_string()
            };
            let sets: Vec<(&str, Vec<f64>)> = if run_limit == u32::MAX {
                vec![("all (no rollover)", rest)]
            } else {
                vec![("across a rollover", near), ("not across", rest)]
            };
            for (set, ms) in sets {
                let (n, p50, p99, max) = quantiles(ms);
                println!(
                    "| {inflight} | {name} | {} | {set} | {n} | {p50:.2} | {p99:.2} | {max:.2} |",
                    s.acked
                );
            }
            drop(ens);
        }
    }
}
