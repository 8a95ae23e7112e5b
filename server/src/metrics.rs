//! Prometheus metrics the way ZooKeeper 3.8's `PrometheusMetricsProvider`
//! serves them: `GET /metrics` on `metricsProvider.httpHost:httpPort`, text
//! exposition format 0.0.4, ZooKeeper's metric names and types, formatted
//! from one [`ServerStats`] snapshot per scrape (the same one `mntr` and the
//! AdminServer use). The metrics, their types and help are the table in
//! [`crate::metric_table`], which `mntr` and `monitor` print too.
//!
//! A summary of detail level ADVANCED (`readlatency`, `updatelatency`) has
//! the quantiles 0.5, 0.9 and 0.99, one of level BASIC (the replication
//! summaries) the 0.5 quantile, as ZooKeeper's provider exports them; both
//! have `_count` and `_sum`.

use std::net::SocketAddr;

use prometheus::proto::{
    Counter, Gauge, Metric, MetricFamily, MetricType, Quantile, Summary as PromSummary,
};
use prometheus::Encoder;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::core::CoreMsg;
use crate::metric_table::{self as table, Kind, Summary, Value};
use crate::stats::ServerStats;

/// A value as a Prometheus sample: a zxid as its 64-bit number (exact up to
/// 2^53, like every sample); `None` for what is not a number.
fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Int(x) => Some(*x as f64),
        Value::Float(x) => Some(*x),
        Value::Zxid(z) => Some(z.as_u64() as f64),
        Value::Text(_) | Value::Summary(_) => None,
    }
}

fn summary(s: &Summary) -> PromSummary {
    let mut p = PromSummary::default();
    p.set_sample_count(s.count);
    p.set_sample_sum(s.sum as f64);
    let quantiles = s
        .quantiles
        .iter()
        .map(|&(q, v)| {
            let mut x = Quantile::default();
            x.set_quantile(q);
            x.set_value(v as f64);
            x
        })
        .collect();
    p.set_quantile(quantiles);
    p
}

/// The family of one metric with its value; `None` when the value is not
/// one Prometheus can carry (the table's unit test keeps those off this
/// surface).
fn family(m: &table::Metric, value: &Value) -> Option<MetricFamily> {
    let mut metric = Metric::default();
    let kind = match (m.kind, value) {
        (Kind::Gauge, v) => {
            let mut g = Gauge::default();
            g.set_value(number(v)?);
            metric.set_gauge(g);
            MetricType::GAUGE
        }
        (Kind::Counter, v) => {
            let mut c = Counter::default();
            c.set_value(number(v)?);
            metric.set_counter(c);
            MetricType::COUNTER
        }
        (Kind::Summary, Value::Summary(s)) => {
            metric.set_summary(summary(s));
            MetricType::SUMMARY
        }
        (Kind::Summary | Kind::Text, _) => return None,
    };
    let mut f = MetricFamily::default();
    f.set_name(m.name.to_owned());
    f.set_help(m.help.to_owned());
    f.set_field_type(kind);
    f.set_metric(vec![metric]);
    Some(f)
}

/// Every metric family of one snapshot: the table's metrics that
/// Prometheus carries and that this snapshot's mode reports.
pub(crate) fn families(st: &ServerStats) -> Vec<MetricFamily> {
    table::METRICS
        .iter()
        .filter(|m| m.in_prometheus())
        .filter_map(|m| family(m, &m.value(st)?))
        .collect()
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
