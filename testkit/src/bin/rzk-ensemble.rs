//! `rzk-ensemble`: the ensemble launcher of `rzk_testkit::ensemble` for shell
//! scripts and Python.
//!
//! `start` writes every member's zoo.cfg and `myid` under `--dir`, starts the
//! members (rzk, or Apache ZooKeeper from Debian's jars), waits until they
//! have settled (one leader, followers, observers; four-letter words over the
//! client ports, with a deadline), records them in `DIR/ensemble.json` and
//! exits, leaving them running. The other commands read that record: `status`,
//! `stop`, `kill` (SIGKILL), `term` (SIGTERM), `pause` (SIGSTOP), `resume`
//! (SIGCONT), `restart`, `leader`, `connect`, `pids`. Members are named by
//! their server id, or `leader`.
//!
//! ```sh
//! rzk-ensemble start --dir /tmp/e --rzk target/release/rzk --voters 3
//! rzk-ensemble status --dir /tmp/e --json
//! rzk-ensemble kill --dir /tmp/e leader && rzk-ensemble restart --dir /tmp/e 2
//! rzk-ensemble stop --dir /tmp/e
//! ```
//!
//! stdout carries only what a script reads (a connect string, ids, pids, or
//! one JSON document with `--json`); progress goes to stderr. Exit status 1
//! when the members do not start or settle (their logs' tails on stderr, and
//! the members this run started are stopped), 2 for a usage error.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use rzk_testkit::ensemble::{Ensemble, FixedPorts, Layout, ObserverMaster, Program, STATE_FILE};
use serde_json::{json, Value};

#[derive(Parser)]
#[command(
    name = "rzk-ensemble",
    about = "Start, signal and stop rzk or Apache ZooKeeper ensembles on this host"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write every member's zoo.cfg and myid under --dir, start them, wait, and
    /// record them in DIR/ensemble.json (stdout: the connect string).
    Start(Box<Start>),
    /// Every member's id, role, pid, mode and client address (or --json).
    Status {
        #[arg(long)]
        dir: PathBuf,
        /// One JSON document: the record, with `alive` and `mode` per member
        /// and the `leader`'s id.
        #[arg(long)]
        json: bool,
        /// Exit 1 if a member is not running (it exited, or was killed).
        #[arg(long)]
        require_running: bool,
    },
    /// Wait until the running members have settled (or serve).
    Wait {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, value_enum, default_value_t = WaitFor::Settled)]
        until: WaitFor,
        /// Seconds.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
    /// SIGTERM every member, SIGKILL those still running after --grace.
    Stop {
        #[arg(long)]
        dir: PathBuf,
        /// Seconds.
        #[arg(long, default_value_t = 60)]
        grace: u64,
    },
    /// SIGKILL (kill -9) the members named, and wait until they are gone.
    Kill(Targets),
    /// SIGTERM the members named and wait for their exit (SIGKILL after --grace).
    Term {
        #[command(flatten)]
        targets: Targets,
        /// Seconds.
        #[arg(long, default_value_t = 60)]
        grace: u64,
    },
    /// SIGSTOP the members named (returns once every thread is stopped).
    Pause(Targets),
    /// SIGCONT the members named.
    Resume(Targets),
    /// Start the members named again on their ports and data (SIGTERM first if
    /// running), and wait until each serves.
    Restart {
        #[command(flatten)]
        targets: Targets,
        #[arg(long, value_enum, default_value_t = WaitFor::Serving)]
        until: WaitFor,
        /// Seconds.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
    /// Print the id of the member that leads (exit 1 if none does).
    Leader {
        #[arg(long)]
        dir: PathBuf,
    },
    /// Print the connect string of the members named (default: every member).
    Connect {
        #[arg(long)]
        dir: PathBuf,
        ids: Vec<String>,
    },
    /// Print the pids of the members named (default: every member), comma-separated.
    Pids {
        #[arg(long)]
        dir: PathBuf,
        ids: Vec<String>,
    },
}

