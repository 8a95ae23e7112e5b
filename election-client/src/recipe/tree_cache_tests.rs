//! Unit tests of the tree-cache machine against the fake server: the initial snapshot,
//! events in order, exact differences after reconnects and session loss, the one-shot
//! fallback, depth limits, and seeded random histories with a disturbance at every
//! step, checking after every event that the events replayed on the snapshot give the
//! cache, and whenever the cache says it is synced, that it equals a fresh read.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use rzk_zxid::Zxid;

use super::*;
use crate::recipe::fake::FakeServer;
use crate::recipe::harness::Harness;

const ROOT: &str = "/cfg";

/// What a user sees of a node: data and versions (a child count or pzxid may be
/// refreshed quietly, without an event).
fn seen(n: &CachedNode) -> (Bytes, Zxid, Zxid, i32) {
    (n.data.clone(), n.stat.czxid, n.stat.mzxid, n.stat.version)
}

fn seen_map(m: &CacheMap) -> BTreeMap<String, (Bytes, Zxid, Zxid, i32)> {
    m.iter().map(|(p, n)| (p.clone(), seen(n))).collect()
}

/// Replays events on a map and fails on any duplicate or inconsistent event.
#[derive(Debug, Default, Clone)]
struct Replica {
    map: CacheMap,
    initialized: bool,
    synced_marks: usize,
}

impl Replica {
    fn apply(&mut self, e: &CacheEvent, snapshot_at_init: &CacheMap) {
        match e {
            CacheEvent::Initialized { nodes } => {
                assert!(!self.initialized, "Initialized twice");
                self.initialized = true;
                self.map = snapshot_at_init.clone();
                assert_eq!(*nodes, self.map.len());
            }
            CacheEvent::Created { path, node } => {
                assert!(self.initialized, "event before Initialized: {e:?}");
                assert!(
                    self.map.insert(path.clone(), node.clone()).is_none(),
                    "Created for a node already there: {path}"
                );
            }
            CacheEvent::Changed { path, old, new } => {
                assert_eq!(
                    self.map.get(path).map(seen),
                    Some(seen(old)),
                    "Changed with a wrong old state: {path}"
                );
                assert_ne!(seen(old), seen(new), "Changed without a change: {path}");
                assert!(
                    new.stat.mzxid > old.stat.mzxid || new.stat.czxid != old.stat.czxid,
                    "Changed backwards in zxid order: {path} {old:?} -> {new:?}"
                );
                self.map.insert(path.clone(), new.clone());
            }
            CacheEvent::Deleted { path, old } => {
                assert_eq!(
                    self.map.remove(path).as_ref().map(seen),
                    Some(seen(old)),
                    "Deleted twice or wrong: {path}"
                );
            }
            CacheEvent::Stale => {}
            CacheEvent::Synced => self.synced_marks += 1,
        }
    }
}

struct T {
    h: Harness<CacheMachine>,
    replica: Replica,
    seen: usize,
}

impl T {
    fn new(cfg: CacheConfig) -> T {
        let server = FakeServer::default();
        let mut h = Harness::new(CacheMachine::new(cfg), server);
        h.check = Some(Box::new(|m: &CacheMachine, _| {
            assert!(
                m.is_progressing(),
                "idle while started and connected: {m:?}"
            );
        }));
        T {
            h,
            replica: Replica::default(),
            seen: 0,
        }
    }

    /// Run and check the events so far against the cache.
    fn run(&mut self, steps: usize) {
        for _ in 0..steps {
            if !self.h.run_one() {
                break;
            }
            self.check_events();
        }
        self.check_events();
    }

    fn check_events(&mut self) {
        while self.seen < self.h.events.len() {
            let e = self.h.events[self.seen].clone();
            // The snapshot at Initialized is the cache at that moment; later events
            // are replayed on it. (The harness applies one input at a time, and the
            // cache's state when the event list is checked can be ahead by events that
            // follow in the same list, so replay them all before comparing.)
            let snap = if matches!(e, CacheEvent::Initialized { .. }) {
                self.snapshot_at(self.seen)
            } else {
                CacheMap::new()
            };
            self.replica.apply(&e, &snap);
            self.seen += 1;
        }
        if self.replica.initialized {
            assert_eq!(
                seen_map(&self.replica.map),
                seen_map(&self.h.m.snapshot()),
                "events replayed on the snapshot differ from the cache"
            );
        }
    }

