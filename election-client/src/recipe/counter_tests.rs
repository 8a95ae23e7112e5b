//! Unit tests of the counter machine: values and events, compare-and-set, exactly-once
//! increments whose replies are lost (applied or not), and seeded random histories of
//! several counters with disturbances at every step, checking that no increment is lost
//! or counted twice.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::recipe::fake::FakeServer;
use crate::recipe::harness::Harness;

const PATH: &str = "/stats/hits";

fn cfg(nonce: u64) -> CounterConfig {
    let mut c = CounterConfig::new(PATH).initial(10);
    c.nonce = nonce;
    c
}

fn harness(server: &FakeServer, nonce: u64) -> Harness<CounterMachine> {
    let mut h = Harness::new(CounterMachine::new(cfg(nonce)), server.clone());
    h.check = Some(Box::new(|m: &CounterMachine, _| {
        assert!(
            m.is_progressing(),
            "idle while started and connected: {m:?}"
        );
    }));
    h
}

fn stored(server: &FakeServer) -> Option<i64> {
    server
        .with(|t| t.data(PATH))
        .map(|d| decode(PATH, &d).expect("a counter"))
}

fn answers(h: &Harness<CounterMachine>) -> Vec<(u64, Result<Option<CounterValue>>)> {
    h.events
        .iter()
        .filter_map(|e| match e {
            CounterOutput::Answer { request, result } => Some((*request, result.clone())),
            CounterOutput::Event(_) => None,
        })
        .collect()
}

fn events(h: &Harness<CounterMachine>) -> Vec<String> {
    h.events
        .iter()
        .filter_map(|e| match e {
            CounterOutput::Event(CounterEvent::Changed(v)) => Some(format!("={}", v.value)),
            CounterOutput::Event(CounterEvent::Stale) => Some("stale".into()),
            CounterOutput::Event(CounterEvent::Synced(v)) => Some(format!("synced {}", v.value)),
            CounterOutput::Answer { .. } => None,
        })
        .collect()
}

fn add(h: &mut Harness<CounterMachine>, request: u64, delta: i64) {
    h.feed(Input::Command(CounterCommand {
        request,
        write: CounterWrite::Add(delta),
    }));
}

/// Run calls and watch events (not timers) until nothing is left, at most `n` steps.
fn run_calls(h: &mut Harness<CounterMachine>, n: usize) {
    for _ in 0..n {
        h.drain_watches();
        let Some(i) = h
            .pending
            .iter()
            .position(|o| matches!(o, Output::Call { .. }))
        else {
            return;
        };
        let call = h.pending.remove(i).expect("call");
        h.pending.push_front(call);
        h.run_one();
    }
}

#[test]
fn a_missing_counter_is_created_with_its_initial_value_and_adds_are_reported() {
    let server = FakeServer::default();
    let mut h = harness(&server, 1);
    h.start();
    run_calls(&mut h, 10);
    assert_eq!(stored(&server), Some(10));
    add(&mut h, 1, 5);
    run_calls(&mut h, 10);
    assert_eq!(stored(&server), Some(15));
    let a = answers(&h);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].1.as_ref().expect("ok").expect("value").value, 15);
    // Someone else writes: the watch reports it.
    server
        .with(|t| t.set_data(PATH, encode(40), -1))
        .expect("set");
    run_calls(&mut h, 10);
    assert_eq!(events(&h), vec!["=10", "=15", "=40"]);
}

#[test]
fn an_add_on_a_stale_version_rereads_and_applies_once() {
    let server = FakeServer::default();
    let mut h = harness(&server, 1);
    h.start();
    run_calls(&mut h, 10);
    // Another writer moves the counter; our watch has not fired yet when we add.
    server
        .with(|t| t.set_data(PATH, encode(20), -1))
        .expect("set");
    add(&mut h, 7, 1);
    run_calls(&mut h, 20);
    assert_eq!(stored(&server), Some(21));
    assert_eq!(answers(&h)[0].1.clone().expect("ok").expect("v").value, 21);
}