#[derive(clap::Args)]
struct Targets {
    #[arg(long)]
    dir: PathBuf,
    /// Server ids, or `leader`.
    #[arg(required = true)]
    ids: Vec<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum WaitFor {
    /// One leader, every other voter following, every observer observing.
    Settled,
    /// Every member answers srvr with a mode.
    Serving,
    /// Do not wait.
    None,
}

#[derive(Clone, Copy, ValueEnum)]
enum OmArg {
    Off,
    /// `observerMasterPort=P` in every zoo.cfg (ZooKeeper's form; with --net).
    Shared,
    /// `observerMasterPort.N=P` for every voter N (rzk's form).
    PerVoter,
}

#[derive(clap::Args)]
struct Start {
    /// The ensemble's directory: m<id>/ per member (the directory itself for
    /// --standalone), and ensemble.json.
    #[arg(long)]
    dir: PathBuf,
    /// Run this rzk binary.
    #[arg(
        long,
        conflicts_with = "zookeeper",
        required_unless_present = "zookeeper"
    )]
    rzk: Option<PathBuf>,
    /// Run Apache ZooKeeper (java, jars in --zookeeper-jars).
    #[arg(long)]
    zookeeper: bool,
    /// Where zookeeper.jar is.
    #[arg(long, default_value = "/usr/share/java")]
    zookeeper_jars: PathBuf,
    /// A JVM flag for ZooKeeper members (repeatable), e.g. --jvm-arg=-Xmx512m.
    #[arg(long = "jvm-arg", allow_hyphen_values = true)]
    jvm_args: Vec<String>,
    /// An environment variable for rzk members, KEY=VALUE (repeatable).
    #[arg(long = "env")]
    env: Vec<String>,
    /// An environment variable removed for rzk members (repeatable).
    #[arg(long = "env-remove")]
    env_remove: Vec<String>,
    /// Voters (ids 1..=N).
    #[arg(long, default_value_t = 3)]
    voters: usize,
    /// Observers (the ids after the voters).
    #[arg(long, default_value_t = 0)]
    observers: usize,
    /// One server without server.N lines or myid.
    #[arg(long, conflicts_with_all = ["voters", "observers"])]
    standalone: bool,
    /// tickTime in ms (default 2000).
    #[arg(long)]
    tick_ms: Option<u64>,
    /// initLimit in ticks (default 10).
    #[arg(long)]
    init_limit: Option<u64>,
    /// syncLimit in ticks (default 5).
    #[arg(long)]
    sync_limit: Option<u64>,
    /// A zoo.cfg key for every member, KEY=VALUE (repeatable).
    #[arg(long = "set")]
    set: Vec<String>,
    /// A zoo.cfg key for one member, ID:KEY=VALUE (repeatable).
    #[arg(long = "set-member")]
    set_member: Vec<String>,
    #[arg(long, value_enum, default_value_t = OmArg::Off)]
    observer_master: OmArg,
    /// An AdminServer per member, on its own port.
    #[arg(long)]
    admin: bool,
    /// A Prometheus endpoint per member, on its own port.
    #[arg(long)]
    metrics: bool,
    /// dataLogDir=<member dir>/datalog.
    #[arg(long)]
    data_log_dir: bool,
    /// Every member's address (default 127.0.0.1).
    #[arg(long, conflicts_with = "net")]
    host: Option<Ipv4Addr>,
    /// Member N on A.B.C.N (e.g. 127.0.2): one address per member.
    #[arg(long)]
    net: Option<String>,
    /// server.N lines without ;host:clientPort.
    #[arg(long)]
    no_client_on_server_lines: bool,
    /// Member 1's client port; member N's is this + N - 1 (with
    /// --quorum-port and --election-port; default: free ports).
    #[arg(long, requires_all = ["quorum_port", "election_port"])]
    client_port: Option<u16>,
    /// Member 1's quorum port (with --client-port).
    #[arg(long, requires = "client_port")]
    quorum_port: Option<u16>,
    /// Member 1's election port (with --client-port).
    #[arg(long, requires = "client_port")]
    election_port: Option<u16>,
    /// Member 1's AdminServer port (with --client-port and --admin).
    #[arg(long, default_value_t = 8080)]
    admin_port: u16,
    /// Member 1's Prometheus port (with --client-port and --metrics).
    #[arg(long, default_value_t = 7000)]
    metrics_port: u16,
    /// Member 1's observer-master port (with --client-port).
    #[arg(long, default_value_t = 2191)]
    observer_master_port: u16,
    #[arg(long, value_enum, default_value_t = WaitFor::Settled)]
    until: WaitFor,
    /// Seconds to wait.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Print the record (ensemble.json, with each member's mode) instead of
    /// the connect string.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Start(s) => start(*s),
        Cmd::Status {
            dir,
            json,
            require_running,
        } => status(&dir, json, require_running),
        Cmd::Wait {
            dir,
            until,
            timeout,
        } => attach(&dir).and_then(|mut e| wait(&mut e, until, timeout)),
        Cmd::Stop { dir, grace } => stop(&dir, grace),
        Cmd::Kill(t) => each(&t, "killed (SIGKILL)", |m| m.kill9()),
        Cmd::Term { targets, grace } => each(&targets, "stopped (SIGTERM)", |m| {
            m.term(Duration::from_secs(grace))
        }),
        Cmd::Pause(t) => each(&t, "paused (SIGSTOP)", |m| {
            if m.is_alive() {
                m.pause()
            }
        }),
        Cmd::Resume(t) => each(&t, "resumed (SIGCONT)", |m| {
            if m.is_alive() {
                m.resume()
            }
        }),
        Cmd::Restart {
            targets,
            until,
            timeout,
        } => restart(&targets, until, timeout),
        Cmd::Leader { dir } => leader(&dir),
        Cmd::Connect { dir, ids } => print_members(&dir, &ids, |m| m.addr()),
        Cmd::Pids { dir, ids } => {
            print_members(&dir, &ids, |m| m.pid_opt().unwrap_or(0).to_string())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rzk-ensemble: {e}");
            ExitCode::FAILURE
        }
    }
}

