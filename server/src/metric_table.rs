//! Every metric rzk reports, in one table: `mntr`, the AdminServer's
//! `monitor` and the Prometheus endpoint (`GET /metrics`) are all produced
//! from [`METRICS`], reading one [`ServerStats`] snapshot.
//!
//! Names are ZooKeeper 3.8's: a Prometheus family is named as ZooKeeper's
//! `PrometheusMetricsProvider` names it, and `mntr` prints the same name with
//! ZooKeeper's `zk_` prefix (`monitor`'s JSON keys have no prefix). rzk's own
//! metrics start with `rzk_`, so a dashboard keyed on ZooKeeper's names never
//! meets one. A summary is one Prometheus family (quantiles, `_count`,
//! `_sum`) and five `mntr` rows, `avg_`, `min_`, `max_`, `cnt_` and `sum_`
//! before the name (after `rzk_` for rzk's own), as ZooKeeper prints an
//! `AvgMinMaxCounter`. A zxid is hex in `mntr` and `monitor` and a number in
//! Prometheus.
//!
//! A metric is on all three surfaces unless its row says
//! [`Surfaces::MonitorOnly`] and why; `mntr` and `monitor` are one command in
//! ZooKeeper and always carry the same rows. The unit test
//! `mntr_monitor_and_prometheus_report_one_set_of_metrics` renders all three
//! for every [`ServerMode`] and fails if one reports a metric another lacks.
//!
//! Differences from ZooKeeper: its summaries cover a sliding 10-minute
//! window, rzk's the time since start or the last `srst`; the BASIC
//! summaries' median is over the most recent 256 values.

use std::borrow::Cow;

use rzk_zxid::Zxid;

use crate::stats::{LatencySnapshot, ServerMode, ServerStats};

/// A metric's type, as Prometheus has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A value that goes up and down.
    Gauge,
    /// A count that only grows (until `srst` or a restart).
    Counter,
    /// A distribution: count, sum, min, max and quantiles.
    Summary,
    /// A string (`mntr` and `monitor` only: Prometheus carries numbers).
    Text,
}

/// The server modes a metric is reported in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Modes(u8);

impl Modes {
    /// Every mode.
    pub const ALL: Modes = Modes::of(&[
        ServerMode::Standalone,
        ServerMode::Leader,
        ServerMode::Follower,
        ServerMode::Observer,
        ServerMode::Looking,
    ]);
    /// A member of an ensemble, whatever its role: ZooKeeper registers
    /// these only in a `QuorumZooKeeperServer`.
    pub const ENSEMBLE: Modes = Modes::of(&[
        ServerMode::Leader,
        ServerMode::Follower,
        ServerMode::Observer,
        ServerMode::Looking,
    ]);
    /// The leader alone (ZooKeeper's `LeaderZooKeeperServer`).
    pub const LEADER: Modes = Modes::of(&[ServerMode::Leader]);

    /// The set of these modes.
    pub const fn of(modes: &[ServerMode]) -> Modes {
        let mut bits = 0u8;
        let mut i = 0;
        while i < modes.len() {
            bits |= 1 << modes[i] as u8;
            i += 1;
        }
        Modes(bits)
    }

    /// Whether `mode` is one of them.
    pub fn contains(self, mode: ServerMode) -> bool {
        self.0 & (1 << mode as u8) != 0
    }
}

/// Where a metric is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Surfaces {
    /// `mntr`, `monitor` and Prometheus.
    All,
    /// `mntr` and `monitor` only, for the reason given.
    MonitorOnly {
        /// Why Prometheus does not carry it.
        why: &'static str,
    },
}

/// A distribution as reported: ms for times, transactions for sizes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Summary {
    /// Values observed.
    pub count: u64,
    /// Their sum.
    pub sum: u64,
    /// The smallest and the largest (0 when none).
    pub min: u64,
    pub max: u64,
    /// (quantile, value): Prometheus exports these.
    pub quantiles: Vec<(f64, u64)>,
}

