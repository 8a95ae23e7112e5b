//! Contend for leadership and print every transition with its fencing epoch.
//!
//! ```sh
//! cargo run -p rzk-election-client --example leader -- 127.0.0.1:2181 /demo/leader node-1
//! ```
//! Run it in several terminals; stop the leader (or its ZooKeeper connection) and watch
//! another take over with a larger epoch.

use std::sync::Arc;
use std::time::Duration;

use rzk_election_client::recipe::{LatchConfig, LeaderLatch, RecipeEvent};
use rzk_election_client::{Client, ClientConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let connect = args.next().unwrap_or_else(|| "127.0.0.1:2181".into());
    let path = args.next().unwrap_or_else(|| "/demo/leader".into());
    let id = args
        .next()
        .unwrap_or_else(|| format!("pid-{}", std::process::id()));

    let client =
        Client::start(ClientConfig::new(&connect)?.session_timeout(Duration::from_secs(6)));
    let (_, mut states) = client.subscribe();
    tokio::spawn(async move {
        while let Some(Ok(state)) = states.next().await {
            println!("connection: {state:?}");
        }
    });

    let mut latch = LeaderLatch::start(
        Arc::new(client.clone()),
        LatchConfig::new(&path).id(id.clone()),
    );
    println!("{id}: contending on {path} via {connect}");
    loop {
        tokio::select! {
            event = latch.next_event() => match event {
                Some(RecipeEvent::Granted(grant)) => match grant.token {
                    Some(token) => println!("{id}: LEADER with fencing epoch {} (zxid {}), node {}", token.epoch, token.zxid, grant.node),
                    None => println!("{id}: LEADER (unfenced), node {}", grant.node),
                },
                Some(RecipeEvent::Revoked(why)) => println!("{id}: not leader ({why:?})"),
                Some(RecipeEvent::Ended) | None => break,
            },
            _ = tokio::signal::ctrl_c() => {
                latch.close().await;
                client.close().await;
                break;
            }
        }
    }
    Ok(())
}
