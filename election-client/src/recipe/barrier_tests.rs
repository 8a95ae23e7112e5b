//! Unit tests of the barrier machines against the fake server.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::recipe::fake::FakeServer;
use crate::recipe::harness::Harness;

const GATE: &str = "/deploy/gate";
const PATH: &str = "/jobs/barrier";

fn gate(server: &FakeServer) -> Harness<BarrierMachine> {
    let mut h = Harness::new(BarrierMachine::new(GATE, 1), server.clone());
    h.check = Some(Box::new(|m: &BarrierMachine, _| {
        assert!(m.is_progressing(), "{m:?}")
    }));
    h
}

fn opened(h: &Harness<BarrierMachine>) -> bool {
    h.events.contains(&BarrierEvent::Open)
}

#[test]
fn a_barrier_opens_when_its_node_goes_also_during_an_outage() {
    for outage in ["none", "suspend", "lose", "local-lose"] {
        let server = FakeServer::default();
        server.with(|t| {
            t.put("/deploy", b"").expect("parent");
            t.put(GATE, b"").expect("gate")
        });
        let mut h = gate(&server);
        h.start();
        h.run(5);
        assert!(!opened(&h), "{outage}: closed while the node exists");
        match outage {
            "suspend" => {
                h.suspend();
                h.drop_pending();
                server.with(|t| t.delete(GATE)).expect("remove");
                h.reconnect_same();
            }
            "lose" | "local-lose" => {
                h.suspend();
                h.drop_pending();
                server.with(|t| t.delete(GATE)).expect("remove");
                h.lose(outage == "lose");
            }
            _ => {
                server.with(|t| t.delete(GATE)).expect("remove");
            }
        }
        assert!(h.run_until(10, opened), "{outage}: not opened");
        assert!(h.ended);
    }
}

#[test]
fn a_missing_barrier_is_open_at_once() {
    let server = FakeServer::default();
    let mut h = gate(&server);
    h.start();
    assert!(h.run_until(3, opened));
}

fn member(server: &FakeServer, id: &str, n: u32) -> Harness<DoubleBarrierMachine> {
    let mut cfg = DoubleBarrierConfig::new(PATH, n);
    cfg.id = id.into();
    cfg.nonce = 9;
    let mut h = Harness::new(DoubleBarrierMachine::new(cfg), server.clone());
    h.check = Some(Box::new(|m: &DoubleBarrierMachine, _| {
        assert!(m.is_progressing(), "{m:?}")
    }));
    h.start();
    h
}

fn has(h: &Harness<DoubleBarrierMachine>, e: &DoubleBarrierEvent) -> bool {
    h.events.contains(e)
}

fn settle(hs: &mut [Harness<DoubleBarrierMachine>]) {
    for _ in 0..200 {
        for h in hs.iter_mut() {
            h.drain_watches();
            if let Some(i) = h
                .pending
                .iter()
                .position(|o| matches!(o, Output::Call { .. }))
            {
                let c = h.pending.remove(i).expect("call");
                h.pending.push_front(c);
                h.run_one();
            }
        }
    }
}

#[test]
fn n_members_enter_together_and_leave_together_and_the_path_is_reusable() {
    let server = FakeServer::default();
    let mut hs: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|id| member(&server, id, 3))
        .collect();
    for round in 0..2 {
        hs[0].feed(Input::Command(DoubleBarrierCommand::Enter));
        hs[1].feed(Input::Command(DoubleBarrierCommand::Enter));
        settle(&mut hs);
        assert!(
            hs.iter().all(|h| !has(h, &DoubleBarrierEvent::Entered)),
            "round {round}: entered with 2 of 3"
        );
        hs[2].feed(Input::Command(DoubleBarrierCommand::Enter));
        settle(&mut hs);
        assert!(
            hs.iter().all(|h| has(h, &DoubleBarrierEvent::Entered)),
            "round {round}: all entered"
        );
        hs[2].feed(Input::Command(DoubleBarrierCommand::Leave));
        hs[0].feed(Input::Command(DoubleBarrierCommand::Leave));
        settle(&mut hs);
        assert!(
            hs.iter().all(|h| !has(h, &DoubleBarrierEvent::Left)),
            "round {round}: left while b works"
        );
        hs[1].feed(Input::Command(DoubleBarrierCommand::Leave));
        settle(&mut hs);
        assert!(
            hs.iter().all(|h| has(h, &DoubleBarrierEvent::Left)),
            "round {round}: all left"
        );
        assert_eq!(
            server.with(|t| t.children_of(PATH)).map(|c| c.len()),
            Some(0),
            "round {round}: clean"
        );
        // A new round: fresh members on the same path.
        hs = ["a", "b", "c"]
            .iter()
            .map(|id| member(&server, id, 3))
            .collect();
    }
}

