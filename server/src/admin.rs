//! The AdminServer: ZooKeeper 3.8's HTTP commands (`admin.enableServer`,
//! `admin.serverAddress`, `admin.serverPort` 8080, `admin.commandURL`
//! `/commands`), answering JSON with ZooKeeper's keys, formatted from one
//! [`ServerStats`] snapshot (the same as the four-letter words and metrics).
//!
//! `GET /commands` lists the commands as links; `GET /commands/<name>` runs
//! one, by its name or its four-letter alias (`/commands/mntr`). Every answer
//! has `command` and `error` (null when it succeeded), like ZooKeeper's.
//!
//! The commands served, with their short names and four-letter aliases, are
//! the table in [`crate::commands`]; [`body`] answers each by its name.
//! Left out: `system_properties` (Java system properties; rzk has none),
//! `set_trace_mask` (rzk has no trace mask).

use rzk_wire::FourLetterWord;
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::commands;
use crate::core::CoreMsg;
use crate::fourlw;
use crate::metric_table::{self, Scalar};
use crate::metrics::snapshot;
use crate::stats::{ServerMode, ServerStats};

fn client_response(st: &ServerStats) -> Value {
    json!({
        "last_buffer_size": st.last_response_bytes,
        "min_buffer_size": st.min_response_bytes,
        "max_buffer_size": st.max_response_bytes,
    })
}

