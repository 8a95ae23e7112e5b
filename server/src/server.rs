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

use crate::acl::AuthInfo;
use crate::config::ServerConfig;
use crate::conn::{self, ConnCtx};
use crate::core::{CoreConfig, CoreError, CoreMsg};
use crate::preload::Preloaded;
use crate::replication::{open_replicator_preloading, Membership, ReplicationError};
use crate::shell::Shell;
use crate::tls::{TlsAcceptor, TlsError};

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
    /// The secure client port's TLS settings cannot be used.
    #[error("secure client port: {0}")]
    Tls(#[from] TlsError),
    /// The member stopped because a log write found its disk full. Nothing of that
    /// write was acknowledged and the data directory holds everything before it,
    /// so the member can be started again from it once space is free (the `rzk`
    /// binary does so itself, with a growing pause).
    #[error("the disk is full: {0}")]
    DiskFull(#[source] Box<ServerError>),
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
    serve_listeners(
        config,
        Listeners {
            plain: listeners,
            ..Listeners::default()
        },
        shutdown,
    )
    .await
}

/// The sockets a server accepts clients on.
#[derive(Debug, Default)]
pub struct Listeners {
    /// `clientPort`: plaintext.
    pub plain: Vec<TcpListener>,
    /// `secureClientPort`: TLS with the configuration's `ssl.*` settings.
    pub secure: Vec<TcpListener>,
    /// The AdminServer's HTTP port (`admin.serverPort`), if enabled.
    pub admin: Option<TcpListener>,
    /// The Prometheus endpoint (`metricsProvider.httpPort`), if enabled.
    pub metrics: Option<TcpListener>,
}

/// [`serve`] with plain and secure listeners. The TLS settings are checked
/// before the data directory is opened.
pub async fn serve_listeners(
    config: ServerConfig,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let membership = Membership::of(&config)?;
    serve_member(config, &membership, listeners, None, shutdown).await
}

/// [`serve_listeners`] for an ensemble member whose quorum port the caller
/// bound already (tests bind port 0 for every member first, then write the
/// configuration); `None` binds the port of the member's `server.N` line.
pub async fn serve_member(
    config: ServerConfig,
    membership: &Membership,
    listeners: Listeners,
    quorum_listener: Option<TcpListener>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let tls = tls_for(&config, &listeners)?;
    let (quorum, preloaded) =
        open_replicator_preloading(&config, membership, quorum_listener).await?;
    let replicator: Arc<dyn Replicator> = quorum.clone();
    let result = run_inner(
        listeners,
        tls,
        config,
        replicator,
        Some(preloaded),
        shutdown,
    )
    .await;
    quorum.shutdown().await;
    match result {
        Err(e) if quorum.stopped_for_full_disk() => Err(ServerError::DiskFull(Box::new(e))),
        other => other,
    }
}

fn tls_for(
    config: &ServerConfig,
    listeners: &Listeners,
) -> Result<Option<Arc<TlsAcceptor>>, ServerError> {
    if listeners.secure.is_empty() {
        return Ok(None);
    }
    Ok(Some(Arc::new(TlsAcceptor::new(&config.tls)?)))
}

/// Serves clients on `listeners` with `replicator` until `shutdown`
/// completes or replication fails.
pub async fn run(
    listeners: Vec<TcpListener>,
    config: ServerConfig,
    replicator: Arc<dyn Replicator>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let listeners = Listeners {
        plain: listeners,
        ..Listeners::default()
    };
    run_inner(listeners, None, config, replicator, None, shutdown).await
}

/// [`run`] with plain and secure listeners.
pub async fn run_listeners(
    listeners: Listeners,
    config: ServerConfig,
    replicator: Arc<dyn Replicator>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let tls = tls_for(&config, &listeners)?;
    run_inner(listeners, tls, config, replicator, None, shutdown).await
}

async fn run_inner(
    listeners: Listeners,
    tls: Option<Arc<TlsAcceptor>>,
    config: ServerConfig,
    replicator: Arc<dyn Replicator>,
    preloaded: Option<Preloaded>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let server_id = replicator.id();
    let shell = Shell::new(
        CoreConfig::new(config.clone(), server_id),
        replicator,
        preloaded,
    )?;
    let (core_tx, core_rx) = mpsc::channel(CORE_QUEUE_MAX);
    let mut core_task = tokio::spawn(shell.run(core_rx));
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
    // Each accepted socket with the TLS acceptor of its listener, if secure.
    type Accepted = (TcpStream, SocketAddr, Option<Arc<TlsAcceptor>>);
    let (accepted_tx, mut accepted) = mpsc::channel::<Accepted>(64);
    let mut acceptors = JoinSet::new();
    // The HTTP endpoints read snapshots from the core; they stop with the server.
    let mut http = JoinSet::new();
    if let Some(l) = listeners.admin {
        let url = config.admin_command_url.clone();
        http.spawn(crate::admin::serve(l, core_tx.clone(), url));
    }
    if let Some(l) = listeners.metrics {
        http.spawn(crate::metrics::serve(l, core_tx.clone()));
    }
    let plain = listeners.plain.into_iter().map(|l| (l, None));
    let secure = listeners.secure.into_iter().map(|l| (l, tls.clone()));
    for (listener, tls) in plain.chain(secure) {
        if let Ok(addr) = listener.local_addr() {
            if tls.is_some() {
                tracing::info!(%addr, "serving TLS clients");
            } else {
                tracing::info!(%addr, "serving clients");
            }
        }
        let tx = accepted_tx.clone();
        acceptors.spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, peer)) => {
                        if tx.send((stream, peer, tls.clone())).await.is_err() {
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
            Some((stream, peer, tls)) = accepted.recv() => {
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
                // Two kinds of task: a TLS handshake's state is large, and a
                // plain connection's task is only its own state machine Each
                // resolves to the client's address.
                match tls {
                    None => conns.spawn(conn::serve(stream, peer, id, ctx)),
                    Some(tls) => conns.spawn(async move {
                        serve_tls(&tls, stream, peer, id, ctx).await;
                        ip
                    }),
                };
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
    http.abort_all();
    let core_result = match core_result {
        Some(r) => r,
        None => {
            tracing::info!("shutdown requested");
            let _ = core_tx
                .send(CoreMsg::Input(crate::core::Input::Shutdown))
                .await;
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

/// Runs the TLS handshake (bounded by the sessionless timeout, so a client
/// that connects and says nothing cannot hold the slot), then serves the
/// connection. A failed handshake is one warning line and a closed socket.
async fn serve_tls(
    tls: &TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
    id: crate::watch::ConnId,
    ctx: Arc<ConnCtx>,
) {
    let _ = stream.set_nodelay(true);
    let (tls_stream, identity) = match tokio::time::timeout(
        ctx.sessionless_timeout,
        tls.accept(stream),
    )
    .await
    {
        Ok(Ok(done)) => done,
        Ok(Err(e)) => {
            tracing::warn!(%peer, error = %e, "refused a connection on the secure client port");
            return;
        }
        Err(_) => {
            tracing::warn!(%peer, "refused a connection on the secure client port: no TLS handshake within the sessionless timeout");
            return;
        }
    };
    let mut auth = AuthInfo::for_peer(peer.ip());
    if let Some(who) = identity {
        tracing::debug!(%peer, subject = %who.subject, "TLS client certificate");
        auth.add("x509", &who.subject);
        auth.is_super |= who.is_super;
    }
    // The stream whole: the connection reads and writes it from one task.
    conn::serve_stream(tls_stream, peer, auth, id, ctx).await;
}
