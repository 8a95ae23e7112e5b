//! `run(listeners, …, shutdown)`: the accept loops, the per-IP connection
//! limit, the core task and graceful shutdown (in the style of mini-redis:
//! the caller owns the listeners, so tests pass their own, bound to port 0).

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rzk_quorum::{PeerId, QuorumOfOne, Replicator, StandaloneError, StandaloneOptions, WalOptions};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;

use crate::config::ServerConfig;
use crate::conn::{self, ConnCtx};
use crate::core::{Core, CoreConfig, CoreError, CoreMsg};

/// Why the server stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The durable log could not be opened.
    #[error(transparent)]
    Storage(#[from] StandaloneError),
    /// Replication or recovery failed.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// `myid` could not be read.
    #[error("cannot read {path}: {reason}")]
    MyId {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// Messages the core may queue before connection readers wait.
const CORE_QUEUE_MAX: usize = 4096;
/// How long shutdown waits for connections to flush their last replies.
const SHUTDOWN_FLUSH_MAX: Duration = Duration::from_secs(5);

/// The server id: 1 standalone (as ZooKeeper), or `myid` from the data
/// directory when the configuration has `server.N` lines.
pub fn server_id(config: &ServerConfig) -> Result<u64, ServerError> {
    if config.servers.is_empty() {
        return Ok(1);
    }
    let path = config.data_dir.join("myid");
    let text = std::fs::read_to_string(&path).map_err(|e| ServerError::MyId {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    text.trim().parse::<u64>().map_err(|e| ServerError::MyId {
        path,
        reason: format!("not a number: {e}"),
    })
}

/// Opens the standalone replicator (a quorum of one) for `config`.
pub async fn open_standalone(config: &ServerConfig) -> Result<Arc<QuorumOfOne>, ServerError> {
    let id = server_id(config)?;
    // The log fsyncs a directory's parent, which a bare relative name such as
    // `data` does not have: hand it absolute paths.
    let absolute = |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
    let data_dir = absolute(&config.data_dir);
    let mut wal = WalOptions {
        snap_retain_count: config.snap_retain_count as usize,
        ..WalOptions::default()
    };
    wal.log.unsafe_no_fsync = config.unsafe_no_fsync;
    if config.data_log_dir != config.data_dir {
        wal.log_dir = Some(absolute(&config.data_log_dir));
    }
    let options = StandaloneOptions {
        wal,
        id: PeerId(id),
        ..StandaloneOptions::default()
    };
    Ok(QuorumOfOne::open(&data_dir, options).await?)
}

/// Opens the data directory, serves clients on `listeners` until `shutdown`
/// completes, then stops gracefully: no new connections, in-flight writes
/// finished and answered, connections closed, the log shut down.
pub async fn serve(
    config: ServerConfig,
    listeners: Vec<TcpListener>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let quorum = open_standalone(&config).await?;
    let replicator: Arc<dyn Replicator> = quorum.clone();
    let result = run(listeners, config, replicator, shutdown).await;
    quorum.shutdown().await;
    result
}

/// Serves clients on `listeners` with `replicator` until `shutdown`
/// completes or replication fails.
pub async fn run(
    listeners: Vec<TcpListener>,
    config: ServerConfig,
    replicator: Arc<dyn Replicator>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let server_id = replicator.id().0;
    let core = Core::recover(
        CoreConfig {
            server: config.clone(),
            server_id,
        },
        replicator,
    )
    .await?;
    let (core_tx, core_rx) = mpsc::channel(CORE_QUEUE_MAX);
    let mut core_task = tokio::spawn(core.run(core_rx));
    let ctx = Arc::new(ConnCtx {
        core: core_tx.clone(),
        global: Arc::new(Semaphore::new(
            config.global_outstanding_limit.max(1) as usize
        )),
        outstanding_max: config.connection_outstanding_max as usize,
        outgoing_bytes_max: config.connection_outgoing_bytes_max as usize,
        frame_bytes_max: config.jute_max_buffer as usize,
        sessionless_timeout: Duration::from_millis(config.sessionless_timeout_ms),
        whitelist: config.four_letter_words.clone(),
    });
    let (accepted_tx, mut accepted) = mpsc::channel::<(TcpStream, SocketAddr)>(64);
    let mut acceptors = JoinSet::new();
    for listener in listeners {
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "serving clients");
        }
        let tx = accepted_tx.clone();
        acceptors.spawn(async move {
            loop {
                match listener.accept().await {
                    Ok(pair) => {
                        if tx.send(pair).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        // Out of file descriptors and the like: wait, then go on.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
    }
    drop(accepted_tx);
    let per_ip_max = config.max_client_cnxns;
    let mut per_ip: HashMap<IpAddr, u32> = HashMap::new();
    let mut conns: JoinSet<IpAddr> = JoinSet::new();
    let mut next_id = 1u64;
    tokio::pin!(shutdown);
    let core_result = loop {
        tokio::select! {
            _ = &mut shutdown => break None,
            r = &mut core_task => break Some(r),
            Some((stream, peer)) = accepted.recv() => {
                let ip = peer.ip();
                let n = per_ip.entry(ip).or_insert(0);
                if per_ip_max > 0 && *n >= per_ip_max {
                    tracing::warn!(%peer, max = per_ip_max, "too many connections from this address (maxClientCnxns): closing");
                    drop(stream);
                    continue;
                }
                *n += 1;
                let id = next_id;
                next_id += 1;
                let ctx = ctx.clone();
                conns.spawn(async move {
                    conn::serve(stream, peer, id, ctx).await;
                    ip
                });
            }
            Some(done) = conns.join_next(), if !conns.is_empty() => {
                if let Ok(ip) = done {
                    if let Some(n) = per_ip.get_mut(&ip) {
                        *n -= 1;
                        if *n == 0 {
                            per_ip.remove(&ip);
                        }
                    }
                }
            }
        }
    };
    acceptors.abort_all();
    let core_result = match core_result {
        Some(r) => r,
        None => {
            tracing::info!("shutdown requested");
            let _ = core_tx.send(CoreMsg::Shutdown).await;
            (&mut core_task).await
        }
    };
    drop(core_tx);
    let _ = tokio::time::timeout(SHUTDOWN_FLUSH_MAX, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    conns.abort_all();
    match core_result {
        Ok(r) => r.map_err(ServerError::from),
        Err(e) => Err(ServerError::Core(CoreError::Commits(format!(
            "core task failed: {e}"
        )))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_id_is_one_standalone_and_myid_in_an_ensemble() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = ServerConfig::parse(&format!("dataDir={}\n", dir.path().display())).unwrap();
        assert_eq!(server_id(&cfg).unwrap(), 1);
        cfg = ServerConfig::parse(&format!(
            "dataDir={}\nserver.3=a:2888:3888\n",
            dir.path().display()
        ))
        .unwrap();
        assert!(matches!(server_id(&cfg), Err(ServerError::MyId { .. })));
        std::fs::write(dir.path().join("myid"), "3\n").unwrap();
        assert_eq!(server_id(&cfg).unwrap(), 3);
        std::fs::write(dir.path().join("myid"), "three").unwrap();
        assert!(server_id(&cfg).is_err());
    }
}
