//! The command line of `rzk-bench` (the contract is `cli-spec`: subcommands
//! run, populate, idle-sessions, wait-serving), parsed with clap and turned
//! into the library's option structs.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::error::BenchError;
use crate::idle::{IdleOptions, WatchSpread};
use crate::populate::PopulateOptions;
use crate::run::{fresh_namespace, Limit, RunOptions};
use crate::wait::WaitOptions;
use crate::workload::WorkloadKind;

/// Default length of a timed run when neither --seconds nor --ops is given.
pub const DEFAULT_SECONDS: f64 = 10.0;

/// Default keys per session for most workloads.
pub const DEFAULT_KEYS_PER_SESSION: usize = 64;

/// Default pool of znodes per session that a timed `delete` run pre-creates.
pub const DEFAULT_DELETE_POOL_PER_SESSION: usize = 2000;

/// rzk-bench: a load generator for any ZooKeeper-protocol endpoint
/// (Apache ZooKeeper 3.8, rzk).
#[derive(Debug, Parser)]
#[command(name = "rzk-bench", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one workload and report throughput and latency.
    Run(RunArgs),
    /// Create N persistent children under a parent and check the count.
    Populate(PopulateArgs),
    /// Open N sessions, print `READY <n>`, hold them, close them.
    IdleSessions(IdleArgs),
    /// Wait until the server serves; print the elapsed milliseconds.
    WaitServing(WaitArgs),
    /// Establish N sessions K at a time (new, or resumed from a file) and
    /// report the rate and the connect latency.
    ConnectStorm(ConnectStormArgs),
}

/// `rzk-bench run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The server, host:port; or an ensemble's connect string,
    /// host:port,host:port,... (session i connects to member i modulo their
    /// number).
    #[arg(long, default_value = "127.0.0.1:2181")]
    pub server: String,
    /// The workload.
    #[arg(long, value_enum)]
    pub workload: WorkloadKind,
    /// Parallel sessions (storm: parallel connect/close tasks).
    #[arg(long, default_value_t = 32)]
    pub sessions: usize,
    /// Requests in flight per session.
    #[arg(long, default_value_t = 8)]
    pub inflight: usize,
    /// Size of every value written.
    #[arg(long, default_value_t = 128)]
    pub value_bytes: usize,
    /// Length of the timed phase (default 10 unless --ops is given).
    #[arg(long, conflicts_with = "ops")]
    pub seconds: Option<f64>,
    /// Number of operations of the timed phase, over all sessions.
    #[arg(long)]
    pub ops: Option<u64>,
    /// Probability of a read in the `mixed` workload.
    #[arg(long, default_value_t = 0.9)]
    pub read_ratio: f64,
    /// Watching sessions of the `watch` workload.
    #[arg(long, default_value_t = 100)]
    pub watchers: usize,
    /// The run's namespace znode (must not exist; default /rzk-bench-<random>).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Session timeout asked for.
    #[arg(long, default_value_t = 30_000)]
    pub session_timeout_ms: i32,
    /// Print exactly one JSON line on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// Seconds between progress lines on stderr (0: none).
    #[arg(long, default_value_t = 5.0)]
    pub progress_seconds: f64,
    /// Seed of the random choices (default: from the clock, printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Keys each session owns (get, set, exists, mixed, mix); for a timed
    /// `delete`, the znodes each session pre-creates (default 2000).
    #[arg(long)]
    pub keys_per_session: Option<usize>,
    /// The server's process id (same machine): its CPU time during the timed
    /// phase is reported, per operation too. An ensemble's members:
    /// pid,pid,... (their CPU time is summed).
    #[arg(long, value_delimiter = ',')]
    pub server_pid: Vec<u32>,
    /// Open loop: offer this many operations per second in total, spread
    /// evenly over the sessions, whether or not earlier ones were answered
    /// (up to --inflight per session); latency counts from each operation's
    /// due time, so a server that falls behind shows its queue (no
    /// coordinated omission). Without it, closed loop: each session sends as
    /// soon as it has a credit. Not for watch and storm.
    #[arg(long)]
    pub rate: Option<f64>,
}

