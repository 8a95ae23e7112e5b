//! Criterion benches of the sans-IO cores: one full candidacy from start to a fenced
//! grant, and dispatching a notification through the watch table.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use rzk_election_client::client::watches::{EventKind, OneShotKind, PersistentMode, WatchRegistry};
use rzk_election_client::client::OpResult as MultiResult;
use rzk_election_client::recipe::candidacy::{
    Candidacy, CandidacyConfig, Input, Output, RecipeEvent,
};
use rzk_election_client::recipe::engine::{Call, Machine, Reply};
use rzk_election_client::{ConnectionState, SessionId, Stat};

fn grant_cycle(c: &mut Criterion) {
    c.bench_function("candidacy start to fenced grant", |b| {
        b.iter(|| {
            let mut cfg = CandidacyConfig::new("/e", "latch-", 7);
            cfg.epoch_path = Some("/e-epoch".into());
            let mut m = Candidacy::new(cfg);
            let s = SessionId(1);
            m.step(0, Input::Start);
            let mut pending = m.step(0, Input::Conn(ConnectionState::Connected { session: s }));
            let mut granted = false;
            while let Some(o) = pending.pop() {
                let Output::Call { id, call } = o else {
                    if matches!(o, Output::Emit(RecipeEvent::Granted(_))) {
                        granted = true;
                    }
                    continue;
                };
                let reply = match call {
                    Call::Create { path, .. } => {
                        Reply::Created(Ok((format!("{path}0000000000"), Stat::default())))
                    }
                    Call::Children { .. } => {
                        Reply::Children(Ok(vec![m.node_path().unwrap_or_default()[3..].to_owned()]))
                    }
                    Call::GetData { path, watch: false } if path == "/e-epoch" => {
                        Reply::Data(Ok((Bytes::from_static(b"41"), Stat::default())))
                    }
                    Call::GetData { watch: false, .. } => Reply::Data(Ok((
                        Bytes::new(),
                        Stat {
                            ephemeral_owner: s,
                            ..Stat::default()
                        },
                    ))),
                    Call::Multi { .. } => Reply::Multi(Ok(vec![
                        MultiResult::Checked,
                        MultiResult::SetData(Stat::default()),
                    ])),
                    // The own-node watch once granted; nothing else is asked for.
                    Call::GetData { watch: true, .. }
                    | Call::Exists { .. }
                    | Call::SetData { .. }
                    | Call::Delete { .. }
                    | Call::AddWatch { .. }
                    | Call::Sync { .. } => continue,
                };
                pending.extend(m.step(0, Input::Done { id, reply }));
            }
            assert!(granted);
        })
    });
}

fn watch_dispatch(c: &mut Criterion) {
    c.bench_function("watch table dispatch, 1000 paths, recursive on root", |b| {
        let mut w = WatchRegistry::default();
        let mut rx: Vec<_> = (0..1000)
            .map(|i| w.add_persistent(PersistentMode::Persistent, &format!("/a/n{i}")))
            .collect();
        let mut rec = w.add_persistent(PersistentMode::Recursive, "/");
        b.iter(|| {
            let _once = w.add_one_shot(OneShotKind::Data, "/a/n500");
            w.dispatch(EventKind::NodeDataChanged, "/a/n500", "/a/n500");
            while rec.try_recv().is_ok() {}
            while rx[500].try_recv().is_ok() {}
        })
    });
}

criterion_group!(benches, grant_cycle, watch_dispatch);
criterion_main!(benches);
