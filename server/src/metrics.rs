//! Prometheus metrics the way ZooKeeper 3.8's `PrometheusMetricsProvider`
//! serves them: `GET /metrics` on `metricsProvider.httpHost:httpPort`, text
//! exposition format 0.0.4, ZooKeeper's metric names and types, formatted
//! from one [`ServerStats`] snapshot per scrape (the same one `mntr` and the
//! AdminServer use).
//!
//! Names and types, as ZooKeeper registers them:
//! - gauges (`ZooKeeperServer.registerMetrics`): `znode_count`, `watch_count`,
//!   `outstanding_requests`, `approximate_data_size`, `ephemerals_count`,
//!   `global_sessions`, `local_sessions`, `num_alive_connections`,
//!   `avg_latency`, `min_latency`, `max_latency`, `packets_received`,
//!   `packets_sent`, `uptime`, `open_file_descriptor_count`,
//!   `max_file_descriptor_count`, `connection_drop_probability`,
//!   `auth_failed_count`, `last/min/max_client_response_size`,
//!   `outstanding_tls_handshake`; in an ensemble `quorum_size`, and on the
//!   leader `learners`, `synced_followers`, `synced_non_voting_followers`,
//!   `synced_observers`, `pending_syncs`;
//! - counters (`ServerMetrics`): `looking_count`, the times this member went
//!   looking for a leader (its first election included);
//! - summaries (`ServerMetrics`, detail level ADVANCED: quantiles 0.5, 0.9,
//!   0.99): `readlatency`, `updatelatency` in ms.
//!
//! - replication (`ServerMetrics`): summaries of detail level BASIC
//!   (quantile 0.5, `_count`, `_sum`) `election_time`, `follower_sync_time`,
//!   `observer_sync_time`, `fsynctime`, `snapshottime` in ms; counters
//!   `diff_count`, `snap_count` (syncs this member sent as leader),
//!   `proposal_count`, `learner_commit_received_count`.
//!
//! rzk's own carry the `rzk_` prefix: `rzk_last_applied_zxid`,
//! `rzk_watched_paths`, `rzk_watching_connections`, `rzk_trunc_count` (TRUNC
//! syncs sent as leader), `rzk_learner_{diff,trunc,snap}_count` (syncs gone
//! through as a learner), `rzk_group_commit_size` (txns per fsync),
//! `rzk_commit_stream_lag` (txns committed and handed over, not yet applied),
//! `rzk_last_snapshot_bytes`, `rzk_log_window_dropped` (log entries dropped
//! from memory by the bounded window, `rzk.log.windowEntriesMax`),
//! `rzk_diff_from_disk_count` (DIFF syncs sent as leader whose entries were
//! read from the durable log), and of the SNAP transfers sent as leader
//! `rzk_snap_outlived_snapshot_count` (went on past a newer snapshot saved
//! meanwhile, once per snapshot), `rzk_snap_tail_from_disk_count` (read what
//! follows their snapshot from the durable log), `rzk_snap_purged_count`
//! (dropped because storage purged that log). The BASIC summaries' median is
//! over the most recent 256 values.
//!
//! Differences: ZooKeeper's summaries cover a sliding 10-minute window; rzk's
//! cover the time since start or the last `srst`.

use std::net::SocketAddr;

use prometheus::proto::{
    Counter, Gauge, Metric, MetricFamily, MetricType, Quantile, Summary as PromSummary,
};
use prometheus::Encoder;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::core::CoreMsg;
use crate::stats::{LatencySnapshot, ServerMode, ServerStats};

fn family(name: &str, kind: MetricType, metric: Metric) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_owned());
    // ZooKeeper's provider uses the name as the help text.
    f.set_help(name.to_owned());
    f.set_field_type(kind);
    f.set_metric(vec![metric]);
    f
}

fn gauge(name: &str, value: f64) -> MetricFamily {
    let mut g = Gauge::default();
    g.set_value(value);
    let mut m = Metric::default();
    m.set_gauge(g);
    family(name, MetricType::GAUGE, m)
}

