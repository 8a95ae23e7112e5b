//! One ZooKeeper session over one TCP connection, driven by hand with
//! rzk-wire's [`ClientCodec`]: the connect handshake, one-at-a-time calls,
//! batches of pipelined calls, pings and notifications.
//!
//! The timed hot path of `rzk-bench run` does not use [`Conn::call`]: it
//! splits the connection ([`Conn::into_parts`]) and drives the two halves
//! itself (see [`crate::pipeline`]). Everything else (setup, cleanup, watches,
//! storms, idle sessions, wait-serving) uses this module.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rzk_wire::client::Incoming;
use rzk_wire::{
    ClientCodec, ConnectRequest, ErrorCode, Notification, OpCode, Request, RequestFrame, Response,
    SessionId, Xid,
};
use rzk_zxid::Zxid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::{Decoder, Encoder};

use crate::error::BenchError;

/// Largest reply payload a benchmark connection accepts: 64 MiB, so that the
/// cleanup's getChildren of a namespace with a few hundred thousand children
/// still decodes (ZooKeeper does not limit reply sizes).
pub const REPLY_BYTES_MAX: usize = 64 << 20;

/// Read buffer growth step. Small, because `idle-sessions` holds ten
/// thousand connections; a large reply grows the buffer as it arrives.
const READ_CHUNK_BYTES: usize = 4 * 1024;

/// How many requests [`Conn::call_many`] keeps in flight.
pub const CALL_MANY_WINDOW: usize = 128;

/// One established session.
#[derive(Debug)]
pub struct Conn {
    /// The socket.
    stream: TcpStream,
    /// Decodes replies; encodes requests.
    codec: ClientCodec,
    /// Bytes read but not yet decoded.
    rbuf: BytesMut,
    /// Frames encoded but not yet written.
    wbuf: BytesMut,
    /// The xid the next request gets (1, 2, ...).
    next_xid: i32,
    /// The session the server gave us.
    session_id: SessionId,
    /// The session's password, as the ConnectResponse gave it (to resume it).
    passwd: Bytes,
    /// The negotiated session timeout.
    timeout_ms: i32,
    /// The server's address as given, for messages.
    server: String,
    /// Notifications that arrived while a call waited for its reply.
    notifications: VecDeque<Notification>,
}

/// The two halves of a [`Conn`] for a caller that drives reads and writes
/// concurrently ([`crate::pipeline`]).
#[derive(Debug)]
pub struct ConnParts {
    /// The read half.
    pub reader: tokio::net::tcp::OwnedReadHalf,
    /// The write half.
    pub writer: tokio::net::tcp::OwnedWriteHalf,
    /// The codec (past the handshake), for decoding replies.
    pub codec: ClientCodec,
    /// Bytes already read and not yet decoded.
    pub rbuf: BytesMut,
    /// The next xid to use.
    pub next_xid: i32,
    /// The negotiated session timeout.
    pub timeout_ms: i32,
}

impl Conn {
    /// Opens a TCP connection to `server` and establishes a new session asking
    /// for `timeout_ms`; fails after `limit` in total.
    pub async fn connect(
        server: &str,
        timeout_ms: i32,
        limit: Duration,
    ) -> Result<Conn, BenchError> {
        Conn::handshake(server, timeout_ms, SessionId::NONE, None, limit).await
    }

    /// Opens a TCP connection to `server` and resumes `session` (a session
    /// another connection created) with its password; fails after `limit` in
    /// total, and if the server answers with another session or refuses it
    /// (expired: timeout 0).
    pub async fn resume(
        server: &str,
        session: SessionId,
        passwd: Bytes,
        timeout_ms: i32,
        limit: Duration,
    ) -> Result<Conn, BenchError> {
        let conn = Conn::handshake(server, timeout_ms, session, Some(passwd), limit).await?;
        if conn.session_id != session {
            return Err(BenchError::WrongAnswer(format!(
                "{server}: resuming session {session} answered session {}",
                conn.session_id
            )));
        }
        Ok(conn)
    }

    async fn handshake(
        server: &str,
        timeout_ms: i32,
        session: SessionId,
        passwd: Option<Bytes>,
        limit: Duration,
    ) -> Result<Conn, BenchError> {
        let inner = Conn::connect_inner(server, timeout_ms, session, passwd);
        match tokio::time::timeout(limit, inner).await {
            Ok(result) => result,
            Err(_) => Err(BenchError::Timeout {
                what: "connect handshake".into(),
                server: server.into(),
                after: limit,
            }),
        }
    }