impl Summary {
    /// The mean, 0.0 when nothing was observed.
    pub fn avg(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// A summary of detail level BASIC, as ZooKeeper's provider exports
    /// one: the median only.
    fn basic(s: &rzk_quorum::SummaryStats) -> Summary {
        Summary {
            count: s.count,
            sum: s.sum,
            min: s.min,
            max: s.max,
            quantiles: vec![(0.5, s.p50)],
        }
    }

    /// A summary of detail level ADVANCED: quantiles 0.5, 0.9 and 0.99.
    fn advanced(s: &LatencySnapshot) -> Summary {
        Summary {
            count: s.count,
            sum: s.sum_ms,
            min: s.min_ms,
            max: s.max_ms,
            quantiles: vec![(0.5, s.p50_ms), (0.9, s.p90_ms), (0.99, s.p99_ms)],
        }
    }
}

/// A metric's value in one snapshot.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    /// A count or a size.
    Int(u64),
    /// A mean or a probability (mntr rounds it to 4 places, as ZooKeeper).
    Float(f64),
    /// A zxid.
    Zxid(Zxid),
    /// A string.
    Text(String),
    /// A distribution.
    Summary(Summary),
}

/// One metric.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Metric {
    /// ZooKeeper's name (rzk's own start with `rzk_`).
    pub name: &'static str,
    /// Its Prometheus type.
    pub kind: Kind,
    /// What it measures (Prometheus's `# HELP`).
    pub help: &'static str,
    /// The modes it is reported in.
    pub modes: Modes,
    /// The surfaces it is reported on.
    pub surfaces: Surfaces,
    /// Its value in a snapshot; `None` leaves it out (a figure that does not
    /// exist yet, such as the last snapshot's zxid before the first one).
    pub read: fn(&ServerStats) -> Option<Value>,
}

impl Metric {
    const fn new(
        name: &'static str,
        kind: Kind,
        help: &'static str,
        read: fn(&ServerStats) -> Option<Value>,
    ) -> Metric {
        Metric {
            name,
            kind,
            help,
            modes: Modes::ALL,
            surfaces: Surfaces::All,
            read,
        }
    }

    const fn in_modes(self, modes: Modes) -> Metric {
        Metric { modes, ..self }
    }

    const fn monitor_only(self, why: &'static str) -> Metric {
        Metric {
            surfaces: Surfaces::MonitorOnly { why },
            ..self
        }
    }

    /// Its value in `st`, if it is reported in that snapshot's mode.
    pub(crate) fn value(&self, st: &ServerStats) -> Option<Value> {
        if !self.modes.contains(st.mode()) {
            return None;
        }
        (self.read)(st)
    }

    /// Whether Prometheus carries it.
    pub(crate) fn in_prometheus(&self) -> bool {
        self.surfaces == Surfaces::All
    }
}

const fn gauge(
    name: &'static str,
    help: &'static str,
    read: fn(&ServerStats) -> Option<Value>,
) -> Metric {
    Metric::new(name, Kind::Gauge, help, read)
}

const fn counter(
    name: &'static str,
    help: &'static str,
    read: fn(&ServerStats) -> Option<Value>,
) -> Metric {
    Metric::new(name, Kind::Counter, help, read)
}

const fn summary(
    name: &'static str,
    help: &'static str,
    read: fn(&ServerStats) -> Option<Value>,
) -> Metric {
    Metric::new(name, Kind::Summary, help, read)
}

const fn text(
    name: &'static str,
    help: &'static str,
    read: fn(&ServerStats) -> Option<Value>,
) -> Metric {
    Metric::new(name, Kind::Text, help, read)
        .monitor_only("a string; Prometheus samples are numbers")
}

/// A count as a value.
fn int(x: impl TryInto<u64>) -> Option<Value> {
    Some(Value::Int(x.try_into().unwrap_or(u64::MAX)))
}

