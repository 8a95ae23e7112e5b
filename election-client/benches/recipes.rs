//! Criterion benches of the sans-IO cores: one full candidacy from start to a fenced
//! grant, and dispatching a notification through the watch table.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use rzk_election_client::client::watches::{EventKind, OneShotKind, PersistentMode, WatchRegistry};
use rzk_election_client::recipe::candidacy::{
    Candidacy, CandidacyConfig, Input, Op, OpResult, Output,
};
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
                let Output::Op { id, op } = o else {
                    if matches!(o, Output::Granted(_)) {
                        granted = true;
                    }
                    continue;
                };
                let result = match op {
                    Op::CreateCandidate { name, .. } => {
                        OpResult::Created(Ok(format!("/e/{name}0000000000")))
                    }
                    Op::ListChildren { .. } => OpResult::Children(Ok(vec![m
                        .node_path()
                        .unwrap_or_default()[3..]
                        .to_owned()])),
                    Op::Read { path } if path == "/e-epoch" => {
                        OpResult::Read(Ok((Bytes::from_static(b"41"), Stat::default())))
                    }
                    Op::Read { .. } => OpResult::Read(Ok((
                        Bytes::new(),
                        Stat {
                            ephemeral_owner: s,
                            ..Stat::default()
                        },
                    ))),
                    Op::BumpEpoch { .. } => OpResult::Bumped(Ok(Stat::default())),
                    Op::Watch { .. } | Op::CreateEpoch { .. } | Op::Delete { .. } => continue,
                };
                pending.extend(m.step(0, Input::Done { id, result }));
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
