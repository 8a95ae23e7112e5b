//! The one error type of the `rzk-benches` library.

use std::time::Duration;

use rzk_wire::{ErrorCode, WireError};

/// What went wrong while talking to the server under test, or while checking
/// what it said.
///
/// Wrong answers during a timed run are not errors of this type: they are
/// counted in the run's report (so one bad reply does not hide the rest) and
/// only make the exit status non-zero. These variants end the operation that
/// hit them.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A socket operation failed.
    #[error("{what} {server}: {source}")]
    Io {
        /// What was being done ("connect to", "write to", "read from").
        what: &'static str,
        /// The server's address.
        server: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The server sent bytes the client codec refuses.
    #[error("bad frame from {server}: {source}")]
    Wire {
        /// The server's address.
        server: String,
        /// What the decoder said.
        source: WireError,
    },
    /// The server closed the connection.
    #[error("{server} closed the connection{context}")]
    Closed {
        /// The server's address.
        server: String,
        /// What was outstanding, if anything (starts with ": ").
        context: String,
    },
    /// Nothing arrived in time.
    #[error("{what}: nothing from {server} within {} ms", .after.as_millis())]
    Timeout {
        /// What was awaited.
        what: String,
        /// The server's address.
        server: String,
        /// How long we waited.
        after: Duration,
    },
    /// The server refused the session (ConnectResponse with timeout 0).
    #[error("{server} refused the session (negotiated timeout {timeout_ms} ms)")]
    SessionRefused {
        /// The server's address.
        server: String,
        /// The timeout it answered.
        timeout_ms: i32,
    },
    /// A request got an error code where success was due.
    #[error("{op} {path}: server answered {code}, expected OK")]
    Unexpected {
        /// The ZooKeeper name of the operation.
        op: &'static str,
        /// The path it worked on.
        path: String,
        /// The error code received.
        code: ErrorCode,
    },
    /// A reply broke the protocol or did not say what this run wrote.
    #[error("{0}")]
    WrongAnswer(String),
    /// The options do not make sense together.
    #[error("invalid options: {0}")]
    Options(String),
}