#[test]
fn compare_and_set_fails_on_a_moved_version_without_retrying() {
    let server = FakeServer::default();
    let mut h = harness(&server, 1);
    h.start();
    run_calls(&mut h, 10);
    let seen = h.m.last().expect("value");
    server
        .with(|t| t.set_data(PATH, encode(11), -1))
        .expect("set");
    h.feed(Input::Command(CounterCommand {
        request: 3,
        write: CounterWrite::CompareAndSet {
            version: seen.version,
            value: 99,
        },
    }));
    run_calls(&mut h, 10);
    assert_eq!(answers(&h), vec![(3, Ok(None))]);
    assert_eq!(stored(&server), Some(11));
}

#[test]
fn a_lost_reply_of_an_applied_add_is_resolved_by_its_marker_not_repeated() {
    // Curator's DistributedAtomicLong retries this write (BADVERSION: reported as
    // failed although applied) or the caller does (counted twice).
    let server = FakeServer::default();
    let mut h = harness(&server, 1);
    h.start();
    run_calls(&mut h, 10);
    h.lose_reply_if = Some(Box::new(|c| matches!(c, Call::Multi { .. })));
    add(&mut h, 1, 1);
    run_calls(&mut h, 20);
    assert_eq!(stored(&server), Some(11), "applied once");
    let a = answers(&h);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].1.clone().expect("ok").expect("value").value, 11);
}

#[test]
fn an_add_lost_before_it_reached_the_server_is_sent_again_after_the_reconnect() {
    let server = FakeServer::default();
    let mut h = harness(&server, 1);
    h.start();
    run_calls(&mut h, 10);
    add(&mut h, 1, 1);
    // The multi never reaches the server.
    h.suspend();
    h.drop_pending();
    assert!(events(&h).contains(&"stale".to_owned()));
    h.reconnect_same();
    run_calls(&mut h, 30);
    assert_eq!(stored(&server), Some(11));
    assert_eq!(answers(&h)[0].1.clone().expect("ok").expect("v").value, 11);
    assert_eq!(events(&h), vec!["=10", "stale", "synced 10", "=11"]);
}

#[test]
fn an_add_applied_just_before_a_session_loss_is_not_repeated_on_the_new_session() {
    let server = FakeServer::default();
    let mut h = harness(&server, 1);
    h.start();
    run_calls(&mut h, 10);
    add(&mut h, 1, 1);
    // The multi reaches the server; its reply is lost with the session.
    let call = h
        .pending
        .iter()
        .find_map(|o| match o {
            Output::Call { call, .. } => Some(call.clone()),
            _ => None,
        })
        .expect("the multi");
    let s = h.session;
    h.server
        .with(|t| crate::recipe::fake::fake_call(t, s, call));
    h.drop_pending();
    h.lose(true);
    run_calls(&mut h, 30);
    assert_eq!(stored(&server), Some(11), "once, not twice");
    assert_eq!(answers(&h).len(), 1);
}