#[test]
fn losing_the_session_while_entering_fails_the_entry_and_a_new_member_takes_its_place() {
    let server = FakeServer::default();
    let mut hs = vec![member(&server, "a", 2), member(&server, "b", 2)];
    hs[0].feed(Input::Command(DoubleBarrierCommand::Enter));
    settle(&mut hs);
    hs[0].suspend();
    hs[0].drop_pending();
    hs[0].lose(false);
    assert!(has(
        &hs[0],
        &DoubleBarrierEvent::Failed(Error::SessionExpired)
    ));
    // The old session's node is still on the server (a client-side LOST); a's
    // replacement uses a new id. Once the server expires the old session, b and the
    // replacement are the two members.
    hs.push(member(&server, "a2", 2));
    hs[2].feed(Input::Command(DoubleBarrierCommand::Enter));
    let stale_owner = server.with(|t| t.stat(&format!("{PATH}/a")).map(|s| s.ephemeral_owner));
    if let Some(o) = stale_owner {
        server.with(|t| t.end_session(o));
    }
    hs[1].feed(Input::Command(DoubleBarrierCommand::Enter));
    settle(&mut hs);
    assert!(has(&hs[1], &DoubleBarrierEvent::Entered) && has(&hs[2], &DoubleBarrierEvent::Entered));
    assert!(!has(&hs[0], &DoubleBarrierEvent::Entered));
}

#[test]
fn losing_the_session_after_entering_is_reported_and_leave_fails_after_the_others() {
    let server = FakeServer::default();
    let mut hs = vec![member(&server, "a", 2), member(&server, "b", 2)];
    for h in hs.iter_mut() {
        h.feed(Input::Command(DoubleBarrierCommand::Enter));
    }
    settle(&mut hs);
    assert!(hs.iter().all(|h| has(h, &DoubleBarrierEvent::Entered)));
    hs[0].suspend();
    hs[0].drop_pending();
    hs[0].lose(true);
    assert!(has(&hs[0], &DoubleBarrierEvent::MembershipLost));
    hs[0].feed(Input::Command(DoubleBarrierCommand::Leave));
    settle(&mut hs);
    assert!(
        !hs[0]
            .events
            .iter()
            .any(|e| matches!(e, DoubleBarrierEvent::Failed(_))),
        "waits for b"
    );
    hs[1].feed(Input::Command(DoubleBarrierCommand::Leave));
    settle(&mut hs);
    assert!(has(&hs[1], &DoubleBarrierEvent::Left));
    assert!(has(
        &hs[0],
        &DoubleBarrierEvent::Failed(Error::SessionExpired)
    ));
}

