//! What the integration tests share (`mod support;`), on top of `rzk_testkit`:
//!
//! - [`server`]: servers inside the test process: [`TestServer`] (standalone,
//!   on a listener bound to port 0), [`server::Ensemble`] (members on reserved
//!   ports, zoo.cfg as `rzk_testkit::ensemble` writes it, crashed and restarted
//!   in place) and [`server::Standalone`] (restarts on its port and data);
//! - [`procs`]: real `rzk` processes, for what needs a process to die (kill
//!   -9), stop (SIGSTOP) or be measured (/proc): [`procs::procs`] (an
//!   ensemble of `rzk_testkit::ensemble` with the tests' timing) and
//!   [`procs::Rzk`] (one server from zoo.cfg lines);
//! - [`clients`]: the client side: `zookeeper-client` sessions, open ACLs,
//!   the check that every acknowledged write is on every member, a
//!   hand-driven protocol client ([`Raw`]) and plain HTTP GETs;
//! - [`rollover`]: the epoch-rollover workload and its checks;
//! - here: waiting on a condition with a deadline ([`eventually`]), a
//!   runtime whose threads report panics ([`run_trapped`]), four-letter words.
#![allow(dead_code, unused_imports)]

pub mod clients;
pub mod procs;
pub mod rollover;
pub mod server;

use std::future::Future;
use std::time::{Duration, Instant};

pub use clients::{client, client_with_timeout, create_req, Raw};
pub use server::TestServer;

/// Waits until `cond` is true, failing the test after `max` (at once when a
/// task of the test panicked).
pub async fn eventually<F, Fut>(max: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + max;
    loop {
        if cond().await {
            return;
        }
        rzk_testkit::check_panics();
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A four-letter word's answer from `addr` (a `SocketAddr` or
/// `"host:port"`), "" when nothing answers within 5 s.
pub async fn four_letter(addr: impl tokio::net::ToSocketAddrs, word: &str) -> String {
    rzk_testkit::fourlw::four_letter_async(addr, word)
        .await
        .unwrap_or_default()
}

/// Runs a test's body on a multi-thread runtime of 2 workers whose threads report
/// their panics to an [`rzk_testkit::PanicTrap`]: a panic in any task of any member
/// (which tokio would catch, and the member might survive) fails the test with its
/// message, after the body.
pub fn run_trapped<F: Future>(body: F) -> F::Output {
    let trap = rzk_testkit::PanicTrap::new();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(trap.thread_hook())
        .build()
        .expect("a runtime");
    let out = runtime.block_on(body);
    drop(runtime);
    trap.check();
    out
}
