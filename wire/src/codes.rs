//! The protocol's numbers as types: opcodes, error codes, event types, keeper
//! states, create modes, watcher types, addWatch modes, permission bits, xids
//! and session ids. Every numeric value is ZooKeeper's; the tables are in
//! docs/client-protocol.md ("Special xids", "Opcodes", "Create modes", "Error
//! codes", "Notifications", "Permissions").

use std::fmt;

/// Defines a fieldless enum over `i32` wire values with lossless conversions.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $value:expr => $zk:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(i32)]
        pub enum $name {
            $( $(#[$vmeta])* $variant = $value, )*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The value for a wire number, or `None` if ZooKeeper defines none.
            pub const fn from_i32(value: i32) -> Option<$name> {
                match value {
                    $( $value => Some($name::$variant), )*
                    _ => None,
                }
            }

            /// The wire number.
            pub const fn as_i32(self) -> i32 {
                self as i32
            }

            /// The name ZooKeeper's Java sources give this value.
            pub const fn zk_name(self) -> &'static str {
                match self {
                    $( $name::$variant => $zk, )*
                }
            }
        }

        impl From<$name> for i32 {
            fn from(value: $name) -> i32 {
                value.as_i32()
            }
        }

        impl TryFrom<i32> for $name {
            type Error = i32;

            /// Fails with the raw number when ZooKeeper defines no such value.
            fn try_from(value: i32) -> Result<$name, i32> {
                $name::from_i32(value).ok_or(value)
            }
        }
    };
}

wire_enum! {
    /// A request type (`ZooDefs.OpCode`; docs/client-protocol.md, "Opcodes").
    pub enum OpCode {
        /// Defined but never sent as a request.
        Notification = 0 => "notification",
        /// Create a node; reply CreateResponse.
        Create = 1 => "create",
        /// Delete a node; no reply body.
        Delete = 2 => "delete",
        /// Stat of a node (NONODE if missing).
        Exists = 3 => "exists",
        /// Data and stat of a node.
        GetData = 4 => "getData",
        /// Replace a node's data.
        SetData = 5 => "setData",
        /// ACL and stat of a node.
        GetAcl = 6 => "getACL",
        /// Replace a node's ACL.
        SetAcl = 7 => "setACL",
        /// Names of a node's children.
        GetChildren = 8 => "getChildren",
        /// Barrier: reply once the server has caught up.
        Sync = 9 => "sync",
        /// Keep-alive, xid -2.
        Ping = 11 => "ping",
        /// Children and the parent's stat.
        GetChildren2 = 12 => "getChildren2",
        /// Version check (inside multi).
        Check = 13 => "check",
        /// Atomic batch of writes.
        Multi = 14 => "multi",
        /// Create, replying with the stat too.
        Create2 = 15 => "create2",
        /// Dynamic reconfiguration.
        Reconfig = 16 => "reconfig",
        /// Whether this connection has a watch.
        CheckWatches = 17 => "checkWatches",
        /// Remove this connection's watches.
        RemoveWatches = 18 => "removeWatches",
        /// Create a container node.
        CreateContainer = 19 => "createContainer",
        /// Server-internal (the container reaper); never sent by clients.
        DeleteContainer = 20 => "deleteContainer",
        /// Create a node with a TTL.
        CreateTtl = 21 => "createTTL",
        /// Non-atomic batch of reads.
        MultiRead = 22 => "multiRead",
        /// Add an auth identity, xid -4.
        Auth = 100 => "auth",
        /// Restore watches after reconnecting, xid -8.
        SetWatches = 101 => "setWatches",
        /// One step of a SASL exchange.
        Sasl = 102 => "sasl",
        /// The session's ephemeral nodes under a prefix.
        GetEphemerals = 103 => "getEphemerals",
        /// Number of all descendants of a node.
        GetAllChildrenNumber = 104 => "getAllChildrenNumber",
        /// setWatches with persistent watches, xid -8.
        SetWatches2 = 105 => "setWatches2",
        /// Add a persistent (recursive) watch.
        AddWatch = 106 => "addWatch",
        /// The connection's identities.
        WhoAmI = 107 => "whoAmI",
        /// Internal only: sessions are made with a ConnectRequest.
        CreateSession = -10 => "createSession",
        /// Close the session.
        CloseSession = -11 => "closeSession",
        /// Used only as a MultiHeader type for error results.
        Error = -1 => "error",
    }
}

