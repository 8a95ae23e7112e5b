//! Unit tests of the queue machine (read-write lock, semaphore): exact transitions, the
//! lifecycle across SUSPENDED / LOST / RECONNECTED, release and close at every step,
//! and seeded random histories of several participants on one fake server with the
//! exclusion invariants checked after every single step.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::recipe::fake::FakeServer;
use crate::recipe::harness::Harness;
use crate::recipe::rwlock::{LEASE_NAME, READ_NAME, WRITE_NAME};

const LOCK: &str = "/app/lock";
const EPOCH: &str = "/app/lock-epoch";

fn writer(nonce: u64) -> QueueConfig {
    let mut c = QueueConfig::new(LOCK, WRITE_NAME, Admission::First, nonce);
    c.fence = Fence::Bump(EPOCH.into());
    c
}

fn reader(nonce: u64) -> QueueConfig {
    let mut c = QueueConfig::new(
        LOCK,
        READ_NAME,
        Admission::NoneBefore {
            blocker: WRITE_NAME.into(),
        },
        nonce,
    );
    c.fence = Fence::Observe(EPOCH.into());
    c
}

fn lease(nonce: u64, n: u32) -> QueueConfig {
    QueueConfig::new(LOCK, LEASE_NAME, Admission::Within { n }, nonce)
}

fn harness(server: &FakeServer, cfg: QueueConfig) -> Harness<QueueMachine> {
    let mut h = Harness::new(QueueMachine::new(cfg), server.clone());
    h.check = Some(Box::new(|m: &QueueMachine, _| {
        assert!(
            m.is_progressing(),
            "idle while started and connected: {m:?}"
        );
    }));
    h
}

fn granted(h: &Harness<QueueMachine>) -> Option<Grant> {
    h.m.granted().cloned()
}

fn epoch_of(g: &Grant) -> u64 {
    g.token.expect("fenced").epoch
}

/// Run every harness until quiet: watch events and calls first (round robin), a timer
/// (backoff or self-check) only when no call is pending anywhere. Bounded: self-checks
/// re-arm themselves forever.
fn settle(hs: &mut [&mut Harness<QueueMachine>]) {
    let mut next_timer = 0;
    for _ in 0..300 {
        let mut ran = false;
        for h in hs.iter_mut() {
            h.drain_watches();
            if let Some(i) = h
                .pending
                .iter()
                .position(|o| matches!(o, Output::Call { .. }))
            {
                let call = h.pending.remove(i).expect("call");
                h.pending.push_front(call);
                h.run_one();
                ran = true;
            }
        }
        if !ran {
            let k = hs.len();
            for j in 0..k {
                let h = &mut hs[(next_timer + j) % k];
                if !h.pending.is_empty() {
                    h.run_one();
                    break;
                }
            }
            next_timer += 1;
        }
    }
}

#[test]
fn writers_exclude_each_other_and_readers_share_in_queue_order() {
    let server = FakeServer::default();
    let mut w1 = harness(&server, writer(1));
    let mut r1 = harness(&server, reader(2));
    let mut r2 = harness(&server, reader(3));
    let mut w2 = harness(&server, writer(4));
    let mut r3 = harness(&server, reader(5));
    for h in [&mut w1, &mut r1, &mut r2, &mut w2, &mut r3] {
        h.start();
        h.run(1); // each node created in this order: w1 r1 r2 w2 r3
    }
    settle(&mut [&mut w1, &mut r1, &mut r2, &mut w2, &mut r3]);
    let g = granted(&w1).expect("the first writer holds");
    assert_eq!(epoch_of(&g), 1);
    assert!(granted(&r1).is_none() && granted(&r2).is_none() && granted(&w2).is_none());

    w1.feed(Input::Command(QueueCommand::Release));
    settle(&mut [&mut w1, &mut r1, &mut r2, &mut w2, &mut r3]);
    assert!(w1.ended);
    let (g1, g2) = (granted(&r1).expect("r1"), granted(&r2).expect("r2"));
    assert_eq!(
        epoch_of(&g1),
        1,
        "a reader's token is the last writer's epoch"
    );
    assert_eq!(epoch_of(&g2), 1);
    assert!(
        granted(&w2).is_none(),
        "the second writer waits for both readers"
    );
    assert!(
        granted(&r3).is_none(),
        "a reader behind a waiting writer waits (fair)"
    );

    r1.feed(Input::Command(QueueCommand::Release));
    settle(&mut [&mut r1, &mut r2, &mut w2, &mut r3]);
    assert!(granted(&w2).is_none());
    r2.feed(Input::Command(QueueCommand::Release));
    settle(&mut [&mut r2, &mut w2, &mut r3]);
    assert_eq!(granted(&w2).map(|g| epoch_of(&g)), Some(2));
    assert!(granted(&r3).is_none());
    w2.feed(Input::Close);
    settle(&mut [&mut w2, &mut r3]);
    assert_eq!(granted(&r3).map(|g| epoch_of(&g)), Some(2));
    assert_eq!(
        server.with(|t| t.children_of(LOCK)).map(|c| c.len()),
        Some(1),
        "released nodes are deleted"
    );
}