fn server_stats(st: &ServerStats, out: &mut Map<String, Value>) {
    let d = st.details.clone().unwrap_or_default();
    out.insert("version".into(), json!(st.version));
    out.insert("read_only".into(), json!(false));
    out.insert(
        "server_stats".into(),
        json!({
            "packets_sent": st.packets_sent,
            "packets_received": st.packets_received,
            "client_response_stats": client_response(st),
            "data_dir_size": d.data_dir_bytes,
            "log_dir_size": d.data_log_dir_bytes,
            "server_state": st.mode().as_str(),
            "last_processed_zxid": st.quorum.last_zxid.as_i64(),
            "outstanding_requests": st.outstanding_requests,
            "avg_latency": round4(st.avg_latency_ms),
            "max_latency": st.max_latency_ms,
            "min_latency": st.min_latency_ms,
            "num_alive_client_connections": st.connections.len(),
            "auth_failed_count": st.auth_failed,
            "non_mtlsremote_conn_count": 0,
            "non_mtlslocal_conn_count": 0,
            "uptime": st.uptime_ms,
        }),
    );
    out.insert("client_response".into(), client_response(st));
    out.insert("node_count".into(), json!(st.node_count));
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

fn connections(st: &ServerStats, detailed: bool) -> Value {
    let rows: Vec<Value> = st
        .connections
        .iter()
        .map(|c| {
            let mut m = Map::new();
            m.insert("remote_socket_address".into(), json!(c.peer.to_string()));
            m.insert("outstanding_requests".into(), json!(c.queued));
            m.insert("packets_received".into(), json!(c.received));
            m.insert("packets_sent".into(), json!(c.sent));
            if detailed {
                m.insert("session_id".into(), json!(c.session.unwrap_or(0)));
                m.insert("last_operation".into(), json!(c.last_op));
                m.insert("established".into(), json!(c.established_ms));
                m.insert("session_timeout".into(), json!(c.session_timeout_ms));
                m.insert("last_cxid".into(), json!(c.last_cxid));
                m.insert("last_zxid".into(), json!(c.last_zxid));
                m.insert("last_response_time".into(), json!(c.last_response_ms));
                m.insert("last_latency".into(), json!(c.last_latency_ms));
                m.insert("min_latency".into(), json!(c.min_latency_ms));
                m.insert("avg_latency".into(), json!(c.avg_latency_ms));
                m.insert("max_latency".into(), json!(c.max_latency_ms));
            }
            Value::Object(m)
        })
        .collect();
    Value::Array(rows)
}

/// The body of command `name` (its canonical name) from a snapshot, without
/// `command` and `error`. `Err` is the error text of a command that does not
/// apply (ZooKeeper's `leader` on a standalone server).
fn body(name: &str, st: &ServerStats) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    let cfg = &st.config;
    let d = st.details.clone().unwrap_or_default();
    match name {
        "configuration" => {
            out.insert("client_port".into(), json!(cfg.client_addr.port()));
            if let Some(a) = cfg.secure_client_addr {
                out.insert("secure_client_port".into(), json!(a.port()));
            }
            out.insert("data_dir".into(), json!(cfg.data_dir.display().to_string()));
            out.insert(
                "data_log_dir".into(),
                json!(cfg.data_log_dir.display().to_string()),
            );
            out.insert("tick_time".into(), json!(cfg.tick_time_ms));
            out.insert("max_client_cnxns".into(), json!(cfg.max_client_cnxns));
            out.insert(
                "min_session_timeout".into(),
                json!(cfg.min_session_timeout_ms),
            );
            out.insert(
                "max_session_timeout".into(),
                json!(cfg.max_session_timeout_ms),
            );
            out.insert("server_id".into(), json!(st.server_id));
            out.insert("client_port_listen_backlog".into(), json!(-1));
        }
        "connections" => {
            out.insert("connections".into(), connections(st, true));
            out.insert("secure_connections".into(), json!([]));
        }
        "dirs" => {
            out.insert("datadir_size".into(), json!(d.data_dir_bytes));
            out.insert("logdir_size".into(), json!(d.data_log_dir_bytes));
        }
        "dump" => {
            let mut by_expiry: Map<String, Value> = Map::new();
            for (sid, _, expires) in &d.sessions {
                let e = by_expiry
                    .entry(expires.to_string())
                    .or_insert_with(|| json!([]));
                if let Value::Array(v) = e {
                    v.push(json!(sid));
                }
            }
            let ephemerals: Map<String, Value> = d
                .ephemerals
                .iter()
                .map(|(sid, paths)| (sid.to_string(), json!(paths)))
                .collect();
            out.insert(
                "expiry_time_to_session_ids".into(),
                Value::Object(by_expiry),
            );
            out.insert(
                "session_id_to_ephemeral_paths".into(),
                Value::Object(ephemerals),
            );
        }
        "environment" => {
            for (k, v) in fourlw::environment(st) {
                out.insert(k.into(), json!(v));
            }
        }
        "get_trace_mask" => {
            out.insert("tracemask".into(), json!(306));
        }
        // rzk keeps no tree digests.
        "hash" => {
            out.insert("digests".into(), json!([]));
        }
        "initial_configuration" => {
            out.insert("initial_configuration".into(), json!(cfg.initial_text));
        }
        "is_read_only" => {
            out.insert("read_only".into(), json!(false));
        }
        "leader" => {
            if st.mode() == ServerMode::Standalone {
                // ZooKeeper answers this on a standalone server.
                return Err("server is not initialized".into());
            }
            let leader = st.quorum.leader;
            out.insert("is_leader".into(), json!(st.mode() == ServerMode::Leader));
            out.insert("leader_id".into(), json!(leader.map_or(-1, |l| l as i64)));
            let ip = leader
                .and_then(|l| cfg.servers.get(&l))
                .map(|p| p.host.clone());
            out.insert("leader_ip".into(), json!(ip));
        }
        "monitor" => {
            // mntr's rows, numbers as numbers, as ZooKeeper's JSON has them.
            for (k, v) in metric_table::monitor_rows(st) {
                let value = match v {
                    Scalar::Int(x) => json!(x),
                    Scalar::Float(x) => json!(round4(x)),
                    Scalar::Text(s) => json!(s),
                };
                out.insert(k.into_owned(), value);
            }
        }
        "last_snapshot" => {
            // As ZooKeeper: the zxid in hex without a prefix, the time in
            // seconds; -1 for both before the first snapshot since the start
            // (ZooKeeper then reports the file it started from).
            let last = st.quorum.replication.last_snapshot;
            let zxid = last.map_or(-1i64, |s| s.zxid.as_u64() as i64);
            out.insert("zxid".into(), json!(format!("{:x}", zxid)));
            out.insert(
                "timestamp".into(),
                json!(last.map_or(-1i64, |s| s.unix_secs as i64)),
            );
        }
        "ruok" | "connection_stat_reset" | "stat_reset" | "observer_connection_stat_reset" => {}
        "server_stats" => server_stats(st, &mut out),
        "stats" => {
            server_stats(st, &mut out);
            out.insert("connections".into(), connections(st, false));
            out.insert("secure_connections".into(), json!([]));
        }
        "observers" => {
            // ZooKeeper 3.8's SyncedObserverConsCommand: the leader's observer
            // sessions, else a follower's ObserverMaster's, else none. Each
            // entry carries ZooKeeper's keys that rzk knows (`sid`,
            // `last_zxid` on the leader, `queued_packets` on a relay).
            let q = &st.quorum;
            let list: Vec<Value> = if st.mode() == ServerMode::Leader {
                q.leader_observers
                    .iter()
                    .map(|(id, zxid)| json!({"sid": id, "last_zxid": zxid.as_u64()}))
                    .collect()
            } else {
                q.relayed_observers
                    .iter()
                    .flatten()
                    .map(|(id, queued)| json!({"sid": id, "queued_packets": queued}))
                    .collect()
            };
            out.insert("synced_observers".into(), json!(list.len()));
            out.insert("observers".into(), Value::Array(list));
        }
        "voting_view" => {
            let view: Map<String, Value> = cfg
                .servers
                .iter()
                .map(|(id, p)| {
                    let role = match p.role {
                        crate::config::PeerRole::Participant => "participant",
                        crate::config::PeerRole::Observer => "observer",
                    };
                    let client = p
                        .client
                        .as_ref()
                        .map(|(h, port)| format!(";{h}:{port}"))
                        .unwrap_or_default();
                    let text = format!(
                        "{}:{}:{}:{role}{client}",
                        p.host, p.quorum_port, p.election_port
                    );
                    (id.to_string(), json!(text))
                })
                .collect();
            out.insert("current_config".into(), Value::Object(view));
        }
        "watch_summary" => {
            out.insert("num_connections".into(), json!(st.watching_connections));
            out.insert("num_paths".into(), json!(st.watched_paths));
            out.insert("num_total_watches".into(), json!(st.watch_count));
        }
        "watches" => {
            let m: Map<String, Value> = d
                .watches_by_session
                .iter()
                .map(|(sid, paths)| (sid.to_string(), json!(paths)))
                .collect();
            out.insert("session_id_to_watched_paths".into(), Value::Object(m));
        }
        "watches_by_path" => {
            let m: Map<String, Value> = d
                .watches_by_path
                .iter()
                .map(|(p, sids)| (p.clone(), json!(sids)))
                .collect();
            out.insert("path_to_session_ids".into(), Value::Object(m));
        }
        "zabstate" => {
            let (voting, state) = match st.mode() {
                ServerMode::Standalone => (false, ""),
                ServerMode::Observer => (false, "broadcast"),
                ServerMode::Looking => (true, "election"),
                ServerMode::Leader | ServerMode::Follower => (true, "broadcast"),
            };
            out.insert("voting".into(), json!(voting));
            out.insert("zabstate".into(), json!(state));
        }
        _ => return Err(format!("Unknown command: {name}")),
    }
    Ok(out)
}