impl OpCode {
    /// Whether clients send this opcode as a request. The four that they never
    /// send (notification, deleteContainer, createSession, error) are treated
    /// like unknown opcodes by the server decoder.
    pub const fn is_client_request(self) -> bool {
        !matches!(
            self,
            OpCode::Notification | OpCode::DeleteContainer | OpCode::CreateSession | OpCode::Error
        )
    }
}

wire_enum! {
    /// A result code (`KeeperException.Code`; docs/client-protocol.md, "Error
    /// codes"). `Ok` (0) is a value like the others because the wire uses it
    /// inside multi results: a rolled-back sub-op carries code 0 in an error
    /// result.
    pub enum ErrorCode {
        /// Success.
        Ok = 0 => "OK",
        /// Generic system error (base value).
        SystemError = -1 => "SYSTEMERROR",
        /// Multi: sub-ops after the failing one.
        RuntimeInconsistency = -2 => "RUNTIMEINCONSISTENCY",
        /// Not used on the client port.
        DataInconsistency = -3 => "DATAINCONSISTENCY",
        /// Client-side: connection lost.
        ConnectionLoss = -4 => "CONNECTIONLOSS",
        /// A request that cannot be decoded.
        MarshallingError = -5 => "MARSHALLINGERROR",
        /// Unknown opcode, TTL disabled, reconfig in standalone.
        Unimplemented = -6 => "UNIMPLEMENTED",
        /// Client-side: operation timeout.
        OperationTimeout = -7 => "OPERATIONTIMEOUT",
        /// Invalid path, flags or TTL.
        BadArguments = -8 => "BADARGUMENTS",
        /// Quorum internals.
        UnknownSession = -12 => "UNKNOWNSESSION",
        /// Reconfig: no quorum of the new config.
        NewConfigNoQuorum = -13 => "NEWCONFIGNOQUORUM",
        /// Reconfig already running.
        ReconfigInProgress = -14 => "RECONFIGINPROGRESS",
        /// Base value of API errors.
        ApiError = -100 => "APIERROR",
        /// Missing node or parent.
        NoNode = -101 => "NONODE",
        /// The ACL denies the operation.
        NoAuth = -102 => "NOAUTH",
        /// Version or aversion mismatch.
        BadVersion = -103 => "BADVERSION",
        /// Create under an ephemeral node.
        NoChildrenForEphemerals = -108 => "NOCHILDRENFOREPHEMERALS",
        /// The node exists.
        NodeExists = -110 => "NODEEXISTS",
        /// The node has children.
        NotEmpty = -111 => "NOTEMPTY",
        /// The session expired.
        SessionExpired = -112 => "SESSIONEXPIRED",
        /// Client-side: invalid callback.
        InvalidCallback = -113 => "INVALIDCALLBACK",
        /// Empty or malformed ACL.
        InvalidAcl = -114 => "INVALIDACL",
        /// Auth with an unknown scheme; SASL failure.
        AuthFailed = -115 => "AUTHFAILED",
        /// The session moved to another server.
        SessionMoved = -118 => "SESSIONMOVED",
        /// Write sent to a read-only server.
        NotReadOnly = -119 => "NOTREADONLY",
        /// Ephemeral create on a local session.
        EphemeralOnLocalSession = -120 => "EPHEMERALONLOCALSESSION",
        /// checkWatches/removeWatches found nothing.
        NoWatcher = -121 => "NOWATCHER",
        /// Client-side: request timeout.
        RequestTimeout = -122 => "REQUESTTIMEOUT",
        /// Reconfig disabled.
        ReconfigDisabled = -123 => "RECONFIGDISABLED",
        /// SASL required but not done.
        SessionClosedRequireSaslAuth = -124 => "SESSIONCLOSEDREQUIRESASLAUTH",
        /// Quota exceeded (enforcement on).
        QuotaExceeded = -125 => "QUOTAEXCEEDED",
        /// Throttled by the server.
        ThrottledOp = -127 => "THROTTLEDOP",
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.zk_name(), self.as_i32())
    }
}