    /// The cache as it was when event `i` (an Initialized) was emitted: the current
    /// cache with every later event undone.
    fn snapshot_at(&self, i: usize) -> CacheMap {
        let mut map = self.h.m.snapshot();
        for e in self.h.events[i + 1..].iter().rev() {
            match e {
                CacheEvent::Created { path, .. } => {
                    map.remove(path);
                }
                CacheEvent::Changed { path, old, .. } | CacheEvent::Deleted { path, old } => {
                    map.insert(path.clone(), old.clone());
                }
                CacheEvent::Initialized { .. } | CacheEvent::Stale | CacheEvent::Synced => {}
            }
        }
        map
    }

    fn fresh_read(&self) -> CacheMap {
        let depth = self.h.m.cfg.max_depth;
        let m = &self.h.m;
        self.h
            .server
            .with(|t| t.subtree(ROOT))
            .into_iter()
            .filter(|(p, _)| match (m.depth(p), depth) {
                (Some(d), Some(max)) => d <= max,
                (Some(_), None) => true,
                (None, _) => false,
            })
            .map(|(p, (data, stat))| (p, CachedNode { data, stat }))
            .collect()
    }

    fn assert_equals_server(&self, ctx: &str) {
        let cache = self.h.m.snapshot();
        let server = self.fresh_read();
        assert_eq!(
            cache.keys().collect::<Vec<_>>(),
            server.keys().collect::<Vec<_>>(),
            "{ctx}: paths differ"
        );
        for (p, n) in &cache {
            let s = &server[p];
            assert_eq!(n.data, s.data, "{ctx}: data of {p}");
            assert_eq!(n.stat.mzxid, s.stat.mzxid, "{ctx}: mzxid of {p}");
            assert_eq!(n.stat.czxid, s.stat.czxid, "{ctx}: czxid of {p}");
        }
    }

    fn put(&self, path: &str, data: &'static [u8]) {
        self.h.server.with(|t| t.put(path, data)).expect("put");
    }

    fn set(&self, path: &str, data: &'static [u8]) {
        self.h
            .server
            .with(|t| t.set_data(path, Bytes::from_static(data), -1))
            .expect("set");
    }

    fn del(&self, path: &str) {
        self.h.server.with(|t| t.delete(path)).expect("delete");
    }

    fn new_events(&self, from: usize) -> Vec<CacheEvent> {
        self.h.events[from..].to_vec()
    }
}

fn tree(t: &T) {
    t.put(ROOT, b"root");
    t.put("/cfg/a", b"a1");
    t.put("/cfg/b", b"b1");
    t.put("/cfg/b/x", b"x1");
}

fn names(events: &[CacheEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            CacheEvent::Initialized { nodes } => format!("init {nodes}"),
            CacheEvent::Created { path, node } => {
                format!("+{path}={}", String::from_utf8_lossy(&node.data))
            }
            CacheEvent::Changed { path, new, .. } => {
                format!("~{path}={}", String::from_utf8_lossy(&new.data))
            }
            CacheEvent::Deleted { path, .. } => format!("-{path}"),
            CacheEvent::Stale => "stale".into(),
            CacheEvent::Synced => "synced".into(),
        })
        .collect()
}

#[test]
fn initial_load_is_one_snapshot_event_then_the_cache_equals_the_subtree() {
    let mut t = T::new(CacheConfig::new(ROOT));
    tree(&t);
    t.put("/other", b"not cached");
    t.h.start();
    t.run(100);
    assert_eq!(names(&t.h.events), vec!["init 4"]);
    assert!(t.h.m.is_synced());
    t.assert_equals_server("after load");
}

#[test]
fn changes_are_reported_in_order_each_once() {
    let mut t = T::new(CacheConfig::new(ROOT));
    tree(&t);
    t.h.start();
    t.run(100);
    let from = t.h.events.len();
    t.put("/cfg/c", b"c1");
    t.run(100);
    t.set("/cfg/a", b"a2");
    t.run(100);
    t.del("/cfg/b/x");
    t.run(100);
    assert_eq!(
        names(&t.new_events(from)),
        vec!["+/cfg/c=c1", "~/cfg/a=a2", "-/cfg/b/x"]
    );
    t.assert_equals_server("after changes");
}

