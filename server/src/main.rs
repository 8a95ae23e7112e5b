//! `rzk [zoo.cfg]`: the rzk server. `rzk snapshot dump <file>` and
//! `rzk log dump <dir>`: ZooKeeper 3.8's data files or rzk's, as ZooKeeper's
//! toolkits print them (read only). `rzk import-zookeeper`: a ZooKeeper data
//! directory moved over to a new rzk one.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rzk_server::config::ServerConfig;
use rzk_server::logging::{self, LogFormat};

/// A ZooKeeper-compatible server. With no file it serves 127.0.0.1:2181 with
/// data in ./data. Flags override the file.
#[derive(Parser, Debug)]
#[command(name = "rzk", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Tool>,
    /// A zoo.cfg-compatible configuration file.
    config: Option<PathBuf>,
    /// clientPort.
    #[arg(long)]
    client_port: Option<u16>,
    /// clientPortAddress.
    #[arg(long)]
    client_port_address: Option<String>,
    /// dataDir.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// dataLogDir.
    #[arg(long)]
    data_log_dir: Option<PathBuf>,
    /// tickTime in ms.
    #[arg(long)]
    tick_time: Option<u32>,
    /// This member's id in an ensemble (instead of `myid` in the data directory).
    #[arg(long)]
    id: Option<u64>,
    /// Any zoo.cfg key, as key=value (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// rzk.log.format: text (default; coloured only on a terminal) or json.
    #[arg(long, value_name = "text|json")]
    log_format: Option<LogFormat>,
}

/// Tools for data directories (dump only reads; import writes only a new
/// directory).
#[derive(Subcommand, Debug)]
enum Tool {
    /// Moves an Apache ZooKeeper 3.8 data directory over: its newest valid
    /// snapshot and the log after it (znodes with data, ACL and stat,
    /// sessions and their ephemerals, the last zxid) into a new rzk data
    /// directory. Writes nothing if any input is corrupt.
    #[command(name = "import-zookeeper")]
    ImportZookeeper {
        /// ZooKeeper's dataDir (or its version-2).
        #[arg(long)]
        from: PathBuf,
        /// ZooKeeper's dataLogDir, when it is not dataDir.
        #[arg(long)]
        from_log: Option<PathBuf>,
        /// The rzk dataDir to create (absent or an empty directory).
        #[arg(long)]
        to: PathBuf,
        /// The rzk dataLogDir to create, when it is not dataDir.
        #[arg(long)]
        to_log: Option<PathBuf>,
    },
    /// Snapshot files.
    Snapshot {
        #[command(subcommand)]
        action: SnapshotAction,
    },
    /// Transaction logs.
    Log {
        #[command(subcommand)]
        action: LogAction,
    },
}

#[derive(Subcommand, Debug)]
enum SnapshotAction {
    /// Prints a snapshot file, ZooKeeper 3.8's (`version-2/snapshot.<zxid>`)
    /// or rzk's (`<dataDir>/snap/snapshot.<zxid>`): a summary and every znode
    /// with its stat and ACL (zkSnapShotToolkit). Checks its checksum.
    Dump {
        /// The snapshot file.
        file: PathBuf,
        /// Only the summary (counts and sessions).
        #[arg(long)]
        summary: bool,
    },
}

#[derive(Subcommand, Debug)]
enum LogAction {
    /// Prints every txn of a data directory's log, ZooKeeper 3.8's or rzk's
    /// (or of one log file): zxid, time, session, cxid, type, paths
    /// (zkTxnLogToolkit). Never repairs: a torn tail is reported, not cut.
    Dump {
        /// ZooKeeper's dataLogDir or its version-2; rzk's dataDir, its log/
        /// or its dataLogDir; or one log file.
        dir: PathBuf,
    },
}

fn run_tool(tool: &Tool) -> ExitCode {
    let mut out = String::new();
    let result = match tool {
        Tool::Snapshot {
            action: SnapshotAction::Dump { file, summary },
        } => rzk_server::dump::any_snapshot(file, *summary, &mut out).map_err(|e| e.to_string()),
        Tool::Log {
            action: LogAction::Dump { dir },
        } => rzk_server::dump::any_log(dir, &mut out).map_err(|e| e.to_string()),
        Tool::ImportZookeeper {
            from,
            from_log,
            to,
            to_log,
        } => {
            let opts = rzk_server::import::ImportOptions {
                from: from.clone(),
                from_log: from_log.clone(),
                to: to.clone(),
                to_log: to_log.clone(),
            };
            match rzk_server::import::import_zookeeper(&opts) {
                Ok(report) => {
                    out = format!("{report}\n");
                    Ok(())
                }
                Err(e) => Err(format!("{e}; nothing was written to {}", to.display())),
            }
        }
    };
    print!("{out}");
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rzk: {e}");
            ExitCode::FAILURE
        }
    }
}

fn overrides(cli: &Cli) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    if let Some(p) = cli.client_port {
        out.push(("clientPort".into(), p.to_string()));
    }
    if let Some(a) = &cli.client_port_address {
        out.push(("clientPortAddress".into(), a.clone()));
    }
    if let Some(d) = &cli.data_dir {
        out.push(("dataDir".into(), d.display().to_string()));
    }
    if let Some(d) = &cli.data_log_dir {
        out.push(("dataLogDir".into(), d.display().to_string()));
    }
    if let Some(t) = cli.tick_time {
        out.push(("tickTime".into(), t.to_string()));
    }
    if let Some(f) = cli.log_format {
        out.push(("rzk.log.format".into(), f.to_string()));
    }
    for kv in &cli.set {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(format!("--set {kv:?}: expected key=value"));
        };
        out.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    Ok(out)
}