impl std::error::Error for ErrorCode {}

wire_enum! {
    /// A watch event type (`Watcher.Event.EventType`; docs/client-protocol.md,
    /// "Notifications"). Servers send only 1–4; the others are generated by
    /// clients.
    pub enum EventType {
        /// Client-generated connection state change.
        None = -1 => "None",
        /// The node was created.
        NodeCreated = 1 => "NodeCreated",
        /// The node was deleted.
        NodeDeleted = 2 => "NodeDeleted",
        /// The node's data changed.
        NodeDataChanged = 3 => "NodeDataChanged",
        /// The node's children changed.
        NodeChildrenChanged = 4 => "NodeChildrenChanged",
        /// Client-generated after removeWatches.
        DataWatchRemoved = 5 => "DataWatchRemoved",
        /// Client-generated after removeWatches.
        ChildWatchRemoved = 6 => "ChildWatchRemoved",
        /// Client-generated after removing a persistent watch.
        PersistentWatchRemoved = 7 => "PersistentWatchRemoved",
    }
}

wire_enum! {
    /// A connection state (`Watcher.Event.KeeperState`;
    /// docs/client-protocol.md, "Notifications"). Servers send only
    /// `SyncConnected` inside notifications.
    pub enum KeeperState {
        /// Deprecated.
        Unknown = -1 => "Unknown",
        /// Disconnected.
        Disconnected = 0 => "Disconnected",
        /// Deprecated.
        NoSyncConnected = 1 => "NoSyncConnected",
        /// Connected; the state every notification carries.
        SyncConnected = 3 => "SyncConnected",
        /// Authentication failed.
        AuthFailed = 4 => "AuthFailed",
        /// Connected to a read-only server.
        ConnectedReadOnly = 5 => "ConnectedReadOnly",
        /// SASL authentication succeeded.
        SaslAuthenticated = 6 => "SaslAuthenticated",
        /// The session expired.
        Expired = -112 => "Expired",
        /// The client closed the session.
        Closed = 7 => "Closed",
    }
}

wire_enum! {
    /// A create mode (`CreateMode`; docs/client-protocol.md, "Create modes"),
    /// carried as `flags` in create requests. Requests keep the raw flags (an
    /// invalid value is answered BADARGUMENTS by the server, not rejected by
    /// the decoder); this type is what they mean.
    pub enum CreateMode {
        /// A persistent node.
        Persistent = 0 => "PERSISTENT",
        /// Deleted when its session ends.
        Ephemeral = 1 => "EPHEMERAL",
        /// Persistent, with a sequence suffix.
        PersistentSequential = 2 => "PERSISTENT_SEQUENTIAL",
        /// Ephemeral, with a sequence suffix.
        EphemeralSequential = 3 => "EPHEMERAL_SEQUENTIAL",
        /// Deleted once empty after having had a child (op 19).
        Container = 4 => "CONTAINER",
        /// Deleted when childless and older than its TTL (op 21).
        PersistentWithTtl = 5 => "PERSISTENT_WITH_TTL",
        /// TTL node with a sequence suffix (op 21).
        PersistentSequentialWithTtl = 6 => "PERSISTENT_SEQUENTIAL_WITH_TTL",
    }
}

impl CreateMode {
    /// Whether nodes of this mode belong to a session.
    pub const fn is_ephemeral(self) -> bool {
        matches!(
            self,
            CreateMode::Ephemeral | CreateMode::EphemeralSequential
        )
    }