#[test]
fn a_node_created_and_changed_before_its_read_is_reported_once_with_its_final_state() {
    let mut t = T::new(CacheConfig::new(ROOT));
    tree(&t);
    t.h.start();
    t.run(100);
    let from = t.h.events.len();
    // Both events arrive before either read is answered.
    t.put("/cfg/c", b"c1");
    t.set("/cfg/c", b"c2");
    t.set("/cfg/a", b"a2");
    t.run(100);
    assert_eq!(names(&t.new_events(from)), vec!["+/cfg/c=c2", "~/cfg/a=a2"]);
}

#[test]
fn a_node_deleted_and_recreated_is_reported_as_both() {
    let mut t = T::new(CacheConfig::new(ROOT));
    tree(&t);
    t.h.start();
    t.run(100);
    let from = t.h.events.len();
    t.del("/cfg/a");
    t.put("/cfg/a", b"a-again");
    t.run(100);
    assert_eq!(
        names(&t.new_events(from)),
        vec!["-/cfg/a", "+/cfg/a=a-again"]
    );
}

fn disconnected_changes(t: &T) {
    t.put("/cfg/c", b"c1"); // created
    t.set("/cfg/a", b"a2"); // changed
    t.del("/cfg/b/x"); // deleted
    t.del("/cfg/b"); // deleted
    t.put("/cfg/b", b"b-new"); // re-created
}

#[test]
fn reconnect_on_the_same_session_emits_exactly_the_missed_differences() {
    let mut t = T::new(CacheConfig::new(ROOT));
    tree(&t);
    t.h.start();
    t.run(100);
    let from = t.h.events.len();
    t.h.suspend();
    t.h.drop_pending();
    disconnected_changes(&t);
    t.h.reconnect_same();
    t.run(200);
    let mut got = names(&t.new_events(from));
    assert_eq!(got.remove(0), "stale");
    assert_eq!(got.pop().as_deref(), Some("synced"));
    got.sort();
    assert_eq!(
        got,
        vec![
            "+/cfg/b=b-new",
            "+/cfg/c=c1",
            "-/cfg/b",
            "-/cfg/b/x",
            "~/cfg/a=a2"
        ]
    );
    t.assert_equals_server("after resync");
}

#[test]
fn session_loss_adds_the_watch_again_and_emits_exactly_the_differences() {
    let mut t = T::new(CacheConfig::new(ROOT));
    tree(&t);
    t.h.start();
    t.run(100);
    let from = t.h.events.len();
    t.h.drop_pending();
    t.h.conn = None;
    disconnected_changes(&t);
    t.h.lose(true);
    t.run(200);
    let got = names(&t.new_events(from));
    assert_eq!(got.first().map(String::as_str), Some("stale"));
    assert_eq!(got.last().map(String::as_str), Some("synced"));
    assert_eq!(got.len(), 7, "{got:?}");
    t.assert_equals_server("after session loss");
    // The new session's watch works.
    let from = t.h.events.len();
    t.set("/cfg/c", b"c2");
    t.run(50);
    assert_eq!(names(&t.new_events(from)), vec!["~/cfg/c=c2"]);
}

#[test]
fn nothing_changed_while_disconnected_means_no_event_but_synced() {
    let mut t = T::new(CacheConfig::new(ROOT));
    tree(&t);
    t.h.start();
    t.run(100);
    let from = t.h.events.len();
    t.h.suspend();
    t.h.reconnect_same();
    t.run(100);
    assert_eq!(names(&t.new_events(from)), vec!["stale", "synced"]);
}

#[test]
fn a_watch_stream_that_ends_while_connected_triggers_a_resync() {
    let mut t = T::new(CacheConfig::new(ROOT));
    tree(&t);
    t.h.start();
    t.run(100);
    let from = t.h.events.len();
    // The server-side watch is gone (as when the reader lagged); the change is missed.
    t.h.server.with(|tr| tr.drop_recursive_watches());
    t.set("/cfg/a", b"a2");
    t.run(100);
    assert_eq!(
        names(&t.new_events(from)),
        vec!["stale", "~/cfg/a=a2", "synced"]
    );
}

#[test]
fn without_add_watch_the_cache_falls_back_to_one_shot_watches() {
    let mut t = T::new(CacheConfig::new(ROOT));
    t.h.server.with(|tr| tr.no_add_watch = true);
    tree(&t);
    t.h.start();
    t.run(100);
    assert!(t.h.m.uses_one_shot_watches());
    assert_eq!(names(&t.h.events), vec!["init 4"]);
    let from = t.h.events.len();
    t.put("/cfg/b/y", b"y1");
    t.run(100);
    t.set("/cfg/b/y", b"y2");
    t.run(100);
    t.del("/cfg/a");
    t.run(100);
    assert_eq!(
        names(&t.new_events(from)),
        vec!["+/cfg/b/y=y1", "~/cfg/b/y=y2", "-/cfg/a"]
    );
    t.assert_equals_server("one-shot");
}

