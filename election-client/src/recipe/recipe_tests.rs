//! The recipes run by their driver against the in-memory fake, in simulated time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::fake::{FakeServer, Kind};
use super::*;
use crate::error::Error;
use crate::state::ConnectionState;
use crate::types::SessionId;

const PARENT: &str = "/svc/election";
const EPOCH: &str = "/svc/election-epoch";

fn cfg(id: &str) -> LatchConfig {
    LatchConfig::new(PARENT).id(id.to_owned())
}

/// Wait (in simulated time) until `f` holds; fail after a minute.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        rzk_testkit::check_panics();
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn next_granted(latch: &mut LeaderLatch) -> Grant {
    loop {
        match tokio::time::timeout(Duration::from_secs(60), latch.next_event()).await {
            Ok(Some(RecipeEvent::Granted(g))) => return g,
            Ok(Some(_)) => continue,
            Ok(None) => panic!("latch ended"),
            Err(_) => panic!("no grant within a minute"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn seed_latch_regains_leadership_after_expiry_with_parent_collected() {
    let _trap = rzk_testkit::PanicTrap::new();
    // The leader-latch failure (docs/recipes.md, "The session-expiry failure"):
    // the session expires, the ephemeral goes, the empty container parent is
    // collected, connectivity returns.
    let server = FakeServer::default();
    let client = server.client();
    let mut latch = LeaderLatch::start(client.clone(), cfg("a"));
    client.publish(&[ConnectionState::Connected {
        session: client.session().expect("connected"),
    }]);
    let first = next_granted(&mut latch).await;
    assert_eq!(first.token.map(|t| t.epoch), Some(1));

    let old = client.session().expect("session");
    client.suspend();
    assert_eq!(
        latch.next_event().await,
        Some(RecipeEvent::Revoked(Revoked::Suspended))
    );
    server.with(|t| {
        t.end_session(old);
        t.gc_containers();
        assert!(!t.exists(PARENT), "the parent was collected");
    });
    let new = client.connect_new();
    client.publish(&[
        ConnectionState::Lost,
        ConnectionState::Reconnected { session: new },
    ]);
    let second = next_granted(&mut latch).await;
    assert_eq!(second.session, new);
    assert_ne!(second.node, first.node);
    assert!(second.token > first.token, "{second:?} after {first:?}");
    assert!(server.with(|t| t.exists(&second.node)));
    latch.close().await;
    assert!(!latch.is_leader());
}

#[tokio::test(start_paused = true)]
async fn leadership_moves_when_the_leader_session_ends_and_the_old_leader_rejoins() {
    let _trap = rzk_testkit::PanicTrap::new();
    let server = FakeServer::default();
    let (ca, cb) = (server.client(), server.client());
    let mut a = LeaderLatch::start(ca.clone(), cfg("a"));
    ca.publish(&[ConnectionState::Connected {
        session: ca.session().expect("a"),
    }]);
    let ga = next_granted(&mut a).await;
    let mut b = LeaderLatch::start(cb.clone(), cfg("b"));
    cb.publish(&[ConnectionState::Connected {
        session: cb.session().expect("b"),
    }]);
    // b queues behind a, watching it.
    eventually("b queued", || {
        server.with(|t| t.children_of(PARENT).map(|c| c.len()) == Some(2))
    })
    .await;
    assert!(!b.is_leader());

    let sa = ca.session().expect("a");
    ca.suspend();
    server.with(|t| t.end_session(sa));
    let gb = next_granted(&mut b).await;
    assert!(gb.token > ga.token);

    let sa2 = ca.connect_new();
    ca.publish(&[
        ConnectionState::Lost,
        ConnectionState::Reconnected { session: sa2 },
    ]);
    eventually("a queued again", || {
        server.with(|t| t.children_of(PARENT).map(|c| c.len()) == Some(2))
    })
    .await;
    assert!(!a.is_leader(), "reconnection never implies leadership");
    assert!(b.is_leader());
}

#[tokio::test(start_paused = true)]
async fn client_side_lost_with_the_old_node_still_alive_never_makes_two_leaders() {
    let _trap = rzk_testkit::PanicTrap::new();
    // CURATOR-696: LOST from the local timer; the server still holds the old session and
    // its node, which sorts first.
    let server = FakeServer::default();
    let (ca, cb) = (server.client(), server.client());
    let mut a = LeaderLatch::start(ca.clone(), cfg("a"));
    ca.publish(&[ConnectionState::Connected {
        session: ca.session().expect("a"),
    }]);
    let ga = next_granted(&mut a).await;
    let b = LeaderLatch::start(cb.clone(), cfg("b"));
    cb.publish(&[ConnectionState::Connected {
        session: cb.session().expect("b"),
    }]);
    eventually("b queued", || {
        server.with(|t| t.children_of(PARENT).map(|c| c.len()) == Some(2))
    })
    .await;

    let leaders = Arc::new(AtomicUsize::new(0));
    ca.suspend();
    let sa2 = ca.connect_new();
    // The old session S1 is still alive on the server; a's old node still sorts first.
    ca.publish(&[
        ConnectionState::Lost,
        ConnectionState::Reconnected { session: sa2 },
    ]);
    assert_eq!(
        a.next_event().await,
        Some(RecipeEvent::Revoked(Revoked::Suspended))
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let n = usize::from(a.is_leader()) + usize::from(b.is_leader());
        assert!(n <= 1, "two leaders at once");
        leaders.fetch_max(n, Ordering::Relaxed);
        if let Some(g) = a.leadership() {
            assert_eq!(g.session, sa2, "led through the old session's node");
            assert!(g.token > ga.token);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The dead node was deleted by a's new session, so someone leads again.
    assert_eq!(leaders.load(Ordering::Relaxed), 1, "nobody leads");
    assert!(
        !server.with(|t| t.exists(&ga.node)),
        "the old session's node was cleaned up"
    );
}

#[tokio::test(start_paused = true)]
async fn check_then_gc_race_on_create_is_retried() {
    // The reviewer's race in the seed: the parent exists when checked, then the reaper
    // deletes it before the candidate is created.
    let _trap = rzk_testkit::PanicTrap::new();
    let server = FakeServer::default();
    let client = server.client();
    // A used, empty container parent: it had a candidate, which is gone. The reaper
    // collects exactly such parents.
    let old = client
        .create_candidate(PARENT, "old-", Bytes::new())
        .await
        .expect("old candidate");
    server.with(|t| t.delete(&old)).expect("delete it");
    assert!(server.with(|t| t.exists(PARENT)));
    // Each hook runs after the latch saw (or made) the parent and before its candidate
    // is created, and counts the parents it removed. The first is the reaper alone (the
    // used, empty parent is due); the next two delete the recreated, never-used parent
    // as a reaper with `maxNeverUsedIntervalMs` would.
    let removed = Arc::new(AtomicUsize::new(0));
    for i in 0..3 {
        let removed = removed.clone();
        server.before(Kind::Create, move |t| {
            assert!(t.exists(PARENT), "hook {i}: the parent exists when checked");
            t.gc_containers();
            if i > 0 {
                let _ = t.delete(PARENT);
            }
            if !t.exists(PARENT) {
                removed.fetch_add(1, Ordering::SeqCst);
            }
            None
        });
    }
    let mut latch = LeaderLatch::start(client.clone(), cfg("a"));
    client.publish(&[ConnectionState::Connected {
        session: client.session().expect("s"),
    }]);
    let g = next_granted(&mut latch).await;
    assert_eq!(
        removed.load(Ordering::SeqCst),
        3,
        "every create met a parent collected after the check"
    );
    assert!(server.with(|t| t.exists(&g.node)));
}

#[tokio::test(start_paused = true)]
async fn nonode_on_listing_recreates_parent_and_candidate() {
    let _trap = rzk_testkit::PanicTrap::new();
    let server = FakeServer::default();
    let client = server.client();
    let session = client.session().expect("s");
    // The first listing finds the whole subtree wiped (ensemble recreated).
    server.before(Kind::Children, move |t| {
        for child in t.children_of(PARENT).unwrap_or_default() {
            let _ = t.delete(&format!("{PARENT}/{child}"));
        }
        let _ = t.delete(PARENT);
        None
    });
    let mut latch = LeaderLatch::start(client.clone(), cfg("a"));
    client.publish(&[ConnectionState::Connected { session }]);
    let g = next_granted(&mut latch).await;
    assert!(server.with(|t| t.exists(&g.node)));
}

#[tokio::test(start_paused = true)]
async fn expiry_while_fencing_returns_to_candidacy_and_wins_on_the_new_session() {
    let _trap = rzk_testkit::PanicTrap::new();
    let server = FakeServer::default();
    let client = server.client();
    let s1 = client.session().expect("s");
    server.before(Kind::Bump, move |t| {
        t.end_session(s1);
        Some(Error::SessionExpired)
    });
    let mut latch = LeaderLatch::start(client.clone(), cfg("a"));
    client.publish(&[ConnectionState::Connected { session: s1 }]);
    eventually("the fencing step ran", || {
        server.with(|t| {
            !t.exists(&format!("{PARENT}/x"))
                && t.children_of(PARENT).map(|c| c.is_empty()).unwrap_or(true)
        })
    })
    .await;
    assert!(!latch.is_leader());
    let s2 = client.connect_new();
    client.publish(&[
        ConnectionState::Lost,
        ConnectionState::Reconnected { session: s2 },
    ]);
    let g = next_granted(&mut latch).await;
    assert_eq!(g.session, s2);
    assert_eq!(server.with(|t| t.epoch(EPOCH)), g.token.map(|t| t.epoch));
}

#[tokio::test(start_paused = true)]
async fn suspension_without_loss_keeps_the_same_candidate_node() {
    let _trap = rzk_testkit::PanicTrap::new();
    let server = FakeServer::default();
    let client = server.client();
    let s = client.session().expect("s");
    let mut latch = LeaderLatch::start(client.clone(), cfg("a"));
    client.publish(&[ConnectionState::Connected { session: s }]);
    let g1 = next_granted(&mut latch).await;
    client.suspend();
    assert_eq!(
        latch.next_event().await,
        Some(RecipeEvent::Revoked(Revoked::Suspended))
    );
    client.resume(s);
    let g2 = next_granted(&mut latch).await;
    assert_eq!(g1.node, g2.node);
    assert!(g2.token > g1.token);
}

#[tokio::test(start_paused = true)]
async fn close_deletes_the_candidate_and_reports_revocation() {
    let _trap = rzk_testkit::PanicTrap::new();
    let server = FakeServer::default();
    let client = server.client();
    let mut latch = LeaderLatch::start(client.clone(), cfg("a"));
    client.publish(&[ConnectionState::Connected {
        session: client.session().expect("s"),
    }]);
    let g = next_granted(&mut latch).await;
    latch.close().await;
    latch.close().await;
    assert_eq!(
        latch.next_event().await,
        Some(RecipeEvent::Revoked(Revoked::Closed))
    );
    assert_eq!(latch.next_event().await, Some(RecipeEvent::Ended));
    eventually("node deleted", || !server.with(|t| t.exists(&g.node))).await;
}

#[tokio::test(start_paused = true)]
async fn stream_end_closes_the_latch() {
    let _trap = rzk_testkit::PanicTrap::new();
    let server = FakeServer::default();
    let client = server.client();
    let mut latch = LeaderLatch::start(client.clone(), cfg("a"));
    client.publish(&[ConnectionState::Connected {
        session: client.session().expect("s"),
    }]);
    next_granted(&mut latch).await;
    client.close();
    assert_eq!(
        latch.next_event().await,
        Some(RecipeEvent::Revoked(Revoked::Closed))
    );
    assert_eq!(latch.next_event().await, Some(RecipeEvent::Ended));
}

#[tokio::test(start_paused = true)]
async fn selector_holds_leadership_until_the_callback_returns_and_requeues() {
    let _trap = rzk_testkit::PanicTrap::new();
    let server = FakeServer::default();
    let client = server.client();
    let runs = Arc::new(AtomicUsize::new(0));
    let concurrent = Arc::new(AtomicUsize::new(0));
    let (r, c) = (runs.clone(), concurrent.clone());
    let selector = LeaderSelector::start(
        client.clone(),
        cfg("a"),
        true,
        move |leadership: Leadership| {
            let (r, c) = (r.clone(), c.clone());
            async move {
                assert_eq!(
                    c.fetch_add(1, Ordering::SeqCst),
                    0,
                    "callback ran twice at once"
                );
                assert!(leadership.grant.token.is_some());
                tokio::time::sleep(Duration::from_millis(100)).await;
                r.fetch_add(1, Ordering::SeqCst);
                c.fetch_sub(1, Ordering::SeqCst);
            }
        },
    );
    client.publish(&[ConnectionState::Connected {
        session: client.session().expect("s"),
    }]);
    eventually("three leadership periods", || {
        runs.load(Ordering::SeqCst) >= 3
    })
    .await;
    selector.close().await;
    eventually("node deleted", || {
        server.with(|t| t.children_of(PARENT).unwrap_or_default().is_empty())
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn selector_callback_learns_of_suspension() {
    let _trap = rzk_testkit::PanicTrap::new();
    let server = FakeServer::default();
    let client = server.client();
    let revoked = Arc::new(std::sync::Mutex::new(None));
    let rv = revoked.clone();
    let selector = LeaderSelector::start(
        client.clone(),
        cfg("a"),
        false,
        move |mut leadership: Leadership| {
            let rv = rv.clone();
            async move {
                let why = leadership.revoked().await;
                *rv.lock().expect("lock") = Some(why);
            }
        },
    );
    client.publish(&[ConnectionState::Connected {
        session: client.session().expect("s"),
    }]);
    eventually("leading", || server.with(|t| t.epoch(EPOCH) == Some(1))).await;
    client.suspend();
    eventually("callback saw the revocation", || {
        revoked.lock().expect("lock").is_some()
    })
    .await;
    assert_eq!(*revoked.lock().expect("lock"), Some(Revoked::Suspended));
    selector.close().await;
}

#[tokio::test(start_paused = true)]
async fn mutex_excludes_and_hands_over() {
    let _trap = rzk_testkit::PanicTrap::new();
    let server = FakeServer::default();
    let (ca, cb) = (server.client(), server.client());
    ca.publish(&[ConnectionState::Connected {
        session: ca.session().expect("a"),
    }]);
    cb.publish(&[ConnectionState::Connected {
        session: cb.session().expect("b"),
    }]);
    let ma = Mutex::new(ca.clone(), "/locks/x").fenced("/locks/x-epoch");
    let mb = Mutex::new(cb.clone(), "/locks/x").fenced("/locks/x-epoch");
    let ga = ma.acquire().await.expect("a acquires");
    assert!(ga.is_held());
    assert!(mb
        .try_acquire(Duration::from_secs(2))
        .await
        .expect("no error")
        .is_none());
    let waiter = tokio::spawn(async move { mb.acquire().await.map(|g| g.grant().clone()) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished());
    let ta = ga.grant().token;
    ga.release().await;
    let gb = waiter.await.expect("join").expect("b acquires");
    assert!(gb.token > ta);
    assert_eq!(gb.session, cb.session().expect("b"));
}

#[tokio::test(start_paused = true)]
async fn mutex_lost_with_its_session_is_reported() {
    let _trap = rzk_testkit::PanicTrap::new();
    let server = FakeServer::default();
    let client = server.client();
    let s = client.session().expect("s");
    client.publish(&[ConnectionState::Connected { session: s }]);
    let m = Mutex::new(client.clone(), "/locks/y");
    let mut g = m.acquire().await.expect("acquire");
    assert_eq!(g.grant().token, None);
    client.suspend();
    assert_eq!(g.lost().await, Revoked::Suspended);
    server.with(|t| t.end_session(s));
    let s2 = client.connect_new();
    client.publish(&[
        ConnectionState::Lost,
        ConnectionState::Reconnected { session: s2 },
    ]);
    assert_eq!(g.lost().await, Revoked::Lost);
    assert!(!g.is_held());
    let _ = SessionId::NONE;
}

/// Three latches on three fake clients under seeded random suspensions, server-side
/// expiries, container collection and parent wipes, in simulated time. Throughout each
/// run, after every fault and every 10 ms of simulated time: at most one latch believes
/// it leads. After every run: no fencing epoch was granted twice, and once everyone is
/// connected again exactly one latch leads, through a live node of its current session
/// (nothing idles). A violation prints the seed and the run's timeline.
#[tokio::test(start_paused = true)]
async fn seeded_random_faults_never_share_an_epoch_and_always_end_with_one_leader() {
    use futures::FutureExt;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    let _trap = rzk_testkit::PanicTrap::new();
    for seed in 0..25u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let server = FakeServer::default();
        let n = 3;
        let clients: Vec<_> = (0..n).map(|_| server.client()).collect();
        let mut sessions: Vec<SessionId> =
            clients.iter().map(|c| c.session().expect("s")).collect();
        let t0 = Instant::now();
        let mut timeline: Vec<String> = Vec::new();
        let mut epochs: Vec<u64> = Vec::new();
        let mut latches = Vec::new();
        for (i, c) in clients.iter().enumerate() {
            latches.push(LeaderLatch::start(c.clone(), cfg(&format!("c{i}"))));
            c.publish(&[ConnectionState::Connected {
                session: sessions[i],
            }]);
        }
        // Reads every latch's pending events into the timeline, then checks that at
        // most one latch believes it leads (its grant is set from the moment the
        // machine grants until it revokes).
        let mut observe = |latches: &mut Vec<LeaderLatch>, timeline: &mut Vec<String>| {
            let at = t0.elapsed().as_millis();
            for (i, l) in latches.iter_mut().enumerate() {
                while let Some(Some(ev)) = l.next_event().now_or_never() {
                    if let RecipeEvent::Granted(g) = &ev {
                        epochs.push(g.token.expect("fenced").epoch);
                    }
                    timeline.push(format!("{at:>6} ms c{i} {ev:?}"));
                }
            }
            let leading: Vec<usize> = (0..latches.len())
                .filter(|i| latches[*i].is_leader())
                .collect();
            assert!(
                leading.len() <= 1,
                "seed {seed}: {leading:?} believe they lead at once at {at} ms; timeline:\n{}",
                timeline.join("\n")
            );
        };
        for _ in 0..40 {
            let i = rng.random_range(0..n);
            let at = t0.elapsed().as_millis();
            match rng.random_range(0..6) {
                0 if clients[i].session().is_some() => {
                    timeline.push(format!("{at:>6} ms fault: c{i} suspended"));
                    clients[i].suspend();
                }
                1 if clients[i].session().is_none() => {
                    let alive = !server_dead(&server, sessions[i]);
                    if alive {
                        timeline.push(format!("{at:>6} ms fault: c{i} resumes its session"));
                        clients[i].resume(sessions[i]);
                    } else {
                        timeline.push(format!("{at:>6} ms fault: c{i} LOST, new session"));
                        sessions[i] = clients[i].connect_new();
                        clients[i].publish(&[
                            ConnectionState::Lost,
                            ConnectionState::Reconnected {
                                session: sessions[i],
                            },
                        ]);
                    }
                }
                2 => {
                    // The server expires the session (the client is cut off first, as a
                    // real client would be when its session dies).
                    timeline.push(format!("{at:>6} ms fault: c{i}'s session expires"));
                    if clients[i].session().is_some() {
                        clients[i].suspend();
                    }
                    let s = sessions[i];
                    server.with(|t| t.end_session(s));
                }
                3 => {
                    timeline.push(format!("{at:>6} ms fault: containers collected"));
                    server.with(|t| t.gc_containers());
                }
                4 => {
                    // The election subtree is wiped under live sessions (an operator's
                    // deleteall, an ensemble rebuilt): listings get NONODE.
                    timeline.push(format!("{at:>6} ms fault: election subtree wiped"));
                    server.with(|t| {
                        for child in t.children_of(PARENT).unwrap_or_default() {
                            let _ = t.delete(&format!("{PARENT}/{child}"));
                        }
                        let _ = t.delete(PARENT);
                    });
                }
                _ => {}
            }
            observe(&mut latches, &mut timeline);
            // The faults' spacing, sampled every 10 ms.
            let pause = rng.random_range(0..400u64);
            let until = Instant::now() + Duration::from_millis(pause);
            while Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(10).min(until - Instant::now())).await;
                observe(&mut latches, &mut timeline);
            }
        }
        // Heal everything.
        for i in 0..n {
            if clients[i].session().is_none() {
                if server_dead(&server, sessions[i]) {
                    sessions[i] = clients[i].connect_new();
                    clients[i].publish(&[
                        ConnectionState::Lost,
                        ConnectionState::Reconnected {
                            session: sessions[i],
                        },
                    ]);
                } else {
                    clients[i].resume(sessions[i]);
                }
            }
        }
        let one_leader = |latches: &Vec<LeaderLatch>| {
            let leaders: Vec<Grant> = latches.iter().filter_map(|l| l.leadership()).collect();
            leaders.len() == 1
                && server.with(|t| t.exists(&leaders[0].node))
                && sessions.contains(&leaders[0].session)
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !one_leader(&latches) {
            assert!(
                Instant::now() < deadline,
                "seed {seed}: not exactly one live leader after healing; timeline:\n{}",
                timeline.join("\n")
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
            observe(&mut latches, &mut timeline);
        }
        observe(&mut latches, &mut timeline);
        let unique: std::collections::HashSet<u64> = epochs.iter().copied().collect();
        assert_eq!(
            unique.len(),
            epochs.len(),
            "seed {seed}: an epoch granted twice: {epochs:?}; timeline:\n{}",
            timeline.join("\n")
        );
        for c in &clients {
            c.close();
        }
    }
}

fn server_dead(server: &FakeServer, session: SessionId) -> bool {
    server.with(|t| !t.is_live(session))
}

#[tokio::test(start_paused = true)]
async fn selector_close_aborts_a_callback_that_ignores_revocation() {
    let _trap = rzk_testkit::PanicTrap::new();
    let server = FakeServer::default();
    let client = server.client();
    let started = Arc::new(AtomicUsize::new(0));
    let st = started.clone();
    let selector = LeaderSelector::start(
        client.clone(),
        cfg("a"),
        true,
        move |_leadership: Leadership| {
            let st = st.clone();
            async move {
                st.fetch_add(1, Ordering::SeqCst);
                futures::future::pending::<()>().await;
            }
        },
    );
    client.publish(&[ConnectionState::Connected {
        session: client.session().expect("s"),
    }]);
    eventually("leading", || started.load(Ordering::SeqCst) == 1).await;
    let t0 = Instant::now();
    selector.close().await;
    assert!(t0.elapsed() >= CALLBACK_GRACE && t0.elapsed() < CALLBACK_GRACE * 2);
    eventually("node deleted", || {
        server.with(|t| t.children_of(PARENT).unwrap_or_default().is_empty())
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_leadership_callback_ends_its_period_and_close_resumes_the_panic() {
    let trap = rzk_testkit::PanicTrap::new();
    let server = FakeServer::default();
    let client = server.client();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let selector = LeaderSelector::start(client.clone(), cfg("a"), true, move |_: Leadership| {
        let r = r.clone();
        async move {
            let n = r.fetch_add(1, Ordering::SeqCst);
            assert!(n > 0, "the first leadership period fails its check");
            // Lead a while (in simulated time: a callback that returns at once would
            // requeue and lead again without time ever passing).
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    client.publish(&[ConnectionState::Connected {
        session: client.session().expect("s"),
    }]);
    // The panic ends that leadership; the selector requeues and leads again.
    let deadline = Instant::now() + Duration::from_secs(60);
    while runs.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < deadline, "no second leadership period");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let caught = trap.take();
    assert_eq!(caught.len(), 1, "{caught:?}");
    assert!(caught[0]
        .message
        .contains("the first leadership period fails its check"));
    // close() resumes the callback's panic in its caller.
    let closed = tokio::spawn(selector.close()).await;
    let panic = closed
        .expect_err("close resumes the callback's panic")
        .into_panic();
    assert_eq!(
        panic.downcast_ref::<&str>(),
        Some(&"the first leadership period fails its check")
    );
    trap.take();
}