    /// Whether the name gets a 10-digit sequence suffix.
    pub const fn is_sequential(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentSequential
                | CreateMode::EphemeralSequential
                | CreateMode::PersistentSequentialWithTtl
        )
    }

    /// Whether this is the container mode.
    pub const fn is_container(self) -> bool {
        matches!(self, CreateMode::Container)
    }

    /// Whether this is one of the TTL modes.
    pub const fn is_ttl(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentWithTtl | CreateMode::PersistentSequentialWithTtl
        )
    }
}

wire_enum! {
    /// Which watches checkWatches/removeWatches address (`WatcherType`;
    /// docs/client-protocol.md, "checkWatches and removeWatches"). 4 and 5
    /// exist since 3.9; a 3.8 server rejects them.
    pub enum WatcherType {
        /// Child watches.
        Children = 1 => "Children",
        /// Data and exist watches.
        Data = 2 => "Data",
        /// Both.
        Any = 3 => "Any",
        /// Persistent watches (3.9+).
        Persistent = 4 => "Persistent",
        /// Persistent recursive watches (3.9+).
        PersistentRecursive = 5 => "PersistentRecursive",
    }
}

wire_enum! {
    /// The mode of an addWatch request (`AddWatchMode`;
    /// docs/client-protocol.md, "Persistent and recursive watches").
    pub enum AddWatchMode {
        /// Every event on exactly the path.
        Persistent = 0 => "PERSISTENT",
        /// Created/deleted/data events on the path and all descendants.
        PersistentRecursive = 1 => "PERSISTENT_RECURSIVE",
    }
}

/// ACL permission bits (`ZooDefs.Perms`; docs/client-protocol.md,
/// "Permissions"). Unknown bits are kept as they came, so a decoded value
/// re-encodes to the same bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Perms(pub i32);

impl Perms {
    /// No permission.
    pub const NONE: Perms = Perms(0);
    /// Read data and list children.
    pub const READ: Perms = Perms(1);
    /// Set data.
    pub const WRITE: Perms = Perms(1 << 1);
    /// Create children.
    pub const CREATE: Perms = Perms(1 << 2);
    /// Delete children.
    pub const DELETE: Perms = Perms(1 << 3);
    /// Set the ACL.
    pub const ADMIN: Perms = Perms(1 << 4);
    /// All five bits (31).
    pub const ALL: Perms = Perms(31);

    /// Whether every bit of `other` is set here.
    pub const fn contains(self, other: Perms) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any bit of `other` is set here.
    pub const fn intersects(self, other: Perms) -> bool {
        self.0 & other.0 != 0
    }
}

impl std::ops::BitOr for Perms {
    type Output = Perms;

    fn bitor(self, rhs: Perms) -> Perms {
        Perms(self.0 | rhs.0)
    }
}

/// A request's correlation id, echoed in its reply (docs/client-protocol.md,
/// "Special xids"). Negative values are reserved: see the constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Xid(pub i32);

impl Xid {
    /// Watch notifications (server to client only).
    pub const NOTIFICATION: Xid = Xid(-1);
    /// Pings.
    pub const PING: Xid = Xid(-2);
    /// Auth packets.
    pub const AUTH: Xid = Xid(-4);
    /// setWatches and setWatches2.
    pub const SET_WATCHES: Xid = Xid(-8);
}

impl Xid {
    /// The opcode whose reply a reserved xid always carries: ping for -2, auth
    /// for -4, setWatches for -8 (setWatches2's reply has the same empty body).
    /// `None` for the notification xid and for ordinary xids, whose opcode the
    /// client looks up in its queue of outstanding requests.
    pub const fn reserved_opcode(self) -> Option<OpCode> {
        match self.0 {
            -2 => Some(OpCode::Ping),
            -4 => Some(OpCode::Auth),
            -8 => Some(OpCode::SetWatches),
            _ => None,
        }
    }
}

impl fmt::Display for Xid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A session id (docs/client-protocol.md, "New sessions and session ids"). 0 in
/// a ConnectRequest asks for a new session; 0 in a ConnectResponse means the
/// session is invalid. Also the `ephemeralOwner` of a Stat (0 for non-ephemeral
/// nodes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SessionId(pub i64);