fn counter(name: &str, value: f64) -> MetricFamily {
    let mut c = Counter::default();
    c.set_value(value);
    let mut m = Metric::default();
    m.set_counter(c);
    family(name, MetricType::COUNTER, m)
}

fn summary(name: &str, s: &LatencySnapshot) -> MetricFamily {
    let mut p = PromSummary::default();
    p.set_sample_count(s.count);
    p.set_sample_sum(s.sum_ms as f64);
    let quantiles = [(0.5, s.p50_ms), (0.9, s.p90_ms), (0.99, s.p99_ms)]
        .into_iter()
        .map(|(q, v)| {
            let mut x = Quantile::default();
            x.set_quantile(q);
            x.set_value(v as f64);
            x
        })
        .collect();
    p.set_quantile(quantiles);
    let mut m = Metric::default();
    m.set_summary(p);
    family(name, MetricType::SUMMARY, m)
}

/// A summary of detail level BASIC as ZooKeeper's provider exports it: the
/// 0.5 quantile, `_count` and `_sum`.
fn basic_summary(name: &str, s: &rzk_quorum::SummaryStats) -> MetricFamily {
    let mut p = PromSummary::default();
    p.set_sample_count(s.count);
    p.set_sample_sum(s.sum as f64);
    let mut x = Quantile::default();
    x.set_quantile(0.5);
    x.set_value(s.p50 as f64);
    p.set_quantile(vec![x]);
    let mut m = Metric::default();
    m.set_summary(p);
    family(name, MetricType::SUMMARY, m)
}

/// The replication families: ZooKeeper's `ServerMetrics` names, and rzk's own.
fn replication_families(st: &ServerStats) -> Vec<MetricFamily> {
    let r = &st.quorum.replication;
    vec![
        basic_summary("election_time", &r.election_time_ms),
        basic_summary("follower_sync_time", &r.follower_sync_time_ms),
        basic_summary("observer_sync_time", &r.observer_sync_time_ms),
        basic_summary("fsynctime", &r.fsync_time_ms),
        basic_summary("snapshottime", &r.snapshot_time_ms),
        counter("diff_count", r.diff_count as f64),
        counter("snap_count", r.snap_count as f64),
        counter("proposal_count", r.proposal_count as f64),
        counter(
            "learner_commit_received_count",
            r.learner_commit_received_count as f64,
        ),
        counter("rzk_trunc_count", r.trunc_count as f64),
        counter("rzk_learner_diff_count", st.quorum.learner_syncs[0] as f64),
        counter("rzk_learner_trunc_count", st.quorum.learner_syncs[1] as f64),
        counter("rzk_learner_snap_count", st.quorum.learner_syncs[2] as f64),
        basic_summary("rzk_group_commit_size", &r.group_commit_size),
        gauge("rzk_commit_stream_lag", st.quorum.commit_lag as f64),
        counter("rzk_log_window_dropped", st.quorum.window.dropped as f64),
        counter(
            "rzk_diff_from_disk_count",
            st.quorum.window.diffs_from_disk as f64,
        ),
        counter(
            "rzk_snap_outlived_snapshot_count",
            st.quorum.window.snaps_outlived_snapshot as f64,
        ),
        counter(
            "rzk_snap_tail_from_disk_count",
            st.quorum.window.snap_tails_from_disk as f64,
        ),
        counter(
            "rzk_snap_purged_count",
            st.quorum.window.snaps_purged as f64,
        ),
        gauge(
            "rzk_last_snapshot_bytes",
            r.last_snapshot.map_or(0, |s| s.size_bytes) as f64,
        ),
    ]
}