#[test]
fn a_semaphore_admits_n_and_the_next_one_when_any_earlier_lease_goes() {
    let server = FakeServer::default();
    let mut hs: Vec<Harness<QueueMachine>> =
        (0..4).map(|i| harness(&server, lease(i, 2))).collect();
    for h in hs.iter_mut() {
        h.start();
        h.run(1);
    }
    {
        let mut refs: Vec<&mut Harness<QueueMachine>> = hs.iter_mut().collect();
        settle(&mut refs);
    }
    let held: Vec<bool> = hs.iter().map(|h| granted(h).is_some()).collect();
    assert_eq!(held, vec![true, true, false, false]);
    // The *second* lease goes: the third is admitted although the first still holds
    // (watching only the n-th predecessor would miss this).
    hs[1].feed(Input::Command(QueueCommand::Release));
    {
        let mut refs: Vec<&mut Harness<QueueMachine>> = hs.iter_mut().collect();
        settle(&mut refs);
    }
    let held: Vec<bool> = hs.iter().map(|h| granted(h).is_some()).collect();
    assert_eq!(held, vec![true, false, true, false]);
}

#[test]
fn suspension_revokes_and_the_same_session_reproves_the_same_node_with_a_new_token() {
    let server = FakeServer::default();
    let mut h = harness(&server, writer(1));
    h.start();
    settle(&mut [&mut h]);
    let first = granted(&h).expect("granted");
    h.suspend();
    assert_eq!(
        h.events.last(),
        Some(&QueueEvent::Revoked(Revoked::Suspended))
    );
    assert!(granted(&h).is_none());
    h.drop_pending();
    h.reconnect_same();
    settle(&mut [&mut h]);
    let second = granted(&h).expect("granted again");
    assert_eq!(second.node, first.node, "same node");
    assert!(second.token > first.token, "re-fenced");
}

#[test]
fn lost_while_held_ends_the_acquisition() {
    let server = FakeServer::default();
    let mut h = harness(&server, writer(1));
    h.start();
    settle(&mut [&mut h]);
    h.suspend();
    h.drop_pending();
    h.lose(true);
    assert!(h.ended, "a lock lost with its session does not come back");
    assert!(h.events.contains(&QueueEvent::Revoked(Revoked::Suspended)));
    assert!(granted(&h).is_none());
}

#[test]
fn lost_while_waiting_queues_a_fresh_node_and_never_uses_the_dead_one() {
    // CURATOR-696 for locks: after a client-side LOST the old session's node is still
    // first in line on the server. The waiter must not be granted through it.
    let server = FakeServer::default();
    let mut holder = harness(&server, writer(1));
    holder.start();
    settle(&mut [&mut holder]);
    let mut w = harness(&server, writer(2));
    w.start();
    settle(&mut [&mut holder, &mut w]);
    let old_node = w.m.node_path().expect("queued");
    let old_session = w.session;
    w.drop_pending();
    w.lose(false);
    assert!(
        server.with(|t| t.is_live(old_session)),
        "the server still holds it"
    );
    holder.feed(Input::Command(QueueCommand::Release));
    settle(&mut [&mut holder, &mut w]);
    let g = granted(&w).expect("granted on the new session");
    assert_ne!(g.node, old_node);
    assert_eq!(g.session, w.session);
    assert!(
        !server.with(|t| t.exists(&old_node)),
        "the dead node was deleted"
    );
}

#[test]
fn a_lost_create_reply_is_found_by_prefix_not_duplicated() {
    let server = FakeServer::default();
    let mut h = harness(&server, writer(1));
    h.lose_reply_if = Some(Box::new(|c| matches!(c, Call::Create { .. })));
    h.start();
    settle(&mut [&mut h]);
    assert!(granted(&h).is_some());
    assert_eq!(
        server.with(|t| t.children_of(LOCK)).map(|c| c.len()),
        Some(1)
    );
}