/// A command's whole JSON answer for a snapshot.
pub(crate) fn answer(name: &str, st: &ServerStats) -> Value {
    let mut out = match body(name, st) {
        Ok(m) => m,
        Err(e) => {
            let mut m = Map::new();
            m.insert("error".into(), json!(e));
            m.insert("command".into(), json!(name));
            return Value::Object(m);
        }
    };
    out.insert("command".into(), json!(name));
    out.insert("error".into(), Value::Null);
    Value::Object(out)
}

async fn run(core: &mpsc::Sender<CoreMsg>, requested: &str) -> (u16, Value) {
    let Some((admin, command)) = commands::admin_command(requested) else {
        let mut m = Map::new();
        m.insert("command".into(), json!(requested));
        m.insert(
            "error".into(),
            json!(format!("Unknown command: {requested}")),
        );
        return (404, Value::Object(m));
    };
    let name = admin.name;
    // The resets act on the core's counters (as their four-letter words
    // do); the rest read a snapshot.
    let reset = command
        .word
        .filter(|w| matches!(w, FourLetterWord::Crst | FourLetterWord::Srst));
    if let Some(word) = reset {
        let (tx, rx) = oneshot::channel();
        let _ = core.send(CoreMsg::FourLetter { word, reply: tx }).await;
        let _ = rx.await;
    }
    match snapshot(core, command.admin_needs_details()).await {
        Some(st) => (200, answer(name, &st)),
        None => (
            503,
            json!({"command": name, "error": "the server is shutting down"}),
        ),
    }
}

/// Serves the commands under `command_url` on `listener` until the task is
/// dropped.
pub(crate) async fn serve(listener: TcpListener, core: mpsc::Sender<CoreMsg>, command_url: String) {
    use axum::extract::Path;
    use axum::http::{header, StatusCode};
    use axum::response::IntoResponse;
    let index_url = command_url.clone();
    let list = move || {
        let base = index_url.clone();
        async move {
            let body: String = commands::admin_names()
                .into_iter()
                .map(|n| format!("<a href=\"{base}/{n}\">{n}</a>\n<br/>\n"))
                .collect();
            ([(header::CONTENT_TYPE, "text/html")], body)
        }
    };
    let one = move |Path(name): Path<String>| {
        let core = core.clone();
        async move {
            let (code, value) = run(&core, &name).await;
            let text = serde_json::to_string_pretty(&value).unwrap_or_default();
            (
                StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                [(header::CONTENT_TYPE, "application/json")],
                text,
            )
                .into_response()
        }
    };
    let app = axum::Router::new()
        .route(&command_url, axum::routing::get(list.clone()))
        .route(&format!("{command_url}/"), axum::routing::get(list))
        .route(&format!("{command_url}/{{name}}"), axum::routing::get(one));
    crate::metrics::log_serving(&listener, "serving the AdminServer");
    if let Err(e) = axum::serve(listener, app).await {
        tracing::warn!(error = %e, "the AdminServer stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_in_the_table_has_an_answer() {
        for mode in ServerMode::ALL {
            let st = ServerStats::example(mode);
            for name in commands::admin_names() {
                let v = answer(name, &st);
                assert_eq!(v["command"], name, "{v}");
                let error = v["error"].as_str().unwrap_or("");
                assert!(!error.starts_with("Unknown command"), "{name}: {v}");
            }
        }
    }

    #[test]
    fn a_command_answers_to_its_name_short_name_and_word() {
        for (requested, name) in [
            ("monitor", "monitor"),
            ("mntr", "monitor"),
            ("lead", "leader"),
            ("dirs", "dirs"),
            ("srvr", "server_stats"),
        ] {
            let found = commands::admin_command(requested).map(|(a, _)| a.name);
            assert_eq!(found, Some(name), "{requested}");
        }
        // No AdminServer command for these: set_trace_mask is left out.
        assert_eq!(commands::admin_command("stmk"), None);
        assert_eq!(commands::admin_command("telnet close"), None);
    }
}
