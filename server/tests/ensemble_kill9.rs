//! Three `rzk` processes on loopback under a write load from an independent
//! client (the `zookeeper-client` crate, connected to all three): kill -9 of the
//! leader, then of a follower, each restarted while the load runs. Every write
//! the client saw acknowledged must be on every member at the end (I6; the
//! restarted members rejoin by DIFF, TRUNC or SNAP).
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::clients::{assert_acked_on_every_member, connect, Acked};
use support::eventually;
use support::procs::{procs, Layout};
use zookeeper_client as zk;

/// Writers on sessions spread over all members; a create is acknowledged only
/// when the client got its reply (a connection loss is not an answer).
fn load(
    connect_string: String,
    stop: Arc<AtomicBool>,
    acked: Acked,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..4)
        .map(|w| {
            let (cs, stop, acked) = (connect_string.clone(), stop.clone(), acked.clone());
            tokio::spawn(async move {
                let c = connect(&cs).await;
                let opts = zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let data = format!("w{w}-{i}").into_bytes();
                    i += 1;
                    match c.create(&format!("/load/w{w}-"), &data, &opts).await {
                        Ok((_, seq)) => acked
                            .lock()
                            .unwrap()
                            .push((format!("/load/w{w}-{seq}"), data)),
                        // No answer (the connection broke or reset): the
                        // create may or may not have applied; it does not
                        // count as acknowledged, and the next one goes on.
                        Err(
                            zk::Error::ConnectionLoss
                            | zk::Error::Timeout
                            | zk::Error::NoHosts
                            | zk::Error::UnexpectedError(_)
                            | zk::Error::Custom(_),
                        ) => {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => return,
                        Err(e) => panic!("writer {w}: unexpected {e}"),
                    }
                }
            })
        })
        .collect()
}

async fn grows_by(acked: &Acked, n: usize, what: &str) {
    let start = acked.lock().unwrap().len();
    eventually(Duration::from_secs(60), what, || {
        let len = acked.lock().unwrap().len();
        async move { len >= start + n }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_leader_and_follower_under_load_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut ens = procs(dir.path(), &Layout::voters(3).set("snapCount", 400));
    ens.spawn_all();
    ens.settled().await;
    let all = ens.connect_string();
    let setup = connect(&all).await;
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    setup.create("/load", b"", &opts).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Acked = Arc::default();
    let writers = load(all.clone(), stop.clone(), acked.clone());
    grows_by(&acked, 300, "writes under load").await;

    // The leader dies; the survivors elect and the load goes on; the old leader
    // comes back while it runs.
    let leader = ens.settled().await;
    ens.members[leader].kill9();
    grows_by(&acked, 300, "writes after the leader's death").await;
    ens.members[leader].spawn();
    grows_by(&acked, 300, "writes while the old leader rejoins").await;
    ens.settled().await;

    // The same for a follower.
    let leader = ens.settled().await;
    let follower = (leader + 1) % 3;
    ens.members[follower].kill9();
    grows_by(&acked, 300, "writes after a follower's death").await;
    ens.members[follower].spawn();
    grows_by(&acked, 300, "writes while the follower rejoins").await;
    ens.settled().await;

    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.expect("a writer panicked");
    }
    let acked = acked.lock().unwrap().clone();
    assert_acked_on_every_member(&ens.members, &acked).await;
    drop(setup);
}