#[test]
fn the_collected_parent_is_recreated() {
    let server = FakeServer::default();
    let mut h = harness(&server, reader(1));
    h.start();
    h.run(1);
    h.server.with(|t| {
        let kids = t.children_of(LOCK).unwrap_or_default();
        for k in kids {
            let _ = t.delete(&format!("{LOCK}/{k}"));
        }
        t.gc_containers();
    });
    settle(&mut [&mut h]);
    assert!(granted(&h).is_some());
}

/// How the connection behaves around a release.
#[derive(Debug, Clone, Copy)]
enum AtRelease {
    Connected,
    SuspendedThenBack,
    SuspendedThenLost,
    LostCreateReply,
}

#[test]
fn release_or_close_at_every_step_leaves_no_node_of_the_live_session() {
    // CURATOR-18: a create answered after the release is deleted; a release while
    // suspended deletes once reconnected.
    for cfg in [writer(7), reader(7), lease(7, 2)] {
        for k in 0..10 {
            for at in [
                AtRelease::Connected,
                AtRelease::SuspendedThenBack,
                AtRelease::SuspendedThenLost,
                AtRelease::LostCreateReply,
            ] {
                for close in [false, true] {
                    let ctx = format!("{} k={k} {at:?} close={close}", cfg.name);
                    let server = FakeServer::default();
                    let mut h = harness(&server, cfg.clone());
                    h.start();
                    h.run(k);
                    let input = if close {
                        Input::Close
                    } else {
                        Input::Command(QueueCommand::Release)
                    };
                    match at {
                        AtRelease::Connected => h.feed(input),
                        AtRelease::LostCreateReply => {
                            h.lose_reply_if = Some(Box::new(|c| matches!(c, Call::Create { .. })));
                            h.feed(input);
                        }
                        AtRelease::SuspendedThenBack | AtRelease::SuspendedThenLost => {
                            // Calls already sent reach the server; their answers are lost.
                            let sent: Vec<Call> = h
                                .pending
                                .iter()
                                .filter_map(|o| match o {
                                    Output::Call { call, .. } => Some(call.clone()),
                                    _ => None,
                                })
                                .collect();
                            let s = h.session;
                            for call in sent {
                                h.server
                                    .with(|t| crate::recipe::fake::fake_call(t, s, call));
                            }
                            h.drop_pending();
                            h.suspend();
                            h.feed(input);
                            if matches!(at, AtRelease::SuspendedThenBack) {
                                h.reconnect_same();
                            } else {
                                h.lose(true);
                            }
                        }
                    }
                    assert!(
                        h.run_until(60, |h| h.ended),
                        "{ctx}: never ended: {:?}",
                        h.m
                    );
                    let left: Vec<String> = server
                        .with(|t| t.subtree(LOCK))
                        .into_iter()
                        .filter(|(p, (_, st))| {
                            p != LOCK && server.with(|t| t.is_live(st.ephemeral_owner))
                        })
                        .map(|(p, _)| p)
                        .collect();
                    assert!(left.is_empty(), "{ctx}: left behind {left:?}");
                    let grants = h
                        .events
                        .iter()
                        .filter(|e| matches!(e, QueueEvent::Granted(_)))
                        .count();
                    let revokes = h
                        .events
                        .iter()
                        .filter(|e| matches!(e, QueueEvent::Revoked(_)))
                        .count();
                    assert_eq!(
                        grants, revokes,
                        "{ctx}: every grant revoked once: {:?}",
                        h.events
                    );
                }
            }
        }
    }
}

/// What one participant of the random histories is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Writer,
    Reader,
    Lease,
}

struct Participant {
    role: Role,
    h: Harness<QueueMachine>,
    /// Steps left to hold before releasing.
    hold_for: u32,
    /// Suspended by the test (reconnect or lose later).
    suspended: bool,
    /// Old sessions of this participant still alive on the server (client-side LOST).
    zombies: Vec<SessionId>,
}

fn new_participant(server: &FakeServer, role: Role, n: u32, nonce: u64) -> Participant {
    let cfg = match role {
        Role::Writer => writer(nonce),
        Role::Reader => reader(nonce),
        Role::Lease => lease(nonce, n),
    };
    let mut h = harness(server, cfg);
    h.start();
    Participant {
        role,
        h,
        hold_for: 0,
        suspended: false,
        zombies: Vec::new(),
    }
}

