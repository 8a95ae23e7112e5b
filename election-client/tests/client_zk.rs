//! The client against a real server (Apache ZooKeeper 3.8, or `RZK_TEST_ZK`).
//! Run with `cargo test -p rzk-election-client -- --ignored`.

mod support;

use std::time::Duration;

use bytes::Bytes;
use rzk_election_client::{
    Acl, Client, ConnectionState, CreateMode, Error, EventKind, Id, Op, OpResult, Perms,
    PersistentMode, ReadOp, ReadResult, WatcherType,
};
use support::*;

const T: u64 = 4000;

async fn next_state(states: &mut rzk_election_client::StateStream) -> ConnectionState {
    tokio::time::timeout(Duration::from_secs(20), states.next())
        .await
        .expect("a state within 20 s")
        .expect("stream open")
        .expect("not lagged")
}

#[tokio::test]
#[ignore = "needs Apache ZooKeeper"]
async fn every_op_round_trips() {
    let _trap = rzk_testkit::PanicTrap::new();
    let zk = Zk::start();
    let c = connect(&zk.addr, T).await;
    let root = unique("ops");
    let t = c.negotiated_timeout().expect("negotiated");
    assert!(t >= Duration::from_millis(1000), "{t:?}");

    assert_eq!(
        c.create(&root, "r", Acl::open_unsafe(), CreateMode::Persistent)
            .await
            .expect("create"),
        root
    );
    let (p2, st) = c
        .create2(
            &format!("{root}/c2"),
            "x",
            Acl::open_unsafe(),
            CreateMode::Persistent,
        )
        .await
        .expect("create2");
    assert_eq!(p2, format!("{root}/c2"));
    assert_eq!(st.data_length, 1);
    let seq = c
        .create(
            &format!("{root}/s-"),
            "",
            Acl::open_unsafe(),
            CreateMode::PersistentSequential,
        )
        .await
        .expect("seq");
    assert!(
        seq.starts_with(&format!("{root}/s-")) && seq.len() == root.len() + 3 + 10,
        "{seq}"
    );
    let eph = c
        .create(
            &format!("{root}/e"),
            "",
            Acl::open_unsafe(),
            CreateMode::Ephemeral,
        )
        .await
        .expect("eph");
    let (cont, _) = c
        .create_container(&format!("{root}/cont"), "")
        .await
        .expect("container");
    assert_eq!(
        c.create(&root, "r", Acl::open_unsafe(), CreateMode::Persistent)
            .await,
        Err(Error::NodeExists { path: root.clone() })
    );
    match c
        .create_ttl(&format!("{root}/ttl"), "", false, Duration::from_secs(60))
        .await
    {
        // TTL nodes are off by default in ZooKeeper 3.8: UNIMPLEMENTED, a typed error.
        Err(Error::Server { code, .. }) => {
            assert_eq!(code, rzk_election_client::ErrorCode::Unimplemented)
        }
        Ok(_) => {}
        Err(e) => panic!("createTTL: {e}"),
    }

    assert_eq!(
        c.exists(&root)
            .await
            .expect("exists")
            .map(|s| s.num_children),
        Some(4)
    );
    assert_eq!(
        c.exists(&format!("{root}/missing")).await.expect("exists"),
        None
    );
    let (data, stat) = c.get_data(&root).await.expect("get");
    assert_eq!(data, Bytes::from_static(b"r"));
    let stat2 = c.set_data(&root, "r2", stat.version).await.expect("set");
    assert_eq!(stat2.version, stat.version + 1);
    assert!(matches!(
        c.set_data(&root, "r3", stat.version).await,
        Err(Error::BadVersion { .. })
    ));
    assert!(matches!(
        c.get_data(&format!("{root}/missing")).await,
        Err(Error::NoNode { .. })
    ));

    let mut kids = c.get_children(&root).await.expect("children");
    kids.sort();
    assert_eq!(kids.len(), 4);
    let (kids2, pstat) = c.get_children2(&root).await.expect("children2");
    assert_eq!(kids2.len() as i32, pstat.num_children);
    assert_eq!(c.get_all_children_number(&root).await.expect("all"), 4);
    assert_eq!(
        c.get_ephemerals(&root).await.expect("ephemerals"),
        vec![eph.clone()]
    );
    assert_eq!(c.sync(&root).await.expect("sync"), root);

    let (acl, _) = c.get_acl(&root).await.expect("acl");
    assert_eq!(acl, Acl::open_unsafe());
    let read_only = vec![Acl {
        perms: Perms::ALL,
        id: Id::anyone(),
    }];
    c.set_acl(&format!("{root}/c2"), read_only, -1)
        .await
        .expect("setAcl");

    let results = c
        .multi(vec![
            Op::Create {
                path: format!("{root}/m"),
                data: Bytes::new(),
                mode: CreateMode::Persistent,
            },
            Op::SetData {
                path: root.clone(),
                data: Bytes::from_static(b"m"),
                version: -1,
            },
            Op::Check {
                path: root.clone(),
                version: stat2.version + 1,
            },
            Op::Delete {
                path: format!("{root}/m"),
                version: -1,
            },
        ])
        .await
        .expect("multi");
    assert_eq!(results[0], OpResult::Created(format!("{root}/m")));
    assert!(matches!(results[1], OpResult::SetData(_)));
    assert_eq!(results[2..], [OpResult::Checked, OpResult::Deleted]);
    let failed = c
        .multi(vec![
            Op::Create {
                path: format!("{root}/never"),
                data: Bytes::new(),
                mode: CreateMode::Persistent,
            },
            Op::Check {
                path: root.clone(),
                version: 9999,
            },
        ])
        .await;
    match failed {
        Err(Error::MultiFailed { index: 1, source }) => {
            assert!(matches!(*source, Error::BadVersion { .. }))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        c.exists(&format!("{root}/never")).await.expect("exists"),
        None,
        "multi is all or nothing"
    );

    let reads = c
        .multi_read(vec![
            ReadOp::GetData(root.clone()),
            ReadOp::GetChildren(cont.clone()),
            ReadOp::GetData(format!("{root}/missing")),
        ])
        .await
        .expect("multiRead");
    assert!(matches!(&reads[0], ReadResult::Data(d, _) if d == &Bytes::from_static(b"m")));
    assert_eq!(reads[1], ReadResult::Children(vec![]));
    assert!(matches!(&reads[2], ReadResult::Error(Error::NoNode { .. })));

    let who = c.who_am_i().await.expect("whoami");
    assert!(who.iter().any(|i| &*i.auth_scheme == "ip"), "{who:?}");
    assert!(matches!(
        c.reconfig(None, None, None, -1).await,
        Err(Error::Server { .. })
    ));
    assert!(matches!(
        c.check_watches(&root, WatcherType::Any).await,
        Err(Error::Server { .. })
    ));
    let (_, _, _w) = c.get_data_watch(&root).await.expect("watch");
    c.check_watches(&root, WatcherType::Data)
        .await
        .expect("watch registered");
    c.remove_watches(&root, WatcherType::Data)
        .await
        .expect("removeWatches");

    c.delete(&seq, 0).await.expect("delete");
    assert!(matches!(
        c.delete(&root, -1).await,
        Err(Error::NotEmpty { .. })
    ));
    assert!(matches!(
        c.delete(&format!("{root}/x/y"), -1).await,
        Err(Error::NoNode { .. })
    ));
    assert!(matches!(
        c.get_data("no-slash").await,
        Err(Error::InvalidPath { .. })
    ));
    c.close().await;
    c.close().await;
    assert_eq!(c.get_data(&root).await.map(|_| ()), Err(Error::Closed));

    let c2 = connect(&zk.addr, T).await;
    synced(&c2).await;
    assert_eq!(
        c2.exists(&eph).await.expect("exists"),
        None,
        "closing the session deleted its ephemeral"
    );
    c2.close().await;
}

#[tokio::test]
#[ignore = "needs Apache ZooKeeper"]
async fn one_shot_persistent_and_recursive_watches_survive_a_reconnect() {
    let _trap = rzk_testkit::PanicTrap::new();
    let zk = Zk::start();
    let proxy = Proxy::start(&zk.addr).await;
    let c = connect(&proxy.connect_string(), T).await;
    let other = connect(&zk.addr, T).await;
    let root = unique("watch");
    let p = format!("{root}/p");
    c.create(&root, "", Acl::open_unsafe(), CreateMode::Persistent)
        .await
        .expect("root");
    c.create(&p, "", Acl::open_unsafe(), CreateMode::Persistent)
        .await
        .expect("p");

    // ZooKeeper 3.8 keeps one watch mode per path and connection
    // (docs/client-protocol.md, "Persistent and recursive watches"), so the
    // recursive watch gets a path of its own.
    let (_, _, data_w) = c.get_data_watch(&p).await.expect("data watch");
    let (none, exist_w) = c
        .exists_watch(&format!("{p}/later"))
        .await
        .expect("exist watch");
    assert!(none.is_none());
    let (_, child_w) = c.get_children_watch(&p).await.expect("child watch");
    let mut pers = c
        .add_watch(&p, PersistentMode::Persistent)
        .await
        .expect("persistent");
    let mut rec = c
        .add_watch(&root, PersistentMode::Recursive)
        .await
        .expect("recursive");

    // Drop the connection: the session survives, the watches are re-armed with
    // setWatches2 on the new connection.
    let session = c.session_id();
    let (_, mut states) = c.subscribe();
    proxy.set(Mode::Cut);
    assert_eq!(next_state(&mut states).await, ConnectionState::Suspended);
    proxy.set(Mode::Pass);
    assert_eq!(
        next_state(&mut states).await,
        ConnectionState::Reconnected {
            session: session.expect("s")
        }
    );

    other.set_data(&p, "changed", -1).await.expect("set");
    other
        .create(
            &format!("{p}/later"),
            "",
            Acl::open_unsafe(),
            CreateMode::Persistent,
        )
        .await
        .expect("create");
    other
        .create(
            &format!("{p}/later/deep"),
            "",
            Acl::open_unsafe(),
            CreateMode::Persistent,
        )
        .await
        .expect("create");

    let within = Duration::from_secs(10);
    let e = tokio::time::timeout(within, data_w.changed())
        .await
        .expect("in time")
        .expect("event");
    assert_eq!(e.kind, EventKind::NodeDataChanged);
    let e = tokio::time::timeout(within, exist_w.changed())
        .await
        .expect("in time")
        .expect("event");
    assert_eq!(
        (e.kind, e.path),
        (EventKind::NodeCreated, format!("{p}/later"))
    );
    let e = tokio::time::timeout(within, child_w.changed())
        .await
        .expect("in time")
        .expect("event");
    assert_eq!(e.kind, EventKind::NodeChildrenChanged);
    let mut got = Vec::new();
    for _ in 0..2 {
        got.push(
            tokio::time::timeout(within, pers.next())
                .await
                .expect("in time")
                .expect("open")
                .expect("not lagged")
                .kind,
        );
    }
    assert_eq!(
        got,
        vec![EventKind::NodeDataChanged, EventKind::NodeChildrenChanged]
    );
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(
            tokio::time::timeout(within, rec.next())
                .await
                .expect("in time")
                .expect("open")
                .expect("not lagged")
                .path,
        );
    }
    assert_eq!(
        got,
        vec![p.clone(), format!("{p}/later"), format!("{p}/later/deep")]
    );
    c.close().await;
    other.close().await;
}