fn attach(dir: &Path) -> Result<Ensemble, String> {
    Ensemble::attach(dir)
}

fn start(s: Start) -> Result<(), String> {
    if let Ok(mut old) = Ensemble::attach(&s.dir) {
        if old.members.iter_mut().any(|m| m.is_alive()) {
            return Err(format!(
                "{}: an ensemble recorded there is running (rzk-ensemble stop --dir {})",
                s.dir.join(STATE_FILE).display(),
                s.dir.display()
            ));
        }
    }
    let program = program(&s)?;
    let layout = layout(&s)?;
    std::fs::create_dir_all(&s.dir).map_err(|e| format!("{}: {e}", s.dir.display()))?;
    let mut e = Ensemble::new(program, &s.dir, &layout);
    for m in &mut e.members {
        if let Err(err) = m.try_spawn() {
            return Err(format!("member {}: {err}", m.id));
        }
        eprintln!(
            "member {} ({}): pid {}, clients on {}, {}, log {}",
            m.id,
            m.role.name(),
            m.pid(),
            m.client,
            m.cfg.display(),
            m.log_path.display()
        );
    }
    // Recorded before the wait, so `stop` finds members that outlive a
    // failed start (this run stops them itself, below).
    e.save_state().map_err(|err| err.to_string())?;
    if let Err(err) = wait(&mut e, s.until, s.timeout) {
        e.stop_all(Duration::from_secs(10));
        e.save_state().map_err(|err| err.to_string())?;
        return Err(err);
    }
    e.detach();
    e.save_state().map_err(|err| err.to_string())?;
    eprintln!(
        "{} {}: serving on {}",
        e.program.name(),
        if e.standalone {
            "standalone"
        } else {
            "ensemble"
        },
        e.connect_string()
    );
    if s.json {
        println!("{}", status_json(&mut e));
    } else {
        println!("{}", e.connect_string());
    }
    Ok(())
}

