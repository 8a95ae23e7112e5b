//! The crate's one error type.

use thiserror::Error;

/// Everything that can go wrong in the client and the recipes.
///
/// Server error codes that a caller is expected to handle (a missing node, a version
/// conflict, …) have their own variants carrying the path they concern; the rest keep
/// their numeric code in [`Error::Server`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    /// The node (or, for a create, its parent) does not exist (`NONODE`, −101).
    #[error("no node at {path}")]
    NoNode {
        /// The path of the request.
        path: String,
    },
    /// The node already exists (`NODEEXISTS`, −110).
    #[error("node already exists at {path}")]
    NodeExists {
        /// The path of the request.
        path: String,
    },
    /// The expected version did not match (`BADVERSION`, −103).
    #[error("version conflict at {path}")]
    BadVersion {
        /// The path of the request.
        path: String,
    },
    /// The node has children and cannot be deleted (`NOTEMPTY`, −111).
    #[error("node {path} has children")]
    NotEmpty {
        /// The path of the request.
        path: String,
    },
    /// The ACL denies the operation (`NOAUTH`, −102).
    #[error("not authorised at {path}")]
    NoAuth {
        /// The path of the request.
        path: String,
    },
    /// The session has expired (`SESSIONEXPIRED`, −112, or the server refused to resume it).
    #[error("session expired")]
    SessionExpired,
    /// The connection was lost before the reply arrived (`CONNECTIONLOSS`, −4). Whether a
    /// write was applied is unknown.
    #[error("connection lost")]
    ConnectionLoss,
    /// The client or the recipe was closed.
    #[error("closed")]
    Closed,
    /// Any other error code from the server.
    #[error("server error {code} at {path}")]
    Server {
        /// The ZooKeeper error code.
        code: i32,
        /// The path of the request (empty when the request had none).
        path: String,
    },
    /// A znode held data that the recipe could not interpret.
    #[error("unexpected data at {path}: {reason}")]
    BadData {
        /// The znode.
        path: String,
        /// What was wrong with it.
        reason: String,
    },
    /// A configuration value (connect string, path, timeout) is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The transport failed (socket error, undecodable frame, protocol violation).
    #[error("transport: {0}")]
    Transport(String),
}

impl Error {
    /// True for errors after which the outcome of a write is unknown and the connection
    /// is being re-established (the session may still be alive).
    pub fn is_connection_loss(&self) -> bool {
        matches!(self, Error::ConnectionLoss | Error::Transport(_))
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
