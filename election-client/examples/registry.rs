//! Service registration and discovery with two recipes: a `PersistentNode` registers this
//! process (and comes back after every session loss), a `ChildrenCache` follows the
//! other members.
//!
//! `cargo run -p rzk-election-client --example registry -- 127.0.0.1:2181 /services/api host-1 10.0.0.1:8080`

use std::sync::Arc;
use std::time::Duration;

use rzk_election_client::recipe::{
    CacheEvent, ChildrenCache, NodeConfig, NodeEvent, PersistentNode,
};
use rzk_election_client::Client;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [connect, service, id, address] = args.as_slice() else {
        return Err("usage: registry <connect> <service path> <id> <address>".into());
    };
    let client = Arc::new(Client::connect_to(connect, Duration::from_secs(6)).await?);
    let mut me = PersistentNode::start(
        client.clone(),
        NodeConfig::ephemeral(format!("{service}/{id}"), address.clone()),
    );
    let mut members = ChildrenCache::start(client.clone(), service.clone());
    loop {
        tokio::select! {
            Some(e) = me.next_event() => match e {
                NodeEvent::Present { path, session } => println!("registered at {path} (session {session})"),
                NodeEvent::Absent(why) => println!("not registered: {why:?}"),
            },
            Some(e) = members.cache().next_event() => match e {
                CacheEvent::Created { path, node } => println!("+ {path} {}", String::from_utf8_lossy(&node.data)),
                CacheEvent::Deleted { path, .. } => println!("- {path}"),
                CacheEvent::Stale => println!("members: stale (disconnected)"),
                other => println!("members: {other:?}"),
            },
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    me.close().await;
    client.close().await;
    Ok(())
}
