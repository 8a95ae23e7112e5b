//! The tokio side of the observer master against a `RelayHub` source: streams
//! per observer, rebuilds on a source reset and on lag, slow observers dropped
//! without holding the source back. Every wait has a deadline.

use std::sync::Arc;
use std::time::Duration;

use rzk_observer_master::{
    Contiguity, Disconnect, FanoutConfig, ObserverId, ObserverMaster, RelayHub, RelayStream,
    SourceSnapshot, Txn,
};
use rzk_zxid::{Epoch, Zxid};

const DEADLINE: Duration = Duration::from_secs(10);

fn z(counter: u32) -> Zxid {
    Zxid::new(Epoch(1), counter.into())
}

/// Proposes and commits `from..=to` on the hub.
fn commit_range(hub: &RelayHub, from: u32, to: u32) {
    for c in from..=to {
        hub.proposed(Txn::new(z(c), format!("{c}"))).unwrap();
        hub.committed(z(c)).unwrap();
    }
}

/// Reads `stream` through a contiguity check until it has applied `until`.
async fn read_until(stream: &mut RelayStream, check: &mut Contiguity, until: Zxid) -> Vec<Zxid> {
    let mut got = Vec::new();
    while check.last_applied() < until {
        let batch = tokio::time::timeout(DEADLINE, stream.next_batch(64))
            .await
            .expect("the relay delivers within the deadline")
            .expect("the observer stays attached");
        for inform in batch {
            check
                .accept(inform.prev, inform.zxid())
                .expect("contiguous");
            got.push(inform.zxid());
        }
    }
    got
}

/// Waits until `cond` holds for the master, polling its stats with a deadline.
async fn wait_for(
    master: &ObserverMaster,
    cond: impl Fn(&rzk_observer_master::MasterStats) -> bool,
) {
    let start = tokio::time::Instant::now();
    while !cond(&master.stats()) {
        assert!(
            start.elapsed() < DEADLINE,
            "condition not reached: {:?}",
            master.stats()
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The seed scenario end to end through the task: a proposal in flight when the
/// master starts reaches the observer before the next one.
#[tokio::test]
async fn observer_master_starts_with_pending_proposals() {
    let hub = Arc::new(RelayHub::new(z(2), 1024));
    hub.proposed(Txn::new(z(3), "in flight during sync"))
        .unwrap();
    let master = ObserverMaster::spawn(hub.clone(), FanoutConfig::default());
    assert!(master.ready().await);
    let mut stream = master.attach(ObserverId(4), z(2)).unwrap();
    hub.proposed(Txn::new(z(4), "next")).unwrap();
    hub.committed(z(3)).unwrap();
    hub.committed(z(4)).unwrap();
    let mut check = Contiguity::after_sync(z(2));
    assert_eq!(
        read_until(&mut stream, &mut check, z(4)).await,
        vec![z(3), z(4)]
    );
    master.shutdown().await;
}

/// A reset of the source (a new sync of the follower) disconnects every
/// observer and the master rebuilds from the new state; observers attach again.
#[tokio::test]
async fn source_reset_disconnects_and_rebuilds() {
    let hub = Arc::new(RelayHub::new(Zxid::ZERO, 1024));
    let master = ObserverMaster::spawn(hub.clone(), FanoutConfig::default());
    assert!(master.ready().await);
    let mut stream = master.attach(ObserverId(1), Zxid::ZERO).unwrap();
    commit_range(&hub, 1, 3);
    let mut check = Contiguity::after_sync(Zxid::ZERO);
    read_until(&mut stream, &mut check, z(3)).await;
    hub.reset(SourceSnapshot {
        committed: Zxid::new(Epoch(2), 0u32.into()),
        pending: vec![],
    });
    let end = tokio::time::timeout(DEADLINE, stream.next_batch(8))
        .await
        .unwrap();
    assert_eq!(end, Err(Disconnect::SourceReset));
    wait_for(&master, |s| s.builds == 2).await;
    let start = Zxid::epoch_start(Epoch(2));
    let mut stream = master.attach(ObserverId(1), start).unwrap();
    hub.proposed(Txn::new(Zxid::new(Epoch(2), 1u32.into()), "e2"))
        .unwrap();
    hub.committed(Zxid::new(Epoch(2), 1u32.into())).unwrap();
    let mut check = Contiguity::after_sync(start);
    let got = read_until(&mut stream, &mut check, Zxid::new(Epoch(2), 1u32.into())).await;
    assert_eq!(got, vec![Zxid::new(Epoch(2), 1u32.into())]);
    master.shutdown().await;
}

/// An observer that does not read is dropped once its queue is full; another
/// observer receives everything; the source publishes without waiting.
#[tokio::test]
async fn slow_observer_is_dropped_and_never_slows_the_source() {
    let hub = Arc::new(RelayHub::new(Zxid::ZERO, 100_000));
    let config = FanoutConfig {
        relay_queue_txns_max: 100,
        ..FanoutConfig::default()
    };
    let master = ObserverMaster::spawn(hub.clone(), config);
    assert!(master.ready().await);
    let mut slow = master.attach(ObserverId(1), Zxid::ZERO).unwrap();
    let mut fast = master.attach(ObserverId(2), Zxid::ZERO).unwrap();
    // The source commits in chunks of 50 (half the queue); the fast observer
    // reads each chunk, the slow one never reads. Publishing is a plain call:
    // there is nothing in it that could wait for an observer.
    let mut check = Contiguity::after_sync(Zxid::ZERO);
    let mut got = 0;
    for chunk in 0..100 {
        commit_range(&hub, chunk * 50 + 1, chunk * 50 + 50);
        got += read_until(&mut fast, &mut check, z(chunk * 50 + 50))
            .await
            .len();
    }
    assert_eq!(got, 5_000);
    let end = tokio::time::timeout(DEADLINE, async {
        loop {
            match slow.next_batch(1).await {
                Ok(_) => continue,
                Err(why) => return why,
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(end, Disconnect::TooSlow);
    assert_eq!(master.stats().too_slow, 1);
    master.shutdown().await;
}

/// A master that lags its source by more than the live stream's bound rebuilds
/// (its observers resync) instead of holding the source back.
#[tokio::test(flavor = "current_thread")]
async fn lagging_master_rebuilds_instead_of_blocking_the_source() {
    let hub = Arc::new(RelayHub::new(Zxid::ZERO, 8));
    let master = ObserverMaster::spawn(hub.clone(), FanoutConfig::default());
    assert!(master.ready().await);
    let mut stream = master.attach(ObserverId(1), Zxid::ZERO).unwrap();
    // On a current-thread runtime the master's task cannot run while we publish:
    // 100 events overflow its stream of 8.
    commit_range(&hub, 1, 50);
    let end = tokio::time::timeout(DEADLINE, async {
        loop {
            if let Err(why) = stream.next_batch(64).await {
                return why;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(end, Disconnect::SourceReset);
    wait_for(&master, |s| s.builds == 2 && s.committed == z(50)).await;
    master.shutdown().await;
}

/// Shutdown disconnects observers and attach then fails.
#[tokio::test]
async fn shutdown_disconnects_observers() {
    let hub = Arc::new(RelayHub::new(Zxid::ZERO, 16));
    let master = ObserverMaster::spawn(hub.clone(), FanoutConfig::default());
    assert!(master.ready().await);
    let mut stream = master.attach(ObserverId(9), Zxid::ZERO).unwrap();
    master.shutdown().await;
    assert_eq!(stream.next_batch(1).await, Err(Disconnect::SourceReset));
}
