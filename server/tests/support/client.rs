//! The client side the process tests share: a `zookeeper-client` session,
//! open ACLs, and the check that every acknowledged write is on every member.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use zookeeper_client as zk;

use super::procs::Proc;

/// Writes whose reply arrived: (path, data), in the order acknowledged.
pub type Acked = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A session on `connect_string` (10 s timeout); panics if none is made.
pub async fn connect(connect_string: &str) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(connect_string)
        .await
        .expect("connect")
}

/// Create options with an open ACL.
pub fn open() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

/// I6: every acknowledged write is readable, with its data, on every member
/// in `members` (each read after a `sync` on that member).
pub async fn assert_acked_on_every_member(members: &[Proc], acked: &[(String, Vec<u8>)]) {
    for m in members {
        let c = connect(&m.addr()).await;
        c.sync("/").await.unwrap();
        for (path, data) in acked {
            let (got, _) = c
                .get_data(path)
                .await
                .unwrap_or_else(|e| panic!("{path} lost on member {}: {e}", m.id));
            assert_eq!(&got, data, "{path} on member {}", m.id);
        }
    }
}