/// Every metric, in `mntr`'s order (ZooKeeper's, then rzk's own).
pub(crate) const METRICS: &[Metric] = &[
    text("version", "the version rzk reports as ZooKeeper's", |st| {
        Some(Value::Text(st.version.clone()))
    }),
    text("server_state", "standalone, leader, follower, ...", |st| {
        Some(Value::Text(st.mode().as_str().to_owned()))
    }),
    gauge("ephemerals_count", "ephemeral znodes", |st| {
        int(st.ephemerals_count)
    }),
    gauge("num_alive_connections", "client connections open", |st| {
        int(st.connections.len())
    }),
    gauge("avg_latency", "mean request latency, ms", |st| {
        Some(Value::Float(st.avg_latency_ms))
    }),
    gauge("outstanding_requests", "requests not answered yet", |st| {
        int(st.outstanding_requests)
    }),
    gauge("znode_count", "znodes in the tree", |st| int(st.node_count)),
    gauge("global_sessions", "sessions open", |st| {
        int(st.global_sessions)
    }),
    gauge("non_mtls_remote_conn_count", NOT_COUNTED, |_| int(0u8)),
    gauge(
        "last_client_response_size",
        "bytes of the last reply",
        |st| int(st.last_response_bytes),
    ),
    gauge("packets_sent", "packets sent to clients", |st| {
        int(st.packets_sent)
    }),
    gauge("packets_received", "packets received from clients", |st| {
        int(st.packets_received)
    }),
    gauge(
        "max_client_response_size",
        "bytes of the largest reply",
        |st| int(st.max_response_bytes),
    ),
    gauge("connection_drop_probability", NOT_COUNTED, |_| {
        Some(Value::Float(0.0))
    }),
    gauge("watch_count", "watches set", |st| int(st.watch_count)),
    gauge("auth_failed_count", "authentications that failed", |st| {
        int(st.auth_failed)
    }),
    gauge("min_latency", "smallest request latency, ms", |st| {
        int(st.min_latency_ms)
    }),
    gauge("max_file_descriptor_count", "limit on open files", |st| {
        int(st.max_file_descriptors)
    }),
    gauge("approximate_data_size", "bytes of paths and data", |st| {
        int(st.approximate_data_size)
    }),
    gauge("open_file_descriptor_count", "files open", |st| {
        int(st.open_file_descriptors)
    }),
    gauge("local_sessions", NOT_COUNTED, |_| int(0u8)),
    gauge("uptime", "ms since the server started", |st| {
        int(st.uptime_ms)
    }),
    gauge("max_latency", "largest request latency, ms", |st| {
        int(st.max_latency_ms)
    }),
    gauge("outstanding_tls_handshake", NOT_COUNTED, |_| int(0u8)),
    gauge(
        "min_client_response_size",
        "bytes of the smallest reply",
        |st| int(st.min_response_bytes),
    ),
    gauge("non_mtls_local_conn_count", NOT_COUNTED, |_| int(0u8)),
    counter("looking_count", "times this member went looking", |st| {
        int(st.quorum.looking_count)
    }),
    summary("readlatency", "latency of reads, ms", |st| {
        advanced(&st.read_latency)
    }),
    summary("updatelatency", "latency of writes, ms", |st| {
        advanced(&st.update_latency)
    }),
    gauge(
        "rzk_last_durable_zxid",
        "last zxid in the durable log",
        |st| Some(Value::Zxid(st.quorum.last_durable)),
    ),
    gauge("rzk_accepted_epoch", "the durable acceptedEpoch", |st| {
        int(st.quorum.accepted_epoch.0)
    }),
    gauge(
        "rzk_last_applied_zxid",
        "last zxid applied to the tree",
        |st| Some(Value::Zxid(st.quorum.last_zxid)),
    ),
    gauge("rzk_watched_paths", "paths with a watch", |st| {
        int(st.watched_paths)
    }),
    gauge(
        "rzk_watching_connections",
        "connections with a watch",
        |st| int(st.watching_connections),
    ),
    summary("election_time", "ms from looking to serving", |st| {
        basic(&st.quorum.replication.election_time_ms)
    }),
    summary("follower_sync_time", "ms of a follower's sync", |st| {
        basic(&st.quorum.replication.follower_sync_time_ms)
    }),
    summary("observer_sync_time", "ms of an observer's sync", |st| {
        basic(&st.quorum.replication.observer_sync_time_ms)
    }),
    summary("fsynctime", "ms of each fsync of the log", |st| {
        basic(&st.quorum.replication.fsync_time_ms)
    }),
    summary("snapshottime", "ms to write a snapshot durably", |st| {
        basic(&st.quorum.replication.snapshot_time_ms)
    }),
    summary(
        "rzk_group_commit_size",
        "txns made durable per fsync",
        |st| basic(&st.quorum.replication.group_commit_size),
    ),
    counter("diff_count", "DIFF syncs sent as leader", |st| {
        int(st.quorum.replication.diff_count)
    }),
    counter("snap_count", "SNAP syncs sent as leader", |st| {
        int(st.quorum.replication.snap_count)
    }),
    counter("proposal_count", "proposals made as leader", |st| {
        int(st.quorum.replication.proposal_count)
    }),
    counter("learner_commit_received_count", "COMMITs received", |st| {
        int(st.quorum.replication.learner_commit_received_count)
    }),
    counter("rzk_trunc_count", "TRUNC syncs sent as leader", |st| {
        int(st.quorum.replication.trunc_count)
    }),
    counter("rzk_learner_diff_count", "DIFF syncs as a learner", |st| {
        int(st.quorum.learner_syncs[0])
    }),
    counter(
        "rzk_learner_trunc_count",
        "TRUNC syncs as a learner",
        |st| int(st.quorum.learner_syncs[1]),
    ),
    counter("rzk_learner_snap_count", "SNAP syncs as a learner", |st| {
        int(st.quorum.learner_syncs[2])
    }),
    gauge(
        "rzk_commit_stream_lag",
        "txns committed, not applied",
        |st| int(st.quorum.commit_lag),
    ),
    counter(
        "rzk_log_window_dropped",
        "log entries dropped from memory",
        |st| int(st.quorum.window.dropped),
    ),
    counter(
        "rzk_diff_from_disk_count",
        "DIFFs sent from the durable log",
        |st| int(st.quorum.window.diffs_from_disk),
    ),
    counter("rzk_snap_outlived_snapshot_count", SNAP_OUTLIVED, |st| {
        int(st.quorum.window.snaps_outlived_snapshot)
    }),
    counter("rzk_snap_tail_from_disk_count", SNAP_TAIL, |st| {
        int(st.quorum.window.snap_tails_from_disk)
    }),
    counter("rzk_snap_purged_count", SNAP_PURGED, |st| {
        int(st.quorum.window.snaps_purged)
    }),
    gauge(
        "rzk_last_snapshot_bytes",
        "size of the last snapshot",
        |st| {
            int(st
                .quorum
                .replication
                .last_snapshot
                .map_or(0, |s| s.size_bytes))
        },
    ),
    gauge(
        "rzk_last_snapshot_zxid",
        "zxid of the last snapshot",
        |st| Some(Value::Zxid(st.quorum.replication.last_snapshot?.zxid)),
    ),
    gauge("quorum_size", "voting members configured", |st| {
        int(st.quorum.quorum_size)
    })
    .in_modes(Modes::ENSEMBLE),
    gauge("learners", "learners with a session", |st| {
        int(st.quorum.learners)
    })
    .in_modes(Modes::LEADER),
    gauge("followers", "voting learners with a session", |st| {
        int(st.quorum.followers)
    })
    .in_modes(Modes::LEADER)
    .monitor_only(
        "ZooKeeper's mntr documents it (ZooKeeper 3.4's name, which mntr readers \
         still parse); its Prometheus provider registers `learners` instead",
    ),
    gauge("synced_followers", "voting learners synced", |st| {
        int(st.quorum.synced_followers)
    })
    .in_modes(Modes::LEADER),
    gauge("synced_non_voting_followers", NOT_COUNTED, |st| {
        int(st.quorum.synced_non_voting_followers)
    })
    .in_modes(Modes::LEADER),
    gauge("synced_observers", "observers synced", synced_observers)
        .in_modes(Modes::of(&[ServerMode::Leader, ServerMode::Follower])),
    gauge("pending_syncs", "learner syncs in progress", |st| {
        int(st.quorum.pending_syncs)
    })
    .in_modes(Modes::LEADER),
    gauge(
        "observer_master_id",
        "the member an observer learns from",
        |st| int(st.quorum.observer_master_id?),
    )
    .in_modes(Modes::of(&[ServerMode::Observer]))
    .monitor_only(
        "an id, not a measurement: ZooKeeper 3.8 prints it in mntr \
         (dumpMonitorValues) and registers no gauge for it",
    ),
];

