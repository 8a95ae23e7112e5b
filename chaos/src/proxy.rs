//! A userspace TCP proxy for one directed link, with a switch: while the link
//! is *down* nothing crosses it, in either direction, and nothing is lost or
//! reset: bytes wait in the sockets' buffers, and a connection made meanwhile
//! is accepted but not carried on to the target. That is what a network
//! partition looks like to TCP (silence, then the application's own timeouts),
//! without root and without touching the host's firewall. When the link comes
//! back up, waiting bytes flow again (as TCP retransmission would deliver
//! them), and a peer that gave up in between sees its connection end then.
//!
//! Where a proxy cannot look like the network: a TCP handshake with the proxy
//! always succeeds, so a target that is not listening cannot be "refused".
//! Two things keep that close to the truth: while the chaos tool knows a
//! target is down (killed), the link closes every connection at once and
//! closes new ones as soon as they are accepted ([`Link::set_listening`]), so
//! a peer fails at once as it would on a refusal (it sees the connection end
//! instead); and a connection whose target refuses while its member runs is
//! held while the proxy retries for up to [`UPSTREAM_RETRY`] (a leader binds
//! its quorum port a moment after it wins the election, and followers connect
//! at once), and only then closed. The listening port itself is never given
//! up: another process could take it meanwhile (seen: a restarted member's
//! link could not bind its port again).
//!
//! One [`Link`] listens on a free loopback port and forwards to one target.
//! The chaos tool puts one in front of every quorum and election port for
//! every ordered pair of members, and one in front of every client port.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Size of the buffer of one direction of one proxied connection.
const CHUNK_BYTES: usize = 16 * 1024;

/// How long a connection waits for a target that refuses (see the module docs).
pub const UPSTREAM_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// One directed proxy link.
#[derive(Debug)]
pub struct Link {
    /// Where clients of the link connect (a free loopback port).
    local: SocketAddr,
    /// Up (true) or down (false); every connection task watches it.
    state: watch::Sender<bool>,
    /// Connections accepted so far (for tests and reports).
    accepted: Arc<AtomicU64>,
    /// Closed (true) while the target is known to be down.
    refusing: watch::Sender<bool>,
    /// The accept loop; aborted on drop, which also ends its connections.
    accept: JoinHandle<()>,
}

