//! Four-letter words (docs/client-protocol.md, "Four-letter words") with
//! ZooKeeper's output formats, formatted from one [`ServerStats`] snapshot (the
//! AdminServer and the metrics use the same snapshot).

use std::fmt::Write as _;

use rzk_wire::{FourLetterWord, SessionId};

use crate::metric_table::{self, Scalar};
use crate::stats::ServerStats;

/// The text ZooKeeper prints when a word is not whitelisted.
pub(crate) fn not_whitelisted(word: FourLetterWord) -> String {
    format!(
        "{} is not executed because it is not in the whitelist.",
        word.name()
    )
}

/// A double as Java prints it after ZooKeeper rounds it to 4 places
/// (`1.4793`, `0.0`).
pub(crate) fn java_double(x: f64) -> String {
    let r = (x * 10_000.0).round() / 10_000.0;
    let s = format!("{r}");
    if s.contains('.') || s.contains('e') {
        s
    } else {
        format!("{s}.0")
    }
}

fn summary_tail(st: &ServerStats, out: &mut String) {
    let _ = writeln!(
        out,
        "Latency min/avg/max: {}/{}/{}",
        st.min_latency_ms,
        java_double(st.avg_latency_ms),
        st.max_latency_ms
    );
    let _ = writeln!(out, "Received: {}", st.packets_received);
    let _ = writeln!(out, "Sent: {}", st.packets_sent);
    let _ = writeln!(out, "Connections: {}", st.connections.len());
    let _ = writeln!(out, "Outstanding: {}", st.outstanding_requests);
    let _ = writeln!(out, "Zxid: 0x{:x}", st.quorum.last_zxid.as_u64());
    let _ = writeln!(out, "Mode: {}", st.mode().as_str());
    let _ = writeln!(out, "Node count: {}", st.node_count);
}

fn conn_lines(st: &ServerStats, out: &mut String, detailed: bool) {
    for c in &st.connections {
        let _ = write!(
            out,
            " /{}:{}[1](queued={},recved={},sent={}",
            c.peer.ip(),
            c.peer.port(),
            c.queued,
            c.received,
            c.sent
        );
        if detailed {
            let _ = write!(
                out,
                ",sid={},lop={},est={},to={},lcxid=0x{:x},lzxid=0x{:x},lresp={},llat={},minlat={},avglat={},maxlat={}",
                SessionId(c.session.unwrap_or(0)),
                c.last_op,
                c.established_ms,
                c.session_timeout_ms,
                c.last_cxid,
                c.last_zxid,
                c.last_response_ms,
                c.last_latency_ms,
                c.min_latency_ms,
                c.avg_latency_ms,
                c.max_latency_ms
            );
        }
        out.push_str(")\n");
    }
}

/// One `mntr` value as ZooKeeper prints it.
fn mntr_value(v: Scalar) -> String {
    match v {
        Scalar::Int(x) => x.to_string(),
        Scalar::Float(x) => java_double(x),
        Scalar::Text(s) => s,
    }
}

/// `conf`'s ensemble part, as a ZooKeeper quorum peer prints it.
fn conf_membership(st: &ServerStats, out: &mut String) {
    let cfg = &st.config;
    let Some(me) = cfg.servers.get(&st.server_id) else {
        return;
    };
    let _ = writeln!(out, "initLimit={}", cfg.init_limit);
    let _ = writeln!(out, "syncLimit={}", cfg.sync_limit);
    out.push_str("electionAlg=3\n");
    let _ = writeln!(out, "electionPort={}", me.election_port);
    let _ = writeln!(out, "quorumPort={}", me.quorum_port);
    let observer = me.role == crate::config::PeerRole::Observer;
    let _ = writeln!(out, "peerType={}", u8::from(observer));
    out.push_str("membership: \n");
    out.push_str(&cfg.membership_text());
    out.push('\n');
}

