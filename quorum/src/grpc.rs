//! The gRPC transport (tonic): one bidirectional stream per peer pair, message
//! batching, reconnect with backoff, a message size limit, and peer identity
//! checks (a stream or batch from an unknown server id is refused).
//!
//! The peer with the larger server id dials the smaller one (ZooKeeper's rule
//! for election connections), so each pair has exactly one stream. Both
//! directions of the pair's traffic use it. Outgoing messages wait in a bounded
//! per-peer queue; when it is full, or no stream is up, messages are dropped:
//! the core detects the gap and resynchronises (see [`crate::transport`]).
//!
//! When a stream ends (closed, reset, or replaced by a newer one from the same
//! peer) the transport tells the core at once with
//! [`Inbound::Disconnected`], after every message that arrived on it: a
//! killed peer is noticed in the time its kernel takes to reset the
//! connection, not after the core's silence timeout.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use rzk_zxid::{Epoch, Zxid};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::{Request, Response, Status, Streaming};

use crate::message::{
    Entry, LearnerKind, LinkId, Message, Notification, PeerState, RejectReason, SessionMsg, Vote,
};
use crate::transport::{Inbound, Inbox, Transport};
use crate::PeerId;

/// Generated protobuf types and gRPC stubs (`proto/quorum.proto`).
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("rzk.quorum.v1");
}

use pb::quorum_client::QuorumClient;
use pb::quorum_server::{Quorum, QuorumServer};

