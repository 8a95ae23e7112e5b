//! What the layouts write (processes are exercised in `tests/processes.rs`).

use super::*;

fn cfg_of(e: &Ensemble, i: usize) -> String {
    std::fs::read_to_string(&e.members[i].cfg).unwrap()
}

fn line<'a>(cfg: &'a str, key: &str) -> Option<&'a str> {
    cfg.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

#[test]
fn every_member_gets_the_same_server_lines_and_its_own_myid() {
    let root = tempfile::tempdir().unwrap();
    let layout = Layout::voters(3)
        .observers(1)
        .tick_ms(200)
        .set("snapCount", 400);
    let e = Ensemble::new(Program::rzk("/bin/rzk"), root.path(), &layout);
    assert_eq!(e.members.len(), 4);
    let lines = |c: &str| -> Vec<String> {
        c.lines()
            .filter(|l| l.starts_with("server."))
            .map(str::to_owned)
            .collect()
    };
    let first = lines(&cfg_of(&e, 0));
    assert_eq!(first.len(), 4);
    for (i, m) in e.members.iter().enumerate() {
        let cfg = cfg_of(&e, i);
        assert_eq!(lines(&cfg), first, "member {}", m.id);
        let myid = std::fs::read_to_string(m.dir.join("data/myid")).unwrap();
        assert_eq!(myid, format!("{}\n", m.id));
        assert_eq!(m.dir, root.path().join(format!("m{}", m.id)));
        assert_eq!(line(&cfg, "tickTime"), Some("200"));
        assert_eq!(line(&cfg, "initLimit"), Some("10"));
        assert_eq!(line(&cfg, "snapCount"), Some("400"));
        assert_eq!(line(&cfg, "4lw.commands.whitelist"), Some("*"));
        assert_eq!(line(&cfg, "admin.enableServer"), Some("false"));
        assert_eq!(
            line(&cfg, "clientPort"),
            Some(m.client.port().to_string().as_str())
        );
        assert_eq!(
            line(&cfg, "dataDir"),
            Some(m.dir.join("data").display().to_string().as_str())
        );
        assert_eq!(
            first[i],
            format!(
                "server.{}=127.0.0.1:{}:{}{};127.0.0.1:{}",
                m.id,
                m.quorum.port(),
                m.election.port(),
                if m.role == Role::Observer {
                    ":observer"
                } else {
                    ""
                },
                m.client.port()
            )
        );
        assert_eq!(
            cfg.contains("peerType=observer\n"),
            m.role == Role::Observer
        );
        assert_eq!(e.members[i].launch.args, vec![m.cfg.display().to_string()]);
    }
    assert_eq!(e.observers(), vec![3]);
    let ports: std::collections::HashSet<u16> = e
        .members
        .iter()
        .flat_map(|m| [m.client.port(), m.quorum.port(), m.election.port()])
        .collect();
    assert_eq!(ports.len(), 12, "every port its own");
}

#[test]
fn a_standalone_server_has_no_server_lines_no_myid_and_lives_in_the_root() {
    let root = tempfile::tempdir().unwrap();
    let e = Ensemble::new(Program::rzk("/bin/rzk"), root.path(), &Layout::standalone());
    assert_eq!(e.members.len(), 1);
    let m = &e.members[0];
    assert_eq!(m.dir, root.path());
    let cfg = cfg_of(&e, 0);
    assert!(!cfg.contains("server."), "{cfg}");
    assert!(!cfg.contains("initLimit"), "{cfg}");
    assert!(!root.path().join("data/myid").exists());
    assert_eq!(e.connect_string(), m.client.to_string());
}

#[test]
fn caller_keys_win_over_caller_defaults_and_those_over_the_librarys() {
    let root = tempfile::tempdir().unwrap();
    let layout = Layout::voters(3)
        .set("tickTime", 500)
        .set_default("tickTime", 200)
        .set_default("minSessionTimeout", 400)
        .set_default("admin.enableServer", "true")
        .set_for(2, "snapCount", 7)
        .set("clientPortAddress", "0.0.0.0");
    let e = Ensemble::new(Program::rzk("/bin/rzk"), root.path(), &layout);
    let (c1, c2) = (cfg_of(&e, 0), cfg_of(&e, 1));
    assert_eq!(line(&c1, "tickTime"), Some("500"));
    assert_eq!(line(&c1, "minSessionTimeout"), Some("400"));
    assert_eq!(line(&c1, "admin.enableServer"), Some("true"));
    assert_eq!(line(&c1, "snapCount"), None);
    assert_eq!(line(&c2, "snapCount"), Some("7"));
    assert_eq!(
        line(&c1, "clientPortAddress"),
        Some("0.0.0.0"),
        "a key set wins"
    );
    for c in [&c1, &c2] {
        assert_eq!(c.matches("tickTime=").count(), 1, "one line per key: {c}");
    }
}