#[tokio::test]
#[ignore = "needs Apache ZooKeeper"]
async fn chroot_maps_every_path() {
    let _trap = rzk_testkit::PanicTrap::new();
    let zk = Zk::start();
    let base = unique("chroot");
    let plain = connect(&zk.addr, T).await;
    plain
        .create(&base, "", Acl::open_unsafe(), CreateMode::Persistent)
        .await
        .expect("base");
    let c = connect(&format!("{}{base}", zk.addr), T).await;
    assert_eq!(
        c.create("/a", "1", Acl::open_unsafe(), CreateMode::Persistent)
            .await
            .expect("create"),
        "/a"
    );
    let s = c
        .create(
            "/a/s-",
            "",
            Acl::open_unsafe(),
            CreateMode::EphemeralSequential,
        )
        .await
        .expect("seq");
    assert!(s.starts_with("/a/s-"), "{s}");
    assert_eq!(c.get_children("/").await.expect("children"), vec!["a"]);
    assert_eq!(
        c.get_ephemerals("/").await.expect("ephemerals"),
        vec![s.clone()]
    );
    assert_eq!(c.sync("/a").await.expect("sync"), "/a");
    assert_eq!(
        plain
            .get_data(&format!("{base}/a"))
            .await
            .expect("seen from outside")
            .0,
        Bytes::from_static(b"1")
    );
    let (_, _, w) = c.get_data_watch("/a").await.expect("watch");
    plain
        .set_data(&format!("{base}/a"), "2", -1)
        .await
        .expect("set");
    assert_eq!(w.changed().await.expect("event").path, "/a");
    let r = c
        .multi(vec![Op::Create {
            path: "/m".into(),
            data: Bytes::new(),
            mode: CreateMode::Persistent,
        }])
        .await
        .expect("multi");
    assert_eq!(r, vec![OpResult::Created("/m".into())]);
    c.close().await;
    plain.close().await;
}