#[test]
fn a_missing_root_is_cached_once_it_appears_with_either_strategy() {
    for strategy in [WatchStrategy::Persistent, WatchStrategy::OneShot] {
        let mut t = T::new(CacheConfig::new(ROOT).strategy(strategy));
        t.h.start();
        t.run(50);
        assert_eq!(names(&t.h.events), vec!["init 0"], "{strategy:?}");
        t.put(ROOT, b"r");
        t.run(50);
        t.put("/cfg/a", b"a1");
        t.run(50);
        assert_eq!(
            names(&t.h.events[1..]),
            vec!["+/cfg=r", "+/cfg/a=a1"],
            "{strategy:?}"
        );
    }
}

#[test]
fn depth_limits_make_node_and_children_views() {
    let mut t = T::new(CacheConfig::new(ROOT).max_depth(1));
    tree(&t);
    t.h.start();
    t.run(100);
    assert_eq!(
        names(&t.h.events),
        vec!["init 3"],
        "grandchildren are not cached"
    );
    let from = t.h.events.len();
    t.put("/cfg/b/y", b"ignored");
    t.put("/cfg/d", b"d1");
    t.run(100);
    assert_eq!(names(&t.new_events(from)), vec!["+/cfg/d=d1"]);
    t.assert_equals_server("depth 1");
}

#[test]
fn a_failed_read_retries_the_load_with_backoff() {
    let mut t = T::new(CacheConfig::new(ROOT));
    tree(&t);
    t.h.start();
    // The first read fails (a transient server error); the load is retried.
    t.h.lose_reply_if = Some(Box::new(|c| matches!(c, Call::GetData { .. })));
    t.run(100);
    assert!(t.h.m.is_synced());
    assert_eq!(names(&t.h.events), vec!["init 4"]);
}

#[derive(Debug, Clone, Copy)]
enum Poke {
    None,
    Suspend,
    ReadOnly,
    /// A second CONNECTED/RECONNECTED on the same session without a suspension.
    Reconnected,
    Lose,
    LocalLose,
    StaleInputs,
    LostReply,
    StreamLost,
}

const POKES: [Poke; 9] = [
    Poke::None,
    Poke::Suspend,
    Poke::ReadOnly,
    Poke::Reconnected,
    Poke::Lose,
    Poke::LocalLose,
    Poke::StaleInputs,
    Poke::LostReply,
    Poke::StreamLost,
];

/// One random write to the subtree (seeded).
fn random_write(t: &T, rng: &mut ChaCha8Rng) {
    let paths = [
        "/cfg/a", "/cfg/b", "/cfg/b/x", "/cfg/b/y", "/cfg/c", "/cfg/c/z",
    ];
    let p = paths[rng.random_range(0..paths.len())];
    let data: &'static [u8] = [b"1".as_slice(), b"2", b"3"][rng.random_range(0..3)];
    t.h.server.with(|tr| {
        if tr.exists(p) {
            if rng.random_bool(0.5) {
                let _ = tr.set_data(p, Bytes::from_static(data), -1);
            } else {
                let _ = tr.delete(p);
            }
        } else {
            let _ = tr.put(p, data);
        }
    });
}

