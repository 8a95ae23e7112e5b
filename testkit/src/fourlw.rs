//! Four-letter words (`ruok`, `srvr`, `mntr`, ...) over a server's client port,
//! and the fields of their answers.
//!
//! Both servers (rzk and Apache ZooKeeper) answer a four-letter word sent as the
//! first bytes of a connection and close it. Every exchange here is bounded
//! ([`EXCHANGE_MAX`]): a server that accepts and never answers (a JVM still
//! starting, a stopped process) gives no answer, so a caller that polls keeps
//! polling against its own deadline instead of hanging.
//!
//! ```no_run
//! use rzk_testkit::fourlw;
//! let addr = "127.0.0.1:2181".parse().unwrap();
//! let srvr = fourlw::four_letter(addr, "srvr").unwrap_or_default();
//! let mode = fourlw::field(&srvr, "Mode:"); // Some("leader"), Some("follower"), ...
//! let mntr = fourlw::four_letter(addr, "mntr").unwrap_or_default();
//! let zxid = fourlw::mntr_row(&mntr, "last_zxid");
//! # let _ = (mode, zxid);
//! ```

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The longest one exchange (connect, send, read to the end) may take.
pub const EXCHANGE_MAX: Duration = Duration::from_secs(5);

/// Sends `word` to `addr` and reads the answer to its end; `None` when nothing
/// answers within [`EXCHANGE_MAX`] (not running, stopped, not listening yet).
/// Blocks the calling thread; async code uses [`four_letter_async`].
pub fn four_letter(addr: SocketAddr, word: &str) -> Option<String> {
    let deadline = Instant::now() + EXCHANGE_MAX;
    let mut s = TcpStream::connect_timeout(&addr, EXCHANGE_MAX).ok()?;
    s.write_all(word.as_bytes()).ok()?;
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .ok()?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => return None,
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// [`four_letter`] on tokio: the same exchange and bound, without blocking a
/// runtime thread (servers inside the test process answer on that runtime).
/// `addr` is anything tokio resolves (`SocketAddr`, `"127.0.0.1:2181"`).
pub async fn four_letter_async(addr: impl tokio::net::ToSocketAddrs, word: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(word.as_bytes()).await.ok()?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.ok()?;
        Some(String::from_utf8_lossy(&out).into_owned())
    };
    tokio::time::timeout(EXCHANGE_MAX, attempt)
        .await
        .ok()
        .flatten()
}

/// The trimmed rest of the first line of `text` that starts with `prefix`
/// (`field(srvr, "Mode:")`).
pub fn field<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .map(str::trim)
}

/// The value of `zk_<key>` in a `mntr` answer (`mntr_row(mntr, "last_zxid")`).
pub fn mntr_row<'a>(mntr: &'a str, key: &str) -> Option<&'a str> {
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_")?.strip_prefix(key)?.strip_prefix('\t'))
}

/// The `Mode:` of a `srvr` answer: `leader`, `follower`, `observer`,
/// `standalone`; `None` when the server does not serve (its answer then says
/// so and has no mode).
pub fn mode(srvr: &str) -> Option<&str> {
    field(srvr, "Mode:")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A one-shot server: answers the first connection with `answer` after
    /// reading four bytes, then closes it.
    fn answering(answer: &'static str) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut word = [0u8; 4];
            s.read_exact(&mut word).unwrap();
            assert_eq!(&word, b"srvr");
            s.write_all(answer.as_bytes()).unwrap();
        });
        addr
    }

    const SRVR: &str = "Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.0/0\n\
                        Mode: follower\nNode count: 5\n";

    #[test]
    fn reads_the_answer_to_its_end_and_its_fields() {
        let srvr = four_letter(answering(SRVR), "srvr").unwrap();
        assert_eq!(srvr, SRVR);
        assert_eq!(mode(&srvr), Some("follower"));
        assert_eq!(field(&srvr, "Node count:"), Some("5"));
        assert_eq!(field(&srvr, "Zxid:"), None);
    }

    #[tokio::test]
    async fn the_async_exchange_reads_the_same() {
        let srvr = four_letter_async(answering(SRVR), "srvr").await.unwrap();
        assert_eq!(mode(&srvr), Some("follower"));
    }

    #[test]
    fn nothing_listening_is_no_answer() {
        let addr = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        assert_eq!(four_letter(addr, "ruok"), None);
    }

    #[test]
    fn a_server_that_never_answers_is_no_answer_within_the_bound() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let held = std::thread::spawn(move || l.accept().map(|(s, _)| s));
        let t = Instant::now();
        assert_eq!(four_letter(addr, "ruok"), None);
        assert!(t.elapsed() < EXCHANGE_MAX + Duration::from_secs(2));
        drop(held.join());
    }

    #[test]
    fn mntr_rows_by_key() {
        let mntr = "zk_version\t3.8\nzk_server_state\tleader\nzk_synced_observers\t2\n";
        assert_eq!(mntr_row(mntr, "server_state"), Some("leader"));
        assert_eq!(mntr_row(mntr, "synced_observers"), Some("2"));
        assert_eq!(mntr_row(mntr, "synced"), None, "a key is matched whole");
    }
}