/// The exclusion invariants over everyone's reported grants.
fn check_exclusion(ps: &[Participant], n: u32, ctx: &str) {
    let held: Vec<Role> = ps
        .iter()
        .filter(|p| p.h.m.granted().is_some())
        .map(|p| p.role)
        .collect();
    let writers = held.iter().filter(|r| **r == Role::Writer).count();
    let readers = held.iter().filter(|r| **r == Role::Reader).count();
    let leases = held.iter().filter(|r| **r == Role::Lease).count();
    assert!(writers <= 1, "{ctx}: two writers");
    assert!(
        writers == 0 || readers == 0,
        "{ctx}: a reader beside a writer"
    );
    assert!(leases <= n as usize, "{ctx}: {leases} leases of {n}");
}

fn random_history(seed: u64, rwlock: bool) {
    let n = 2;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let server = FakeServer::default();
    let roles: Vec<Role> = if rwlock {
        vec![
            Role::Writer,
            Role::Reader,
            Role::Writer,
            Role::Reader,
            Role::Reader,
        ]
    } else {
        vec![Role::Lease; 5]
    };
    let mut next_nonce = 100;
    let mut ps: Vec<Participant> = roles
        .iter()
        .map(|r| {
            next_nonce += 1;
            new_participant(&server, *r, n, next_nonce)
        })
        .collect();
    let mut tokens = Vec::new();
    let mut grants_total = 0usize;
    for step in 0..400 {
        let ctx = format!("seed={seed} rwlock={rwlock} step={step}");
        let i = rng.random_range(0..ps.len());
        let roll = rng.random_range(0..100);
        let p = &mut ps[i];
        if roll < 70 {
            let before = p.h.events.len();
            p.h.run_one();
            for e in &p.h.events[before..] {
                if let QueueEvent::Granted(g) = e {
                    grants_total += 1;
                    p.hold_for = rng.random_range(1..6);
                    if p.role == Role::Writer {
                        tokens.push(g.token.expect("fenced").epoch);
                    }
                }
            }
        } else if roll < 78 && !p.suspended {
            p.h.suspend();
            p.h.drop_pending();
            p.suspended = true;
        } else if roll < 86 && p.suspended {
            p.suspended = false;
            if rng.random_bool(0.5) {
                p.h.reconnect_same();
            } else {
                let expire = rng.random_bool(0.5);
                let old = p.h.session;
                p.h.lose(expire);
                if !expire {
                    p.zombies.push(old);
                }
            }
        } else if roll < 90 {
            // The server finally expires a zombie session (its nodes go).
            if let Some(z) = p.zombies.pop() {
                server.with(|t| t.end_session(z));
            }
        } else if roll < 93 {
            p.h.lose_reply_if = Some(Box::new(|_| true));
        } else if p.h.m.granted().is_some() {
            p.hold_for = p.hold_for.saturating_sub(1);
            if p.hold_for == 0 {
                p.h.feed(Input::Command(QueueCommand::Release));
            }
        }
        if p.h.ended {
            // Released or lost: this client goes away (its sessions end) and a new one
            // acquires.
            let role = p.role;
            next_nonce += 1;
            let gone: Vec<SessionId> = p.zombies.drain(..).chain([p.h.session]).collect();
            server.with(|t| {
                for s in gone {
                    t.end_session(s);
                }
            });
            *p = new_participant(&server, role, n, next_nonce);
        }
        check_exclusion(&ps, n, &ctx);
    }
    // Quiet: every connection back, zombies expire, everyone settles; someone holds.
    for p in ps.iter_mut() {
        if p.suspended {
            p.h.reconnect_same();
            p.suspended = false;
        }
        for z in p.zombies.drain(..) {
            server.with(|t| t.end_session(z));
        }
        p.h.lose_reply_if = None;
    }
    for round in 0..200 {
        for p in ps.iter_mut() {
            p.h.run_one();
        }
        check_exclusion(&ps, n, &format!("seed={seed} quiet round {round}"));
    }
    assert!(
        ps.iter().any(|p| p.h.m.granted().is_some()),
        "seed={seed}: nobody holds at the end"
    );
    let unique: std::collections::HashSet<u64> = tokens.iter().copied().collect();
    assert_eq!(
        unique.len(),
        tokens.len(),
        "seed={seed}: a writer token twice: {tokens:?}"
    );
    assert!(grants_total > 0, "seed={seed}: no grant at all");
}