#[test]
fn observer_master_admin_and_metrics_ports_are_each_members_own() {
    let root = tempfile::tempdir().unwrap();
    let layout = Layout::voters(3)
        .observers(1)
        .observer_master(ObserverMaster::PerVoter)
        .admin(true)
        .metrics(true)
        .data_log_dir(true);
    let e = Ensemble::new(Program::rzk("/bin/rzk"), root.path(), &layout);
    for (i, m) in e.members.iter().enumerate() {
        let cfg = cfg_of(&e, i);
        for v in &e.members[..3] {
            let om = v.observer_master.unwrap();
            assert_eq!(
                line(&cfg, &format!("observerMasterPort.{}", v.id)),
                Some(om.port().to_string().as_str())
            );
        }
        assert_eq!(m.observer_master.is_some(), m.role == Role::Voter);
        let admin = m.admin.unwrap();
        assert_eq!(line(&cfg, "admin.enableServer"), Some("true"));
        assert_eq!(
            line(&cfg, "admin.serverPort"),
            Some(admin.port().to_string().as_str())
        );
        let metrics = m.metrics.unwrap();
        assert_eq!(
            line(&cfg, "metricsProvider.httpPort"),
            Some(metrics.port().to_string().as_str())
        );
        assert_eq!(
            line(&cfg, "dataLogDir"),
            Some(m.dir.join("datalog").display().to_string().as_str())
        );
    }
}

#[test]
fn a_shared_observer_master_port_on_an_address_per_member() {
    let root = tempfile::tempdir().unwrap();
    let layout = Layout::voters(3)
        .observers(2)
        .net([127, 0, 7])
        .observer_master(ObserverMaster::Shared);
    let e = Ensemble::new(Program::zookeeper(), root.path(), &layout);
    let port = e.members[0].observer_master.unwrap().port();
    for (i, m) in e.members.iter().enumerate() {
        assert_eq!(m.client.ip().to_string(), format!("127.0.7.{}", m.id));
        let cfg = cfg_of(&e, i);
        assert_eq!(
            line(&cfg, "observerMasterPort"),
            Some(port.to_string().as_str())
        );
        assert_eq!(
            line(&cfg, "clientPortAddress"),
            Some(format!("127.0.7.{}", m.id).as_str())
        );
        assert!(cfg.contains(&format!(
            "server.1=127.0.7.1:{}:",
            e.members[0].quorum.port()
        )));
        let l = &m.launch;
        assert!(l
            .args
            .contains(&"org.apache.zookeeper.server.quorum.QuorumPeerMain".into()));
        assert!(m.dir.join("conf/log4j.properties").exists());
    }
}

#[test]
fn fixed_ports_count_up_from_member_one() {
    let root = tempfile::tempdir().unwrap();
    let layout = Layout::voters(3).admin(true).fixed_ports(FixedPorts {
        client: 2181,
        quorum: 2888,
        election: 3888,
        admin: 8080,
        metrics: 7000,
        observer_master: 2191,
    });
    let e = Ensemble::new(Program::rzk("/bin/rzk"), root.path(), &layout);
    assert_eq!(
        e.connect_string(),
        "127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183"
    );
    let cfg = cfg_of(&e, 2);
    assert!(
        cfg.contains("server.3=127.0.0.1:2890:3890;127.0.0.1:2183\n"),
        "{cfg}"
    );
    assert_eq!(line(&cfg, "admin.serverPort"), Some("8082"));
}

#[test]
fn lines_without_client_ports_when_asked() {
    let root = tempfile::tempdir().unwrap();
    let layout = Layout::voters(2).client_on_server_lines(false);
    let e = Ensemble::new(Program::rzk("/bin/rzk"), root.path(), &layout);
    let cfg = cfg_of(&e, 0);
    let m = &e.members[1];
    assert!(cfg.contains(&format!(
        "server.2=127.0.0.1:{}:{}\n",
        m.quorum.port(),
        m.election.port()
    )));
}

#[test]
fn settled_means_one_leader_followers_and_observers() {
    let v = |m: Option<&str>| (Role::Voter, true, m.map(str::to_owned));
    let o = |m: Option<&str>| (Role::Observer, true, m.map(str::to_owned));
    let down = (Role::Voter, false, None);
    assert_eq!(
        leader_if_settled(
            &[v(Some("follower")), v(Some("leader")), o(Some("observer"))],
            false
        ),
        Some(1)
    );
    assert_eq!(
        leader_if_settled(&[v(Some("follower")), v(Some("follower"))], false),
        None
    );
    assert_eq!(
        leader_if_settled(&[v(Some("leader")), v(Some("leader"))], false),
        None
    );
    assert_eq!(
        leader_if_settled(&[v(Some("leader")), v(None)], false),
        None
    );
    assert_eq!(
        leader_if_settled(&[down, v(Some("leader"))], false),
        Some(1)
    );
    assert_eq!(
        leader_if_settled(&[v(Some("leader")), o(Some("follower"))], false),
        None
    );
    assert_eq!(leader_if_settled(&[v(Some("standalone"))], true), Some(0));
    assert_eq!(leader_if_settled(&[v(Some("standalone"))], false), None);
}

#[test]
fn the_record_reads_back_as_it_was_written() {
    let root = tempfile::tempdir().unwrap();
    let layout = Layout::voters(3).observers(1).admin(true);
    let e = Ensemble::new(
        Program::rzk("/bin/rzk").env("RUST_LOG", "warn"),
        root.path(),
        &layout,
    );
    e.save_state().unwrap();
    let back = Ensemble::attach(root.path()).unwrap();
    assert_eq!(back.state(), e.state());
    assert_eq!(back.members[3].role, Role::Observer);
    assert_eq!(back.members[0].launch, e.members[0].launch);
}