/// The help of ZooKeeper's figures that rzk reports as constants.
const NOT_COUNTED: &str = "not counted by rzk: always 0";
const SNAP_OUTLIVED: &str = "SNAPs sent past a newer snapshot";
const SNAP_TAIL: &str = "SNAPs whose tail came from the durable log";
const SNAP_PURGED: &str = "SNAPs dropped: their log was purged";

/// A BASIC summary's value.
fn basic(s: &rzk_quorum::SummaryStats) -> Option<Value> {
    Some(Value::Summary(Summary::basic(s)))
}

/// An ADVANCED summary's value.
fn advanced(s: &LatencySnapshot) -> Option<Value> {
    Some(Value::Summary(Summary::advanced(s)))
}

/// `synced_observers`: ZooKeeper's leader counts the observers it feeds; a
/// follower reports it only when it runs an ObserverMaster (its relay's
/// observers), as ZooKeeper 3.8 does.
fn synced_observers(st: &ServerStats) -> Option<Value> {
    match st.mode() {
        ServerMode::Leader => int(st.quorum.synced_observers),
        ServerMode::Follower => int(st.quorum.relayed_observers.as_ref()?.len()),
        ServerMode::Standalone | ServerMode::Observer | ServerMode::Looking => None,
    }
}

/// One `mntr` row's value (and one `monitor` key's).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Scalar {
    /// An integer (a JSON number).
    Int(u64),
    /// A double (mntr prints it as Java does after rounding to 4 places).
    Float(f64),
    /// A string.
    Text(String),
}