fn main() -> ExitCode {
    // First, before anything large is allocated and freed (rzk_server::malloc).
    let mmap_threshold = rzk_server::malloc::fix_mmap_threshold();
    let cli = Cli::parse();
    if let Some(tool) = &cli.command {
        return run_tool(tool);
    }
    let config = match overrides(&cli)
        .and_then(|o| ServerConfig::load(cli.config.as_deref(), &o).map_err(|e| e.to_string()))
    {
        Ok(mut c) => {
            c.my_id = cli.id;
            c
        }
        Err(e) => {
            eprintln!("rzk: {e}");
            return ExitCode::from(2);
        }
    };
    // A configuration that cannot describe this member (myid outside the server
    // lines, an unresolvable peer…) is a configuration error: exit 2.
    let membership = match rzk_server::Membership::of(&config) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("rzk: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = logging::init(config.log_format) {
        eprintln!("rzk: {e}");
        return ExitCode::FAILURE;
    }
    for w in &config.warnings {
        tracing::warn!("{w}");
    }
    tracing::debug!(?mmap_threshold, "malloc's mmap threshold");
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rzk: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config, membership)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rzk: {e:#}");
            // A peer that does not resolve, or a quorum port that cannot be
            // opened, is the configuration's fault: exit 2 like a bad key.
            let config_error = matches!(
                e.downcast_ref::<rzk_server::ServerError>(),
                Some(rzk_server::ServerError::Replication(
                    rzk_server::ReplicationError::Config(_)
                        | rzk_server::ReplicationError::Resolve { .. }
                        | rzk_server::ReplicationError::MyId { .. }
                        | rzk_server::ReplicationError::Listen { .. }
                ))
            );
            if config_error {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// The first pause before a member stopped by a full disk starts again.
const DISK_FULL_PAUSE_MIN: std::time::Duration = std::time::Duration::from_secs(1);
/// The longest pause between two starts while the disk stays full.
const DISK_FULL_PAUSE_MAX: std::time::Duration = std::time::Duration::from_secs(30);
/// Free space a member stopped by a full disk waits for, on its data and log
/// directories, before it opens them again: one log segment. Opening on a disk
/// that is still full can fail half-way: rzk-chaos's disk-full fault found
/// sled's metadata store left unreadable ("Read corrupted data") by an open that
/// ran out of space.
const DISK_FULL_RESTART_FREE_MIN: u64 = 64 << 20;

/// Serves until a shutdown signal. A member stopped by a full disk (a log write
/// refused with ENOSPC: nothing of it was acknowledged, the directory holds all
/// before it) starts again from its data directory after a pause that doubles up
/// to 30 s, as a supervisor would restart it and as a ZooKeeper member rejoins:
/// its clients move to other members meanwhile, and it serves again once space
/// is free. While the disk stays full, opening the directory fails too (its
/// metadata store writes when it opens): after a full-disk stop such a failure
/// is retried the same way, since opening acknowledges nothing. Every other
/// failure ends the process.
async fn run(config: ServerConfig, membership: rzk_server::Membership) -> anyhow::Result<()> {
    use rzk_server::{ReplicationError, ServerError};
    let mut pause = DISK_FULL_PAUSE_MIN;
    let mut stopped_for_full_disk = false;
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        let e = match serve_once(config.clone(), &membership, stop.as_mut()).await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        let retry = match e.downcast_ref::<ServerError>() {
            Some(ServerError::DiskFull(_)) => true,
            Some(ServerError::Replication(ReplicationError::Storage { .. })) => {
                stopped_for_full_disk
            }
            _ => false,
        };
        if !retry {
            return Err(e);
        }
        stopped_for_full_disk = true;
        tracing::error!(
            error = %format!("{e:#}"),
            pause_ms = pause.as_millis() as u64,
            "the disk is full: this member stopped serving and starts again from its data directory after a pause"
        );
        let mut wait = pause;
        loop {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = stop.as_mut() => {
                    tracing::info!("stopped");
                    return Ok(());
                }
            }
            let free = [&config.data_dir, &config.data_log_dir]
                .into_iter()
                .filter_map(|d| fs2::available_space(d).ok())
                .min();
            match free {
                Some(free) if free < DISK_FULL_RESTART_FREE_MIN => {
                    tracing::warn!(
                        free_bytes = free,
                        needed_bytes = DISK_FULL_RESTART_FREE_MIN,
                        "the disk is still full: waiting for space before starting again"
                    );
                    wait = DISK_FULL_PAUSE_MIN;
                }
                _ => break,
            }
        }
        pause = (pause * 2).min(DISK_FULL_PAUSE_MAX);
    }
}

/// One start of the member: binds its ports, serves until `stop` or a failure.
async fn serve_once(
    config: ServerConfig,
    membership: &rzk_server::Membership,
    stop: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
) -> anyhow::Result<()> {
    let addr = membership.client_addr;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let mut listeners = rzk_server::Listeners {
        plain: vec![listener],
        ..Default::default()
    };
    if let Some(addr) = config.metrics_addr {
        // As ZooKeeper: a metrics provider that cannot start stops the server.
        let l = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            anyhow::anyhow!("cannot listen on {addr} (metricsProvider.httpPort): {e}")
        })?;
        listeners.metrics = Some(l);
    }
    if let Some(addr) = config.admin_addr {
        // As ZooKeeper: an AdminServer that cannot start is a warning.
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => listeners.admin = Some(l),
            Err(e) => {
                tracing::warn!(%addr, error = %e, "cannot start the AdminServer (admin.serverPort); going on without it")
            }
        }
    }
    if let Some(addr) = config.secure_client_addr {
        let secure = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {addr} (secureClientPort): {e}"))?;
        listeners.secure.push(secure);
    }
    rzk_server::serve_member(config, membership, listeners, None, stop).await?;
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