#[test]
fn seeded_random_histories_with_a_disturbance_at_every_step_keep_the_cache_exact() {
    for strategy in [WatchStrategy::Persistent, WatchStrategy::OneShot] {
        for seed in 0..12u64 {
            for poke in POKES {
                for at in [0usize, 1, 3, 7] {
                    let ctx = format!("{strategy:?} seed={seed} poke={poke:?} at={at}");
                    let mut rng = ChaCha8Rng::seed_from_u64(seed);
                    let mut t = T::new(CacheConfig::new(ROOT).strategy(strategy));
                    if seed % 2 == 1 {
                        // Calls answered out of issue order: only the stale-read rule
                        // keeps the events in zxid order then.
                        t.h.shuffle = Some(ChaCha8Rng::seed_from_u64(seed ^ 0xfeed));
                    }
                    tree(&t);
                    t.h.start();
                    for round in 0..12 {
                        for _ in 0..rng.random_range(0..4) {
                            random_write(&t, &mut rng);
                        }
                        t.run(rng.random_range(0..6));
                        if round == at {
                            match poke {
                                Poke::None => {}
                                Poke::Suspend => {
                                    t.h.suspend();
                                    t.h.drop_pending();
                                    random_write(&t, &mut rng);
                                    t.h.reconnect_same();
                                }
                                Poke::ReadOnly => {
                                    t.h.conn = None;
                                    t.h.feed(Input::Conn(ConnectionState::ReadOnly {
                                        session: t.h.session,
                                    }));
                                    t.h.drop_pending();
                                    random_write(&t, &mut rng);
                                    t.h.reconnect_same();
                                }
                                Poke::Reconnected => {
                                    t.h.feed(Input::Conn(ConnectionState::Reconnected {
                                        session: t.h.session,
                                    }));
                                }
                                Poke::Lose | Poke::LocalLose => {
                                    t.h.drop_pending();
                                    t.h.conn = None;
                                    random_write(&t, &mut rng);
                                    t.h.lose(matches!(poke, Poke::Lose));
                                }
                                Poke::StaleInputs => {
                                    t.h.feed(Input::Done {
                                        id: OpId(0),
                                        reply: Reply::Data(Ok((Bytes::new(), Stat::default()))),
                                    });
                                    t.h.feed(Input::Fired { id: OpId(0) });
                                    t.h.feed(Input::Timer { id: OpId(0) });
                                    t.h.feed(Input::StreamEnded { id: OpId(0) });
                                }
                                Poke::LostReply => {
                                    t.h.lose_reply_if = Some(Box::new(|_| true));
                                }
                                Poke::StreamLost => {
                                    if strategy == WatchStrategy::Persistent {
                                        t.h.server.with(|tr| tr.drop_recursive_watches());
                                    }
                                }
                            }
                        }
                        t.check_events();
                    }
                    // Quiet: everything settles and the cache equals a fresh read.
                    t.run(2_000);
                    assert!(t.h.m.is_synced(), "{ctx}: not synced: {:?}", t.h.m);
                    t.assert_equals_server(&ctx);
                }
            }
        }
    }
}

#[test]
fn close_at_every_step_ends_at_once_and_reports_nothing_more() {
    for k in 0..12 {
        let mut t = T::new(CacheConfig::new(ROOT));
        tree(&t);
        t.h.start();
        t.run(k);
        t.h.feed(Input::Close);
        assert!(t.h.ended, "k={k}: not ended");
        let after = t.h.events.len();
        t.set("/cfg/a", b"after close");
        t.run(50);
        t.h.feed(Input::Conn(ConnectionState::Suspended));
        t.h.feed(Input::Conn(ConnectionState::Reconnected {
            session: t.h.session,
        }));
        t.run(50);
        assert_eq!(t.h.events.len(), after, "k={k}: events after close");
        let out = t.h.m.step(
            1_000_000,
            Input::Conn(ConnectionState::Reconnected {
                session: t.h.session,
            }),
        );
        assert!(out.is_empty(), "k={k}: outputs after close: {out:?}");
    }
}

#[test]
fn a_read_overtaken_by_a_later_event_is_not_applied_so_events_never_go_backwards() {
    // Three changes of /cfg/a; the reads they cause are answered out of order (as a
    // server with parallel read workers, or a reordering driver, may): R1 sees v3, R2
    // sees v2, R3 sees v3. Applying R1 and R2 would report v3 then v2: backwards.
    let mut t = T::new(CacheConfig::new(ROOT));
    tree(&t);
    t.h.start();
    t.run(100);
    let stream = t.h.m.stream.expect("watching");
    let from = t.h.events.len();
    let mut reads = Vec::new();
    for _ in 0..3 {
        t.h.feed(Input::Event {
            id: stream,
            event: WatchEvent {
                kind: EventKind::NodeDataChanged,
                path: "/cfg/a".into(),
            },
        });
        match t.h.pending.pop_back() {
            Some(Output::Call { id, .. }) => reads.push(id),
            other => panic!("expected a read, got {other:?}"),
        }
    }
    let v = |data: &'static [u8], mzxid: u64| {
        let stat = Stat {
            czxid: t.h.m.snapshot()["/cfg/a"].stat.czxid,
            mzxid: Zxid::from_u64(mzxid),
            version: mzxid as i32,
            ..Stat::default()
        };
        Reply::Data(Ok((Bytes::from_static(data), stat)))
    };
    let (r2, r1, r3) = (v(b"v2", 100), v(b"v3", 101), v(b"v3", 101));
    t.h.feed(Input::Done {
        id: reads[1],
        reply: r2,
    });
    t.h.feed(Input::Done {
        id: reads[0],
        reply: r1,
    });
    t.h.feed(Input::Done {
        id: reads[2],
        reply: r3,
    });
    t.check_events();
    assert_eq!(names(&t.new_events(from)), vec!["~/cfg/a=v3"]);
}

