//! In-memory 3-peer broadcast.
//!
//! - `core/*`: the three sans-IO peers in one thread, messages and storage
//!   completions delivered at once. Time per proposal here is the CPU the whole
//!   ensemble spends per committed proposal (leader + two followers).
//! - `driver/*`: three tokio drivers over the in-memory network (`MemNetwork`,
//!   `MemStorage`), N proposals of 128 B in flight, measured until all commit.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rzk_quorum::core::{Config, Input, Output, Peer, Recovered, Tick};
use rzk_quorum::storage::MemStorage;
use rzk_quorum::transport::MemNetwork;
use rzk_quorum::{DriverConfig, PeerId, Replicator, Role, ZabReplicator};

const IDS: [PeerId; 3] = [PeerId(1), PeerId(2), PeerId(3)];

struct Cluster {
    peers: Vec<Peer>,
    queue: VecDeque<(usize, Input)>,
    now: u64,
}

impl Cluster {
    fn new() -> Cluster {
        let mut c = Cluster {
            peers: Vec::new(),
            queue: VecDeque::new(),
            now: 0,
        };
        for id in IDS {
            let mut cfg = Config::new(id, IDS);
            cfg.finalize_wait_ticks = 0;
            let (p, out) = Peer::new(cfg, Recovered::default(), Tick(0)).unwrap();
            c.peers.push(p);
            c.route((id.0 - 1) as usize, out);
        }
        while !c.peers.iter().any(|p| p.role() == Role::Leader)
            || c.peers.iter().any(|p| p.leader().is_none())
        {
            c.now += 1;
            if c.queue.is_empty() {
                for i in 0..3 {
                    c.queue.push_back((i, Input::Tick));
                }
            }
            c.pump();
        }
        c
    }

    fn route(&mut self, from: usize, out: Vec<Output>) {
        let mut last_op = None;
        for o in out {
            match o {
                Output::Send { to, msg } => self.queue.push_back((
                    (to.0 - 1) as usize,
                    Input::Message {
                        from: IDS[from],
                        msg,
                    },
                )),
                Output::Storage { op, .. } => last_op = Some(op),
                _ => {}
            }
        }
        // Group commit: one completion for everything the step wrote.
        if let Some(op) = last_op {
            self.queue.push_back((from, Input::StorageDone { op }));
        }
    }

    fn pump(&mut self) {
        while let Some((i, input)) = self.queue.pop_front() {
            let out = self.peers[i].step(Tick(self.now), input);
            self.route(i, out);
        }
    }

    fn leader(&self) -> usize {
        self.peers
            .iter()
            .position(|p| p.role() == Role::Leader)
            .unwrap()
    }

    fn propose(&mut self, n: usize, payload: &Bytes) {
        let l = self.leader();
        let before = self.peers[l].commit_known();
        let batch = (0..n as u64).map(|i| (i, payload.clone())).collect();
        let out = self.peers[l].step(Tick(self.now), Input::Propose(batch));
        self.route(l, out);
        self.pump();
        assert!(self.peers[l].commit_known() > before);
    }
}

fn core(c: &mut Criterion) {
    let payload = Bytes::from(vec![7u8; 128]);
    let mut g = c.benchmark_group("quorum/core_3peers");
    for batch in [1usize, 8, 64] {
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_with_input(BenchmarkId::new("commit_batch", batch), &batch, |b, &n| {
            let mut cl = Cluster::new();
            b.iter(|| cl.propose(n, &payload));
        });
    }
    g.finish();
}

fn driver(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let reps: Vec<Arc<ZabReplicator>> = rt.block_on(async {
        let net = MemNetwork::new();
        let mut reps = Vec::new();
        for id in IDS {
            let mut cfg = Config::new(id, IDS);
            cfg.finalize_wait_ticks = 10;
            cfg.notification_interval_ticks_min = 10;
            let (t, inbox) = net.join(id);
            let r = ZabReplicator::start(DriverConfig::new(cfg), MemStorage::new(), t, inbox)
                .await
                .unwrap();
            let mut s = r.take_commits().unwrap();
            tokio::spawn(async move { while s.next().await.is_some() {} });
            reps.push(Arc::new(r));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !reps.iter().any(|r| r.role() == Role::Leader)
            || reps.iter().any(|r| r.leader().is_none())
        {
            assert!(Instant::now() < deadline, "no leader");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        reps
    });
    let leader = reps
        .iter()
        .find(|r| r.role() == Role::Leader)
        .unwrap()
        .clone();
    let payload = Bytes::from(vec![7u8; 128]);
    let mut g = c.benchmark_group("quorum/driver_3peers_mem");
    for inflight in [1usize, 8, 64] {
        g.throughput(Throughput::Elements(inflight as u64));
        g.bench_with_input(
            BenchmarkId::new("inflight", inflight),
            &inflight,
            |b, &n| {
                b.iter(|| {
                    rt.block_on(async {
                        let futs: Vec<_> =
                            (0..n).map(|_| leader.propose(payload.clone())).collect();
                        for f in futs {
                            f.await.unwrap();
                        }
                    })
                });
            },
        );
    }
    g.finish();
    drop(reps);
}

criterion_group!(benches, core, driver);
criterion_main!(benches);