/// `mntr`'s rows in its order, names without `zk_` (also the AdminServer's
/// `monitor`): every metric reported in this snapshot's mode, a summary
/// spread over its five `AvgMinMaxCounter` rows.
pub(crate) fn monitor_rows(st: &ServerStats) -> Vec<(Cow<'static, str>, Scalar)> {
    let mut rows = Vec::with_capacity(METRICS.len() + 40);
    for m in METRICS {
        let Some(value) = m.value(st) else { continue };
        match value {
            Value::Int(x) => rows.push((Cow::Borrowed(m.name), Scalar::Int(x))),
            Value::Float(x) => rows.push((Cow::Borrowed(m.name), Scalar::Float(x))),
            Value::Zxid(z) => rows.push((Cow::Borrowed(m.name), Scalar::Text(z.to_string()))),
            Value::Text(s) => rows.push((Cow::Borrowed(m.name), Scalar::Text(s))),
            Value::Summary(s) => summary_rows(m.name, &s, &mut rows),
        }
    }
    rows
}

/// A summary as ZooKeeper's `mntr` prints an `AvgMinMaxCounter`:
/// `avg_fsynctime`, ... (`rzk_avg_group_commit_size` for rzk's own).
fn summary_rows(name: &str, s: &Summary, rows: &mut Vec<(Cow<'static, str>, Scalar)>) {
    let (prefix, base) = match name.strip_prefix("rzk_") {
        Some(base) => ("rzk_", base),
        None => ("", name),
    };
    let row = |stat: &str| Cow::Owned(format!("{prefix}{stat}_{base}"));
    rows.push((row("avg"), Scalar::Float(s.avg())));
    rows.push((row("min"), Scalar::Int(s.min)));
    rows.push((row("max"), Scalar::Int(s.max)));
    rows.push((row("cnt"), Scalar::Int(s.count)));
    rows.push((row("sum"), Scalar::Int(s.sum)));
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use rzk_wire::FourLetterWord;

    use super::*;

    /// The names `mntr` prints, without `zk_`.
    fn mntr_names(st: &ServerStats) -> BTreeSet<String> {
        crate::fourlw::format(FourLetterWord::Mntr, st)
            .lines()
            .map(|l| {
                let (key, _) = l.split_once('\t').expect("a mntr row is key TAB value");
                key.strip_prefix("zk_")
                    .expect("mntr keys start with zk_")
                    .to_owned()
            })
            .collect()
    }

    /// The keys of the AdminServer's `monitor` answer, without its own
    /// `command` and `error`.
    fn monitor_names(st: &ServerStats) -> BTreeSet<String> {
        let answer = crate::admin::answer("monitor", st);
        let map = answer.as_object().expect("monitor answers an object");
        map.keys()
            .filter(|k| *k != "command" && *k != "error")
            .cloned()
            .collect()
    }

    /// The families `GET /metrics` serves, with their types.
    fn prometheus_families(st: &ServerStats) -> BTreeSet<(String, String)> {
        crate::metrics::render(st)
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| {
                let (name, kind) = l.split_once(' ').expect("# TYPE name kind");
                (name.to_owned(), kind.to_owned())
            })
            .collect()
    }

    /// `mntr`'s names with each summary's five rows (`avg_x`, `min_x`,
    /// `max_x`, `cnt_x`, `sum_x`; `rzk_avg_x`... for rzk's own) folded into
    /// its name `x`, as Prometheus has it. Only a complete set of five is
    /// folded: `avg_latency`, `min_latency` and `max_latency` are gauges.
    fn fold_summaries(names: &BTreeSet<String>) -> BTreeSet<String> {
        const STATS: [&str; 5] = ["avg", "min", "max", "cnt", "sum"];
        let row = |stat: &str, base: &str| match base.strip_prefix("rzk_") {
            Some(rest) => format!("rzk_{stat}_{rest}"),
            None => format!("{stat}_{base}"),
        };
        let bases: BTreeSet<String> = names
            .iter()
            .filter_map(|n| {
                let base = match n.strip_prefix("rzk_") {
                    Some(rest) => format!("rzk_{}", rest.strip_prefix("cnt_")?),
                    None => n.strip_prefix("cnt_")?.to_owned(),
                };
                STATS
                    .iter()
                    .all(|s| names.contains(&row(s, &base)))
                    .then_some(base)
            })
            .collect();
        let mut out: BTreeSet<String> = names
            .iter()
            .filter(|n| !bases.iter().any(|b| STATS.iter().any(|s| row(s, b) == **n)))
            .cloned()
            .collect();
        out.extend(bases);
        out
    }

    /// Fails naming what only one side has.
    fn assert_same(
        left: (&str, &BTreeSet<String>),
        right: (&str, &BTreeSet<String>),
        mode: ServerMode,
    ) {
        let only = |a: &BTreeSet<String>, b: &BTreeSet<String>| -> Vec<String> {
            a.difference(b).cloned().collect()
        };
        assert!(
            left.1 == right.1,
            "in {mode:?}: only in {} {:?}; only in {} {:?}",
            left.0,
            only(left.1, right.1),
            right.0,
            only(right.1, left.1),
        );
    }

    /// The test that holds the three surfaces to one set: a metric added to
    /// one of them by hand, and not to the table, fails it.
    #[test]
    fn mntr_monitor_and_prometheus_report_one_set_of_metrics() {
        let monitor_only: BTreeSet<String> = METRICS
            .iter()
            .filter(|m| !m.in_prometheus())
            .map(|m| m.name.to_owned())
            .collect();
        for mode in ServerMode::ALL {
            let st = ServerStats::example(mode);
            let mntr = mntr_names(&st);
            assert_same(("monitor", &monitor_names(&st)), ("mntr", &mntr), mode);
            let folded = fold_summaries(&mntr);
            let prometheus: BTreeSet<String> = prometheus_families(&st)
                .into_iter()
                .map(|(n, _)| n)
                .collect();
            let expected: BTreeSet<String> = folded.difference(&monitor_only).cloned().collect();
            assert_same(
                ("Prometheus", &prometheus),
                ("mntr (less the table's monitor-only rows)", &expected),
                mode,
            );
            let table: BTreeSet<String> = METRICS
                .iter()
                .filter(|m| m.value(&st).is_some())
                .map(|m| m.name.to_owned())
                .collect();
            assert_same(("mntr", &folded), ("the table", &table), mode);
        }
    }

    #[test]
    fn every_metric_has_a_value_of_its_kind_and_prometheus_its_type() {
        for mode in ServerMode::ALL {
            let st = ServerStats::example(mode);
            let families = prometheus_families(&st);
            for m in METRICS {
                let Some(value) = m.value(&st) else { continue };
                let fits = match (m.kind, &value) {
                    (
                        Kind::Gauge | Kind::Counter,
                        Value::Int(_) | Value::Float(_) | Value::Zxid(_),
                    ) => true,
                    (Kind::Summary, Value::Summary(_)) => true,
                    (Kind::Text, Value::Text(_)) => !m.in_prometheus(),
                    (Kind::Gauge | Kind::Counter | Kind::Summary | Kind::Text, _) => false,
                };
                assert!(fits, "{} is a {:?} but reads {value:?}", m.name, m.kind);
                let prom_type = match m.kind {
                    Kind::Gauge => "gauge",
                    Kind::Counter => "counter",
                    Kind::Summary => "summary",
                    Kind::Text => continue,
                };
                if m.in_prometheus() {
                    assert!(
                        families.contains(&(m.name.to_owned(), prom_type.to_owned())),
                        "{} is not a {prom_type} in {mode:?}",
                        m.name
                    );
                }
            }
        }
    }

    #[test]
    fn names_are_unique_with_help_and_one_sided_ones_say_why() {
        let mut seen = BTreeSet::new();
        for m in METRICS {
            assert!(seen.insert(m.name), "{} twice", m.name);
            assert!(!m.name.starts_with("zk_"), "{}: mntr adds zk_", m.name);
            assert!(!m.help.is_empty(), "{} has no help", m.name);
            if let Surfaces::MonitorOnly { why } = m.surfaces {
                assert!(
                    !why.is_empty(),
                    "{} is on one surface for no reason",
                    m.name
                );
            }
        }
    }

    #[test]
    fn mntr_and_monitor_keep_zookeepers_formats() {
        let st = ServerStats::example(ServerMode::Leader);
        let mntr = crate::fourlw::format(FourLetterWord::Mntr, &st);
        for row in [
            "zk_server_state\tleader",
            "zk_avg_latency\t0.5",
            "zk_connection_drop_probability\t0.0",
            "zk_avg_election_time\t1.5",
            "zk_cnt_election_time\t2",
            "zk_rzk_sum_group_commit_size\t0",
            "zk_rzk_last_snapshot_zxid\t0x100000005",
            "zk_rzk_last_applied_zxid\t0x100000007",
            "zk_followers\t1",
            "zk_synced_observers\t1",
        ] {
            assert!(mntr.lines().any(|l| l == row), "{row:?} not in\n{mntr}");
        }
        let monitor = crate::admin::answer("monitor", &st);
        assert_eq!(monitor["avg_election_time"], 1.5);
        assert_eq!(monitor["cnt_election_time"], 2);
        assert_eq!(monitor["rzk_last_durable_zxid"], "0x100000008");
        assert_eq!(monitor["server_state"], "leader");
        let follower = crate::fourlw::format(
            FourLetterWord::Mntr,
            &ServerStats::example(ServerMode::Follower),
        );
        assert!(follower.contains("zk_synced_observers\t1\n"), "{follower}");
        assert!(!follower.contains("zk_learners"), "{follower}");
        let standalone = crate::metrics::render(&ServerStats::example(ServerMode::Standalone));
        assert!(!standalone.contains("quorum_size"), "{standalone}");
    }
}