#[test]
fn data_that_is_not_a_counter_is_an_error_and_is_never_overwritten() {
    let server = FakeServer::default();
    server.with(|t| {
        t.put("/stats", b"").expect("stats");
        t.put(PATH, b"abc").expect("node")
    });
    let mut h = harness(&server, 1);
    h.check = None; // the observer backs off and retries: fine, not idle
    h.start();
    add(&mut h, 1, 1);
    run_calls(&mut h, 10);
    match &answers(&h)[..] {
        [(1, Err(Error::BadData { .. }))] => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(
        server.with(|t| t.data(PATH)),
        Some(Bytes::from_static(b"abc"))
    );
}

#[test]
fn close_answers_waiting_commands_and_deletes_the_last_marker() {
    let server = FakeServer::default();
    let mut h = harness(&server, 1);
    h.start();
    run_calls(&mut h, 10);
    add(&mut h, 1, 1);
    run_calls(&mut h, 10);
    assert_eq!(
        server.with(|t| t.children_of(PATH)).map(|c| c.len()),
        Some(1),
        "one marker"
    );
    // One add in flight (it is finished and answered), one queued behind it (closed).
    add(&mut h, 2, 1);
    add(&mut h, 3, 1);
    h.feed(Input::Close);
    run_calls(&mut h, 10);
    assert!(h.ended);
    let a = answers(&h);
    assert_eq!(a[1].0, 3);
    assert_eq!(a[1].1, Err(Error::Closed));
    assert_eq!(a[2].0, 2);
    assert_eq!(a[2].1.clone().expect("ok").expect("v").value, 12);
    assert_eq!(stored(&server), Some(12));
    assert_eq!(
        server.with(|t| t.children_of(PATH)).map(|c| c.len()),
        Some(0)
    );
}

#[test]
fn markers_do_not_pile_up() {
    let server = FakeServer::default();
    let mut h = harness(&server, 1);
    h.start();
    for i in 0..20 {
        add(&mut h, i, 1);
        run_calls(&mut h, 10);
    }
    assert_eq!(stored(&server), Some(30));
    assert_eq!(
        server.with(|t| t.children_of(PATH)).map(|c| c.len()),
        Some(1)
    );
}

struct Adder {
    h: Harness<CounterMachine>,
    sent: u64,
    suspended: bool,
}

#[test]
fn seeded_random_histories_never_lose_or_repeat_an_increment() {
    // Four handles add 1 twelve times each while connections drop, sessions are lost
    // (expired or only client-side), replies are lost after the write applied, and
    // calls are answered in a random order. Every add is answered once with a distinct
    // value, and the counter ends at exactly initial + every add.
    for seed in 0..60u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let server = FakeServer::default();
        let mut adders: Vec<Adder> = (0..4)
            .map(|i| {
                let mut h = harness(&server, 1000 + i);
                h.start();
                Adder {
                    h,
                    sent: 0,
                    suspended: false,
                }
            })
            .collect();
        const ADDS: u64 = 12;
        for step in 0..3_000 {
            let i = rng.random_range(0..adders.len());
            let a = &mut adders[i];
            let roll = rng.random_range(0..100);
            if roll < 10 && a.sent < ADDS {
                add(&mut a.h, a.sent, 1);
                a.sent += 1;
            } else if roll < 14 && !a.suspended {
                a.h.suspend();
                // Sent calls may or may not have reached the server.
                if rng.random_bool(0.5) {
                    let sent: Vec<Call> =
                        a.h.pending
                            .iter()
                            .filter_map(|o| match o {
                                Output::Call { call, .. } => Some(call.clone()),
                                _ => None,
                            })
                            .collect();
                    let s = a.h.session;
                    for c in sent {
                        a.h.server.with(|t| crate::recipe::fake::fake_call(t, s, c));
                    }
                }
                a.h.drop_pending();
                a.suspended = true;
            } else if roll < 18 && a.suspended {
                a.suspended = false;
                match rng.random_range(0..3) {
                    0 => a.h.reconnect_same(),
                    1 => {
                        a.h.lose(true);
                    }
                    _ => {
                        a.h.lose(false);
                    }
                }
            } else if roll < 20 {
                a.h.lose_reply_if = Some(Box::new(|_| true));
            } else {
                a.h.run_one();
            }
            let _ = step;
        }
        for a in adders.iter_mut() {
            if a.suspended {
                a.h.reconnect_same();
                a.suspended = false;
            }
            a.h.lose_reply_if = None;
            while a.sent < ADDS {
                add(&mut a.h, a.sent, 1);
                a.sent += 1;
            }
        }
        for _ in 0..400 {
            for a in adders.iter_mut() {
                a.h.run_one();
            }
        }
        let mut values = Vec::new();
        for (i, a) in adders.iter().enumerate() {
            let got = answers(&a.h);
            assert_eq!(
                got.len() as u64,
                ADDS,
                "seed={seed} adder {i}: answers {got:?}"
            );
            let mut requests: Vec<u64> = got.iter().map(|(r, _)| *r).collect();
            requests.sort();
            requests.dedup();
            assert_eq!(
                requests.len() as u64,
                ADDS,
                "seed={seed} adder {i}: an add answered twice"
            );
            for (_, r) in got {
                values.push(r.expect("ok").expect("value").value);
            }
        }
        let total = 10 + 4 * ADDS as i64;
        assert_eq!(
            stored(&server),
            Some(total),
            "seed={seed}: increments lost or repeated"
        );
        values.sort();
        let expected: Vec<i64> = (11..=total).collect();
        assert_eq!(values, expected, "seed={seed}: each add saw its own value");
    }
}