    async fn connect_inner(
        server: &str,
        timeout_ms: i32,
        session: SessionId,
        passwd: Option<Bytes>,
    ) -> Result<Conn, BenchError> {
        let stream = TcpStream::connect(server)
            .await
            .map_err(|source| BenchError::Io {
                what: "connect to",
                server: server.into(),
                source,
            })?;
        // Small requests must leave at once; Nagle would add up to 40 ms.
        let _ = stream.set_nodelay(true);
        let mut conn = Conn {
            stream,
            codec: ClientCodec::with_limits(
                REPLY_BYTES_MAX,
                rzk_wire::REQUEST_FRAME_BYTES_MAX_DEFAULT,
            ),
            rbuf: BytesMut::with_capacity(READ_CHUNK_BYTES),
            wbuf: BytesMut::with_capacity(256),
            next_xid: 1,
            session_id: SessionId::NONE,
            passwd: Bytes::new(),
            timeout_ms,
            server: server.into(),
            notifications: VecDeque::new(),
        };
        let request = ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: Zxid::ZERO,
            timeout_ms,
            session_id: session,
            passwd: passwd.unwrap_or_else(|| Bytes::from_static(&[0; 16])),
            read_only: Some(false),
        };
        conn.codec
            .encode(request, &mut conn.wbuf)
            .map_err(|source| conn.wire_error(source))?;
        conn.flush().await?;
        let Incoming::Connect(response) = conn.next_incoming().await? else {
            return Err(BenchError::WrongAnswer(format!(
                "{server}: the first frame after the ConnectRequest was not a ConnectResponse"
            )));
        };
        if response.timeout_ms <= 0 {
            return Err(BenchError::SessionRefused {
                server: server.into(),
                timeout_ms: response.timeout_ms,
            });
        }
        conn.session_id = response.session_id;
        conn.passwd = response.passwd;
        conn.timeout_ms = response.timeout_ms;
        Ok(conn)
    }

    /// The session id the server assigned.
    pub fn session_id(&self) -> SessionId {
        self.session_id
    }

    /// The session's password (what resuming it needs).
    pub fn passwd(&self) -> &Bytes {
        &self.passwd
    }

    /// The negotiated session timeout.
    pub fn timeout_ms(&self) -> i32 {
        self.timeout_ms
    }

    /// How often an idle session must ping: a third of the negotiated timeout.
    pub fn ping_interval(&self) -> Duration {
        ping_interval(self.timeout_ms)
    }

    /// How long a call waits for its reply: the negotiated session timeout
    /// (after that the server would have expired the session anyway).
    pub fn reply_timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1) as u64)
    }

    /// The server's address as given.
    pub fn server(&self) -> &str {
        &self.server
    }

    fn wire_error(&self, source: rzk_wire::WireError) -> BenchError {
        BenchError::Wire {
            server: self.server.clone(),
            source,
        }
    }

    /// Encodes `request` with the next xid into the write buffer (not sent
    /// until [`Conn::flush`]) and returns that xid.
    pub fn queue(&mut self, request: &Request) -> Result<Xid, BenchError> {
        let xid = Xid(self.next_xid);
        self.next_xid += 1;
        let frame = RequestFrame {
            xid,
            request: request.clone(),
        };
        self.codec
            .encode(&frame, &mut self.wbuf)
            .map_err(|source| self.wire_error(source))?;
        Ok(xid)
    }

    /// Queues a ping (xid -2); its reply is skipped by the readers.
    pub fn queue_ping(&mut self) -> Result<(), BenchError> {
        self.codec
            .encode(&RequestFrame::ping(), &mut self.wbuf)
            .map_err(|source| self.wire_error(source))
    }

    /// Writes everything queued.
    pub async fn flush(&mut self) -> Result<(), BenchError> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        let result = self.stream.write_all(&self.wbuf).await;
        self.wbuf.clear();
        result.map_err(|source| BenchError::Io {
            what: "write to",
            server: self.server.clone(),
            source,
        })
    }

    /// The next thing the server sent. Cancel-safe: bytes read are kept in the
    /// connection's buffer.
    pub async fn next_incoming(&mut self) -> Result<Incoming, BenchError> {
        loop {
            match self.codec.decode(&mut self.rbuf) {
                Ok(Some(item)) => return Ok(item),
                Ok(None) => {}
                Err(source) => return Err(self.wire_error(source)),
            }
            self.rbuf.reserve(READ_CHUNK_BYTES);
            let n = self
                .stream
                .read_buf(&mut self.rbuf)
                .await
                .map_err(|source| BenchError::Io {
                    what: "read from",
                    server: self.server.clone(),
                    source,
                })?;
            if n == 0 {
                return Err(BenchError::Closed {
                    server: self.server.clone(),
                    context: String::new(),
                });
            }
        }
    }

    /// Waits for the reply to `xid` (sent as `op` on `path`), skipping ping
    /// replies and keeping notifications for [`Conn::take_notification`].
    /// A reply to any other xid is a protocol violation: replies come in
    /// request order.
    async fn reply_to(
        &mut self,
        xid: Xid,
        op: OpCode,
        path: &str,
    ) -> Result<Result<Response, ErrorCode>, BenchError> {
        let limit = self.reply_timeout();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let incoming = match tokio::time::timeout_at(deadline, self.next_incoming()).await {
                Ok(incoming) => incoming?,
                Err(_) => {
                    return Err(BenchError::Timeout {
                        what: format!("reply to {} {path} (xid {xid})", op.zk_name()),
                        server: self.server.clone(),
                        after: limit,
                    })
                }
            };
            match incoming {
                Incoming::Notification(n) => self.notifications.push_back(n),
                Incoming::Reply(raw) if raw.header.xid == Xid::PING => {}
                Incoming::Reply(raw) => {
                    if raw.header.xid != xid {
                        return Err(BenchError::WrongAnswer(format!(
                            "{} {path}: reply carries xid {} but the oldest outstanding request has xid {xid}",
                            op.zk_name(),
                            raw.header.xid
                        )));
                    }
                    let reply = raw.decode(op).map_err(|source| self.wire_error(source))?;
                    return Ok(reply.result);
                }
                Incoming::Connect(_) => {
                    return Err(BenchError::WrongAnswer(format!(
                        "{} {path}: a second ConnectResponse arrived",
                        op.zk_name()
                    )))
                }
            }
        }
    }

    /// Sends one request and waits for its reply. `Ok(Err(code))` is an error
    /// reply; `Err` is a broken connection or protocol.
    pub async fn call(
        &mut self,
        request: &Request,
    ) -> Result<Result<Response, ErrorCode>, BenchError> {
        let xid = self.queue(request)?;
        self.flush().await?;
        self.reply_to(xid, request.opcode(), request.path().unwrap_or(""))
            .await
    }

    /// Sends one request and requires success.
    pub async fn call_ok(&mut self, request: &Request) -> Result<Response, BenchError> {
        self.call(request)
            .await?
            .map_err(|code| BenchError::Unexpected {
                op: request.opcode().zk_name(),
                path: request.path().unwrap_or("").into(),
                code,
            })
    }

    /// Sends `requests` with up to [`CALL_MANY_WINDOW`] in flight and returns
    /// their results in order.
    pub async fn call_many(
        &mut self,
        requests: &[Request],
    ) -> Result<Vec<Result<Response, ErrorCode>>, BenchError> {
        let mut results = Vec::with_capacity(requests.len());
        let mut outstanding: VecDeque<(Xid, usize)> = VecDeque::new();
        let mut next = 0;
        while results.len() < requests.len() {
            while next < requests.len() && outstanding.len() < CALL_MANY_WINDOW {
                outstanding.push_back((self.queue(&requests[next])?, next));
                next += 1;
            }
            self.flush().await?;
            // Read half a window before refilling, so the pipe stays full.
            let low = if next < requests.len() {
                CALL_MANY_WINDOW / 2
            } else {
                0
            };
            while outstanding.len() > low {
                let (xid, i) = outstanding.pop_front().expect("outstanding is not empty");
                let r = &requests[i];
                results.push(
                    self.reply_to(xid, r.opcode(), r.path().unwrap_or(""))
                        .await?,
                );
            }
        }
        Ok(results)
    }

    /// A notification that arrived during a call, if any.
    pub fn take_notification(&mut self) -> Option<Notification> {
        self.notifications.pop_front()
    }

    /// Waits for the next notification, pinging every third of the session
    /// timeout while it waits, for at most `limit`.
    pub async fn next_notification(&mut self, limit: Duration) -> Result<Notification, BenchError> {
        if let Some(n) = self.notifications.pop_front() {
            return Ok(n);
        }
        let deadline = tokio::time::Instant::now() + limit;
        let ping = self.ping_interval();
        loop {
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(BenchError::Timeout {
                    what: "watch notification".into(),
                    server: self.server.clone(),
                    after: limit,
                });
            }
            let wait = (deadline - now).min(ping);
            match tokio::time::timeout(wait, self.next_incoming()).await {
                Err(_) => {
                    self.queue_ping()?;
                    self.flush().await?;
                }
                Ok(incoming) => match incoming? {
                    Incoming::Notification(n) => return Ok(n),
                    Incoming::Reply(raw) if raw.header.xid == Xid::PING => {}
                    Incoming::Reply(raw) => {
                        return Err(BenchError::WrongAnswer(format!(
                            "a reply with xid {} arrived while no request was outstanding",
                            raw.header.xid
                        )))
                    }
                    Incoming::Connect(_) => {
                        return Err(BenchError::WrongAnswer(
                            "a second ConnectResponse arrived".into(),
                        ))
                    }
                },
            }
        }
    }

    /// Sends a ping and waits for its reply (notifications that arrive first
    /// are kept): what the `zookeeper-client` crate does before it counts a
    /// new connection as established.
    pub async fn ping(&mut self) -> Result<(), BenchError> {
        self.queue_ping()?;
        self.flush().await?;
        let limit = self.reply_timeout();
        let wait = async {
            loop {
                match self.next_incoming().await? {
                    Incoming::Reply(raw) if raw.header.xid == Xid::PING => return Ok(()),
                    Incoming::Notification(n) => self.notifications.push_back(n),
                    Incoming::Reply(raw) => {
                        return Err(BenchError::WrongAnswer(format!(
                            "a ping got a reply with xid {}",
                            raw.header.xid
                        )))
                    }
                    Incoming::Connect(_) => {
                        return Err(BenchError::WrongAnswer(
                            "a second ConnectResponse arrived".into(),
                        ))
                    }
                }
            }
        };
        match tokio::time::timeout(limit, wait).await {
            Ok(result) => result,
            Err(_) => Err(BenchError::Timeout {
                what: "ping reply".into(),
                server: self.server.clone(),
                after: limit,
            }),
        }
    }

    /// Keeps the session alive until `until` completes: pings every third of
    /// the timeout and checks that each ping is answered.
    pub async fn keep_alive(
        &mut self,
        until: impl std::future::Future<Output = ()>,
    ) -> Result<(), BenchError> {
        tokio::pin!(until);
        let ping = self.ping_interval();
        let limit = self.reply_timeout();
        let mut last_heard = tokio::time::Instant::now();
        let mut ticker = tokio::time::interval(ping);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut until => return Ok(()),
                _ = ticker.tick() => {
                    if last_heard.elapsed() > limit {
                        return Err(BenchError::Timeout {
                            what: "ping reply".into(),
                            server: self.server.clone(),
                            after: limit,
                        });
                    }
                    self.queue_ping()?;
                    self.flush().await?;
                }
                incoming = self.next_incoming() => {
                    match incoming? {
                        Incoming::Reply(raw) if raw.header.xid == Xid::PING => last_heard = tokio::time::Instant::now(),
                        Incoming::Notification(n) => self.notifications.push_back(n),
                        Incoming::Reply(raw) => {
                            return Err(BenchError::WrongAnswer(format!(
                                "an idle session got a reply with xid {}",
                                raw.header.xid
                            )))
                        }
                        Incoming::Connect(_) => {
                            return Err(BenchError::WrongAnswer("a second ConnectResponse arrived".into()))
                        }
                    }
                }
            }
        }
    }

    /// Ends the session with closeSession and waits for its reply.
    pub async fn close(mut self) -> Result<(), BenchError> {
        self.call_ok(&Request::CloseSession).await.map(|_| ())
    }

    /// Splits the connection for concurrent reading and writing.
    pub fn into_parts(self) -> ConnParts {
        let (reader, writer) = self.stream.into_split();
        ConnParts {
            reader,
            writer,
            codec: self.codec,
            rbuf: self.rbuf,
            next_xid: self.next_xid,
            timeout_ms: self.timeout_ms,
        }
    }

    /// Puts a connection back together after [`Conn::into_parts`].
    pub fn from_parts(
        parts: ConnParts,
        server: &str,
        session_id: SessionId,
    ) -> Result<Conn, BenchError> {
        let stream = parts.reader.reunite(parts.writer).map_err(|_| {
            BenchError::WrongAnswer("the two halves of a connection do not match".into())
        })?;
        Ok(Conn {
            stream,
            codec: parts.codec,
            rbuf: parts.rbuf,
            wbuf: BytesMut::with_capacity(4096),
            next_xid: parts.next_xid,
            session_id,
            passwd: Bytes::new(),
            timeout_ms: parts.timeout_ms,
            server: server.into(),
            notifications: VecDeque::new(),
        })
    }
}

/// A third of the session timeout (at least 1 ms): how long a session may stay
/// silent before it pings, like the Java client.
pub fn ping_interval(timeout_ms: i32) -> Duration {
    Duration::from_millis((timeout_ms.max(3) / 3) as u64)
}
