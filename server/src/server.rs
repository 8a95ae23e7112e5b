//! `run(listeners, …, shutdown)`: the accept loops, the per-IP connection
//! limit, the core task and graceful shutdown (in the style of mini-redis:
//! the caller owns the listeners, so tests pass their own, bound to port 0).

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rzk_quorum::Replicator;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;

use crate::config::ServerConfig;
use crate::conn::{self, ConnCtx};
use crate::core::{Core, CoreConfig, CoreError, CoreMsg};
use crate::replication::{open_replicator, Membership, ReplicationError};

/// Why the server stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The replicator could not be opened (configuration, data directory,
    /// quorum port).
    #[error(transparent)]
    Replication(#[from] ReplicationError),
    /// Replication or recovery failed.
    #[error(transparent)]
    Core(#[from] CoreError),
}

/// Messages the core may queue before connection readers wait.
const CORE_QUEUE_MAX: usize = 4096;
/// How long shutdown waits for connections to flush their last replies.
const SHUTDOWN_FLUSH_MAX: Duration = Duration::from_secs(5);

/// Opens the data directory, serves clients on `listeners` until `shutdown`
/// completes, then stops gracefully: no new connections, in-flight writes
/// finished and answered, connections closed, the log shut down.
pub async fn serve(
    config: ServerConfig,
    listeners: Vec<TcpListener>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let membership = Membership::of(&config)?;
    serve_member(config, &membership, listeners, None, shutdown).await
}

/// [`serve`] for a member whose quorum port the caller bound already (tests bind
/// port 0 for every member first, then write the configuration).
pub async fn serve_member(
    config: ServerConfig,
    membership: &Membership,
    listeners: Vec<TcpListener>,
    quorum_listener: Option<TcpListener>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let quorum = open_replicator(&config, membership, quorum_listener).await?;
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
    let voters = replicator.stats().voters;
    let core = Core::new(
        CoreConfig {
            server: config.clone(),
            server_id,
            voters,
        },
        replicator,
    )?;
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
