//! Take an inter-process lock, hold it for a while, release it.
//!
//! ```sh
//! cargo run -p rzk-election-client --example lock -- 127.0.0.1:2181 /demo/lock 3
//! ```
//! Start several at once: they take turns, each with a larger fencing epoch.

use std::sync::Arc;
use std::time::Duration;

use rzk_election_client::recipe::Mutex;
use rzk_election_client::Client;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let connect = args.next().unwrap_or_else(|| "127.0.0.1:2181".into());
    let path = args.next().unwrap_or_else(|| "/demo/lock".into());
    let hold_s: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(3);

    let client = Arc::new(Client::connect_to(&connect, Duration::from_secs(6)).await?);
    let lock = Mutex::new(client.clone(), &path).fenced(format!("{path}-epoch"));
    println!("waiting for {path} ...");
    let mut guard = lock.acquire().await?;
    let token = guard.grant().token.expect("fenced lock");
    println!(
        "holding {path} with fencing epoch {} for {hold_s} s",
        token.epoch
    );
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs(hold_s)) => {
            guard.release().await;
            println!("released");
        }
        why = guard.lost() => println!("lost the lock early: {why:?}"),
    }
    client.close().await;
    Ok(())
}