#[tokio::test]
#[ignore = "needs Apache ZooKeeper"]
async fn digest_auth_is_replayed_after_reconnect() {
    let _trap = rzk_testkit::PanicTrap::new();
    let zk = Zk::start();
    let proxy = Proxy::start(&zk.addr).await;
    let cfg = config(&proxy.connect_string(), T).auth("digest", "alice:secret");
    let c = Client::connect(cfg).await.expect("connect");
    let root = unique("auth");
    let creator_only = vec![Acl {
        perms: Perms::ALL,
        id: Id {
            scheme: "auth".into(),
            id: "".into(),
        },
    }];
    c.create(&root, "secret", creator_only, CreateMode::Persistent)
        .await
        .expect("create with auth ACL");
    let (acl, _) = c.get_acl(&root).await.expect("acl");
    assert_eq!(&*acl[0].id.id, "alice:aYXlLOpEooaV1cRAvUL1fp9Qt7E=");
    let stranger = connect(&zk.addr, T).await;
    assert!(matches!(
        stranger.get_data(&root).await,
        Err(Error::NoAuth { .. })
    ));
    stranger
        .add_auth("digest", "alice:secret")
        .expect("add auth");
    assert_eq!(
        stranger.get_data(&root).await.expect("authorised now").0,
        Bytes::from_static(b"secret")
    );

    // A new connection starts with no identity but ip: the client must send the auth
    // packet again before any request.
    let (_, mut states) = c.subscribe();
    proxy.set(Mode::Cut);
    assert_eq!(next_state(&mut states).await, ConnectionState::Suspended);
    proxy.set(Mode::Pass);
    assert!(matches!(
        next_state(&mut states).await,
        ConnectionState::Reconnected { .. }
    ));
    assert_eq!(
        c.get_data(&root).await.expect("still authorised").0,
        Bytes::from_static(b"secret")
    );
    c.close().await;
    stranger.close().await;
}