/// The output of a four-letter word that only reads (everything but
/// `crst` and `srst`), from a snapshot.
pub(crate) fn format(word: FourLetterWord, st: &ServerStats) -> String {
    let mut out = String::new();
    let cfg = &st.config;
    let details = st.details.clone().unwrap_or_default();
    match word {
        FourLetterWord::Ruok => out.push_str("imok"),
        // ZooKeeper answers isro with "null" while it is not serving.
        FourLetterWord::Isro => out.push_str(if st.quorum.serving { "rw" } else { "null" }),
        FourLetterWord::Srvr | FourLetterWord::Stat if !st.quorum.serving => {
            out.push_str("This ZooKeeper instance is not currently serving requests\n");
        }
        FourLetterWord::Srvr => {
            let _ = writeln!(out, "Zookeeper version: {}", st.version);
            summary_tail(st, &mut out);
        }
        FourLetterWord::Stat => {
            let _ = writeln!(out, "Zookeeper version: {}", st.version);
            out.push_str("Clients:\n");
            conn_lines(st, &mut out, false);
            out.push('\n');
            summary_tail(st, &mut out);
        }
        FourLetterWord::Cons => {
            conn_lines(st, &mut out, true);
            out.push('\n');
        }
        FourLetterWord::Mntr => {
            for (k, v) in metric_table::monitor_rows(st) {
                let _ = writeln!(out, "zk_{k}\t{}", mntr_value(v));
            }
        }
        FourLetterWord::Conf => {
            let _ = writeln!(out, "clientPort={}", cfg.client_addr.port());
            let _ = writeln!(
                out,
                "secureClientPort={}",
                cfg.secure_client_addr.map_or(-1, |a| i32::from(a.port()))
            );
            let _ = writeln!(out, "dataDir={}", cfg.data_dir.display());
            let _ = writeln!(out, "dataDirSize={}", details.data_dir_bytes);
            let _ = writeln!(out, "dataLogDir={}", cfg.data_log_dir.display());
            let _ = writeln!(out, "dataLogSize={}", details.data_log_dir_bytes);
            let _ = writeln!(out, "tickTime={}", cfg.tick_time_ms);
            let _ = writeln!(out, "maxClientCnxns={}", cfg.max_client_cnxns);
            let _ = writeln!(out, "minSessionTimeout={}", cfg.min_session_timeout_ms);
            let _ = writeln!(out, "maxSessionTimeout={}", cfg.max_session_timeout_ms);
            out.push_str("clientPortListenBacklog=-1\n");
            let _ = writeln!(out, "serverId={}", st.server_id);
            conf_membership(st, &mut out);
        }
        FourLetterWord::Envi => {
            out.push_str("Environment:\n");
            for (k, v) in environment(st) {
                let _ = writeln!(out, "{k}={v}");
            }
        }
        FourLetterWord::Wchs => {
            let _ = writeln!(
                out,
                "{} connections watching {} paths\nTotal watches:{}",
                st.watching_connections, st.watched_paths, st.watch_count
            );
        }
        FourLetterWord::Wchc => {
            for (sid, paths) in &details.watches_by_session {
                let _ = writeln!(out, "{}", SessionId(*sid));
                for p in paths {
                    let _ = writeln!(out, "\t{p}");
                }
            }
            out.push('\n');
        }
        FourLetterWord::Wchp => {
            for (p, sids) in &details.watches_by_path {
                let _ = writeln!(out, "{p}");
                for sid in sids {
                    let _ = writeln!(out, "\t{}", SessionId(*sid));
                }
            }
            out.push('\n');
        }
        FourLetterWord::Dump => {
            out.push_str("SessionTracker dump:\n");
            let n = details.sessions.len();
            let _ = writeln!(out, "Session Sets ({n})/({n}):");
            for (id, _, expires) in &details.sessions {
                let _ = writeln!(out, "1 expire at {expires}:");
                let _ = writeln!(out, "\t{}", SessionId(*id));
            }
            out.push_str("ephemeral nodes dump:\n");
            let _ = writeln!(
                out,
                "Sessions with Ephemerals ({}):",
                details.ephemerals.len()
            );
            for (id, paths) in &details.ephemerals {
                let _ = writeln!(out, "{}:", SessionId(*id));
                for p in paths {
                    let _ = writeln!(out, "\t{p}");
                }
            }
            out.push_str("Connections dump:\n");
            let n = st.connections.len();
            let _ = writeln!(out, "Connections Sets ({n})/({n}):");
            for c in &st.connections {
                let _ = writeln!(out, "\t{}", SessionId(c.session.unwrap_or(0)));
            }
        }
        FourLetterWord::Dirs => {
            let _ = writeln!(out, "datadir_size: {}", details.data_dir_bytes);
            let _ = writeln!(out, "logdir_size: {}", details.data_log_dir_bytes);
        }
        // Mutating words are answered by the core (below); here they say nothing.
        FourLetterWord::Crst | FourLetterWord::Srst => {}
        // rzk has no trace mask; it reports ZooKeeper's default.
        FourLetterWord::Gtmk | FourLetterWord::Stmk { .. } => out.push_str("306\n"),
        FourLetterWord::Hash | FourLetterWord::TelnetClose => {}
    }
    out
}

/// `envi`'s rows (also the AdminServer's `environment`).
pub(crate) fn environment(st: &ServerStats) -> Vec<(&'static str, String)> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let cwd = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    vec![
        ("zookeeper.version", st.version.clone()),
        ("host.name", host.trim().to_owned()),
        ("java.version", "none (rzk is written in Rust)".into()),
        ("os.name", std::env::consts::OS.into()),
        ("os.arch", std::env::consts::ARCH.into()),
        ("user.dir", cwd),
    ]
}

/// What `crst` answers (the core resets the connections' counters).
pub(crate) const CONN_STATS_RESET: &str = "Connection stats reset.\n";
/// What `srst` answers (the core resets the server's counters).
pub(crate) const SERVER_STATS_RESET: &str = "Server stats reset.\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_print_like_java() {
        assert_eq!(java_double(0.0), "0.0");
        assert_eq!(java_double(2.0), "2.0");
        assert_eq!(java_double(1.479_33), "1.4793");
    }
}
