//! A minimal ZooKeeper session for the workload, on rzk-wire's client codec.
//!
//! Why not the `zookeeper-client` crate: the checker needs, for every reply,
//! the reply header's zxid (the per-session monotonicity check), and exact
//! control of what an operation's outcome is: a request that never left is
//! *failed*, one whose connection died or timed out after it left is
//! *indeterminate*, and a reconnect happens only when and where the workload
//! says (to another member, resuming the session with its last seen zxid).
//! The crate hides all three (it keeps the zxid internally, retries and
//! reconnects on its own).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rzk_wire::client::Incoming;
use rzk_wire::{
    ClientCodec, ConnectRequest, ErrorCode, OpCode, Request, RequestFrame, Response, SessionId, Xid,
};
use rzk_zxid::Zxid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::{Decoder, Encoder};

/// Why a call has no answer.
#[derive(Debug)]
pub enum CallError {
    /// The request never left this client (no connection): definitely not applied.
    NotSent(String),
    /// The request may have left; the connection is gone or the answer is late.
    Lost(String),
}

/// The answer to one call: the reply zxid and the server's result.
pub type Answer = (Zxid, Result<Response, ErrorCode>);

/// How a (re)connect ended.
#[derive(Debug)]
pub enum ConnectError {
    /// The server answered that the session is no longer valid.
    Expired,
    /// Anything else (refused, timed out, server not serving).
    Failed(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Expired => f.write_str("session expired"),
            ConnectError::Failed(why) => f.write_str(why),
        }
    }
}

/// One connection carrying one session.
pub struct Conn {
    stream: TcpStream,
    codec: ClientCodec,
    rbuf: BytesMut,
    wbuf: BytesMut,
}

/// A session: its id and password, and the highest zxid it has seen.
#[derive(Clone, Debug, Default)]
pub struct SessionState {
    /// 0 until the first connect.
    pub id: i64,
    /// The password the server gave.
    pub passwd: Bytes,
    /// The highest reply zxid (sent on reconnect).
    pub last_zxid: Zxid,
    /// The negotiated timeout.
    pub timeout_ms: i32,
    /// The last xid used. Xids keep increasing across the session's
    /// connections, as ZooKeeper's own client does: a member matches a
    /// committed txn to the request waiting for it by (session, xid), so a
    /// request from an earlier connection still in the pipeline must not share
    /// its xid with a new one (found here: with xids restarting at 1 on each
    /// connection, ZooKeeper answered a create with a BADVERSION meant for an
    /// earlier setData of the same session).
    pub last_xid: i32,
}

impl Conn {
    /// Connects to `addr` and creates (state.id == 0) or resumes a session,
    /// within `limit`. Updates `state` on success.
    pub async fn connect(
        addr: std::net::SocketAddr,
        state: &mut SessionState,
        timeout_ms: i32,
        limit: Duration,
    ) -> Result<Conn, ConnectError> {
        match tokio::time::timeout(limit, Conn::connect_inner(addr, state, timeout_ms)).await {
            Ok(r) => r,
            Err(_) => Err(ConnectError::Failed(format!(
                "handshake with {addr} timed out"
            ))),
        }
    }