#[test]
fn seeded_random_outages_never_let_a_member_pass_early_and_everyone_passes() {
    for seed in 0..80u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let server = FakeServer::default();
        let n = 3;
        let mut hs: Vec<_> = (0..n)
            .map(|i| member(&server, &format!("m{i}"), n as u32))
            .collect();
        let mut asked_enter = vec![false; n];
        let mut asked_leave = vec![false; n];
        let mut suspended = vec![false; n];
        // A member whose session was lost after asking to enter may be left behind by
        // the others (its node died); its leave must then fail, never pass silently.
        let mut lost = vec![false; n];
        // Sessions lost on the client side only: the server expires them in the end.
        let mut zombies = Vec::new();
        for step in 0..600 {
            let i = rng.random_range(0..n);
            let roll = rng.random_range(0..100);
            let h = &mut hs[i];
            if roll < 6 && !asked_enter[i] {
                asked_enter[i] = true;
                h.feed(Input::Command(DoubleBarrierCommand::Enter));
            } else if roll < 10 && has(h, &DoubleBarrierEvent::Entered) && !asked_leave[i] {
                asked_leave[i] = true;
                h.feed(Input::Command(DoubleBarrierCommand::Leave));
            } else if roll < 13 && !suspended[i] {
                h.suspend();
                h.drop_pending();
                suspended[i] = true;
            } else if roll < 16 && suspended[i] {
                suspended[i] = false;
                if rng.random_bool(0.6) {
                    h.reconnect_same();
                } else {
                    let old = h.session;
                    let expire = rng.random_bool(0.5);
                    h.lose(expire);
                    if !expire {
                        zombies.push(old);
                    }
                    lost[i] |= asked_enter[i];
                }
            } else {
                h.run_one();
            }
            let ctx = format!("seed={seed} step={step}");
            for h in &hs {
                if has(h, &DoubleBarrierEvent::Entered) {
                    assert!(
                        asked_enter.iter().all(|a| *a),
                        "{ctx}: entered before all {n} asked"
                    );
                }
                if has(h, &DoubleBarrierEvent::Left) {
                    assert!(
                        (0..n).all(|i| asked_leave[i] || lost[i]),
                        "{ctx}: left before all {n} asked"
                    );
                }
            }
        }
        for z in zombies.drain(..) {
            server.with(|t| t.end_session(z));
        }
        // Members that failed with their session are not waited for; everyone else
        // must get through. Failures only ever follow a lost session.
        for i in 0..n {
            if suspended[i] {
                hs[i].reconnect_same();
            }
            if !asked_enter[i] {
                asked_enter[i] = true;
                hs[i].feed(Input::Command(DoubleBarrierCommand::Enter));
            }
        }
        settle(&mut hs);
        let failed: Vec<bool> = hs
            .iter()
            .map(|h| {
                h.events
                    .iter()
                    .any(|e| matches!(e, DoubleBarrierEvent::Failed(_)))
            })
            .collect();
        for i in 0..n {
            assert!(
                !failed[i] || lost[i],
                "seed={seed}: m{i} failed without a lost session: {:?}",
                hs[i].events
            );
        }
        let any_entered = hs.iter().any(|h| has(h, &DoubleBarrierEvent::Entered));
        for i in 0..n {
            if failed[i] && !has(&hs[i], &DoubleBarrierEvent::Entered) && !any_entered {
                // Nobody got in: the barrier still needs n members; a new one steps in.
                let old = hs[i].session;
                server.with(|t| t.end_session(old));
                hs[i] = member(&server, &format!("m{i}-again"), n as u32);
                hs[i].feed(Input::Command(DoubleBarrierCommand::Enter));
            }
        }
        settle(&mut hs);
        for i in 0..n {
            let failed = hs[i]
                .events
                .iter()
                .any(|e| matches!(e, DoubleBarrierEvent::Failed(_)));
            if failed {
                continue;
            }
            assert!(
                has(&hs[i], &DoubleBarrierEvent::Entered),
                "seed={seed}: m{i} never entered: {:?}",
                hs[i].m
            );
            if !asked_leave[i] {
                asked_leave[i] = true;
                hs[i].feed(Input::Command(DoubleBarrierCommand::Leave));
            }
        }
        settle(&mut hs);
        for (i, h) in hs.iter().enumerate() {
            let failed = has(h, &DoubleBarrierEvent::Failed(Error::SessionExpired));
            assert!(
                has(h, &DoubleBarrierEvent::Left) || (failed && lost[i]),
                "seed={seed}: m{i} never left: {:?} {:?}",
                h.events,
                h.m
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_handles_run_over_a_client() {
    let _trap = rzk_testkit::PanicTrap::new();
    use std::time::Duration;
    let server = FakeServer::default();
    let client = |s: &FakeServer| {
        let c = s.client();
        c.publish(&[ConnectionState::Connected {
            session: c.last_session(),
        }]);
        c
    };
    let gate = Barrier::new(client(&server), GATE);
    gate.set().await.expect("set");
    gate.set().await.expect("set twice is fine");
    let waiter = {
        let gate = gate.clone();
        tokio::spawn(async move { gate.wait().await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!waiter.is_finished());
    gate.remove().await.expect("remove");
    waiter.await.expect("task").expect("opened");

    let mut members: Vec<DoubleBarrier> = (0..3)
        .map(|_| DoubleBarrier::new(client(&server), DoubleBarrierConfig::new(PATH, 3)))
        .collect();
    let mut tasks = Vec::new();
    for mut m in members.drain(..) {
        tasks.push(tokio::spawn(async move {
            m.enter().await.expect("enter");
            m.leave().await.expect("leave");
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("in time")
            .expect("task");
    }
    assert_eq!(
        server.with(|t| t.children_of(PATH)).map(|c| c.len()),
        Some(0)
    );
}