fn program(s: &Start) -> Result<Program, String> {
    let mut p = match &s.rzk {
        // Absolute, so a later `restart` from another directory finds it.
        Some(bin) => Program::rzk(
            std::fs::canonicalize(bin).map_err(|e| format!("--rzk {}: {e}", bin.display()))?,
        ),
        None => Program::ZooKeeper {
            java: PathBuf::from("java"),
            jars: s.zookeeper_jars.clone(),
            jvm_args: Vec::new(),
        },
    };
    for kv in &s.env {
        let (k, v) = split_kv(kv)?;
        p = p.env(k, v);
    }
    for k in &s.env_remove {
        p = p.env_remove(k);
    }
    for a in &s.jvm_args {
        p = p.jvm_arg(a);
    }
    Ok(p)
}

fn layout(s: &Start) -> Result<Layout, String> {
    let mut l = if s.standalone {
        Layout::standalone()
    } else {
        Layout::voters(s.voters).observers(s.observers)
    };
    if let Some(t) = s.tick_ms {
        l = l.tick_ms(t);
    }
    if let Some(t) = s.init_limit {
        l = l.init_limit_ticks(t);
    }
    if let Some(t) = s.sync_limit {
        l = l.sync_limit_ticks(t);
    }
    for kv in &s.set {
        let (k, v) = split_kv(kv)?;
        l = l.set(k, v);
    }
    for ikv in &s.set_member {
        let (id, kv) = ikv
            .split_once(':')
            .ok_or_else(|| format!("--set-member {ikv}: expected ID:KEY=VALUE"))?;
        let id: u64 = id
            .parse()
            .map_err(|_| format!("--set-member {ikv}: {id} is not a server id"))?;
        let (k, v) = split_kv(kv)?;
        l = l.set_for(id, k, v);
    }
    l = l
        .observer_master(match s.observer_master {
            OmArg::Off => ObserverMaster::Off,
            OmArg::Shared => ObserverMaster::Shared,
            OmArg::PerVoter => ObserverMaster::PerVoter,
        })
        .admin(s.admin)
        .metrics(s.metrics)
        .data_log_dir(s.data_log_dir)
        .client_on_server_lines(!s.no_client_on_server_lines);
    if let Some(h) = s.host {
        l = l.host(h);
    }
    if let Some(net) = &s.net {
        l = l.net(parse_net(net)?);
    }
    if let (Some(client), Some(quorum), Some(election)) =
        (s.client_port, s.quorum_port, s.election_port)
    {
        l = l.fixed_ports(FixedPorts {
            client,
            quorum,
            election,
            admin: s.admin_port,
            metrics: s.metrics_port,
            observer_master: s.observer_master_port,
        });
    }
    Ok(l)
}

fn split_kv(kv: &str) -> Result<(&str, &str), String> {
    kv.split_once('=')
        .ok_or_else(|| format!("{kv}: expected KEY=VALUE"))
}

fn parse_net(net: &str) -> Result<[u8; 3], String> {
    let parts: Vec<u8> = net
        .split('.')
        .map(|p| {
            p.parse()
                .map_err(|_| format!("--net {net}: expected A.B.C"))
        })
        .collect::<Result<_, _>>()?;
    <[u8; 3]>::try_from(parts).map_err(|_| format!("--net {net}: expected A.B.C"))
}

fn wait(e: &mut Ensemble, until: WaitFor, timeout: u64) -> Result<(), String> {
    let within = Duration::from_secs(timeout);
    match until {
        WaitFor::None => Ok(()),
        WaitFor::Serving => e.wait_serving_blocking(within),
        WaitFor::Settled => e.wait_settled_blocking(within).map(|_| ()),
    }
}

/// The record with each member's `alive` and `mode`, and the leader's id.
fn status_json(e: &mut Ensemble) -> Value {
    let mut v = e.state();
    let mut leader = Value::Null;
    let members = v["members"].as_array_mut().expect("members");
    for (m, j) in e.members.iter_mut().zip(members.iter_mut()) {
        let alive = m.is_alive();
        let mode = if alive { m.mode_blocking() } else { None };
        if matches!(mode.as_deref(), Some("leader") | Some("standalone")) {
            leader = json!(m.id);
        }
        j["alive"] = json!(alive);
        j["mode"] = json!(mode);
    }
    v["leader"] = leader;
    v
}

