//! A first end-to-end check with a real client.
mod support;

use support::*;
use zookeeper_client as zk;

#[tokio::test]
async fn create_get_set_delete_with_a_real_client() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), &[]).await;
    let c = client(&server).await;
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let (stat, _) = c.create("/a", b"hi", &opts).await.unwrap();
    assert_eq!(stat.version, 0);
    let (data, stat) = c.get_data("/a").await.unwrap();
    assert_eq!((data.as_slice(), stat.data_length), (&b"hi"[..], 2));
    let stat = c.set_data("/a", b"ho", Some(0)).await.unwrap();
    assert_eq!(stat.version, 1);
    assert_eq!(
        c.set_data("/a", b"x", Some(0)).await.unwrap_err(),
        zk::Error::BadVersion
    );
    c.delete("/a", None).await.unwrap();
    assert_eq!(c.get_data("/a").await.unwrap_err(), zk::Error::NoNode);
    drop(c);
    server.stop().await.unwrap();
}