impl SessionId {
    /// "No session": a new-session request, an invalid-session response, the
    /// owner of a non-ephemeral node.
    pub const NONE: SessionId = SessionId(0);
}

impl fmt::Display for SessionId {
    /// ZooKeeper's form: `0x` and lower-case hex, as in `0x1000006ed6f0024`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_round_trips<T: Copy + PartialEq + std::fmt::Debug>(
        all: &[T],
        to: fn(T) -> i32,
        from: fn(i32) -> Option<T>,
    ) {
        for &v in all {
            assert_eq!(from(to(v)), Some(v));
        }
    }

    #[test]
    fn every_enum_value_round_trips_through_its_number() {
        assert_round_trips(OpCode::ALL, OpCode::as_i32, OpCode::from_i32);
        assert_round_trips(ErrorCode::ALL, ErrorCode::as_i32, ErrorCode::from_i32);
        assert_round_trips(EventType::ALL, EventType::as_i32, EventType::from_i32);
        assert_round_trips(KeeperState::ALL, KeeperState::as_i32, KeeperState::from_i32);
        assert_round_trips(CreateMode::ALL, CreateMode::as_i32, CreateMode::from_i32);
        assert_round_trips(WatcherType::ALL, WatcherType::as_i32, WatcherType::from_i32);
        assert_round_trips(
            AddWatchMode::ALL,
            AddWatchMode::as_i32,
            AddWatchMode::from_i32,
        );
    }

    #[test]
    fn numbers_match_zookeeper() {
        // Spot checks of ZooKeeper's tables (opcodes, error codes, event types:
        // docs/client-protocol.md) beyond the macro's own consistency: a typo
        // in a value would pass the round trip.
        assert_eq!(OpCode::CloseSession.as_i32(), -11);
        assert_eq!(OpCode::WhoAmI.as_i32(), 107);
        assert_eq!(OpCode::MultiRead.as_i32(), 22);
        assert_eq!(ErrorCode::NoNode.as_i32(), -101);
        assert_eq!(ErrorCode::ThrottledOp.as_i32(), -127);
        assert_eq!(ErrorCode::MarshallingError.as_i32(), -5);
        assert_eq!(KeeperState::Expired.as_i32(), -112);
        assert_eq!(EventType::NodeChildrenChanged.as_i32(), 4);
        assert_eq!(OpCode::ALL.len(), 33);
        assert_eq!(ErrorCode::ALL.len(), 32);
        assert_eq!(OpCode::from_i32(10), None);
        assert_eq!(ErrorCode::from_i32(-126), None);
    }

    #[test]
    fn error_code_displays_zookeeper_name_and_number() {
        assert_eq!(ErrorCode::NoNode.to_string(), "NONODE (-101)");
    }

    #[test]
    fn create_mode_properties() {
        assert!(CreateMode::EphemeralSequential.is_ephemeral());
        assert!(CreateMode::EphemeralSequential.is_sequential());
        assert!(CreateMode::PersistentSequentialWithTtl.is_ttl());
        assert!(CreateMode::PersistentSequentialWithTtl.is_sequential());
        assert!(CreateMode::Container.is_container());
        assert!(!CreateMode::Persistent.is_ephemeral());
    }

    #[test]
    fn reserved_xids_name_their_opcodes() {
        assert_eq!(Xid::PING.reserved_opcode(), Some(OpCode::Ping));
        assert_eq!(Xid::AUTH.reserved_opcode(), Some(OpCode::Auth));
        assert_eq!(Xid::SET_WATCHES.reserved_opcode(), Some(OpCode::SetWatches));
        assert_eq!(Xid::NOTIFICATION.reserved_opcode(), None);
        assert_eq!(Xid(1).reserved_opcode(), None);
    }

    #[test]
    fn perms_bits() {
        assert_eq!(
            Perms::READ | Perms::WRITE | Perms::CREATE | Perms::DELETE | Perms::ADMIN,
            Perms::ALL
        );
        assert!(Perms::ALL.contains(Perms::ADMIN));
        assert!(!Perms::READ.intersects(Perms::WRITE));
    }
}
