//! The crate's one error type.

use rzk_wire::ErrorCode;
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
        code: ErrorCode,
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
    /// A path is not a valid ZooKeeper path (checked before sending).
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The path.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A multi failed: nothing was applied. `index` is the first failing op.
    #[error("multi op {index} failed: {source}")]
    MultiFailed {
        /// The failing op.
        index: usize,
        /// Its error.
        source: Box<Error>,
    },
    /// A configuration value (connect string, path, timeout) is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The transport failed (socket error, undecodable frame, protocol violation).
    #[error("transport: {0}")]
    Transport(String),
}

impl Error {
    /// The error for a server's error code on a request for `path`.
    pub fn from_code(code: ErrorCode, path: &str) -> Error {
        let path = path.to_owned();
        // No wildcard arm on a protocol enum: every code listed, so a new one
        // fails to compile here.
        match code {
            ErrorCode::NoNode => Error::NoNode { path },
            ErrorCode::NodeExists => Error::NodeExists { path },
            ErrorCode::BadVersion => Error::BadVersion { path },
            ErrorCode::NotEmpty => Error::NotEmpty { path },
            ErrorCode::NoAuth => Error::NoAuth { path },
            ErrorCode::SessionExpired => Error::SessionExpired,
            ErrorCode::ConnectionLoss => Error::ConnectionLoss,
            ErrorCode::Ok
            | ErrorCode::SystemError
            | ErrorCode::RuntimeInconsistency
            | ErrorCode::DataInconsistency
            | ErrorCode::MarshallingError
            | ErrorCode::Unimplemented
            | ErrorCode::OperationTimeout
            | ErrorCode::BadArguments
            | ErrorCode::UnknownSession
            | ErrorCode::NewConfigNoQuorum
            | ErrorCode::ReconfigInProgress
            | ErrorCode::ApiError
            | ErrorCode::NoChildrenForEphemerals
            | ErrorCode::InvalidCallback
            | ErrorCode::InvalidAcl
            | ErrorCode::AuthFailed
            | ErrorCode::SessionMoved
            | ErrorCode::NotReadOnly
            | ErrorCode::EphemeralOnLocalSession
            | ErrorCode::NoWatcher
            | ErrorCode::RequestTimeout
            | ErrorCode::ReconfigDisabled
            | ErrorCode::SessionClosedRequireSaslAuth
            | ErrorCode::QuotaExceeded
            | ErrorCode::ThrottledOp => Error::Server { code, path },
        }
    }

    /// The server error code, for [`Error::Server`].
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::NoNode { .. } => Some(ErrorCode::NoNode),
            Error::NodeExists { .. } => Some(ErrorCode::NodeExists),
            Error::BadVersion { .. } => Some(ErrorCode::BadVersion),
            Error::NotEmpty { .. } => Some(ErrorCode::NotEmpty),
            Error::NoAuth { .. } => Some(ErrorCode::NoAuth),
            Error::SessionExpired => Some(ErrorCode::SessionExpired),
            Error::ConnectionLoss => Some(ErrorCode::ConnectionLoss),
            Error::Server { code, .. } => Some(*code),
            Error::MultiFailed { source, .. } => source.code(),
            Error::Closed
            | Error::BadData { .. }
            | Error::InvalidPath { .. }
            | Error::Config(_)
            | Error::Transport(_) => None,
        }
    }

    /// True for errors after which the outcome of a write is unknown and the connection
    /// is being re-established (the session may still be alive).
    pub fn is_connection_loss(&self) -> bool {
        matches!(self, Error::ConnectionLoss | Error::Transport(_))
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
