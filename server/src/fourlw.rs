//! Four-letter words (doc §14) with ZooKeeper's output formats.

use std::fmt::Write as _;
use std::path::Path;

use rzk_wire::FourLetterWord;

use crate::core::{format_sid, now_ms, Core, Serving};

/// The version string rzk reports where ZooKeeper reports its own: the
/// protocol version it speaks, then rzk's.
pub(crate) fn version() -> String {
    format!("3.8.0-rzk-{}, built on rzk", env!("CARGO_PKG_VERSION"))
}

/// The text ZooKeeper prints when a word is not whitelisted.
pub(crate) fn not_whitelisted(word: FourLetterWord) -> String {
    format!(
        "{} is not executed because it is not in the whitelist.",
        word.name()
    )
}

/// A double as Java prints it after ZooKeeper rounds it to 4 places
/// (`1.4793`, `0.0`).
fn java_double(x: f64) -> String {
    let r = (x * 10_000.0).round() / 10_000.0;
    let s = format!("{r}");
    if s.contains('.') || s.contains('e') {
        s
    } else {
        format!("{s}.0")
    }
}

fn dir_size(p: &Path) -> u64 {
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

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn max_fds() -> u64 {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

impl Core {
    /// `srvr`'s and `mntr`'s mode: standalone for an ensemble of one, else the
    /// member's role.
    fn mode(&self) -> &'static str {
        match self.serving {
            Serving::No => "looking",
            Serving::Yes { .. } if self.cfg.voters == 1 && self.cfg.server.servers.is_empty() => {
                "standalone"
            }
            Serving::Yes { role, .. } => match role {
                rzk_quorum::Role::Leader => "leader",
                rzk_quorum::Role::Follower => "follower",
                rzk_quorum::Role::Observer => "observer",
                rzk_quorum::Role::Looking => "looking",
            },
        }
    }

    fn avg_latency(&self) -> f64 {
        if self.stats.replies == 0 {
            0.0
        } else {
            self.stats.total_latency_ms as f64 / self.stats.replies as f64
        }
    }

    fn summary_tail(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "Latency min/avg/max: {}/{}/{}",
            self.stats.min_latency_ms,
            java_double(self.avg_latency()),
            self.stats.max_latency_ms
        );
        let _ = writeln!(out, "Received: {}", self.stats.packets_received);
        let _ = writeln!(out, "Sent: {}", self.stats.packets_sent);
        let _ = writeln!(out, "Connections: {}", self.conns.len());
        let _ = writeln!(out, "Outstanding: {}", self.outstanding());
        let _ = writeln!(out, "Zxid: 0x{:x}", self.applied.as_u64());
        let _ = writeln!(out, "Mode: {}", self.mode());
        let _ = writeln!(out, "Node count: {}", self.tree.node_count());
    }

    fn conn_lines(&self, out: &mut String, detailed: bool) {
        let mut ids: Vec<_> = self.conns.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let c = &self.conns[&id];
            let s = &c.stats;
            let _ = write!(
                out,
                " /{}:{}[1](queued={},recved={},sent={}",
                c.peer.ip(),
                c.peer.port(),
                c.queued(),
                s.received,
                s.sent
            );
            if detailed {
                let avg = s.total_latency_ms.checked_div(s.replies).unwrap_or(0);
                let lresp = s
                    .last_response
                    .map_or(0, |t| now_ms() - t.elapsed().as_millis() as i64);
                let _ = write!(
                    out,
                    ",sid={},lop={},est={},to={},lcxid=0x{:x},lzxid=0x{:x},lresp={},llat={},minlat={},avglat={},maxlat={}",
                    format_sid(c.session().unwrap_or(0)),
                    if s.last_op.is_empty() { "NA" } else { s.last_op },
                    c.established_ms,
                    c.session()
                        .and_then(|sid| self.sessions.get(&sid))
                        .map_or(0, |x| x.timeout_ms),
                    s.last_cxid,
                    s.last_zxid,
                    lresp,
                    s.last_latency_ms,
                    s.min_latency_ms,
                    avg,
                    s.max_latency_ms
                );
            }
            out.push_str(")\n");
        }
    }

    /// The output of a four-letter word (already whitelisted).
    pub(crate) fn four_letter(&mut self, word: FourLetterWord) -> String {
        let mut out = String::new();
        let cfg = &self.cfg.server;
        match word {
            FourLetterWord::Ruok => out.push_str("imok"),
            FourLetterWord::Isro => out.push_str(if self.serving == Serving::No {
                "null"
            } else {
                "rw"
            }),
            FourLetterWord::Srvr | FourLetterWord::Stat if self.serving == Serving::No => {
                out.push_str("This ZooKeeper instance is not currently serving requests\n");
            }
            FourLetterWord::Srvr => {
                let _ = writeln!(out, "Zookeeper version: {}", version());
                self.summary_tail(&mut out);
            }
            FourLetterWord::Stat => {
                let _ = writeln!(out, "Zookeeper version: {}", version());
                out.push_str("Clients:\n");
                self.conn_lines(&mut out, false);
                out.push('\n');
                self.summary_tail(&mut out);
            }
            FourLetterWord::Cons => {
                self.conn_lines(&mut out, true);
                out.push('\n');
            }
            FourLetterWord::Mntr => {
                let mut metrics: Vec<(&str, String)> = vec![
                    ("version", version()),
                    ("server_state", self.mode().into()),
                    ("ephemerals_count", self.tree.ephemeral_count().to_string()),
                    ("num_alive_connections", self.conns.len().to_string()),
                    ("avg_latency", java_double(self.avg_latency())),
                    ("outstanding_requests", self.outstanding().to_string()),
                    ("znode_count", self.tree.node_count().to_string()),
                    ("global_sessions", self.sessions.len().to_string()),
                    ("non_mtls_remote_conn_count", "0".into()),
                    (
                        "last_client_response_size",
                        self.stats.last_response_bytes.to_string(),
                    ),
                    ("packets_sent", self.stats.packets_sent.to_string()),
                    ("packets_received", self.stats.packets_received.to_string()),
                    (
                        "max_client_response_size",
                        self.stats.max_response_bytes.to_string(),
                    ),
                    ("connection_drop_probability", "0.0".into()),
                    ("watch_count", self.watches.watch_count().to_string()),
                    ("auth_failed_count", self.stats.auth_failed.to_string()),
                    ("min_latency", self.stats.min_latency_ms.to_string()),
                    ("max_file_descriptor_count", max_fds().to_string()),
                    (
                        "approximate_data_size",
                        self.tree.approximate_data_size().to_string(),
                    ),
                    ("open_file_descriptor_count", open_fds().to_string()),
                    ("local_sessions", "0".into()),
                    ("uptime", self.started.elapsed().as_millis().to_string()),
                    ("max_latency", self.stats.max_latency_ms.to_string()),
                    ("outstanding_tls_handshake", "0".into()),
                    (
                        "min_client_response_size",
                        self.stats.min_response_bytes.to_string(),
                    ),
                    ("non_mtls_local_conn_count", "0".into()),
                ];
                if self.leader.is_some() {
                    // The leader's view of its ensemble, as ZooKeeper's leader
                    // reports it.
                    let q = self.replicator.stats();
                    let followers = q.learners.iter().filter(|l| l.voting).count();
                    let synced = q.learners.iter().filter(|l| l.voting && l.synced).count();
                    metrics.push(("quorum_size", q.voters.to_string()));
                    metrics.push(("learners", q.learners.len().to_string()));
                    metrics.push(("synced_non_voting_followers", "0".into()));
                    metrics.push(("followers", followers.to_string()));
                    metrics.push(("synced_followers", synced.to_string()));
                    metrics.push(("pending_syncs", q.pending_syncs.to_string()));
                }
                for (k, v) in metrics {
                    let _ = writeln!(out, "zk_{k}\t{v}");
                }
            }
            FourLetterWord::Conf => {
                let _ = writeln!(out, "clientPort={}", cfg.client_addr.port());
                out.push_str("secureClientPort=-1\n");
                let _ = writeln!(out, "dataDir={}", cfg.data_dir.display());
                let _ = writeln!(out, "dataDirSize={}", dir_size(&cfg.data_dir));
                let _ = writeln!(out, "dataLogDir={}", cfg.data_log_dir.display());
                let _ = writeln!(out, "dataLogSize={}", dir_size(&cfg.data_log_dir));
                let _ = writeln!(out, "tickTime={}", cfg.tick_time_ms);
                let _ = writeln!(out, "maxClientCnxns={}", cfg.max_client_cnxns);
                let _ = writeln!(out, "minSessionTimeout={}", cfg.min_session_timeout_ms);
                let _ = writeln!(out, "maxSessionTimeout={}", cfg.max_session_timeout_ms);
                out.push_str("clientPortListenBacklog=-1\n");
                let _ = writeln!(
                    out,
                    "serverId={}",
                    if cfg.servers.is_empty() {
                        0
                    } else {
                        self.cfg.server_id
                    }
                );
                if let Some(me) = cfg.servers.get(&self.cfg.server_id) {
                    let _ = writeln!(out, "initLimit={}", cfg.init_limit);
                    let _ = writeln!(out, "syncLimit={}", cfg.sync_limit);
                    out.push_str("electionAlg=3\n");
                    let _ = writeln!(out, "electionPort={}", me.election_port);
                    let _ = writeln!(out, "quorumPort={}", me.quorum_port);
                    let observer = me.role == crate::config::PeerRole::Observer;
                    let _ = writeln!(out, "peerType={}", u8::from(observer));
                    out.push_str("membership: \n");
                    for (id, p) in &cfg.servers {
                        let role = match p.role {
                            crate::config::PeerRole::Participant => "participant",
                            crate::config::PeerRole::Observer => "observer",
                        };
                        let client = match &p.client {
                            Some((h, port)) => format!("{h}:{port}"),
                            None => format!("{}:{}", cfg.client_addr.ip(), cfg.client_addr.port()),
                        };
                        let _ = writeln!(
                            out,
                            "server.{id}={}:{}:{}:{role};{client}",
                            p.host, p.quorum_port, p.election_port
                        );
                    }
                    out.push_str("version=0\n");
                }
            }
            FourLetterWord::Envi => {
                out.push_str("Environment:\n");
                let _ = writeln!(out, "zookeeper.version={}", version());
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
                let _ = writeln!(out, "host.name={}", host.trim());
                out.push_str("java.version=none (rzk is written in Rust)\n");
                let _ = writeln!(out, "os.name={}", std::env::consts::OS);
                let _ = writeln!(out, "os.arch={}", std::env::consts::ARCH);
                let cwd = std::env::current_dir()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default();
                let _ = writeln!(out, "user.dir={cwd}");
            }
            FourLetterWord::Wchs => {
                let _ = writeln!(
                    out,
                    "{} connections watching {} paths\nTotal watches:{}",
                    self.watches.conn_count(),
                    self.watches.path_count(),
                    self.watches.watch_count()
                );
            }
            FourLetterWord::Wchc => {
                let mut rows: Vec<_> = self.watches.by_conn().collect();
                rows.sort_unstable_by_key(|(c, _)| *c);
                for (conn, paths) in rows {
                    let sid = self.conns.get(&conn).and_then(|c| c.session()).unwrap_or(0);
                    let _ = writeln!(out, "{}", format_sid(sid));
                    for p in paths {
                        let _ = writeln!(out, "\t{p}");
                    }
                }
                out.push('\n');
            }
            FourLetterWord::Wchp => {
                let mut rows: Vec<_> = self.watches.by_path().collect();
                rows.sort_unstable_by(|a, b| a.0.cmp(b.0));
                for (p, conns) in rows {
                    let _ = writeln!(out, "{p}");
                    for c in conns {
                        let sid = self.conns.get(&c).and_then(|c| c.session()).unwrap_or(0);
                        let _ = writeln!(out, "\t{}", format_sid(sid));
                    }
                }
                out.push('\n');
            }
            FourLetterWord::Dump => {
                out.push_str("SessionTracker dump:\n");
                let _ = writeln!(
                    out,
                    "Session Sets ({})/({}):",
                    self.sessions.len(),
                    self.sessions.len()
                );
                let mut ids: Vec<_> = self.sessions.iter().collect();
                ids.sort_unstable_by_key(|(id, _)| **id);
                let now = std::time::Instant::now();
                for (id, s) in &ids {
                    let left = self
                        .session_deadline(**id, s.timeout_ms)
                        .saturating_duration_since(now)
                        .as_millis() as i64;
                    let _ = writeln!(out, "1 expire at {}:", now_ms() + left);
                    let _ = writeln!(out, "\t{}", format_sid(**id));
                }
                out.push_str("ephemeral nodes dump:\n");
                let eph = self.tree.all_ephemerals();
                let _ = writeln!(out, "Sessions with Ephemerals ({}):", eph.len());
                let mut owners: Vec<_> = eph.iter().collect();
                owners.sort_unstable_by_key(|(id, _)| **id);
                for (id, paths) in owners {
                    let _ = writeln!(out, "{}:", format_sid(*id));
                    for p in paths {
                        let _ = writeln!(out, "\t{p}");
                    }
                }
                out.push_str("Connections dump:\n");
                let _ = writeln!(
                    out,
                    "Connections Sets ({})/({}):",
                    self.conns.len(),
                    self.conns.len()
                );
                for c in self.conns.values() {
                    let _ = writeln!(out, "\t{}", format_sid(c.session().unwrap_or(0)));
                }
            }
            FourLetterWord::Dirs => {
                let _ = writeln!(out, "datadir_size: {}", dir_size(&cfg.data_dir));
                let _ = writeln!(out, "logdir_size: {}", dir_size(&cfg.data_log_dir));
            }
            FourLetterWord::Crst => {
                for c in self.conns.values_mut() {
                    c.stats = Default::default();
                }
                out.push_str("Connection stats reset.\n");
            }
            FourLetterWord::Srst => {
                self.stats = Default::default();
                out.push_str("Server stats reset.\n");
            }
            // rzk has no trace mask; it reports ZooKeeper's default.
            FourLetterWord::Gtmk | FourLetterWord::Stmk { .. } => out.push_str("306\n"),
            FourLetterWord::Hash | FourLetterWord::TelnetClose => {}
        }
        out
    }
}

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