    async fn connect_inner(
        addr: std::net::SocketAddr,
        state: &mut SessionState,
        timeout_ms: i32,
    ) -> Result<Conn, ConnectError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| ConnectError::Failed(format!("connect {addr}: {e}")))?;
        let _ = stream.set_nodelay(true);
        let mut conn = Conn {
            stream,
            codec: ClientCodec::new(),
            rbuf: BytesMut::with_capacity(4096),
            wbuf: BytesMut::with_capacity(256),
        };
        let passwd = if state.id == 0 {
            Bytes::from_static(&[0; 16])
        } else {
            state.passwd.clone()
        };
        let request = ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: state.last_zxid,
            timeout_ms,
            session_id: SessionId(state.id),
            passwd,
            read_only: Some(false),
        };
        conn.codec
            .encode(request, &mut conn.wbuf)
            .map_err(|e| ConnectError::Failed(format!("encode: {e}")))?;
        conn.flush()
            .await
            .map_err(|e| ConnectError::Failed(format!("send handshake: {e}")))?;
        let incoming = conn
            .next_incoming()
            .await
            .map_err(|e| ConnectError::Failed(format!("handshake: {e}")))?;
        let Incoming::Connect(response) = incoming else {
            return Err(ConnectError::Failed(
                "first frame was not a ConnectResponse".into(),
            ));
        };
        if response.timeout_ms <= 0 || response.session_id == SessionId::NONE {
            if state.id != 0 {
                return Err(ConnectError::Expired);
            }
            return Err(ConnectError::Failed("session refused".into()));
        }
        if state.id != 0 && response.session_id.0 != state.id {
            return Err(ConnectError::Failed(format!(
                "asked to resume {:#x}, got {:#x}",
                state.id, response.session_id.0
            )));
        }
        state.id = response.session_id.0;
        state.passwd = response.passwd.clone();
        state.timeout_ms = response.timeout_ms;
        Ok(conn)
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        let out = self.wbuf.split();
        self.stream.write_all(&out).await
    }

    async fn next_incoming(&mut self) -> Result<Incoming, String> {
        loop {
            if let Some(item) = self
                .codec
                .decode(&mut self.rbuf)
                .map_err(|e| e.to_string())?
            {
                return Ok(item);
            }
            self.rbuf.reserve(4096);
            let n = self
                .stream
                .read_buf(&mut self.rbuf)
                .await
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("connection closed by the server".into());
            }
        }
    }

    /// Sends `requests` pipelined and waits for all their replies, in order,
    /// within `limit`. Notifications and ping replies are skipped.
    pub async fn call(
        &mut self,
        requests: &[Request],
        state: &mut SessionState,
        limit: Duration,
    ) -> Result<Vec<Answer>, CallError> {
        let mut xids = Vec::with_capacity(requests.len());
        for r in requests {
            state.last_xid += 1;
            let xid = Xid(state.last_xid);
            let frame = RequestFrame {
                xid,
                request: r.clone(),
            };
            self.codec
                .encode(&frame, &mut self.wbuf)
                .map_err(|e| CallError::NotSent(format!("encode: {e}")))?;
            xids.push((xid, r.opcode()));
        }
        let body = async {
            self.flush().await.map_err(|e| format!("send: {e}"))?;
            let mut answers = Vec::with_capacity(xids.len());
            while answers.len() < xids.len() {
                let Incoming::Reply(raw) = self.next_incoming().await? else {
                    continue;
                };
                if raw.header.xid.0 < 0 {
                    continue;
                }
                let (xid, op): (Xid, OpCode) = xids[answers.len()];
                if raw.header.xid != xid {
                    return Err(format!(
                        "reply xid {} but expected {}",
                        raw.header.xid.0, xid.0
                    ));
                }
                let reply = raw.decode(op).map_err(|e| format!("decode: {e}"))?;
                answers.push((reply.zxid, reply.result));
            }
            Ok(answers)
        };
        let answers = match tokio::time::timeout(limit, body).await {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => return Err(CallError::Lost(e)),
            Err(_) => return Err(CallError::Lost(format!("no answer within {limit:?}"))),
        };
        for (z, _) in &answers {
            if *z > state.last_zxid {
                state.last_zxid = *z;
            }
        }
        Ok(answers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::{SinkExt, StreamExt};
    use rzk_wire::server::Incoming as ServerIncoming;
    use rzk_wire::{DeleteRequest, Reply, ServerCodec};
    use tokio_util::codec::Framed;

    /// A fake server: accepts sessions (always id 7), answers every request ok,
    /// and reports the xids it saw.
    async fn fake_server(xids: tokio::sync::mpsc::UnboundedSender<i32>) -> std::net::SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (s, _) = l.accept().await.unwrap();
                let xids = xids.clone();
                tokio::spawn(async move {
                    let mut f = Framed::new(s, ServerCodec::new());
                    while let Some(Ok(item)) = f.next().await {
                        match item {
                            ServerIncoming::Connect(c) => {
                                let r =
                                    c.accept(10_000, SessionId(7), Bytes::from_static(&[1; 16]));
                                f.send(r).await.unwrap();
                            }
                            ServerIncoming::Request(frame) => {
                                xids.send(frame.xid.0).unwrap();
                                f.send(Reply::ok(frame.xid, Zxid::from_u64(5), Response::Empty))
                                    .await
                                    .unwrap();
                            }
                            _ => return,
                        }
                    }
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn xids_keep_increasing_across_a_sessions_connections() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let addr = fake_server(tx).await;
        let mut state = SessionState::default();
        let delete = Request::Delete(DeleteRequest {
            path: "/x".to_string().into(),
            version: -1,
        });
        let limit = Duration::from_secs(10);
        for _ in 0..2 {
            let mut conn = Conn::connect(addr, &mut state, 10_000, limit)
                .await
                .ok()
                .unwrap();
            conn.call(&[delete.clone(), delete.clone()], &mut state, limit)
                .await
                .ok()
                .unwrap();
        }
        let seen: Vec<i32> = (0..4).map(|_| rx.try_recv().unwrap()).collect();
        assert_eq!(seen, vec![1, 2, 3, 4], "a resumed session reused xids");
        assert_eq!(state.id, 7);
        assert_eq!(state.last_zxid, Zxid::from_u64(5));
    }
}