#[tokio::test(start_paused = true)]
async fn the_driver_keeps_a_cache_over_a_client_across_a_suspension() {
    let _trap = rzk_testkit::PanicTrap::new();
    let server = FakeServer::default();
    server.with(|t| {
        t.put(ROOT, b"root").expect("root");
        t.put("/cfg/a", b"a1").expect("a");
    });
    let client = server.client();
    client.publish(&[ConnectionState::Connected {
        session: client.last_session(),
    }]);
    let mut cache = TreeCache::start(client.clone(), CacheConfig::new(ROOT));
    assert_eq!(
        cache.next_event().await,
        Some(CacheEvent::Initialized { nodes: 2 })
    );
    assert_eq!(
        cache.get("/cfg/a").map(|n| n.data),
        Some(Bytes::from_static(b"a1"))
    );
    server.with(|t| t.put("/cfg/b", b"b1")).expect("b");
    match cache.next_event().await {
        Some(CacheEvent::Created { path, .. }) => assert_eq!(path, "/cfg/b"),
        other => panic!("{other:?}"),
    }
    client.suspend();
    assert_eq!(cache.next_event().await, Some(CacheEvent::Stale));
    assert!(!cache.is_synced());
    server
        .with(|t| t.set_data("/cfg/a", Bytes::from_static(b"a2"), -1))
        .expect("set");
    client.resume(client.last_session());
    match cache.next_event().await {
        Some(CacheEvent::Changed { path, new, .. }) => {
            assert_eq!(path, "/cfg/a");
            assert_eq!(new.data, Bytes::from_static(b"a2"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(cache.next_event().await, Some(CacheEvent::Synced));
    cache.wait_synced().await.expect("synced");
    assert_eq!(
        cache.children(ROOT).keys().cloned().collect::<Vec<_>>(),
        vec!["a", "b"]
    );
    cache.close().await;
}

#[tokio::test(start_paused = true)]
async fn node_and_children_views_follow_their_node_only() {
    let _trap = rzk_testkit::PanicTrap::new();
    let server = FakeServer::default();
    server.with(|t| {
        t.put(ROOT, b"root").expect("root");
        t.put("/cfg/a", b"a1").expect("a");
        t.put("/cfg/a/deep", b"d").expect("deep");
    });
    let client = server.client();
    client.publish(&[ConnectionState::Connected {
        session: client.last_session(),
    }]);
    let mut node = NodeCache::start(client.clone(), "/cfg/a");
    let mut kids = ChildrenCache::start(client.clone(), ROOT);
    node.cache().wait_synced().await.expect("node synced");
    kids.cache().wait_synced().await.expect("children synced");
    assert_eq!(node.get().map(|n| n.data), Some(Bytes::from_static(b"a1")));
    assert_eq!(
        kids.children().keys().cloned().collect::<Vec<_>>(),
        vec!["a"]
    );
    assert!(kids.cache().get("/cfg/a/deep").is_none(), "depth 1 only");
    assert_eq!(node.cache().len(), 1, "depth 0 only");
    server
        .with(|t| t.set_data("/cfg/a", Bytes::from_static(b"a2"), -1))
        .expect("set");
    server.with(|t| t.put("/cfg/b", b"b1")).expect("b");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while node.get().map(|n| n.data) != Some(Bytes::from_static(b"a2"))
        || kids.children().len() != 2
    {
        assert!(tokio::time::Instant::now() < deadline, "views not updated");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    server.with(|t| t.delete("/cfg/a/deep")).expect("deep");
    server.with(|t| t.delete("/cfg/a")).expect("a");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while node.get().is_some() || kids.children().len() != 1 {
        assert!(tokio::time::Instant::now() < deadline, "deletion not seen");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    node.cache().close().await;
    kids.cache().close().await;
}