/// Every metric family of one snapshot.
pub(crate) fn families(st: &ServerStats) -> Vec<MetricFamily> {
    let mut out = vec![
        gauge("znode_count", st.node_count as f64),
        gauge("watch_count", st.watch_count as f64),
        gauge("outstanding_requests", st.outstanding_requests as f64),
        gauge("approximate_data_size", st.approximate_data_size as f64),
        gauge("ephemerals_count", st.ephemerals_count as f64),
        gauge("global_sessions", st.global_sessions as f64),
        gauge("local_sessions", 0.0),
        gauge("num_alive_connections", st.connections.len() as f64),
        gauge("avg_latency", st.avg_latency_ms),
        gauge("min_latency", st.min_latency_ms as f64),
        gauge("max_latency", st.max_latency_ms as f64),
        gauge("packets_received", st.packets_received as f64),
        gauge("packets_sent", st.packets_sent as f64),
        gauge("uptime", st.uptime_ms as f64),
        gauge(
            "open_file_descriptor_count",
            st.open_file_descriptors as f64,
        ),
        gauge("max_file_descriptor_count", st.max_file_descriptors as f64),
        gauge("connection_drop_probability", 0.0),
        gauge("auth_failed_count", st.auth_failed as f64),
        gauge("last_client_response_size", st.last_response_bytes as f64),
        gauge("min_client_response_size", st.min_response_bytes as f64),
        gauge("max_client_response_size", st.max_response_bytes as f64),
        gauge("outstanding_tls_handshake", 0.0),
        counter("looking_count", st.quorum.looking_count as f64),
        summary("readlatency", &st.read_latency),
        summary("updatelatency", &st.update_latency),
        gauge("rzk_last_applied_zxid", st.quorum.last_zxid.as_u64() as f64),
        gauge("rzk_watched_paths", st.watched_paths as f64),
        gauge("rzk_watching_connections", st.watching_connections as f64),
    ];
    out.extend(replication_families(st));
    if st.mode() != ServerMode::Standalone {
        out.push(gauge("quorum_size", st.quorum.quorum_size as f64));
    }
    if st.mode() == ServerMode::Leader {
        let q = &st.quorum;
        out.push(gauge("learners", q.learners as f64));
        out.push(gauge("synced_followers", q.synced_followers as f64));
        out.push(gauge(
            "synced_non_voting_followers",
            q.synced_non_voting_followers as f64,
        ));
        out.push(gauge("synced_observers", q.synced_observers as f64));
        out.push(gauge("pending_syncs", q.pending_syncs as f64));
    }
    out
}

/// The exposition text of one snapshot.
pub(crate) fn render(st: &ServerStats) -> String {
    let mut buf = Vec::new();
    // Encoding hand-built families into a Vec cannot fail: every family has a
    // name, a type and one metric of that type.
    if let Err(e) = prometheus::TextEncoder::new().encode(&families(st), &mut buf) {
        tracing::error!(error = %e, "cannot encode metrics");
    }
    String::from_utf8(buf).unwrap_or_default()
}

/// Asks the core for a snapshot; `None` when it is gone (shutting down).
pub(crate) async fn snapshot(core: &mpsc::Sender<CoreMsg>, details: bool) -> Option<ServerStats> {
    let (tx, rx) = oneshot::channel();
    core.send(CoreMsg::Stats { details, reply: tx })
        .await
        .ok()?;
    rx.await.ok()
}

/// Serves `GET /metrics` on `listener` until the task is dropped.
pub(crate) async fn serve(listener: TcpListener, core: mpsc::Sender<CoreMsg>) {
    use axum::http::{header, StatusCode};
    use axum::response::IntoResponse;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let core = core.clone();
            async move {
                match snapshot(&core, false).await {
                    Some(st) => (
                        StatusCode::OK,
                        [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
                        render(&st),
                    )
                        .into_response(),
                    None => (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response(),
                }
            }
        }),
    );
    log_serving(&listener, "serving Prometheus metrics on /metrics");
    if let Err(e) = axum::serve(listener, app).await {
        tracing::warn!(error = %e, "the metrics endpoint stopped");
    }
}

pub(crate) fn log_serving(listener: &TcpListener, what: &'static str) {
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    if let Some(addr) = addr {
        tracing::info!(%addr, "{what}");
    }
}
