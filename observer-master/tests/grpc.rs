//! The relay over gRPC on 127.0.0.1: an ObserverMaster served by tonic, and
//! observers following it with `RelayClient`. Every wait has a deadline.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rzk_observer_master::grpc::{FollowError, RelayClient, RelayService};
use rzk_observer_master::{
    FanoutConfig, ObserverId, ObserverMaster, RelayHub, SourceSnapshot, StreamError, Txn,
};
use rzk_zxid::{Epoch, Zxid};

const DEADLINE: Duration = Duration::from_secs(20);

fn z(counter: u32) -> Zxid {
    Zxid::new(Epoch(1), counter.into())
}

/// Serves `master` on a free port of 127.0.0.1.
async fn serve(master: Arc<ObserverMaster>) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let task = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(RelayService::new(master))
            .serve_with_incoming(incoming)
            .await;
    });
    (addr, task)
}

/// A master over `hub`, served; ready to attach.
async fn start(
    hub: &Arc<RelayHub>,
    config: FanoutConfig,
) -> (Arc<ObserverMaster>, SocketAddr, tokio::task::JoinHandle<()>) {
    let master = Arc::new(ObserverMaster::spawn(hub.clone(), config));
    assert!(master.ready().await);
    let (addr, task) = serve(master.clone()).await;
    (master, addr, task)
}

/// Reads until the client has handed out `until`.
async fn read_until(client: &mut RelayClient, until: Zxid) -> Vec<Zxid> {
    let mut got = Vec::new();
    while client.last_applied() < until {
        let batch = tokio::time::timeout(DEADLINE, client.next())
            .await
            .expect("within the deadline")
            .expect("the stream goes on");
        got.extend(batch.into_iter().map(|t| t.zxid));
    }
    got
}

/// The seed scenario over the wire: the proposal in flight when the master
/// started reaches the observer, in order.
#[tokio::test]
async fn observer_follows_over_grpc_with_pending_proposals() {
    let hub = Arc::new(RelayHub::new(z(2), 1024));
    hub.proposed(Txn::new(z(3), "in flight")).unwrap();
    let (_master, addr, server) = start(&hub, FanoutConfig::default()).await;
    let mut client = RelayClient::follow(addr, ObserverId(5), z(2))
        .await
        .unwrap();
    hub.proposed(Txn::new(z(4), "next")).unwrap();
    hub.committed(z(3)).unwrap();
    hub.committed(z(4)).unwrap();
    assert_eq!(read_until(&mut client, z(4)).await, vec![z(3), z(4)]);
    server.abort();
}

/// With the regression switch the observer's client refuses the stream (a
/// gap), hands nothing out, and the caller resyncs; nothing panics.
#[tokio::test]
async fn regression_switch_5088_is_refused_by_the_client() {
    let hub = Arc::new(RelayHub::new(z(2), 1024));
    hub.proposed(Txn::new(z(3), "in flight")).unwrap();
    let config = FanoutConfig {
        regression_5088: true,
        ..FanoutConfig::default()
    };
    let (_master, addr, server) = start(&hub, config).await;
    let mut client = RelayClient::follow(addr, ObserverId(5), z(2))
        .await
        .unwrap();
    hub.proposed(Txn::new(z(4), "next")).unwrap();
    hub.committed(z(3)).unwrap();
    hub.committed(z(4)).unwrap();
    let err = tokio::time::timeout(DEADLINE, client.next())
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(
            err,
            FollowError::Stream(StreamError::Gap { last_applied, got, .. })
                if last_applied == z(2) && got == z(4)
        ),
        "{err}"
    );
    assert_eq!(client.last_applied(), z(2), "nothing was handed out");
    server.abort();
}

/// An observer ahead of the source, or one that attached already, is refused
/// with the documented status.
#[tokio::test]
async fn refused_attach_has_a_clear_status() {
    let hub = Arc::new(RelayHub::new(z(2), 16));
    let (_master, addr, server) = start(&hub, FanoutConfig::default()).await;
    let err = RelayClient::follow(addr, ObserverId(1), z(9))
        .await
        .unwrap_err();
    match err {
        FollowError::Ended(s) => {
            assert_eq!(s.code(), tonic::Code::FailedPrecondition, "{s}");
            assert!(s.message().contains("ahead of the committed"), "{s}");
        }
        other => panic!("{other}"),
    }
    let _first = RelayClient::follow(addr, ObserverId(2), z(2))
        .await
        .unwrap();
    let err = RelayClient::follow(addr, ObserverId(2), z(2))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FollowError::Ended(s) if s.code() == tonic::Code::AlreadyExists),
        "{err}"
    );
    server.abort();
}

/// A reset of the source ends every stream with ABORTED; the observer follows
/// again from its new sync point.
#[tokio::test]
async fn source_reset_ends_the_stream_and_the_observer_follows_again() {
    let hub = Arc::new(RelayHub::new(Zxid::ZERO, 1024));
    let (master, addr, server) = start(&hub, FanoutConfig::default()).await;
    let mut client = RelayClient::follow(addr, ObserverId(1), Zxid::ZERO)
        .await
        .unwrap();
    for c in 1..=3 {
        hub.proposed(Txn::new(z(c), "x")).unwrap();
        hub.committed(z(c)).unwrap();
    }
    read_until(&mut client, z(3)).await;
    let start = Zxid::epoch_start(Epoch(2));
    hub.reset(SourceSnapshot {
        committed: start,
        pending: vec![],
    });
    let err = tokio::time::timeout(DEADLINE, client.next())
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(&err, FollowError::Ended(s) if s.code() == tonic::Code::Aborted),
        "{err}"
    );
    // The master rebuilds from the new state; follow again once it has.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut client = loop {
        match RelayClient::follow(addr, ObserverId(1), start).await {
            Ok(c) => break c,
            Err(e) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{e} ({:?})",
                    master.stats()
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let e2 = Zxid::new(Epoch(2), 1u32.into());
    hub.proposed(Txn::new(e2, "y")).unwrap();
    hub.committed(e2).unwrap();
    assert_eq!(read_until(&mut client, e2).await, vec![e2]);
    server.abort();
}

/// An observer that does not read is dropped once its relay queue is full
/// (ABORTED, TooSlow); the source committed everything without waiting.
#[tokio::test]
async fn slow_observer_over_grpc_is_dropped() {
    let hub = Arc::new(RelayHub::new(Zxid::ZERO, 100_000));
    let config = FanoutConfig {
        relay_queue_bytes_max: 1 << 20,
        ..FanoutConfig::default()
    };
    let (master, addr, server) = start(&hub, config).await;
    let mut client = RelayClient::follow(addr, ObserverId(1), Zxid::ZERO)
        .await
        .unwrap();
    let payload = vec![0u8; 64 << 10];
    for c in 1..=400 {
        hub.proposed(Txn::new(z(c), payload.clone())).unwrap();
        hub.committed(z(c)).unwrap();
    }
    // 25 MiB committed; the observer read nothing. Now it reads: what was
    // buffered, then the end.
    let err = tokio::time::timeout(DEADLINE, async {
        loop {
            if let Err(e) = client.next().await {
                return e;
            }
        }
    })
    .await
    .unwrap();
    assert!(
        matches!(&err, FollowError::Ended(s) if s.code() == tonic::Code::Aborted && s.message().contains("TooSlow")),
        "{err}"
    );
    assert!(client.last_applied() < z(400));
    assert_eq!(master.stats().too_slow, 1);
    assert_eq!(hub.snapshot().committed, z(400));
    server.abort();
}
