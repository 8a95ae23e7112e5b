//! The relay over gRPC (`proto/relay.proto`): the service an observer master
//! serves on its observer port, and the observer's client, which checks every
//! transaction with [`Contiguity`] before handing it out.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use rzk_zxid::Zxid;
use tonic::{Request, Response, Status, Streaming};

use crate::error::{AttachError, StreamError};
use crate::fanout::{Disconnect, Inform, Txn};
use crate::master::{ObserverMaster, RelayStream};
use crate::receiver::Contiguity;
use crate::ObserverId;

/// The generated protobuf types and tonic stubs.
#[allow(missing_docs)]
pub mod pb {
    tonic::include_proto!("rzk.observer.v1");
}

use pb::observer_relay_client::ObserverRelayClient;
use pb::observer_relay_server::{ObserverRelay, ObserverRelayServer};

/// How often an observer pings its master's connection (HTTP/2 PING).
pub const RELAY_PING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// How long a ping (or the connect) may go unanswered before the follow ends.
pub const RELAY_PING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Informs sent per gRPC message at most.
const BATCH_INFORMS_MAX: usize = 256;

/// The service of an [`ObserverMaster`].
#[derive(Debug, Clone)]
pub struct RelayService {
    /// The master whose relays this serves.
    master: Arc<ObserverMaster>,
}

impl RelayService {
    /// The service of `master`, ready to add to a tonic server.
    pub fn new(master: Arc<ObserverMaster>) -> ObserverRelayServer<RelayService> {
        ObserverRelayServer::new(RelayService { master })
    }
}

/// The status that ends a stream when the observer was dropped.
fn disconnect_status(why: Disconnect) -> Status {
    Status::aborted(format!("observer dropped ({why:?}): sync again"))
}

/// The status of a refused attach.
fn attach_status(e: AttachError) -> Status {
    match e {
        AttachError::TooFarBehind { .. } | AttachError::AheadOfSource { .. } => {
            Status::failed_precondition(e.to_string())
        }
        AttachError::AlreadyAttached(_) => Status::already_exists(e.to_string()),
        AttachError::NoSource => Status::unavailable(e.to_string()),
    }
}

/// The stream of one observer: its relay, then one error status at its end.
/// Polled by tonic only when the connection can take more (HTTP/2 flow
/// control), so a slow observer fills its own relay queue and nothing else.
type FollowStream = Pin<Box<dyn Stream<Item = Result<pb::InformBatch, Status>> + Send>>;

#[tonic::async_trait]
impl ObserverRelay for RelayService {
    type FollowStream = FollowStream;

    async fn follow(
        &self,
        request: Request<pb::FollowRequest>,
    ) -> Result<Response<FollowStream>, Status> {
        let req = request.into_inner();
        let observer = ObserverId(req.observer);
        let synced_to = Zxid::from_u64(req.synced_to);
        let relay = self
            .master
            .attach(observer, synced_to)
            .map_err(attach_status)?;
        let stream =
            futures::stream::unfold(Some(relay), |state: Option<RelayStream>| async move {
                let mut relay = state?;
                match relay.next_batch(BATCH_INFORMS_MAX).await {
                    Ok(batch) => {
                        let informs = batch
                            .into_iter()
                            .map(|i| pb::Inform {
                                prev: i.prev.as_u64(),
                                zxid: i.txn.zxid.as_u64(),
                                payload: i.txn.payload,
                            })
                            .collect();
                        Some((Ok(pb::InformBatch { informs }), Some(relay)))
                    }
                    Err(why) => Some((Err(disconnect_status(why)), None)),
                }
            });
        Ok(Response::new(Box::pin(stream)))
    }
}

/// Why an observer's follow ended. Every case means: drop the connection,
/// sync again, follow again. None is a reason to stop the observer.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// The stream is not the next part of the observer's history.
    #[error("refused the relay's stream: {0}")]
    Stream(#[from] StreamError),
    /// The master ended the stream or refused it (see `relay.proto`).
    #[error("the observer master ended the stream: {0}")]
    Ended(#[from] Status),
    /// The connection could not be made.
    #[error("cannot connect to the observer master at {addr}: {source}")]
    Connect {
        /// The master's address.
        addr: SocketAddr,
        /// Why.
        source: tonic::transport::Error,
    },
    /// The stream ended without a status (the connection closed).
    #[error("the relay stream closed")]
    Closed,
}

/// An observer following a master: every transaction it hands out has passed
/// the contiguity check.
#[derive(Debug)]
pub struct RelayClient {
    /// The gRPC response stream.
    stream: Streaming<pb::InformBatch>,
    /// The check, from the observer's synced zxid.
    check: Contiguity,
}

impl RelayClient {
    /// Connects to the master at `addr` and follows its stream after `synced_to`.
    pub async fn follow(
        addr: SocketAddr,
        observer: ObserverId,
        synced_to: Zxid,
    ) -> Result<RelayClient, FollowError> {
        let connect = |source| FollowError::Connect { addr, source };
        // HTTP/2 pings on an idle stream: a master that stops answering (a
        // stopped process, a cut link) ends the follow within
        // RELAY_PING_INTERVAL + RELAY_PING_TIMEOUT instead of leaving the
        // observer waiting on a stream that never closes.
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(connect)?
            .tcp_nodelay(true)
            .connect_timeout(RELAY_PING_TIMEOUT)
            .http2_keep_alive_interval(RELAY_PING_INTERVAL)
            .keep_alive_timeout(RELAY_PING_TIMEOUT)
            .keep_alive_while_idle(true)
            .connect()
            .await
            .map_err(connect)?;
        let mut client = ObserverRelayClient::new(channel);
        let stream = client
            .follow(pb::FollowRequest {
                observer: observer.0,
                synced_to: synced_to.as_u64(),
            })
            .await?
            .into_inner();
        Ok(RelayClient {
            stream,
            check: Contiguity::after_sync(synced_to),
        })
    }

    /// The last zxid handed out (or the synced zxid).
    pub fn last_applied(&self) -> Zxid {
        self.check.last_applied()
    }

    /// The next transactions, each checked before it is handed out. On an
    /// error nothing of the batch is handed out (the check does not move) and
    /// the client is done: sync again and follow again.
    pub async fn next(&mut self) -> Result<Vec<Txn>, FollowError> {
        let Some(batch) = self.stream.message().await? else {
            return Err(FollowError::Closed);
        };
        let mut out = Vec::with_capacity(batch.informs.len());
        // Check the whole batch on a copy; move on only if all of it passes.
        let mut check = self.check;
        for i in batch.informs {
            let inform = Inform {
                prev: Zxid::from_u64(i.prev),
                txn: Txn::new(Zxid::from_u64(i.zxid), i.payload),
            };
            check.accept(inform.prev, inform.zxid())?;
            out.push(inform.txn);
        }
        self.check = check;
        Ok(out)
    }
}