/// `rzk-bench populate`.
#[derive(Debug, Args)]
pub struct PopulateArgs {
    /// The server, host:port.
    #[arg(long, default_value = "127.0.0.1:2181")]
    pub server: String,
    /// How many children to create.
    #[arg(long)]
    pub znodes: u64,
    /// Size of each child's value.
    #[arg(long, default_value_t = 128)]
    pub value_bytes: usize,
    /// The parent znode.
    #[arg(long, default_value = "/rzk-populate")]
    pub path: String,
    /// Parallel sessions.
    #[arg(long, default_value_t = 32)]
    pub sessions: usize,
    /// Requests in flight per session.
    #[arg(long, default_value_t = 8)]
    pub inflight: usize,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// `rzk-bench idle-sessions`.
#[derive(Debug, Args)]
pub struct IdleArgs {
    /// The server, host:port.
    #[arg(long, default_value = "127.0.0.1:2181")]
    pub server: String,
    /// Sessions to open.
    #[arg(long)]
    pub sessions: usize,
    /// Session timeout asked for.
    #[arg(long, default_value_t = 30_000)]
    pub session_timeout_ms: i32,
    /// How long to hold the sessions (ends early when stdin, if a pipe,
    /// closes, or on SIGTERM / Ctrl-C).
    #[arg(long, default_value_t = 30.0)]
    pub hold_seconds: f64,
    /// Connects in progress at once.
    #[arg(long, default_value_t = 64)]
    pub connect_parallelism: usize,
    /// Each session first leaves exist watches on children `n<i>` of this
    /// parent (as `populate` names them), --watches-per-session of them.
    #[arg(long)]
    pub watch_parent: Option<String>,
    /// How many children of --watch-parent exist (`n0` .. `n<N-1>`).
    #[arg(long, default_value_t = 100_000)]
    pub watch_znodes: u64,
    /// Watches each session leaves (with --watch-parent).
    #[arg(long, default_value_t = 10_000)]
    pub watches_per_session: u64,
}

/// `rzk-bench connect-storm`.
#[derive(Debug, Args)]
pub struct ConnectStormArgs {
    /// The server, host:port.
    #[arg(long, default_value = "127.0.0.1:2181")]
    pub server: String,
    /// New sessions to establish (without --resume).
    #[arg(long, default_value_t = 10_000)]
    pub sessions: usize,
    /// Connects in progress at once.
    #[arg(long, default_value_t = 64)]
    pub connect_parallelism: usize,
    /// Session timeout asked for (new sessions).
    #[arg(long, default_value_t = 30_000)]
    pub session_timeout_ms: i32,
    /// Leave the sessions open on the server and write them to this file
    /// (one `0x<id> <password hex> <timeout ms>` line each) for --resume.
    #[arg(long)]
    pub save_sessions: Option<std::path::PathBuf>,
    /// Resume the sessions of this file (written by --save-sessions) instead
    /// of creating new ones.
    #[arg(long)]
    pub resume: Option<std::path::PathBuf>,
    /// Print one JSON line.
    #[arg(long)]
    pub json: bool,
}

impl ConnectStormArgs {
    /// The checked options (reads the --resume file).
    pub fn into_options(self) -> Result<crate::connect_storm::StormOptions, BenchError> {
        if self.session_timeout_ms <= 0 {
            return Err(BenchError::Options(
                "--session-timeout-ms must be positive".into(),
            ));
        }
        if self.resume.is_none() && self.sessions == 0 {
            return Err(BenchError::Options("--sessions must be at least 1".into()));
        }
        let resume = match &self.resume {
            None => None,
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    BenchError::Options(format!("--resume {}: {e}", path.display()))
                })?;
                let saved = text
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(crate::connect_storm::SavedSession::parse_line)
                    .collect::<Result<Vec<_>, _>>()?;
                if saved.is_empty() {
                    return Err(BenchError::Options(format!(
                        "--resume {}: no sessions in the file",
                        path.display()
                    )));
                }
                Some(saved)
            }
        };
        Ok(crate::connect_storm::StormOptions {
            server: self.server,
            sessions: self.sessions,
            connect_parallelism: self.connect_parallelism.max(1),
            session_timeout_ms: self.session_timeout_ms,
            resume,
            keep_open: self.save_sessions.is_some(),
        })
    }
}

/// `rzk-bench wait-serving`.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// The server, host:port.
    #[arg(long, default_value = "127.0.0.1:2181")]
    pub server: String,
    /// Give up after this long.
    #[arg(long, default_value_t = 120.0)]
    pub timeout_seconds: f64,
    /// A znode that must exist with --expect-children children.
    #[arg(long, requires = "expect_children")]
    pub check_path: Option<String>,
    /// How many children --check-path must have.
    #[arg(long, requires = "check_path")]
    pub expect_children: Option<u64>,
}

fn check_path_arg(what: &str, path: &str) -> Result<(), BenchError> {
    let valid =
        path.starts_with('/') && path.len() > 1 && !path.ends_with('/') && !path.contains("//");
    if valid {
        Ok(())
    } else {
        Err(BenchError::Options(format!(
            "{what} {path:?} must be an absolute znode path other than /"
        )))
    }
}