#[tokio::test]
#[ignore = "needs Apache ZooKeeper"]
async fn fails_over_across_hosts_and_keeps_the_session() {
    let _trap = rzk_testkit::PanicTrap::new();
    let zk = Zk::start();
    let (a, b) = (Proxy::start(&zk.addr).await, Proxy::start(&zk.addr).await);
    // Reserved and never listened on: every connection to it is refused.
    let dead_port = rzk_testkit::ports::reserve();
    let dead = format!("127.0.0.1:{dead_port}");
    let mut cfg = config(
        &format!("{dead},{},{}", a.connect_string(), b.connect_string()),
        T,
    );
    cfg.shuffle_hosts = false;
    let c = Client::connect(cfg)
        .await
        .expect("connect past a dead host");
    let session = c.session_id().expect("session");
    let (_, mut states) = c.subscribe();
    // Whichever proxy carries the connection goes away; the client moves on.
    a.set(Mode::Cut);
    b.set(Mode::Cut);
    assert_eq!(next_state(&mut states).await, ConnectionState::Suspended);
    b.set(Mode::Pass);
    assert_eq!(
        next_state(&mut states).await,
        ConnectionState::Reconnected { session }
    );
    assert!(c.exists("/").await.expect("works").is_some());
    c.close().await;
}

#[tokio::test]
#[ignore = "needs Apache ZooKeeper"]
async fn session_expiry_is_lost_then_a_new_session() {
    let _trap = rzk_testkit::PanicTrap::new();
    let zk = Zk::start();
    let c = connect(&zk.addr, T).await;
    let old = c.session_id().expect("session");
    let root = unique("expiry");
    let eph = c
        .create(&root, "", Acl::open_unsafe(), CreateMode::Ephemeral)
        .await
        .expect("eph");
    let (_, mut states) = c.subscribe();
    expire_session(&zk.addr, &c).await;
    // Attaching the killer closes our connection; we may resume the session once more
    // before the killer closes it, so SUSPENDED / RECONNECTED(old) may come first.
    assert_eq!(next_state(&mut states).await, ConnectionState::Suspended);
    loop {
        match next_state(&mut states).await {
            ConnectionState::Lost => break,
            ConnectionState::Suspended => {}
            ConnectionState::Reconnected { session } => assert_eq!(session, old),
            other => panic!("unexpected {other:?}"),
        }
    }
    let ConnectionState::Reconnected { session } = next_state(&mut states).await else {
        panic!("expected RECONNECTED")
    };
    assert_ne!(session, old);
    synced(&c).await;
    assert_eq!(c.exists(&eph).await.expect("exists"), None);
    c.close().await;
}

