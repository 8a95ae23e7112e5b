//! The `zookeeper-client` crate with digest auth: given at connect (sent right
//! behind the ConnectRequest, before its answer) and added later with `auth`.
mod support;

use std::time::Duration;

use support::*;
use zookeeper_client as zk;

#[tokio::test]
async fn digest_auth_at_connect_and_after() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let address = server.connect_string();
    let client = tokio::time::timeout(
        Duration::from_secs(10),
        zk::Client::connector()
            .with_auth("digest", b"ops:secret")
            .connect(&address),
    )
    .await
    .expect("connected in time")
    .expect("connect");
    let acl = zk::CreateMode::Persistent.with_acls(zk::Acls::creator_all());
    tokio::time::timeout(Duration::from_secs(10), client.create("/a", b"x", &acl))
        .await
        .expect("in time")
        .expect("create");
    let (data, _) = client.get_data("/a").await.expect("read own node");
    assert_eq!(data, b"x");

    let other = zk::Client::connector()
        .connect(&address)
        .await
        .expect("connect");
    tokio::time::timeout(Duration::from_secs(10), other.auth("digest", b"ops:secret"))
        .await
        .expect("in time")
        .expect("auth");
    let (data, _) = other
        .get_data("/a")
        .await
        .expect("read with the same identity");
    assert_eq!(data, b"x");
}