#[test]
fn seeded_random_histories_never_break_exclusion_at_any_step() {
    for seed in 0..40 {
        random_history(seed, true);
        random_history(seed, false);
    }
}

// ----- the handles, run by the driver over a fake client in simulated time ------------

mod handles {
    use std::time::Duration;

    use crate::recipe::fake::FakeServer;
    use crate::recipe::{ReadWriteLock, Revoked, Semaphore};
    use crate::state::ConnectionState;

    const LOCK: &str = "/app/lock";

    fn connected(server: &FakeServer) -> std::sync::Arc<crate::recipe::fake::FakeClient> {
        let c = server.client();
        c.publish(&[ConnectionState::Connected {
            session: c.last_session(),
        }]);
        c
    }

    fn nodes(server: &FakeServer) -> usize {
        server
            .with(|t| t.children_of(LOCK))
            .map(|c| c.len())
            .unwrap_or(0)
    }

    async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !f() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn write_and_read_are_reentrant_per_handle_and_an_upgrade_is_refused() {
        let _trap = rzk_testkit::PanicTrap::new();
        let server = FakeServer::default();
        let lock = ReadWriteLock::new(connected(&server), LOCK).fenced("/app/epoch");
        let w = lock.write().await.expect("write");
        let w2 = lock.write().await.expect("re-entered");
        let r = lock.read().await.expect("read under the write lock");
        let view = r.clone();
        assert_eq!(nodes(&server), 1, "one acquisition shared by three guards");
        assert_eq!(w.token(), r.token());
        w.release().await;
        w2.release().await;
        assert!(r.is_held(), "the read guard keeps the write lock");
        r.release().await;
        // A view kept by another task does not keep the lock.
        assert!(!view.is_held());
        assert_eq!(nodes(&server), 0, "released although a view is alive");
        let w = lock
            .write()
            .await
            .expect("a new write acquisition, not a re-entry");
        assert_ne!(w.grant().node, view.grant().node);
        w.release().await;

        let r = lock.read().await.expect("read");
        let err = lock.write().await.expect_err("upgrade refused");
        assert!(matches!(err, crate::Error::Config(_)), "{err}");
        drop(r);
        eventually("dropped guard released", || nodes(&server) == 0).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_timed_out_acquire_leaves_no_node_and_a_writer_waits_for_readers() {
        let _trap = rzk_testkit::PanicTrap::new();
        let server = FakeServer::default();
        let a = ReadWriteLock::new(connected(&server), LOCK);
        let b = ReadWriteLock::new(connected(&server), LOCK);
        let r = a.read().await.expect("read");
        assert!(b
            .try_write(Duration::from_secs(1))
            .await
            .expect("try")
            .is_none());
        eventually("the timed-out node deleted", || nodes(&server) == 1).await;
        let rb = b
            .try_read(Duration::from_secs(1))
            .await
            .expect("try")
            .expect("readers share");
        let waiting = tokio::spawn(async move {
            let c = ReadWriteLock::new(connected(&server), LOCK);
            let w = c.write().await.expect("write");
            (server, w)
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished(), "a writer waits for the readers");
        r.release().await;
        rb.release().await;
        let (_server, w) = waiting.await.expect("task");
        assert!(w.is_held());
    }

    #[tokio::test(start_paused = true)]
    async fn a_guard_follows_suspension_and_is_lost_for_good_with_its_session() {
        let _trap = rzk_testkit::PanicTrap::new();
        let server = FakeServer::default();
        let client = connected(&server);
        let sem = Semaphore::new(client.clone(), LOCK, 2).fenced("/app/epoch");
        let lease = sem.acquire().await.expect("lease");
        let first = lease.token().expect("fenced");
        client.suspend();
        assert_eq!(lease.lost().await, Revoked::Suspended);
        assert!(!lease.is_held());
        client.resume(client.last_session());
        let again = lease.regained().await.expect("regained");
        assert!(again.token.expect("fenced") > first, "re-fenced");
        let old = client.last_session();
        client.suspend();
        assert_eq!(lease.lost().await, Revoked::Suspended);
        server.with(|t| t.end_session(old));
        let new = client.connect_new();
        client.publish(&[
            ConnectionState::Lost,
            ConnectionState::Reconnected { session: new },
        ]);
        assert!(lease.regained().await.is_err(), "never comes back");
        assert_eq!(lease.lost().await, Revoked::Lost);
        // The semaphore still works on the new session.
        let l2 = sem.acquire().await.expect("a new lease");
        assert_eq!(l2.grant().session, new);
    }
}