fn positive_seconds(what: &str, s: f64) -> Result<f64, BenchError> {
    if s.is_finite() && s > 0.0 {
        Ok(s)
    } else {
        Err(BenchError::Options(format!(
            "{what} must be a positive number of seconds, not {s}"
        )))
    }
}

impl RunArgs {
    /// The checked options; `clock_seed` is used when --seed is absent.
    pub fn into_options(self, clock_seed: u64) -> Result<RunOptions, BenchError> {
        if self.sessions == 0 || self.inflight == 0 {
            return Err(BenchError::Options(
                "--sessions and --inflight must be at least 1".into(),
            ));
        }
        if !(0.0..=1.0).contains(&self.read_ratio) {
            return Err(BenchError::Options(format!(
                "--read-ratio {} is not in [0, 1]",
                self.read_ratio
            )));
        }
        if self.session_timeout_ms <= 0 {
            return Err(BenchError::Options(
                "--session-timeout-ms must be positive".into(),
            ));
        }
        if self.server.split(',').any(|m| m.trim().is_empty()) {
            return Err(BenchError::Options(format!(
                "--server {:?}: an empty member (expected host:port or host:port,host:port,...)",
                self.server
            )));
        }
        if self.workload == WorkloadKind::Watch && self.watchers == 0 {
            return Err(BenchError::Options("--watchers must be at least 1".into()));
        }
        if self.progress_seconds < 0.0 || !self.progress_seconds.is_finite() {
            return Err(BenchError::Options(
                "--progress-seconds must be 0 or positive".into(),
            ));
        }
        if let Some(rate) = self.rate {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(BenchError::Options(format!(
                    "--rate must be a positive number of operations per second, not {rate}"
                )));
            }
            if matches!(self.workload, WorkloadKind::Watch | WorkloadKind::Storm) {
                return Err(BenchError::Options(format!(
                    "--rate is for the request workloads, not {}",
                    self.workload.name()
                )));
            }
        }
        let limit = match (self.seconds, self.ops) {
            (Some(s), _) => Limit::Seconds(positive_seconds("--seconds", s)?),
            (None, Some(0)) => return Err(BenchError::Options("--ops must be at least 1".into())),
            (None, Some(n)) => Limit::Ops(n),
            (None, None) => Limit::Seconds(DEFAULT_SECONDS),
        };
        let namespace = self.namespace.unwrap_or_else(fresh_namespace);
        check_path_arg("--namespace", &namespace)?;
        let keys_per_session = match (self.keys_per_session, self.workload, limit) {
            (Some(k), _, _) => k,
            // A delete run deletes each pre-created znode once: with --ops the
            // pool is exactly what the budget needs.
            (None, WorkloadKind::Delete, Limit::Ops(n)) => {
                n.div_ceil(self.sessions as u64) as usize
            }
            (None, WorkloadKind::Delete, Limit::Seconds(_)) => DEFAULT_DELETE_POOL_PER_SESSION,
            (None, _, _) => DEFAULT_KEYS_PER_SESSION,
        };
        let needs_keys = matches!(
            self.workload,
            WorkloadKind::Get
                | WorkloadKind::Set
                | WorkloadKind::Exists
                | WorkloadKind::Mixed
                | WorkloadKind::Delete
        );
        if needs_keys && keys_per_session == 0 {
            return Err(BenchError::Options(
                "--keys-per-session must be at least 1".into(),
            ));
        }
        Ok(RunOptions {
            server: self.server,
            workload: self.workload,
            sessions: self.sessions,
            inflight: self.inflight,
            value_bytes: self.value_bytes,
            limit,
            read_ratio: self.read_ratio,
            watchers: self.watchers,
            namespace,
            session_timeout_ms: self.session_timeout_ms,
            progress_seconds: self.progress_seconds,
            seed: self.seed.unwrap_or(clock_seed),
            keys_per_session,
            server_pids: self.server_pid,
            rate: self.rate,
        })
    }
}

impl PopulateArgs {
    /// The checked options.
    pub fn into_options(self) -> Result<PopulateOptions, BenchError> {
        check_path_arg("--path", &self.path)?;
        if self.sessions == 0 || self.inflight == 0 {
            return Err(BenchError::Options(
                "--sessions and --inflight must be at least 1".into(),
            ));
        }
        Ok(PopulateOptions {
            server: self.server,
            znodes: self.znodes,
            value_bytes: self.value_bytes,
            path: self.path,
            sessions: self.sessions,
            inflight: self.inflight,
            session_timeout_ms: 30_000,
        })
    }
}