impl Link {
    /// Binds a free port on 127.0.0.1 and forwards to `target`; starts up.
    pub async fn start(target: SocketAddr) -> std::io::Result<Link> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let local = listener.local_addr()?;
        let (state, _) = watch::channel(true);
        let (refusing, _) = watch::channel(false);
        let accepted = Arc::new(AtomicU64::new(0));
        let accept = tokio::spawn(accept_loop(
            listener,
            target,
            state.clone(),
            refusing.clone(),
            accepted.clone(),
        ));
        Ok(Link {
            local,
            state,
            accepted,
            refusing,
            accept,
        })
    }

    /// Closes every connection through the link and every new one at once
    /// (`false`: the target is down), or carries them again (`true`).
    pub fn set_listening(&mut self, listening: bool) -> std::io::Result<()> {
        self.refusing.send_replace(!listening);
        Ok(())
    }

    /// The address to connect to.
    pub fn local(&self) -> SocketAddr {
        self.local
    }

    /// Takes the link up (true) or down (false).
    pub fn set_up(&self, up: bool) {
        self.state.send_replace(up);
    }

    /// Whether the link is up.
    pub fn is_up(&self) -> bool {
        *self.state.borrow()
    }

    /// Connections accepted since the start.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    state: watch::Sender<bool>,
    refusing: watch::Sender<bool>,
    accepted: Arc<AtomicU64>,
) {
    // Connection tasks live in this set, so aborting the accept loop (on drop)
    // ends them too.
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted_conn = listener.accept() => {
                let Ok((client, _)) = accepted_conn else { continue };
                accepted.fetch_add(1, Ordering::Relaxed);
                if *refusing.borrow() {
                    drop(client);
                    continue;
                }
                let refused = refusing.subscribe();
                let up = state.subscribe();
                conns.spawn(async move {
                    tokio::select! {
                        _ = carry(client, target, up) => {}
                        _ = until_refused(refused) => {}
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Resolves once the link starts refusing (its target went down).
async fn until_refused(mut refusing: watch::Receiver<bool>) {
    loop {
        if *refusing.borrow_and_update() {
            return;
        }
        if refusing.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Waits until the link is up; false if the link is gone.
async fn until_up(state: &mut watch::Receiver<bool>) -> bool {
    loop {
        if *state.borrow_and_update() {
            return true;
        }
        if state.changed().await.is_err() {
            return false;
        }
    }
}

async fn carry(client: TcpStream, target: SocketAddr, mut state: watch::Receiver<bool>) {
    // A connection made while the link is down waits, as a SYN would.
    if !until_up(&mut state).await {
        return;
    }
    let deadline = tokio::time::Instant::now() + UPSTREAM_RETRY;
    let upstream = loop {
        match TcpStream::connect(target).await {
            Ok(u) => break u,
            // Not listening (yet): retry briefly, then the client sees EOF.
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            Err(_) => return,
        }
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (ur, uw) = upstream.into_split();
    tokio::join!(pump(cr, uw, state.clone()), pump(ur, cw, state));
}

/// Copies one direction while the link is up; stops reading while it is down.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut state: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        if !until_up(&mut state).await {
            return;
        }
        tokio::select! {
            read = from.read(&mut buf) => {
                match read {
                    Ok(0) | Err(_) => {
                        let _ = to.shutdown().await;
                        return;
                    }
                    Ok(n) => {
                        if to.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                }
            }
            // The link changed while we waited for bytes: check it again.
            changed = state.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn echo_server() -> SocketAddr {
        let l = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    loop {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => s.write_all(&buf[..n]).await.unwrap(),
                        }
                    }
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
        s.write_all(msg).await.unwrap();
        let mut buf = vec![0u8; msg.len()];
        s.read_exact(&mut buf).await.unwrap();
        buf
    }

    #[tokio::test]
    async fn bytes_cross_an_up_link() {
        let link = Link::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(link.local()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"hello").await, b"hello");
        assert_eq!(link.accepted(), 1);
    }

    #[tokio::test]
    async fn a_down_link_holds_bytes_until_it_heals_and_loses_none() {
        let link = Link::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(link.local()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"one").await, b"one");
        link.set_up(false);
        s.write_all(b"two").await.unwrap();
        let mut buf = [0u8; 3];
        // Nothing comes back while the link is down (the deadline is the
        // assertion: an answer within it would be a leak through the partition).
        let r = tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut buf)).await;
        assert!(r.is_err(), "bytes crossed a down link");
        link.set_up(true);
        tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut buf))
            .await
            .expect("bytes held by the partition arrive after heal")
            .unwrap();
        assert_eq!(&buf, b"two");
    }

    #[tokio::test]
    async fn a_connection_made_during_a_partition_is_carried_after_heal() {
        let link = Link::start(echo_server().await).await.unwrap();
        link.set_up(false);
        let mut s = TcpStream::connect(link.local()).await.unwrap();
        s.write_all(b"late").await.unwrap();
        let mut buf = [0u8; 4];
        let r = tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut buf)).await;
        assert!(r.is_err(), "a connection crossed a down link");
        link.set_up(true);
        tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut buf))
            .await
            .expect("carried after heal")
            .unwrap();
        assert_eq!(&buf, b"late");
    }

    #[tokio::test]
    async fn a_refusing_link_ends_connections_at_once_and_carries_again_on_its_port() {
        let mut link = Link::start(echo_server().await).await.unwrap();
        let port = link.local();
        let mut old = TcpStream::connect(port).await.unwrap();
        assert_eq!(roundtrip(&mut old, b"before").await, b"before");
        link.set_listening(false).unwrap();
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(10), old.read(&mut buf)).await;
        assert!(
            matches!(n, Ok(Ok(0)) | Ok(Err(_))),
            "an open connection must end: {n:?}"
        );
        let mut new = TcpStream::connect(port).await.unwrap();
        let n = tokio::time::timeout(Duration::from_secs(10), new.read(&mut buf)).await;
        assert!(
            matches!(n, Ok(Ok(0)) | Ok(Err(_))),
            "a new connection must end at once: {n:?}"
        );
        link.set_listening(true).unwrap();
        let mut s = TcpStream::connect(port).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"again").await, b"again");
    }

    #[tokio::test]
    async fn a_dead_target_ends_the_client_connection() {
        let l = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let dead = l.local_addr().unwrap();
        drop(l);
        let link = Link::start(dead).await.unwrap();
        let mut s = TcpStream::connect(link.local()).await.unwrap();
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("the proxy closes a connection it cannot carry");
        assert!(matches!(n, Ok(0) | Err(_)));
    }
}