fn status(dir: &Path, as_json: bool, require_running: bool) -> Result<(), String> {
    let mut e = attach(dir)?;
    let v = status_json(&mut e);
    let down: Vec<String> = v["members"]
        .as_array()
        .expect("members")
        .iter()
        .filter(|m| m["alive"] != json!(true))
        .map(|m| m["id"].to_string())
        .collect();
    let verdict = if require_running && !down.is_empty() {
        Err(format!("members not running: {}", down.join(", ")))
    } else {
        Ok(())
    };
    if as_json {
        println!("{v}");
        return verdict;
    }
    for m in v["members"].as_array().expect("members") {
        println!(
            "member {} {} pid {} {} {} {}",
            m["id"],
            m["role"].as_str().unwrap_or("?"),
            m["pid"],
            if m["alive"] == json!(true) {
                "running"
            } else {
                "down"
            },
            m["mode"].as_str().unwrap_or("-"),
            m["client"].as_str().unwrap_or("?"),
        );
    }
    verdict
}

fn stop(dir: &Path, grace: u64) -> Result<(), String> {
    let mut e = attach(dir)?;
    e.stop_all(Duration::from_secs(grace));
    e.save_state().map_err(|err| err.to_string())?;
    eprintln!("stopped every member of {}", dir.display());
    Ok(())
}

/// The indexes of the members `ids` name (ids, or `leader`).
fn resolve(e: &Ensemble, ids: &[String]) -> Result<Vec<usize>, String> {
    ids.iter()
        .map(|id| {
            if id == "leader" {
                return e
                    .leader_blocking()
                    .ok_or_else(|| "no member leads now".to_owned());
            }
            let n: u64 = id
                .parse()
                .map_err(|_| format!("{id}: not a server id (or `leader`)"))?;
            e.index_of(n).ok_or_else(|| format!("no member {n}"))
        })
        .collect()
}

fn each(
    t: &Targets,
    what: &str,
    f: impl Fn(&mut rzk_testkit::ensemble::Member),
) -> Result<(), String> {
    let mut e = attach(&t.dir)?;
    for i in resolve(&e, &t.ids)? {
        let m = &mut e.members[i];
        let pid = m.pid_opt().unwrap_or(0);
        f(m);
        eprintln!("member {}: {what} (pid {pid})", m.id);
    }
    e.save_state().map_err(|err| err.to_string())
}

fn restart(t: &Targets, until: WaitFor, timeout: u64) -> Result<(), String> {
    let mut e = attach(&t.dir)?;
    let which = resolve(&e, &t.ids)?;
    for &i in &which {
        let m = &mut e.members[i];
        m.term(Duration::from_secs(60));
        m.try_spawn()
            .map_err(|err| format!("member {}: {err}", m.id))?;
        eprintln!("member {}: started again (pid {})", m.id, m.pid());
    }
    let result = wait(&mut e, until, timeout);
    e.detach();
    e.save_state().map_err(|err| err.to_string())?;
    result
}

fn leader(dir: &Path) -> Result<(), String> {
    let e = attach(dir)?;
    let i = e
        .leader_blocking()
        .ok_or_else(|| "no member leads now".to_owned())?;
    println!("{}", e.members[i].id);
    Ok(())
}

fn print_members(
    dir: &Path,
    ids: &[String],
    f: impl Fn(&rzk_testkit::ensemble::Member) -> String,
) -> Result<(), String> {
    let e = attach(dir)?;
    let which = if ids.is_empty() {
        (0..e.members.len()).collect()
    } else {
        resolve(&e, ids)?
    };
    let out: Vec<String> = which.iter().map(|&i| f(&e.members[i])).collect();
    println!("{}", out.join(","));
    Ok(())
}
