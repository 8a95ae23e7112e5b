//! One stats view: an owned snapshot of what the server knows about itself,
//! taken by the core on request ([`crate::core::CoreMsg::Stats`]; gathered by
//! `Core::stats`) and formatted
//! by the four-letter words ([`crate::fourlw`]), the AdminServer and the
//! Prometheus exporter. Nothing formats from the core's fields directly, so
//! the three surfaces cannot disagree.
//!
//! The quorum part comes from the commit stream's last role item (whether and
//! as what this member serves) and the replicator's `stats()` (the leader's
//! learners, pending syncs).

use std::path::Path;

use rzk_quorum::Role;
use rzk_zxid::Zxid;

use crate::config::ServerConfig;

/// A latency distribution in milliseconds, since start or the last `srst`:
/// count, sum, min, max and quantiles (hdrhistogram, 2 significant digits).
#[derive(Clone, Debug)]
pub(crate) struct Latency {
    histogram: hdrhistogram::Histogram<u64>,
    sum_ms: u64,
    /// The smallest and largest values recorded, exact (the histogram
    /// rounds them to 2 significant digits); 0 before the first.
    min_ms: u64,
    max_ms: u64,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            // Auto-resizing, so any value can be recorded.
            histogram: hdrhistogram::Histogram::new(2).expect("2 significant digits is valid"),
            sum_ms: 0,
            min_ms: 0,
            max_ms: 0,
        }
    }
}

impl Latency {
    /// Records one latency of `ms` milliseconds.
    pub(crate) fn record_ms(&mut self, ms: u64) {
        self.min_ms = if self.histogram.is_empty() {
            ms
        } else {
            self.min_ms.min(ms)
        };
        self.max_ms = self.max_ms.max(ms);
        self.sum_ms += ms;
        self.histogram.saturating_record(ms);
    }

    pub(crate) fn snapshot(&self) -> LatencySnapshot {
        let h = &self.histogram;
        let q = |x: f64| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(x)
            }
        };
        LatencySnapshot {
            count: h.len(),
            sum_ms: self.sum_ms,
            min_ms: self.min_ms,
            max_ms: self.max_ms,
            p50_ms: q(0.5),
            p90_ms: q(0.9),
            p99_ms: q(0.99),
        }
    }
}

/// A [`Latency`] as reported.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct LatencySnapshot {
    pub count: u64,
    pub sum_ms: u64,
    pub min_ms: u64,
    pub max_ms: u64,
    pub p50_ms: u64,
    pub p90_ms: u64,
    pub p99_ms: u64,
}

/// What this server is now, as ZooKeeper's `server_state` (mntr), `Mode:`
/// (srvr, stat) and the AdminServer report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ServerMode {
    /// No `server.N` lines: a single server, not part of an ensemble.
    Standalone,
    /// The ensemble's leader.
    Leader,
    /// A voting member that follows the leader.
    Follower,
    /// A non-voting member that learns from the leader or a relay.
    Observer,
    /// A member looking for a leader (electing or syncing).
    Looking,
}

impl ServerMode {
    /// Every mode, in the order above.
    #[cfg(test)]
    pub const ALL: [ServerMode; 5] = [
        ServerMode::Standalone,
        ServerMode::Leader,
        ServerMode::Follower,
        ServerMode::Observer,
        ServerMode::Looking,
    ];

    /// ZooKeeper's word for the mode.
    pub const fn as_str(self) -> &'static str {
        match self {
            ServerMode::Standalone => "standalone",
            ServerMode::Leader => "leader",
            ServerMode::Follower => "follower",
            ServerMode::Observer => "observer",
            ServerMode::Looking => "looking",
        }
    }

    /// The mode of a server with this configuration in this replication
    /// role: standalone without `server.N` lines, whatever the role says.
    pub(crate) fn of(cfg: &ServerConfig, role: Role) -> ServerMode {
        if cfg.servers.is_empty() {
            return ServerMode::Standalone;
        }
        match role {
            Role::Leader => ServerMode::Leader,
            Role::Follower => ServerMode::Follower,
            Role::Observer => ServerMode::Observer,
            Role::Looking => ServerMode::Looking,
        }
    }
}