#[tokio::test]
#[ignore = "needs Apache ZooKeeper"]
async fn silent_partition_is_suspended_then_lost_on_the_client_clock() {
    let _trap = rzk_testkit::PanicTrap::new();
    let zk = Zk::start();
    let proxy = Proxy::start(&zk.addr).await;
    let c = connect(&proxy.connect_string(), T).await;
    let t = c.negotiated_timeout().expect("negotiated");
    let (_, mut states) = c.subscribe();
    let start = tokio::time::Instant::now();
    proxy.set(Mode::Blackhole);
    assert_eq!(next_state(&mut states).await, ConnectionState::Suspended);
    let suspended = start.elapsed();
    // SUSPENDED after the read timeout (2/3 T), LOST one session timeout after that.
    assert!(
        suspended >= t * 2 / 3 - Duration::from_millis(100) && suspended < t,
        "{suspended:?}"
    );
    proxy.set(Mode::Cut);
    assert_eq!(next_state(&mut states).await, ConnectionState::Lost);
    let lost = start.elapsed();
    assert!(
        lost >= suspended + t - Duration::from_millis(100),
        "{lost:?}"
    );
    proxy.set(Mode::Pass);
    assert!(matches!(
        next_state(&mut states).await,
        ConnectionState::Reconnected { .. }
    ));
    c.close().await;
}

#[tokio::test]
#[ignore = "needs Apache ZooKeeper"]
async fn outstanding_requests_are_bounded() {
    let _trap = rzk_testkit::PanicTrap::new();
    let zk = Zk::start();
    let mut cfg = config(&zk.addr, T);
    cfg.outstanding_max = 4;
    let c = Client::connect(cfg).await.expect("connect");
    assert_eq!(c.available_request_slots(), 4);
    let root = unique("bounded");
    c.create(&root, "", Acl::open_unsafe(), CreateMode::Persistent)
        .await
        .expect("root");
    let mut tasks = Vec::new();
    for i in 0..200 {
        let c = c.clone();
        let p = format!("{root}/n{i}");
        tasks.push(tokio::spawn(async move {
            c.create(&p, "", Acl::open_unsafe(), CreateMode::Persistent)
                .await
        }));
    }
    let mut min_free = usize::MAX;
    while !tasks.iter().all(|t| t.is_finished()) {
        min_free = min_free.min(c.available_request_slots());
        tokio::task::yield_now().await;
    }
    for t in tasks {
        t.await.expect("join").expect("create");
    }
    assert_eq!(c.get_children(&root).await.expect("children").len(), 200);
    assert_eq!(c.available_request_slots(), 4);
    assert_eq!(min_free, 0, "the limit was reached and waited on");
    c.close().await;
}

#[tokio::test]
#[ignore = "needs Apache ZooKeeper"]
async fn idle_session_stays_connected_on_pings() {
    let _trap = rzk_testkit::PanicTrap::new();
    let zk = Zk::start();
    let c = connect(&zk.addr, 2000).await;
    let (_, mut states) = c.subscribe();
    // Nothing but pings for three session timeouts: no state change may happen.
    let t = c.negotiated_timeout().expect("negotiated");
    let quiet = tokio::time::timeout(3 * t, states.next()).await;
    assert!(quiet.is_err(), "state changed while idle: {quiet:?}");
    assert!(c.exists("/").await.expect("still works").is_some());
    c.close().await;
}

#[tokio::test]
#[ignore = "needs Apache ZooKeeper"]
async fn oversized_request_is_refused_and_the_session_survives() {
    let _trap = rzk_testkit::PanicTrap::new();
    let zk = Zk::start();
    let c = connect(&zk.addr, T).await;
    let session = c.session_id();
    let root = unique("big");
    let big = vec![7u8; 2 * 1024 * 1024];
    match c
        .create(&root, big, Acl::open_unsafe(), CreateMode::Persistent)
        .await
    {
        Err(Error::Transport(why)) => {
            assert!(why.contains("large") || why.contains("1048575"), "{why}")
        }
        other => panic!("expected a clear refusal, got {other:?}"),
    }
    assert_eq!(c.session_id(), session);
    c.create(&root, "small", Acl::open_unsafe(), CreateMode::Persistent)
        .await
        .expect("the connection still works");
    c.close().await;
}

#[tokio::test]
async fn a_client_without_hosts_is_closed_not_a_panic() {
    let _trap = rzk_testkit::PanicTrap::new();
    let mut cfg = rzk_election_client::ClientConfig::new("127.0.0.1:1").expect("valid");
    cfg.hosts.clear();
    let c = Client::start(cfg);
    assert_eq!(c.get_data("/").await.map(|_| ()), Err(Error::Closed));
}
