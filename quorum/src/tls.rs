//! Mutual TLS on the quorum port (ZooKeeper's `sslQuorum=true`).
//!
//! The gRPC transport carries its streams over TLS when
//! [`crate::grpc::GrpcConfig::tls`] is set: the accepting side asks every
//! connecting member for its certificate and checks it against the trust store
//! (the [`rustls::ServerConfig`] given must require client certificates), and
//! the dialing side presents its own certificate and checks the accepting
//! member's. The caller builds both rustls configurations (rzk-server reads
//! them from the `ssl.quorum.*` keys); this module only runs the handshakes.
//!
//! A connection whose handshake fails (a member without TLS, a certificate
//! from another CA, no certificate) is closed with one warning naming the
//! remote address and the reason; nothing from it reaches the core, so such a
//! member can neither join nor vote. The other connections do not notice.
//!
//! ```no_run
//! # fn f(server: std::sync::Arc<rustls::ServerConfig>, client: std::sync::Arc<rustls::ClientConfig>) {
//! let tls = rzk_quorum::tls::QuorumTls::new(server, client);
//! # let _ = tls; }
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tonic::codegen::http::Uri;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::PeerId;

/// How long a connecting member has to finish its handshake before the
/// connection is closed (a silent or plaintext peer cannot hold a slot).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepted connections waiting for the gRPC server, at most.
const ACCEPTED_QUEUE_MAX: usize = 64;

/// The rustls configurations of one member's quorum port.
#[derive(Clone)]
pub struct QuorumTls {
    /// For connections this member accepts; must require a client certificate.
    pub server: Arc<rustls::ServerConfig>,
    /// For connections this member dials; must carry this member's certificate.
    pub client: Arc<rustls::ClientConfig>,
    /// The name each member's certificate is checked against when dialed (the
    /// host of its `server.N` line); a member not here is checked against its
    /// IP address.
    pub names: BTreeMap<PeerId, ServerName<'static>>,
}

impl std::fmt::Debug for QuorumTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumTls").finish_non_exhaustive()
    }
}

impl QuorumTls {
    /// Both ends' configurations; ALPN `h2` is set on both (gRPC is HTTP/2).
    pub fn new(server: Arc<rustls::ServerConfig>, client: Arc<rustls::ClientConfig>) -> QuorumTls {
        let mut server = (*server).clone();
        server.alpn_protocols = vec![b"h2".to_vec()];
        let mut client = (*client).clone();
        client.alpn_protocols = vec![b"h2".to_vec()];
        QuorumTls {
            server: Arc::new(server),
            client: Arc::new(client),
            names: BTreeMap::new(),
        }
    }

    /// The name `peer`'s certificate must carry when dialed at `addr`.
    pub(crate) fn name_of(&self, peer: PeerId, addr: SocketAddr) -> ServerName<'static> {
        self.names
            .get(&peer)
            .cloned()
            .unwrap_or_else(|| ServerName::IpAddress(addr.ip().into()))
    }
}

/// One accepted TLS connection, as tonic's server wants it.
pub(crate) struct TlsConn {
    stream: tokio_rustls::server::TlsStream<TcpStream>,
    remote: SocketAddr,
    local: Option<SocketAddr>,
}

impl Connected for TlsConn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo {
            local_addr: self.local,
            remote_addr: Some(self.remote),
        }
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Accepts on `listener`, runs each handshake in its own task (one slow peer
/// does not hold up the others) and yields the connections that completed it.
/// The accept task ends when the returned stream is dropped.
pub(crate) fn incoming(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
) -> impl futures::Stream<Item = Result<TlsConn, std::io::Error>> + Send + 'static {
    let (tx, rx) = mpsc::channel::<TlsConn>(ACCEPTED_QUEUE_MAX);
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::spawn(async move {
        loop {
            let (tcp, remote) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        tracing::warn!(error = %e, "quorum port: accept failed");
                        continue;
                    }
                },
                () = tx.closed() => return,
            };
            let _ = tcp.set_nodelay(true);
            let local = tcp.local_addr().ok();
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx
                            .send(TlsConn {
                                stream,
                                remote,
                                local,
                            })
                            .await;
                    }
                    Ok(Err(e)) => tracing::warn!(
                        %remote,
                        error = %e,
                        "refused a quorum connection: TLS handshake failed (sslQuorum is on: \
                         a member without TLS, or with a certificate the trust store does not accept?)"
                    ),
                    Err(_) => tracing::warn!(
                        %remote,
                        "refused a quorum connection: no TLS handshake within {HANDSHAKE_TIMEOUT:?}"
                    ),
                }
            });
        }
    });
    futures::stream::unfold(
        rx,
        |mut rx| async move { rx.recv().await.map(|c| (Ok(c), rx)) },
    )
}

/// Dials a member over TLS for tonic's channel: connects to `addr` (the URI
/// is ignored) and checks the member's certificate for `name`.
#[derive(Clone)]
pub(crate) struct Connector {
    pub(crate) config: Arc<rustls::ClientConfig>,
    pub(crate) addr: SocketAddr,
    pub(crate) name: ServerName<'static>,
    pub(crate) peer: u64,
}

type Connecting = Pin<
    Box<
        dyn Future<
                Output = Result<
                    hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<TcpStream>>,
                    std::io::Error,
                >,
            > + Send,
    >,
>;

impl tonic::codegen::Service<Uri> for Connector {
    type Response = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: Uri) -> Connecting {
        let this = self.clone();
        Box::pin(async move {
            let tcp = TcpStream::connect(this.addr).await?;
            let _ = tcp.set_nodelay(true);
            let connector = tokio_rustls::TlsConnector::from(this.config.clone());
            match connector.connect(this.name.clone(), tcp).await {
                Ok(stream) => Ok(hyper_util::rt::TokioIo::new(stream)),
                Err(e) => {
                    // A TLS failure, unlike a peer that is down, is a
                    // configuration problem the operator must see.
                    tracing::warn!(
                        peer = this.peer,
                        addr = %this.addr,
                        error = %e,
                        "quorum connection refused: TLS handshake with the member failed"
                    );
                    Err(e)
                }
            }
        })
    }
}