/// Why a gRPC message could not be turned into a [`Message`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A required field or `oneof` is missing.
    #[error("missing field {0}")]
    Missing(&'static str),
    /// An epoch or enum value is out of range.
    #[error("invalid value in {0}")]
    Invalid(&'static str),
}

/// Errors of the gRPC transport.
#[derive(Debug, thiserror::Error)]
pub enum GrpcError {
    /// The listener could not be used.
    #[error("listener: {0}")]
    Listener(#[from] std::io::Error),
}

/// Settings of the gRPC transport.
#[derive(Clone, Debug)]
pub struct GrpcConfig {
    /// This server.
    pub id: PeerId,
    /// Every other server and the address of its quorum port.
    pub peers: BTreeMap<PeerId, SocketAddr>,
    /// Largest encoded batch (and message) accepted or sent. A SNAP larger than
    /// this cannot be sent; size it above the largest snapshot.
    pub message_bytes_max: usize,
    /// Outgoing messages queued per peer before new ones are dropped.
    pub queue_max: usize,
    /// First reconnect delay; doubles up to `backoff_max`.
    pub backoff_min: Duration,
    /// Largest reconnect delay.
    pub backoff_max: Duration,
    /// Mutual TLS on every stream (`sslQuorum`); `None`: plaintext.
    pub tls: Option<crate::tls::QuorumTls>,
}

impl GrpcConfig {
    /// Defaults: 64 MiB messages, 8192 queued messages per peer, backoff
    /// 20 ms … 1 s.
    pub fn new(id: PeerId, peers: BTreeMap<PeerId, SocketAddr>) -> GrpcConfig {
        GrpcConfig {
            id,
            peers,
            message_bytes_max: 64 << 20,
            queue_max: 8192,
            backoff_min: Duration::from_millis(20),
            backoff_max: Duration::from_secs(1),
            tls: None,
        }
    }
}

/// One peer's outgoing queue and the writer task that currently drains it.
struct Link {
    tx: mpsc::Sender<Message>,
    rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Message>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// The stream currently carrying this pair's traffic (0: none). Only the
    /// end of the current stream is reported to the core; a stale stream that
    /// ends after a newer one took over says nothing.
    stream: Mutex<u64>,
    /// The task reading the stream this server accepted from the peer, if
    /// any. Ending it (with the writer) ends the response stream, which is how
    /// the peer learns that this server is gone.
    reader: Mutex<Option<JoinHandle<()>>>,
}

struct Inner {
    cfg: GrpcConfig,
    links: BTreeMap<PeerId, Link>,
    inbox: mpsc::UnboundedSender<Inbound>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    next_stream: AtomicU64,
}

impl Inner {
    /// A stream with `peer` is up; returns its number. If it replaces a live
    /// one, that one's end is reported first: its messages in flight are lost.
    fn stream_up(&self, peer: PeerId) -> u64 {
        let id = self.next_stream.fetch_add(1, Ordering::Relaxed) + 1;
        let Some(link) = self.links.get(&peer) else {
            return id;
        };
        let mut cur = link.stream.lock().expect("not poisoned");
        if *cur != 0 {
            tracing::info!(peer = peer.0, "quorum stream replaced by a new one");
            let _ = self.inbox.send(Inbound::Disconnected { peer });
        }
        *cur = id;
        id
    }

    /// Stream `id` with `peer` ended; tells the core if it was the current one.
    fn stream_down(&self, peer: PeerId, id: u64, end: &StreamEnd) {
        match end {
            StreamEnd::Refused(st) => tracing::warn!(
                peer = peer.0,
                error = %st,
                "refused a quorum message; the stream ends"
            ),
            StreamEnd::Lost(why) => {
                tracing::info!(peer = peer.0, reason = %why, "quorum stream ended")
            }
        }
        let Some(link) = self.links.get(&peer) else {
            return;
        };
        let mut cur = link.stream.lock().expect("not poisoned");
        if *cur != id {
            return;
        }
        *cur = 0;
        let _ = self.inbox.send(Inbound::Disconnected { peer });
    }
}

/// How a stream ended.
enum StreamEnd {
    /// Bad input from the peer (I7): oversized, undecodable, or a batch that
    /// claims another sender.
    Refused(Status),
    /// Closed, reset, or gone with this transport.
    Lost(String),
}

impl StreamEnd {
    fn of(result: &Result<(), Status>) -> StreamEnd {
        use tonic::Code;
        match result {
            Ok(()) => StreamEnd::Lost("closed by the peer".into()),
            Err(st) => match st.code() {
                Code::OutOfRange
                | Code::ResourceExhausted
                | Code::Internal
                | Code::InvalidArgument
                | Code::PermissionDenied
                | Code::DataLoss => StreamEnd::Refused(st.clone()),
                Code::Ok
                | Code::Cancelled
                | Code::Unknown
                | Code::DeadlineExceeded
                | Code::NotFound
                | Code::AlreadyExists
                | Code::FailedPrecondition
                | Code::Aborted
                | Code::Unimplemented
                | Code::Unavailable
                | Code::Unauthenticated => StreamEnd::Lost(st.to_string()),
            },
        }
    }
}

/// The gRPC [`Transport`]. Dropping it stops its server and connections.
#[derive(Clone)]
pub struct GrpcTransport {
    inner: Arc<Inner>,
}

impl Transport for GrpcTransport {
    fn send(&self, to: PeerId, msg: Message) {
        if let Some(link) = self.inner.links.get(&to) {
            // Full queue: drop; the session's sequence numbers expose the gap.
            let _ = link.tx.try_send(msg);
        }
    }

    fn close(&self) {
        self.shutdown();
    }
}

impl GrpcTransport {
    /// Serves the quorum port on `listener` (bind port 0 in tests) and dials
    /// every peer with a smaller id. Returns the transport and its inbox.
    pub fn start(
        cfg: GrpcConfig,
        listener: tokio::net::TcpListener,
    ) -> Result<(GrpcTransport, Inbox), GrpcError> {
        let (inbox_tx, inbox) = mpsc::unbounded_channel();
        let links = cfg
            .peers
            .keys()
            .filter(|p| **p != cfg.id)
            .map(|p| {
                let (tx, rx) = mpsc::channel(cfg.queue_max.max(1));
                (
                    *p,
                    Link {
                        tx,
                        rx: Arc::new(tokio::sync::Mutex::new(rx)),
                        writer: Mutex::new(None),
                        stream: Mutex::new(0),
                        reader: Mutex::new(None),
                    },
                )
            })
            .collect();
        let inner = Arc::new(Inner {
            cfg: cfg.clone(),
            links,
            inbox: inbox_tx,
            tasks: Mutex::new(Vec::new()),
            next_stream: AtomicU64::new(0),
        });
        let svc = QuorumServer::new(Service {
            inner: inner.clone(),
        })
        .max_decoding_message_size(cfg.message_bytes_max)
        .max_encoding_message_size(cfg.message_bytes_max);
        let server = match &cfg.tls {
            None => {
                let incoming =
                    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
                tokio::spawn(async move {
                    let _ = tonic::transport::Server::builder()
                        .add_service(svc)
                        .serve_with_incoming(incoming)
                        .await;
                })
            }
            Some(tls) => {
                let incoming = crate::tls::incoming(listener, tls.server.clone());
                tokio::spawn(async move {
                    let _ = tonic::transport::Server::builder()
                        .add_service(svc)
                        .serve_with_incoming(incoming)
                        .await;
                })
            }
        };
        let mut tasks = vec![server];
        for (&peer, &addr) in cfg.peers.iter().filter(|(p, _)| **p < cfg.id) {
            tasks.push(tokio::spawn(dial_loop(inner.clone(), peer, addr)));
        }
        inner.tasks.lock().expect("not poisoned").extend(tasks);
        Ok((GrpcTransport { inner }, inbox))
    }

    /// Stops the server and every connection. The streams end, so the peers'
    /// transports report this server disconnected at once.
    pub fn shutdown(&self) {
        for t in self.inner.tasks.lock().expect("not poisoned").drain(..) {
            t.abort();
        }
        for link in self.inner.links.values() {
            if let Some(w) = link.writer.lock().expect("not poisoned").take() {
                w.abort();
            }
            if let Some(r) = link.reader.lock().expect("not poisoned").take() {
                r.abort();
            }
        }
    }
}

/// Starts draining `peer`'s queue into `out`, replacing any previous writer.
fn start_writer<F>(inner: &Arc<Inner>, peer: PeerId, send: F)
where
    F: Fn(pb::Batch) -> Pin<Box<dyn std::future::Future<Output = bool> + Send>> + Send + 'static,
{
    let Some(link) = inner.links.get(&peer) else {
        return;
    };
    let rx = link.rx.clone();
    let (me, max) = (inner.cfg.id, inner.cfg.message_bytes_max);
    let mut slot = link.writer.lock().expect("not poisoned");
    if let Some(old) = slot.take() {
        old.abort();
    }
    *slot = Some(tokio::spawn(async move {
        let mut rx = rx.lock().await;
        while let Some(first) = rx.recv().await {
            if !fits(&first, max, peer) {
                continue;
            }
            // Batching: everything already queued goes in one gRPC message, up to
            // half the size limit.
            let mut size = first.size_bytes();
            let mut msgs = vec![to_proto(&first)];
            while size < max / 2 && msgs.len() < 4096 {
                let Ok(m) = rx.try_recv() else { break };
                if !fits(&m, max, peer) {
                    continue;
                }
                size += m.size_bytes();
                msgs.push(to_proto(&m));
            }
            let batch = pb::Batch {
                from: me.0,
                to: peer.0,
                msgs,
            };
            if !send(batch).await {
                return;
            }
        }
    }));
}

/// Whether `m` can go out under the message size limit: at most half of it,
/// as a batch is (the size is an estimate; the half leaves room for the
/// encoding). One that cannot is dropped with an error line instead of
/// breaking the stream for every message behind it; its session sees the gap
/// and resynchronises.
fn fits(m: &Message, max: usize, peer: PeerId) -> bool {
    let size = m.size_bytes();
    if size <= max / 2 {
        return true;
    }
    let name = match m {
        Message::Notification(_) => "NOTIFICATION",
        Message::Session { msg, .. } => msg.name(),
    };
    tracing::error!(
        peer = peer.0,
        msg = name,
        size_bytes = size,
        limit_bytes = max,
        "a quorum message over the size limit was not sent"
    );
    false
}

/// Delivers the messages of one received batch, after checking the sender.
fn deliver(inner: &Inner, peer: PeerId, batch: pb::Batch) -> Result<(), Status> {
    if batch.from != peer.0 || batch.to != inner.cfg.id.0 {
        // The stream ends (with a log line from `stream_down`).
        return Err(Status::permission_denied(format!(
            "batch from {} to {} on the stream of server {}",
            batch.from, batch.to, peer.0
        )));
    }
    for m in batch.msgs {
        match from_proto(m) {
            Ok(msg) => {
                let _ = inner.inbox.send(Inbound::Message { from: peer, msg });
            }
            Err(e) => {
                // I7: a malformed message is dropped with a clear log line; the
                // session it belonged to sees a gap and resynchronises.
                tracing::warn!(peer = peer.0, error = %e, "dropped a malformed quorum message");
            }
        }
    }
    Ok(())
}

async fn dial_loop(inner: Arc<Inner>, peer: PeerId, addr: SocketAddr) {
    let cfg = &inner.cfg;
    let mut backoff = cfg.backoff_min;
    loop {
        match dial_once(&inner, peer, addr).await {
            Ok(()) => backoff = cfg.backoff_min,
            Err(e) => tracing::debug!(peer = peer.0, error = %e, "quorum connection failed"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(cfg.backoff_max);
    }
}

async fn dial_once(inner: &Arc<Inner>, peer: PeerId, addr: SocketAddr) -> Result<(), Status> {
    let max = inner.cfg.message_bytes_max;
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| Status::invalid_argument(e.to_string()))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(2));
    let channel = match &inner.cfg.tls {
        None => endpoint.connect().await,
        Some(tls) => {
            endpoint
                .connect_with_connector(crate::tls::Connector {
                    config: tls.client.clone(),
                    addr,
                    name: tls.name_of(peer, addr),
                    peer: peer.0,
                })
                .await
        }
    }
    .map_err(|e| Status::unavailable(e.to_string()))?;
    let mut client = QuorumClient::new(channel)
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    let (out_tx, out_rx) = mpsc::channel::<pb::Batch>(64);
    // The first batch identifies this server.
    let hello = pb::Batch {
        from: inner.cfg.id.0,
        to: peer.0,
        msgs: Vec::new(),
    };
    out_tx
        .send(hello)
        .await
        .map_err(|_| Status::internal("request stream closed"))?;
    let outgoing =
        futures::stream::unfold(
            out_rx,
            |mut rx| async move { rx.recv().await.map(|b| (b, rx)) },
        );
    let mut incoming = client.exchange(Request::new(outgoing)).await?.into_inner();
    let stream = inner.stream_up(peer);
    start_writer(inner, peer, move |b| {
        let tx = out_tx.clone();
        Box::pin(async move { tx.send(b).await.is_ok() })
    });
    let result = receive(inner, peer, &mut incoming).await;
    inner.stream_down(peer, stream, &StreamEnd::of(&result));
    result
}

/// Delivers the batches of one stream until it ends.
async fn receive(
    inner: &Inner,
    peer: PeerId,
    incoming: &mut Streaming<pb::Batch>,
) -> Result<(), Status> {
    while let Some(batch) = incoming.message().await? {
        deliver(inner, peer, batch)?;
    }
    Ok(())
}

struct Service {
    inner: Arc<Inner>,
}

type BatchStream = Pin<Box<dyn Stream<Item = Result<pb::Batch, Status>> + Send>>;

#[tonic::async_trait]
impl Quorum for Service {
    type ExchangeStream = BatchStream;

    async fn exchange(
        &self,
        request: Request<Streaming<pb::Batch>>,
    ) -> Result<Response<BatchStream>, Status> {
        let remote = request.remote_addr();
        let mut incoming = request.into_inner();
        let hello = match incoming.message().await {
            Ok(Some(hello)) => hello,
            Ok(None) => return Err(Status::invalid_argument("empty stream")),
            Err(st) => {
                tracing::warn!(?remote, error = %st, "refused a quorum stream: unreadable first message");
                return Err(st);
            }
        };
        let me = self.inner.cfg.id;
        let peer = PeerId(hello.from);
        // Identity check: a configured server with a larger id, talking to us.
        if !self.inner.links.contains_key(&peer) || peer <= me || hello.to != me.0 {
            tracing::warn!(
                peer = hello.from,
                to = hello.to,
                ?remote,
                "refused a quorum stream from an unknown or unexpected server id"
            );
            return Err(Status::permission_denied(format!(
                "unknown or unexpected server id {} (to {})",
                hello.from, hello.to
            )));
        }
        let stream = self.inner.stream_up(peer);
        if let Err(st) = deliver(&self.inner, peer, hello) {
            self.inner
                .stream_down(peer, stream, &StreamEnd::Refused(st.clone()));
            return Err(st);
        }
        let (resp_tx, resp_rx) = mpsc::channel::<Result<pb::Batch, Status>>(64);
        start_writer(&self.inner, peer, {
            let resp_tx = resp_tx.clone();
            move |b| {
                let tx = resp_tx.clone();
                Box::pin(async move { tx.send(Ok(b)).await.is_ok() })
            }
        });
        let inner = self.inner.clone();
        let reader = tokio::spawn(async move {
            let result = receive(&inner, peer, &mut incoming).await;
            inner.stream_down(peer, stream, &StreamEnd::of(&result));
            if let Err(st) = result {
                let _ = resp_tx.send(Err(st)).await;
            }
        });
        if let Some(link) = self.inner.links.get(&peer) {
            // A stream this one replaced is dead: stop reading it.
            if let Some(old) = link.reader.lock().expect("not poisoned").replace(reader) {
                old.abort();
            }
        }
        let out =
            futures::stream::unfold(
                resp_rx,
                |mut rx| async move { rx.recv().await.map(|b| (b, rx)) },
            );
        Ok(Response::new(Box::pin(out)))
    }
}

// ---- conversions ----------------------------------------------------------

fn entry_to(e: &Entry) -> pb::Entry {
    pb::Entry {
        zxid: e.zxid.as_u64(),
        payload: e.payload.clone(),
    }
}

fn entry_from(e: pb::Entry) -> Entry {
    Entry {
        zxid: Zxid::from_u64(e.zxid),
        payload: e.payload,
    }
}

fn state_to(s: PeerState) -> pb::PeerState {
    match s {
        PeerState::Looking => pb::PeerState::Looking,
        PeerState::Following => pb::PeerState::Following,
        PeerState::Leading => pb::PeerState::Leading,
        PeerState::Observing => pb::PeerState::Observing,
    }
}

fn state_from(s: pb::PeerState) -> PeerState {
    match s {
        pb::PeerState::Looking => PeerState::Looking,
        pb::PeerState::Following => PeerState::Following,
        pb::PeerState::Leading => PeerState::Leading,
        pb::PeerState::Observing => PeerState::Observing,
    }
}

fn reason_to(r: RejectReason) -> pb::RejectReason {
    match r {
        RejectReason::AheadOfLeader => pb::RejectReason::AheadOfLeader,
        RejectReason::NotLeading => pb::RejectReason::NotLeading,
        RejectReason::Unsupported => pb::RejectReason::Unsupported,
        RejectReason::Protocol => pb::RejectReason::Protocol,
    }
}

fn reason_from(r: pb::RejectReason) -> RejectReason {
    match r {
        pb::RejectReason::AheadOfLeader => RejectReason::AheadOfLeader,
        pb::RejectReason::NotLeading => RejectReason::NotLeading,
        pb::RejectReason::Unsupported => RejectReason::Unsupported,
        pb::RejectReason::Protocol => RejectReason::Protocol,
    }
}

/// Encodes a message for the wire.
pub fn to_proto(m: &Message) -> pb::Msg {
    use pb::session::Msg as S;
    let kind = match m {
        Message::Notification(n) => pb::msg::Kind::Notification(pb::Notification {
            state: state_to(n.state) as i32,
            vote: Some(pb::Vote {
                leader: n.vote.leader.0,
                zxid: n.vote.zxid.as_u64(),
                peer_epoch: n.vote.peer_epoch.0,
            }),
            round: n.round,
        }),
        Message::Session { session, seq, msg } => {
            let msg = match msg {
                SessionMsg::FollowerInfo {
                    kind,
                    accepted_epoch,
                } => S::FollowerInfo(pb::FollowerInfo {
                    observer: *kind == LearnerKind::Observer,
                    accepted_epoch: accepted_epoch.0,
                }),
                SessionMsg::LeaderInfo { epoch, established } => S::LeaderInfo(pb::LeaderInfo {
                    epoch: epoch.0,
                    established: *established,
                }),
                SessionMsg::AckEpoch {
                    current_epoch,
                    last_zxid,
                    epoch_ends,
                } => S::AckEpoch(pb::AckEpoch {
                    current_epoch: current_epoch.0,
                    last_zxid: last_zxid.as_u64(),
                    epoch_ends: epoch_ends.iter().map(|z| z.as_u64()).collect(),
                }),
                SessionMsg::Diff { leader_last } => S::Diff(pb::Diff {
                    leader_last: leader_last.as_u64(),
                }),
                SessionMsg::Trunc { to } => S::Trunc(pb::Trunc { to: to.as_u64() }),
                SessionMsg::Snap {
                    zxid,
                    size_bytes,
                    crc,
                } => S::Snap(pb::Snap {
                    zxid: zxid.as_u64(),
                    size_bytes: *size_bytes,
                    crc: *crc,
                }),
                SessionMsg::SnapChunk { offset, data } => S::SnapChunk(pb::SnapChunk {
                    offset: *offset,
                    data: data.clone(),
                }),
                SessionMsg::SnapAck { received } => S::SnapAck(pb::SnapAck {
                    received: *received,
                }),
                SessionMsg::Proposal { entries } => S::Proposal(pb::Proposal {
                    entries: entries.iter().map(entry_to).collect(),
                }),
                SessionMsg::Commit { upto } => S::Commit(pb::Commit {
                    upto: upto.as_u64(),
                }),
                SessionMsg::NewLeader { epoch } => S::NewLeader(pb::NewLeader { epoch: epoch.0 }),
                SessionMsg::AckNewLeader { epoch } => {
                    S::AckNewLeader(pb::AckNewLeader { epoch: epoch.0 })
                }
                SessionMsg::UpToDate { committed } => S::UpToDate(pb::UpToDate {
                    committed: committed.as_u64(),
                }),
                SessionMsg::Ack { upto } => S::Ack(pb::Ack {
                    upto: upto.as_u64(),
                }),
                SessionMsg::Inform { prev, entries } => S::Inform(pb::Inform {
                    entries: entries.iter().map(entry_to).collect(),
                    prev: prev.as_u64(),
                }),
                SessionMsg::Ping { id } => S::Ping(pb::Ping { id: *id }),
                SessionMsg::Pong { id } => S::Pong(pb::Pong { id: *id }),
                SessionMsg::SyncRequest { id } => S::SyncRequest(pb::SyncRequest { id: *id }),
                SessionMsg::SyncReply { id, zxid } => S::SyncReply(pb::SyncReply {
                    id: *id,
                    zxid: zxid.as_u64(),
                }),
                SessionMsg::Reject { reason } => S::Reject(pb::Reject {
                    reason: reason_to(*reason) as i32,
                }),
                SessionMsg::Forward { payload } => S::Forward(pb::Forward {
                    payload: payload.clone(),
                }),
                SessionMsg::Relayed => S::Relayed(pb::Relayed {}),
            };
            pb::msg::Kind::Session(pb::Session {
                session: session.0,
                seq: *seq,
                msg: Some(msg),
            })
        }
    };
    pb::Msg { kind: Some(kind) }
}

/// Decodes a message from the wire; never panics (I7).
pub fn from_proto(m: pb::Msg) -> Result<Message, DecodeError> {
    use pb::session::Msg as S;
    match m.kind.ok_or(DecodeError::Missing("Msg.kind"))? {
        pb::msg::Kind::Notification(n) => {
            let v = n.vote.ok_or(DecodeError::Missing("Notification.vote"))?;
            let state = pb::PeerState::try_from(n.state)
                .map_err(|_| DecodeError::Invalid("Notification.state"))?;
            Ok(Message::Notification(Notification {
                state: state_from(state),
                vote: Vote {
                    leader: PeerId(v.leader),
                    zxid: Zxid::from_u64(v.zxid),
                    peer_epoch: Epoch(v.peer_epoch),
                },
                round: n.round,
            }))
        }
        pb::msg::Kind::Session(s) => {
            let msg = match s.msg.ok_or(DecodeError::Missing("Session.msg"))? {
                S::FollowerInfo(f) => SessionMsg::FollowerInfo {
                    kind: if f.observer {
                        LearnerKind::Observer
                    } else {
                        LearnerKind::Participant
                    },
                    accepted_epoch: Epoch(f.accepted_epoch),
                },
                S::LeaderInfo(l) => SessionMsg::LeaderInfo {
                    epoch: Epoch(l.epoch),
                    established: l.established,
                },
                S::AckEpoch(a) => {
                    if a.epoch_ends.len() > crate::message::EPOCH_ENDS_MAX {
                        return Err(DecodeError::Invalid("AckEpoch.epoch_ends"));
                    }
                    SessionMsg::AckEpoch {
                        current_epoch: Epoch(a.current_epoch),
                        last_zxid: Zxid::from_u64(a.last_zxid),
                        epoch_ends: a.epoch_ends.into_iter().map(Zxid::from_u64).collect(),
                    }
                }
                S::Diff(d) => SessionMsg::Diff {
                    leader_last: Zxid::from_u64(d.leader_last),
                },
                S::Trunc(t) => SessionMsg::Trunc {
                    to: Zxid::from_u64(t.to),
                },
                S::Snap(s) => SessionMsg::Snap {
                    zxid: Zxid::from_u64(s.zxid),
                    size_bytes: s.size_bytes,
                    crc: s.crc,
                },
                S::SnapChunk(c) => SessionMsg::SnapChunk {
                    offset: c.offset,
                    data: c.data,
                },
                S::SnapAck(a) => SessionMsg::SnapAck {
                    received: a.received,
                },
                S::Proposal(p) => SessionMsg::Proposal {
                    entries: p.entries.into_iter().map(entry_from).collect(),
                },
                S::Commit(c) => SessionMsg::Commit {
                    upto: Zxid::from_u64(c.upto),
                },
                S::NewLeader(n) => SessionMsg::NewLeader {
                    epoch: Epoch(n.epoch),
                },
                S::AckNewLeader(n) => SessionMsg::AckNewLeader {
                    epoch: Epoch(n.epoch),
                },
                S::UpToDate(u) => SessionMsg::UpToDate {
                    committed: Zxid::from_u64(u.committed),
                },
                S::Ack(a) => SessionMsg::Ack {
                    upto: Zxid::from_u64(a.upto),
                },
                S::Inform(i) => SessionMsg::Inform {
                    prev: Zxid::from_u64(i.prev),
                    entries: i.entries.into_iter().map(entry_from).collect(),
                },
                S::Ping(p) => SessionMsg::Ping { id: p.id },
                S::Pong(p) => SessionMsg::Pong { id: p.id },
                S::SyncRequest(r) => SessionMsg::SyncRequest { id: r.id },
                S::SyncReply(r) => SessionMsg::SyncReply {
                    id: r.id,
                    zxid: Zxid::from_u64(r.zxid),
                },
                S::Reject(r) => SessionMsg::Reject {
                    reason: reason_from(
                        pb::RejectReason::try_from(r.reason)
                            .map_err(|_| DecodeError::Invalid("Reject.reason"))?,
                    ),
                },
                S::Forward(f) => SessionMsg::Forward { payload: f.payload },
                S::Relayed(pb::Relayed {}) => SessionMsg::Relayed,
            };
            Ok(Message::Session {
                session: LinkId(s.session),
                seq: s.seq,
                msg,
            })
        }
    }
}