impl IdleArgs {
    /// The checked options.
    pub fn into_options(self) -> Result<IdleOptions, BenchError> {
        if self.session_timeout_ms <= 0 {
            return Err(BenchError::Options(
                "--session-timeout-ms must be positive".into(),
            ));
        }
        if self.hold_seconds < 0.0 || !self.hold_seconds.is_finite() {
            return Err(BenchError::Options(
                "--hold-seconds must be 0 or positive".into(),
            ));
        }
        Ok(IdleOptions {
            server: self.server,
            sessions: self.sessions,
            session_timeout_ms: self.session_timeout_ms,
            hold: Duration::from_secs_f64(self.hold_seconds),
            connect_parallelism: self.connect_parallelism.max(1),
            watches: self.watch_parent.map(|parent| WatchSpread {
                parent,
                znodes: self.watch_znodes.max(1),
                per_session: self.watches_per_session,
            }),
        })
    }
}

impl WaitArgs {
    /// The checked options.
    pub fn into_options(self) -> Result<WaitOptions, BenchError> {
        let timeout =
            Duration::from_secs_f64(positive_seconds("--timeout-seconds", self.timeout_seconds)?);
        let check = match (self.check_path, self.expect_children) {
            (Some(path), Some(n)) => {
                check_path_arg("--check-path", &path)?;
                Some((path, n))
            }
            _ => None,
        };
        Ok(WaitOptions {
            server: self.server,
            timeout,
            check,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("rzk-bench").chain(args.iter().copied()))
    }

    fn run_options(args: &[&str]) -> Result<RunOptions, String> {
        match parse(args).map_err(|e| e.to_string())?.command {
            Command::Run(r) => r.into_options(7).map_err(|e| e.to_string()),
            other => Err(format!("not run: {other:?}")),
        }
    }

    #[test]
    fn rate_is_positive_and_for_request_workloads_only() {
        assert_eq!(
            run_options(&["run", "--workload", "get"]).unwrap().rate,
            None
        );
        let o = run_options(&["run", "--workload", "set", "--rate", "2500"]).unwrap();
        assert_eq!(o.rate, Some(2500.0));
        for bad in ["0", "-5", "NaN", "inf"] {
            let arg = format!("--rate={bad}");
            let e = run_options(&["run", "--workload", "get", &arg]).unwrap_err();
            assert!(e.contains("--rate must be a positive"), "{bad}: {e}");
        }
        let e = run_options(&["run", "--workload", "watch", "--rate", "10"]).unwrap_err();
        assert!(e.contains("not watch"), "{e}");
    }

    #[test]
    fn run_defaults_follow_the_spec() {
        let o = run_options(&["run", "--workload", "get"]).unwrap();
        assert_eq!(o.server, "127.0.0.1:2181");
        assert_eq!((o.sessions, o.inflight, o.value_bytes), (32, 8, 128));
        assert_eq!(o.limit, Limit::Seconds(10.0));
        assert_eq!(o.read_ratio, 0.9);
        assert_eq!(o.watchers, 100);
        assert_eq!(o.session_timeout_ms, 30_000);
        assert_eq!(o.progress_seconds, 5.0);
        assert_eq!(o.seed, 7);
        assert!(o.namespace.starts_with("/rzk-bench-"), "{}", o.namespace);
        assert_eq!(o.keys_per_session, DEFAULT_KEYS_PER_SESSION);
    }

    #[test]
    fn run_spreads_sessions_over_an_ensembles_members_and_sums_their_cpu() {
        let o = run_options(&[
            "run",
            "--server",
            "127.0.0.1:1,127.0.0.1:2, 127.0.0.1:3",
            "--workload",
            "get",
            "--server-pid",
            "10,11,12",
        ])
        .unwrap();
        assert_eq!(o.members(), 3);
        let seen: Vec<&str> = (0..7).map(|i| o.member(i)).collect();
        assert_eq!(
            seen,
            [
                "127.0.0.1:1",
                "127.0.0.1:2",
                "127.0.0.1:3",
                "127.0.0.1:1",
                "127.0.0.1:2",
                "127.0.0.1:3",
                "127.0.0.1:1"
            ]
        );
        assert_eq!(o.server_pids, [10, 11, 12]);
        let one = run_options(&["run", "--workload", "get", "--server-pid", "5"]).unwrap();
        assert_eq!((one.members(), one.member(4)), (1, "127.0.0.1:2181"));
        assert_eq!(one.server_pids, [5]);
        let err = run_options(&["run", "--workload", "get", "--server", "h:1,,h:2"]).unwrap_err();
        assert!(err.contains("an empty member"), "{err}");
    }

    #[test]
    fn run_takes_every_option_of_the_spec() {
        let o = run_options(&[
            "run",
            "--server",
            "10.0.0.1:2182",
            "--workload",
            "mixed",
            "--sessions",
            "4",
            "--inflight",
            "2",
            "--value-bytes",
            "10",
            "--ops",
            "500",
            "--read-ratio",
            "0.5",
            "--watchers",
            "3",
            "--namespace",
            "/mine",
            "--session-timeout-ms",
            "6000",
            "--json",
            "--progress-seconds",
            "1",
            "--seed",
            "99",
        ])
        .unwrap();
        assert_eq!(o.server, "10.0.0.1:2182");
        assert_eq!(o.workload, WorkloadKind::Mixed);
        assert_eq!((o.sessions, o.inflight, o.value_bytes), (4, 2, 10));
        assert_eq!(o.limit, Limit::Ops(500));
        assert_eq!((o.read_ratio, o.watchers), (0.5, 3));
        assert_eq!(
            (o.namespace.as_str(), o.session_timeout_ms, o.seed),
            ("/mine", 6000, 99)
        );
    }

    #[test]
    fn every_workload_name_parses() {
        for name in [
            "create", "set", "get", "exists", "children", "delete", "mixed", "mix", "multi",
            "watch", "storm",
        ] {
            let o = run_options(&["run", "--workload", name, "--ops", "1"]).unwrap();
            assert_eq!(o.workload.name(), name);
        }
        assert!(run_options(&["run", "--workload", "nope"]).is_err());
    }

    #[test]
    fn seconds_and_ops_exclude_each_other() {
        assert!(parse(&["run", "--workload", "get", "--seconds", "1", "--ops", "5"]).is_err());
        assert_eq!(
            run_options(&["run", "--workload", "get", "--seconds", "2.5"])
                .unwrap()
                .limit,
            Limit::Seconds(2.5)
        );
    }

    #[test]
    fn nonsense_values_are_refused() {
        for bad in [
            &["run", "--workload", "get", "--read-ratio", "1.5"][..],
            &["run", "--workload", "get", "--sessions", "0"],
            &["run", "--workload", "get", "--seconds", "0"],
            &["run", "--workload", "get", "--ops", "0"],
            &["run", "--workload", "get", "--namespace", "relative"],
            &["run", "--workload", "get", "--namespace", "/"],
            &["run", "--workload", "watch", "--watchers", "0"],
        ] {
            assert!(run_options(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn delete_pool_covers_the_op_budget() {
        let o = run_options(&[
            "run",
            "--workload",
            "delete",
            "--ops",
            "101",
            "--sessions",
            "4",
        ])
        .unwrap();
        assert_eq!(o.keys_per_session, 26);
        let o = run_options(&["run", "--workload", "delete", "--seconds", "1"]).unwrap();
        assert_eq!(o.keys_per_session, DEFAULT_DELETE_POOL_PER_SESSION);
    }

    #[test]
    fn populate_idle_and_wait_parse() {
        let Command::Populate(p) = parse(&[
            "populate", "--server", "h:1", "--znodes", "200000", "--json",
        ])
        .unwrap()
        .command
        else {
            panic!()
        };
        let p = p.into_options().unwrap();
        assert_eq!(
            (
                p.znodes,
                p.path.as_str(),
                p.sessions,
                p.inflight,
                p.value_bytes
            ),
            (200_000, "/rzk-populate", 32, 8, 128)
        );

        let Command::IdleSessions(i) = parse(&["idle-sessions", "--sessions", "10000"])
            .unwrap()
            .command
        else {
            panic!()
        };
        let i = i.into_options().unwrap();
        assert_eq!(
            (
                i.sessions,
                i.session_timeout_ms,
                i.hold,
                i.connect_parallelism
            ),
            (10_000, 30_000, Duration::from_secs(30), 64)
        );

        let Command::WaitServing(w) = parse(&[
            "wait-serving",
            "--check-path",
            "/rzk-populate",
            "--expect-children",
            "5",
        ])
        .unwrap()
        .command
        else {
            panic!()
        };
        let w = w.into_options().unwrap();
        assert_eq!(w.timeout, Duration::from_secs(120));
        assert_eq!(w.check, Some(("/rzk-populate".to_string(), 5)));
        // --check-path needs --expect-children and the other way round.
        assert!(parse(&["wait-serving", "--check-path", "/x"]).is_err());
        assert!(parse(&["wait-serving", "--expect-children", "3"]).is_err());
    }
}