/// The replication side of the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct QuorumView {
    /// What this server is now (ZooKeeper's `server_state`).
    pub mode: ServerMode,
    /// The leader this member knows of.
    pub leader: Option<u64>,
    /// Voting members configured (`server.N` lines that are participants; 1
    /// standalone).
    pub quorum_size: usize,
    /// Whether this member serves clients now (a current leader or follower).
    pub serving: bool,
    /// Leader only: learner sessions, voting followers, followers synced,
    /// observers synced, syncs in progress.
    pub learners: usize,
    pub followers: usize,
    pub synced_followers: usize,
    pub synced_non_voting_followers: usize,
    pub synced_observers: usize,
    pub pending_syncs: usize,
    /// A member with an `observerMasterPort`: the observers attached to its
    /// relay now (server id, transactions queued for it). `None` without the
    /// port (ZooKeeper prints `synced_observers` on a follower only when it
    /// runs an ObserverMaster).
    pub relayed_observers: Option<Vec<(u64, usize)>>,
    /// An observer: the member it takes committed transactions from, a
    /// voter's observer master or else the leader (ZooKeeper's
    /// `observer_master_id`).
    pub observer_master_id: Option<u64>,
    /// Leader only: the observers synced on a learner session with it
    /// (server id, last zxid acknowledged).
    pub leader_observers: Vec<(u64, Zxid)>,
    /// The last applied zxid.
    pub last_zxid: Zxid,
    /// Times this member went looking for a leader since it started (its
    /// first election included): ZooKeeper's `looking_count`. An epoch
    /// rollover (I3) leaves it unchanged.
    pub looking_count: u64,
    /// The last zxid in this member's durable log (it may be ahead of the
    /// applied one: proposed or acknowledged, not yet committed).
    pub last_durable: Zxid,
    /// The durable acceptedEpoch (see `rzk_quorum::QuorumStats`).
    pub accepted_epoch: rzk_zxid::Epoch,
    /// The replicator's timings and counts (election, sync, fsync, snapshot).
    pub replication: rzk_quorum::ReplicatorMetrics,
    /// Transactions the replicator has handed to the commit stream that this
    /// server has not applied yet (within one epoch; 0 across a change of
    /// epoch, which the server reaches only after applying the old one).
    pub commit_lag: u64,
    /// Syncs this member went through as a learner: DIFF, TRUNC, SNAP.
    pub learner_syncs: [u64; 3],
    /// The bounded in-memory log: entries dropped from memory, and learner
    /// syncs whose DIFF was read from the durable log.
    pub window: rzk_quorum::core::WindowCounts,
}

/// One client connection.
#[derive(Clone, Debug)]
pub(crate) struct ConnView {
    pub peer: std::net::SocketAddr,
    pub session: Option<i64>,
    pub session_timeout_ms: i32,
    pub queued: usize,
    pub received: u64,
    pub sent: u64,
    pub established_ms: i64,
    pub last_op: &'static str,
    pub last_cxid: i32,
    pub last_zxid: i64,
    /// Wall-clock ms of the last response, 0 if none.
    pub last_response_ms: i64,
    pub last_latency_ms: u64,
    pub min_latency_ms: u64,
    pub avg_latency_ms: u64,
    pub max_latency_ms: u64,
}

/// The parts that grow with the data (watch lists, session lists,
/// ephemerals, directory sizes), taken only when asked for.
#[derive(Clone, Debug, Default)]
pub(crate) struct Details {
    /// Path → sessions watching it, by path.
    pub watches_by_path: Vec<(String, Vec<i64>)>,
    /// Session → paths it watches, by session.
    pub watches_by_session: Vec<(i64, Vec<String>)>,
    /// (session, timeout ms, wall-clock ms it expires at without traffic).
    pub sessions: Vec<(i64, i32, i64)>,
    /// Session → its ephemeral nodes, by session.
    pub ephemerals: Vec<(i64, Vec<String>)>,
    pub data_dir_bytes: u64,
    pub data_log_dir_bytes: u64,
}

/// Everything the server reports about itself, at one instant.
#[derive(Clone, Debug)]
pub(crate) struct ServerStats {
    pub version: String,
    /// 0 standalone (as ZooKeeper's `conf` says), else `myid`.
    pub server_id: u64,
    pub config: ServerConfig,
    pub quorum: QuorumView,
    pub uptime_ms: u64,
    pub node_count: usize,
    pub approximate_data_size: u64,
    pub ephemerals_count: usize,
    pub watch_count: usize,
    pub watched_paths: usize,
    pub watching_connections: usize,
    pub global_sessions: usize,
    pub outstanding_requests: usize,
    pub packets_received: u64,
    pub packets_sent: u64,
    pub min_latency_ms: u64,
    pub avg_latency_ms: f64,
    pub max_latency_ms: u64,
    pub auth_failed: u64,
    pub last_response_bytes: usize,
    pub min_response_bytes: usize,
    pub max_response_bytes: usize,
    pub read_latency: LatencySnapshot,
    pub update_latency: LatencySnapshot,
    pub open_file_descriptors: usize,
    pub max_file_descriptors: u64,
    pub connections: Vec<ConnView>,
    pub details: Option<Details>,
}

impl ServerStats {
    /// `zk_server_state` / `Mode:`.
    pub fn mode(&self) -> ServerMode {
        self.quorum.mode
    }
}

/// The version string rzk reports where ZooKeeper reports its own: the
/// protocol version it speaks, then rzk's.
pub(crate) fn version() -> String {
    format!("3.8.0-rzk-{}, built on rzk", env!("CARGO_PKG_VERSION"))
}

pub(crate) fn dir_size(p: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(p) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

pub(crate) fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

pub(crate) fn max_fds() -> u64 {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Whether member `id` serves observers on an `observerMasterPort`.
pub(crate) fn serves_observers(cfg: &crate::config::ServerConfig, id: u64) -> bool {
    let participant = cfg
        .servers
        .get(&id)
        .is_some_and(|p| p.role == crate::config::PeerRole::Participant);
    participant
        && (cfg.observer_master_port.is_some() || cfg.observer_master_ports.contains_key(&id))
}

/// A made-up snapshot for the formatting tests.
#[cfg(test)]
impl ServerStats {
    /// A snapshot in `mode` in which every figure that can be absent is
    /// present (a snapshot taken, an ObserverMaster relay, an observer
    /// master), so that every row the mode can show is shown.
    pub(crate) fn example(mode: ServerMode) -> ServerStats {
        use rzk_zxid::{Counter, Epoch};
        let summary = rzk_quorum::SummaryStats {
            count: 2,
            sum: 3,
            min: 1,
            max: 2,
            p50: 1,
        };
        let replication = rzk_quorum::ReplicatorMetrics {
            election_time_ms: summary,
            fsync_time_ms: summary,
            last_snapshot: Some(rzk_quorum::LastSnapshot {
                zxid: Zxid::new(Epoch(1), Counter(5)),
                unix_secs: 1,
                size_bytes: 100,
            }),
            ..Default::default()
        };
        ServerStats {
            version: version(),
            server_id: 1,
            config: ServerConfig::default(),
            quorum: QuorumView {
                mode,
                leader: Some(1),
                quorum_size: 3,
                serving: true,
                learners: 2,
                followers: 1,
                synced_followers: 1,
                synced_non_voting_followers: 0,
                synced_observers: 1,
                pending_syncs: 0,
                relayed_observers: Some(vec![(4, 0)]),
                observer_master_id: Some(2),
                leader_observers: vec![(3, Zxid::new(Epoch(1), Counter(7)))],
                last_zxid: Zxid::new(Epoch(1), Counter(7)),
                looking_count: 1,
                last_durable: Zxid::new(Epoch(1), Counter(8)),
                accepted_epoch: Epoch(1),
                replication,
                commit_lag: 0,
                learner_syncs: [1, 0, 0],
                window: Default::default(),
            },
            uptime_ms: 10,
            node_count: 4,
            approximate_data_size: 30,
            ephemerals_count: 1,
            watch_count: 2,
            watched_paths: 1,
            watching_connections: 1,
            global_sessions: 1,
            outstanding_requests: 0,
            packets_received: 5,
            packets_sent: 5,
            min_latency_ms: 0,
            avg_latency_ms: 0.5,
            max_latency_ms: 1,
            auth_failed: 0,
            last_response_bytes: 16,
            min_response_bytes: 16,
            max_response_bytes: 64,
            read_latency: LatencySnapshot::default(),
            update_latency: LatencySnapshot::default(),
            open_file_descriptors: 10,
            max_file_descriptors: 1024,
            connections: Vec::new(),
            details: Some(Details::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_quantiles_count_and_sum() {
        let mut l = Latency::default();
        assert_eq!(l.snapshot(), LatencySnapshot::default());
        for ms in 1..=100u64 {
            l.record_ms(ms);
        }
        let s = l.snapshot();
        assert_eq!(s.count, 100);
        assert_eq!(s.sum_ms, 5050);
        assert_eq!((s.min_ms, s.max_ms), (1, 100));
        assert_eq!(s.p50_ms, 50);
        assert_eq!(s.p90_ms, 90);
        assert_eq!(s.p99_ms, 99);
    }

    #[test]
    fn mode_is_standalone_without_server_lines() {
        let cfg = ServerConfig::default();
        assert_eq!(ServerMode::of(&cfg, Role::Leader), ServerMode::Standalone);
        let cfg = ServerConfig::parse("server.1=a:1:2\nserver.2=b:1:2\n").unwrap();
        assert_eq!(ServerMode::of(&cfg, Role::Follower), ServerMode::Follower);
        assert_eq!(ServerMode::of(&cfg, Role::Looking), ServerMode::Looking);
    }

    #[test]
    fn modes_print_zookeepers_words() {
        let words: Vec<&str> = ServerMode::ALL.iter().map(|m| m.as_str()).collect();
        assert_eq!(
            words,
            ["standalone", "leader", "follower", "observer", "looking"]
        );
    }
}
