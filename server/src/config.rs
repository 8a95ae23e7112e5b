//! Server configuration: a `zoo.cfg`-compatible file, command-line overrides, and
//! the embedded default (127.0.0.1:2181, data in `./data`) when there is no file.
//!
//! The file format is ZooKeeper's: Java-properties lines `key=value` (also
//! `key: value` and `key value`), `#` and `!` comments, values trimmed. Keys are
//! ZooKeeper's names. An unknown key is a warning; an invalid value is a
//! [`ConfigError`] naming the key, the line and the reason, which the binary turns
//! into a message and exit code 2.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// ZooKeeper's `jute.maxbuffer` default: the largest frame a client may send.
pub const JUTE_MAX_BUFFER_DEFAULT: u32 = 0xfffff;

/// The lowest `rzk.zxid.counterLimit` accepted. Every rollover uses up one of
/// the 2^32 epochs, and an ensemble whose epochs are used up can never elect a
/// leader again: at 100,000 writes/s a limit of 16 would take about 8 days to
/// get there, the default about 1.4 million years.
pub const ZXID_COUNTER_LIMIT_MIN: u32 = 16;

/// The smallest `rzk.snap.chunkBytesMax`. A leader reads and sends a SNAP up
/// to the quorum core's in-flight limit (8 MiB) beyond what the learner
/// stored, one message per chunk, and the gRPC transport queues at most 8192
/// messages per peer (more are dropped, which ends the learner's session):
/// at 4 KiB at most 2048 chunk messages are outstanding.
pub const SNAP_CHUNK_BYTES_MIN: usize = 4 << 10;

/// The largest `rzk.snap.chunkBytesMax`: the quorum core's in-flight limit of
/// a SNAP (8 MiB), so that one chunk never exceeds what may be outstanding.
pub const SNAP_CHUNK_BYTES_MAX: usize = 8 << 20;

/// Which four-letter words the server answers (`4lw.commands.whitelist`).
/// The words it may name, and ZooKeeper's default, are the server's table
/// of commands' (`crate::commands`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FourLetterWhitelist {
    /// `*`: every command.
    All,
    /// Only these commands. ZooKeeper's default (since 3.5.3) is `srvr` alone.
    Only(BTreeSet<String>),
}

impl FourLetterWhitelist {
    /// Whether `cmd` may run.
    pub fn allows(&self, cmd: &str) -> bool {
        match self {
            FourLetterWhitelist::All => true,
            FourLetterWhitelist::Only(set) => set.contains(cmd),
        }
    }
}

impl Default for FourLetterWhitelist {
    fn default() -> Self {
        FourLetterWhitelist::Only(
            crate::commands::default_whitelist()
                .map(str::to_owned)
                .collect(),
        )
    }
}

/// The role a `server.N=` line gives a member of the ensemble.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerRole {
    /// A voting member (the default).
    Participant,
    /// A non-voting learner (`:observer`).
    Observer,
}

/// One `server.N=host:quorumPort:electionPort[:role][;[clientHost:]clientPort]` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerSpec {
    /// The host name or address of the quorum and election ports.
    pub host: String,
    /// The port learners use to reach a leader.
    pub quorum_port: u16,
    /// The leader-election port.
    pub election_port: u16,
    /// Participant or observer.
    pub role: PeerRole,
    /// The client address, if the line gives one.
    pub client: Option<(String, u16)>,
    /// Where the line is (`zoo.cfg line 12`, `command line`), for errors.
    pub origin: String,
}

/// `peerType=observer|participant`: the role a member's own zoo.cfg gives it.
/// It must agree with the member's own `server.N` line (see
/// `Membership::of`); ZooKeeper 3.8 only warns and follows the line, rzk
/// refuses to start, since a member that votes where its operator meant it
/// to observe changes the quorum size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerType {
    /// The role it names.
    pub role: PeerRole,
    /// Where it is set.
    pub origin: String,
}

/// The whole server configuration, with every default filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// `tickTime`: the basic time unit in milliseconds (default 2000, as in the
    /// `zoo.cfg` ZooKeeper ships).
    pub tick_time_ms: u32,
    /// `dataDir`: snapshots and metadata (default `./data`).
    pub data_dir: PathBuf,
    /// `dataLogDir`: the transaction log (default: `dataDir`).
    pub data_log_dir: PathBuf,
    /// `clientPort` and `clientPortAddress`: where clients connect. Without a
    /// file: 127.0.0.1:2181. With a file that gives no `clientPortAddress`, all
    /// interfaces (0.0.0.0), as ZooKeeper does.
    pub client_addr: SocketAddr,
    /// `minSessionTimeout` in ms (default 2 × tickTime).
    pub min_session_timeout_ms: u32,
    /// `maxSessionTimeout` in ms (default 20 × tickTime).
    pub max_session_timeout_ms: u32,
    /// `maxClientCnxns`: concurrent connections per client IP; 0 = no limit
    /// (default 60).
    pub max_client_cnxns: u32,
    /// `globalOutstandingLimit`: requests in flight across all connections
    /// before the server stops reading sockets (default 1000).
    pub global_outstanding_limit: u32,
    /// `rzk.connection.outstandingMax`: requests in flight on one connection
    /// before the server stops reading that socket (default 1000).
    pub connection_outstanding_max: u32,
    /// `rzk.connection.outgoingBytesMax`: bytes queued to a client that does not
    /// read before the server closes its connection (default 64 MiB).
    pub connection_outgoing_bytes_max: u64,
    /// `zookeeper.nio.sessionlessCnxnTimeout`: ms a connection may stay open
    /// without sending its ConnectRequest (default 10000;
    /// docs/client-protocol.md, "Connection limits").
    pub sessionless_timeout_ms: u64,
    /// `snapCount`: transactions between snapshots (default 100000).
    pub snap_count: u64,
    /// `autopurge.snapRetainCount`: snapshots kept (default and minimum 3).
    pub snap_retain_count: u32,
    /// `rzk.snapshot.writeBytesPerSecMax`: the most bytes per second a local
    /// snapshot is written at, so that its disk writes leave room for the
    /// log's fsyncs (0: unlimited; default
    /// [`rzk_wal::SNAPSHOT_WRITE_BYTES_PER_SEC_MAX`]).
    pub snapshot_write_bytes_per_sec_max: Option<u64>,
    /// `4lw.commands.whitelist`.
    pub four_letter_words: FourLetterWhitelist,
    /// `zookeeper.extendedTypesEnabled`: TTL nodes (default false).
    pub extended_types_enabled: bool,
    /// `jute.maxbuffer`: the largest client frame in bytes (default 0xfffff).
    pub jute_max_buffer: u32,
    /// `superDigest`: `super:<base64 sha1>`; a client that authenticates as this
    /// digest passes every ACL check.
    pub super_digest: Option<String>,
    /// `znode.container.checkIntervalMs`: how often containers and TTL nodes are
    /// checked (default 60000).
    pub container_check_interval_ms: u64,
    /// `znode.container.maxPerMinute`: containers deleted per minute at most
    /// (default 10000).
    pub container_max_per_minute: u32,
    /// `preAllocSize` in KiB: the size the transaction log preallocates
    /// (default 65536 KiB = 64 MiB).
    pub prealloc_size_kib: u64,
    /// `forceSync=no` turns fsync off. Unsafe: acknowledged writes can be lost on
    /// power failure. Meant only for benchmarks, as in ZooKeeper.
    pub unsafe_no_fsync: bool,
    /// `initLimit` in ticks (quorum only; default 10).
    pub init_limit: u32,
    /// `syncLimit` in ticks (quorum only; default 5).
    pub sync_limit: u32,
    /// `server.N=` lines, by server id. Empty for standalone.
    pub servers: BTreeMap<u64, PeerSpec>,
    /// `peerType`, when the configuration sets it (ZooKeeper's default is
    /// participant).
    pub peer_type: Option<PeerType>,
    /// `observerMasterPort`. On a participant: the port it serves observers on
    /// (host from its own `server.N` line). On an observer: it follows a
    /// voter's observer master on this port (ZooKeeper: the same port on every
    /// voter's host) before it falls back to the leader.
    pub observer_master_port: Option<u16>,
    /// `observerMasterPort.N` (an rzk addition): voter N's port where it
    /// differs from `observerMasterPort` (several members on one host).
    pub observer_master_ports: BTreeMap<u64, u16>,
    /// This member's id when given on the command line (`--id N`); otherwise
    /// `myid` in the data directory (1 standalone).
    pub my_id: Option<u64>,
    /// `rzk.log.format`: `text` (default) or `json`, one object per line
    /// (see [`crate::logging`]).
    pub log_format: crate::logging::LogFormat,
    /// `rzk.zxid.counterLimit`: the highest zxid counter a leader assigns in
    /// one epoch before it rolls to the next epoch through a rollover proposal,
    /// without an election (I3). Default `0xffffffff`, the whole 32-bit
    /// counter, as ZooKeeper. A test knob: a low limit makes the rollover
    /// happen every few thousand writes instead of every four billion. Values
    /// below [`ZXID_COUNTER_LIMIT_MIN`] are refused.
    pub zxid_counter_limit: u32,
    /// `rzk.log.windowEntriesMax`: log entries a member keeps in memory beyond
    /// those not yet applied (default: the quorum core's, 10,000). A learner
    /// further behind is sent the older entries read from the durable log.
    /// `None` keeps the core's default.
    pub log_window_entries_max: Option<usize>,
    /// `rzk.log.windowBytesMax`: the same bound in payload bytes (default:
    /// the quorum core's, 64 MiB).
    pub log_window_bytes_max: Option<u64>,
    /// `rzk.snap.chunkBytesMax`: the largest chunk of a snapshot file a leader
    /// sends to a learner in one SNAP message, and of the durable log it reads
    /// in one batch for a learner (default: the quorum core's, 1 MiB; from
    /// [`SNAP_CHUNK_BYTES_MIN`] to [`SNAP_CHUNK_BYTES_MAX`]). `None` keeps the
    /// core's default.
    pub snap_chunk_bytes_max: Option<usize>,
    /// `secureClientPort` and `secureClientPortAddress`: where TLS clients
    /// connect (none by default). The address defaults as `clientPortAddress`
    /// does.
    pub secure_client_addr: Option<SocketAddr>,
    /// The `ssl.*` keys for the secure client port (see [`crate::tls`]).
    pub tls: TlsSettings,
    /// `sslQuorum`: mutual TLS on every quorum connection (default false).
    pub ssl_quorum: bool,
    /// The `ssl.quorum.*` keys (see [`crate::tls::quorum_tls`]): the same
    /// store formats as the client side; `client_auth` is always `Need`.
    pub quorum_tls: TlsSettings,
    /// `ssl.quorum.hostnameVerification` (default true, as ZooKeeper): a
    /// dialed member's certificate must name the host of its `server.N` line.
    pub quorum_hostname_verification: bool,
    /// `admin.enableServer` (default true, as ZooKeeper), `admin.serverAddress`
    /// (default all interfaces; 127.0.0.1 without a file) and
    /// `admin.serverPort` (default 8080): the AdminServer's HTTP address.
    pub admin_addr: Option<SocketAddr>,
    /// `admin.commandURL`: where the commands are (default `/commands`).
    pub admin_command_url: String,
    /// `metricsProvider.className=...PrometheusMetricsProvider` with
    /// `metricsProvider.httpHost` (default all interfaces) and
    /// `metricsProvider.httpPort` (default 7000): where `/metrics` is served.
    pub metrics_addr: Option<SocketAddr>,
    /// The configuration file's text as read (the AdminServer's
    /// `initial_configuration`); empty without a file.
    pub initial_text: String,
    /// Warnings found while reading (unknown keys, raised values); the binary
    /// logs them.
    pub warnings: Vec<String>,
}

/// The format of a key store or trust store file (`ssl.keyStore.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreType {
    /// PEM: certificates and (for a key store) one unencrypted private key.
    Pem,
    /// PKCS#12 (`.p12`, `.pfx`): recognised, not read (rzk says so at start).
    Pkcs12,
    /// Java KeyStore (`.jks`): recognised, not read.
    Jks,
    /// Bouncy Castle FIPS key store (`.bcfks`): recognised, not read.
    Bcfks,
}

impl StoreType {
    /// ZooKeeper's rule when no type is given: from the file name's extension.
    pub fn from_path(path: &Path) -> Option<StoreType> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "pem" | "crt" | "cer" | "key" => Some(StoreType::Pem),
            "p12" | "pfx" => Some(StoreType::Pkcs12),
            "jks" => Some(StoreType::Jks),
            "bcfks" => Some(StoreType::Bcfks),
            _ => None,
        }
    }
}

/// A key store or trust store: `ssl.keyStore.location`, `.password`, `.type`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreSettings {
    /// The file.
    pub location: Option<PathBuf>,
    /// Its password (PEM: of an encrypted private key, which rzk does not read).
    pub password: Option<String>,
    /// Its format; `None`: from the file name's extension, else PEM.
    pub kind: Option<StoreType>,
}

impl StoreSettings {
    /// The format the file is read as.
    pub fn effective_type(&self) -> StoreType {
        self.kind
            .or_else(|| self.location.as_deref().and_then(StoreType::from_path))
            .unwrap_or(StoreType::Pem)
    }
}

/// `ssl.clientAuth`: whether a TLS client must present a certificate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientAuth {
    /// No certificate is asked for.
    None,
    /// One is asked for; a client without one is served, one with an
    /// untrusted one is refused.
    Want,
    /// One is required (ZooKeeper's default).
    #[default]
    Need,
}

/// The TLS settings of the secure client port (ZooKeeper's `ssl.*` keys; each
/// may also carry the `zookeeper.` prefix of its Java system property).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// `ssl.keyStore.*`: the server's certificate chain and private key.
    pub key_store: StoreSettings,
    /// `ssl.trustStore.*`: the CAs a client certificate must chain to.
    pub trust_store: StoreSettings,
    /// `ssl.clientAuth`: none, want or need (default need).
    pub client_auth: ClientAuth,
    /// `ssl.protocol`: `TLSv1.2` or `TLSv1.3`; enables that version alone
    /// unless `ssl.enabledProtocols` says otherwise. `None`: both.
    pub protocol: Option<String>,
    /// `ssl.enabledProtocols`: the versions offered (comma-separated).
    pub enabled_protocols: Option<Vec<String>>,
    /// `ssl.ciphersuites`: IANA/Java names of the suites allowed, in order
    /// of preference (comma-separated). `None`: rustls's defaults.
    pub ciphersuites: Option<Vec<String>>,
    /// `client.certReload`: reload the key and trust store when their files
    /// change (checked at each new TLS connection).
    pub cert_reload: bool,
    /// `X509AuthenticationProvider.superUser`: the subject (RFC 2253) whose
    /// client certificate makes the connection a super user.
    pub x509_super_user: Option<String>,
}

impl Default for ServerConfig {
    /// The embedded default: 127.0.0.1:2181, data in `./data`.
    fn default() -> Self {
        let tick = 2000;
        ServerConfig {
            tick_time_ms: tick,
            data_dir: PathBuf::from("data"),
            data_log_dir: PathBuf::from("data"),
            client_addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 2181),
            min_session_timeout_ms: 2 * tick,
            max_session_timeout_ms: 20 * tick,
            max_client_cnxns: 60,
            global_outstanding_limit: 1000,
            connection_outstanding_max: 1000,
            connection_outgoing_bytes_max: 64 << 20,
            sessionless_timeout_ms: 10_000,
            snap_count: 100_000,
            snap_retain_count: 3,
            snapshot_write_bytes_per_sec_max: rzk_wal::SNAPSHOT_WRITE_BYTES_PER_SEC_MAX,
            four_letter_words: FourLetterWhitelist::default(),
            extended_types_enabled: false,
            jute_max_buffer: JUTE_MAX_BUFFER_DEFAULT,
            super_digest: None,
            container_check_interval_ms: 60_000,
            container_max_per_minute: 10_000,
            prealloc_size_kib: 64 * 1024,
            unsafe_no_fsync: false,
            init_limit: 10,
            sync_limit: 5,
            servers: BTreeMap::new(),
            peer_type: None,
            observer_master_port: None,
            observer_master_ports: BTreeMap::new(),
            my_id: None,
            log_format: crate::logging::LogFormat::Text,
            zxid_counter_limit: u32::MAX,
            log_window_entries_max: None,
            log_window_bytes_max: None,
            snap_chunk_bytes_max: None,
            secure_client_addr: None,
            tls: TlsSettings::default(),
            ssl_quorum: false,
            quorum_tls: TlsSettings::default(),
            quorum_hostname_verification: true,
            admin_addr: Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8080)),
            admin_command_url: "/commands".to_owned(),
            metrics_addr: None,
            initial_text: String::new(),
            warnings: Vec::new(),
        }
    }
}

/// A configuration that cannot be used. The binary prints it and exits with 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A value that is not valid for its key.
    #[error("{origin}: invalid value {value:?} for {key}: {reason}")]
    Invalid {
        /// Where the value came from (`zoo.cfg line 7`, `command line`).
        origin: String,
        /// The key.
        key: String,
        /// The value as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A line that is not `key=value`.
    #[error("{origin}: cannot parse {line:?}: expected key=value")]
    Syntax {
        /// Where the line came from.
        origin: String,
        /// The line.
        line: String,
    },
    /// Values that are valid alone but not together.
    #[error("inconsistent configuration: {0}")]
    Inconsistent(String),
}

/// One `key=value` with where it came from, for error messages.
#[derive(Clone, Debug)]
struct Setting {
    key: String,
    value: String,
    origin: String,
}

impl ServerConfig {
    /// The ensemble as ZooKeeper's quorum peers write it into
    /// `/zookeeper/config` and print after `membership:` in `conf`: a
    /// `server.N=host:quorumPort:electionPort:role;clientHost:clientPort` line
    /// per member, then `version=0` (no reconfig has happened), with no final
    /// newline. Empty on a standalone server.
    pub fn membership_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        if self.servers.is_empty() {
            return out;
        }
        for (id, p) in &self.servers {
            let role = match p.role {
                PeerRole::Participant => "participant",
                PeerRole::Observer => "observer",
            };
            let client = match &p.client {
                Some((h, port)) => format!("{h}:{port}"),
                None => format!("{}:{}", self.client_addr.ip(), self.client_addr.port()),
            };
            let _ = writeln!(
                out,
                "server.{id}={}:{}:{}:{role};{client}",
                p.host, p.quorum_port, p.election_port
            );
        }
        out.push_str("version=0");
        out
    }

    /// Reads `file` (if any), then applies `overrides` (`key=value`, from the
    /// command line) on top, and validates the result.
    pub fn load(file: Option<&Path>, overrides: &[(String, String)]) -> Result<Self, ConfigError> {
        let mut settings = Vec::new();
        let mut initial = String::new();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.to_owned(),
                source,
            })?;
            settings.extend(parse_properties(&text, &path.display().to_string())?);
            initial = text;
        }
        settings.extend(overrides.iter().map(|(k, v)| Setting {
            key: k.clone(),
            value: v.clone(),
            origin: "command line".to_owned(),
        }));
        let mut cfg = Self::from_settings(file.is_some(), settings)?;
        cfg.initial_text = initial;
        Ok(cfg)
    }

    /// Parses the text of a `zoo.cfg` (for tests and embedding).
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let mut cfg = Self::from_settings(true, parse_properties(text, "config")?)?;
        cfg.initial_text = text.to_owned();
        Ok(cfg)
    }

    fn from_settings(from_file: bool, settings: Vec<Setting>) -> Result<Self, ConfigError> {
        let mut cfg = ServerConfig::default();
        if from_file {
            // ZooKeeper binds every interface when clientPortAddress is absent.
            cfg.client_addr.set_ip(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        }
        let mut min_timeout = None;
        let mut max_timeout = None;
        let mut data_log_dir = None;
        let mut secure_port = None;
        let mut secure_ip = None;
        let mut http = HttpKeys::default();
        for s in &settings {
            if cfg.apply_tls(s, &mut secure_port, &mut secure_ip)?
                || cfg.apply_quorum_tls(s)?
                || refuse_unbuilt_auth(s)?
                || http.apply(s)?
            {
                continue;
            }
            cfg.apply(s, &mut min_timeout, &mut max_timeout, &mut data_log_dir)?;
        }
        let any = if from_file {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        };
        cfg.admin_addr = http.admin_enabled.unwrap_or(true).then(|| {
            SocketAddr::new(
                http.admin_ip.unwrap_or(any),
                http.admin_port.unwrap_or(8080),
            )
        });
        if let Some(url) = http.command_url {
            cfg.admin_command_url = url;
        }
        cfg.metrics_addr = http.prometheus.then(|| {
            SocketAddr::new(
                http.metrics_ip.unwrap_or(any),
                http.metrics_port.unwrap_or(7000),
            )
        });
        if let Some(port) = secure_port.filter(|p| *p != 0) {
            let ip = secure_ip.unwrap_or(cfg.client_addr.ip());
            cfg.secure_client_addr = Some(SocketAddr::new(ip, port));
        } else if secure_ip.is_some() {
            return Err(ConfigError::Inconsistent(
                "secureClientPortAddress is set but secureClientPort is not".into(),
            ));
        }
        cfg.data_log_dir = data_log_dir.unwrap_or_else(|| cfg.data_dir.clone());
        cfg.min_session_timeout_ms = min_timeout.unwrap_or(2 * cfg.tick_time_ms);
        cfg.max_session_timeout_ms = max_timeout.unwrap_or(20 * cfg.tick_time_ms);
        cfg.validate()?;
        Ok(cfg)
    }

    fn apply(
        &mut self,
        s: &Setting,
        min_timeout: &mut Option<u32>,
        max_timeout: &mut Option<u32>,
        data_log_dir: &mut Option<PathBuf>,
    ) -> Result<(), ConfigError> {
        let v = s.value.as_str();
        match s.key.as_str() {
            "tickTime" => self.tick_time_ms = positive(s)?,
            "dataDir" => self.data_dir = path(s)?,
            "dataLogDir" => *data_log_dir = Some(path(s)?),
            "clientPort" => self.client_addr.set_port(port(s)?),
            "clientPortAddress" => self.client_addr.set_ip(ip(s)?),
            "minSessionTimeout" => *min_timeout = Some(positive(s)?),
            "maxSessionTimeout" => *max_timeout = Some(positive(s)?),
            "maxClientCnxns" => self.max_client_cnxns = number(s)?,
            "globalOutstandingLimit" => self.global_outstanding_limit = positive(s)?,
            "rzk.connection.outstandingMax" => self.connection_outstanding_max = positive(s)?,
            "rzk.connection.outgoingBytesMax" => self.connection_outgoing_bytes_max = positive(s)?,
            "snapCount" => self.snap_count = at_least(s, 2)?,
            "rzk.snapshot.writeBytesPerSecMax" => {
                let n: u64 = number(s)?;
                self.snapshot_write_bytes_per_sec_max = (n > 0).then_some(n);
            }
            "zookeeper.nio.sessionlessCnxnTimeout" => self.sessionless_timeout_ms = positive(s)?,
            "autopurge.snapRetainCount" => {
                let n: u32 = number(s)?;
                if n < 3 {
                    self.warnings.push(format!(
                        "{}: autopurge.snapRetainCount={n} is below the minimum; using 3",
                        s.origin
                    ));
                }
                self.snap_retain_count = n.max(3);
            }
            "autopurge.purgeInterval" => {
                // rzk purges after every snapshot; the interval has nothing to time.
                let _: u32 = number(s)?;
                self.warnings.push(format!(
                    "{}: autopurge.purgeInterval is accepted but unused: rzk purges old \
                     snapshots and logs right after each snapshot",
                    s.origin
                ));
            }
            "4lw.commands.whitelist" | "zookeeper.4lw.commands.whitelist" => {
                self.four_letter_words = whitelist(s)?
            }
            "zookeeper.extendedTypesEnabled" => self.extended_types_enabled = boolean(s)?,
            "jute.maxbuffer" => self.jute_max_buffer = at_least(s, 1024)?,
            "superDigest" | "zookeeper.DigestAuthenticationProvider.superDigest" => {
                self.super_digest = Some(super_digest(s)?)
            }
            "znode.container.checkIntervalMs" => self.container_check_interval_ms = positive(s)?,
            "znode.container.maxPerMinute" => self.container_max_per_minute = positive(s)?,
            "preAllocSize" => self.prealloc_size_kib = positive(s)?,
            "forceSync" => {
                self.unsafe_no_fsync = match v.to_ascii_lowercase().as_str() {
                    "yes" => false,
                    "no" => true,
                    _ => return Err(invalid(s, "expected yes or no")),
                }
            }
            "rzk.log.format" => self.log_format = v.parse().map_err(|e: String| invalid(s, &e))?,
            "rzk.zxid.counterLimit" => {
                self.zxid_counter_limit = counter_limit(s)?;
                if self.zxid_counter_limit != u32::MAX {
                    self.warnings.push(format!(
                        "{}: rzk.zxid.counterLimit={} is a test knob: the leader rolls to the \
                         next epoch every {} writes (every member must have the same value)",
                        s.origin, s.value, self.zxid_counter_limit
                    ));
                }
            }
            // The simulator checks windows from 2 entries and 64 bytes up.
            "rzk.log.windowEntriesMax" => self.log_window_entries_max = Some(at_least(s, 2)?),
            "rzk.log.windowBytesMax" => self.log_window_bytes_max = Some(at_least(s, 64)?),
            "rzk.snap.chunkBytesMax" => {
                self.snap_chunk_bytes_max =
                    Some(within(s, SNAP_CHUNK_BYTES_MIN, SNAP_CHUNK_BYTES_MAX)?)
            }
            "observerMasterPort" => self.observer_master_port = Some(observer_master_port(s)?),
            key if key.starts_with("observerMasterPort.") => {
                let id = key["observerMasterPort.".len()..]
                    .parse::<u64>()
                    .map_err(|_| {
                        invalid(
                            s,
                            "the server id after 'observerMasterPort.' must be a number",
                        )
                    })?;
                self.observer_master_ports
                    .insert(id, observer_master_port(s)?);
            }
            "peerType" => {
                let role = match s.value.to_ascii_lowercase().as_str() {
                    "observer" => PeerRole::Observer,
                    "participant" => PeerRole::Participant,
                    _ => return Err(invalid(s, "expected observer or participant")),
                };
                self.peer_type = Some(PeerType {
                    role,
                    origin: s.origin.clone(),
                });
            }
            "initLimit" => self.init_limit = positive(s)?,
            "syncLimit" => self.sync_limit = positive(s)?,
            key if key.starts_with("server.") => {
                let id = key["server.".len()..]
                    .parse::<u64>()
                    .map_err(|_| invalid(s, "the server id after 'server.' must be a number"))?;
                let spec = peer_spec(s)?;
                // The same id twice in one file is a mistake to report, not a
                // line to let win (a --set on the command line may override).
                if s.origin != "command line" && self.servers.contains_key(&id) {
                    return Err(invalid(s, &format!("server.{id} is given twice")));
                }
                self.servers.insert(id, spec);
            }
            "standaloneEnabled" | "reconfigEnabled" | "quorumListenOnAllIPs" => {
                self.warnings.push(format!(
                    "{}: {} is not supported by rzk yet; ignored",
                    s.origin, s.key
                ));
            }
            _ => self.warnings.push(format!(
                "{}: unknown configuration key {:?}; ignored",
                s.origin, s.key
            )),
        }
        Ok(())
    }

    /// The TLS keys (`ssl.*`, `secureClientPort*`, `client.certReload`);
    /// `Ok(false)` for any other key.
    fn apply_tls(
        &mut self,
        s: &Setting,
        secure_port: &mut Option<u16>,
        secure_ip: &mut Option<IpAddr>,
    ) -> Result<bool, ConfigError> {
        let key = s.key.strip_prefix("zookeeper.").unwrap_or(&s.key);
        let v = s.value.as_str();
        let list = || -> Vec<String> {
            v.split(',')
                .map(|x| x.trim().to_owned())
                .filter(|x| !x.is_empty())
                .collect()
        };
        let tls = &mut self.tls;
        match key {
            "secureClientPort" => *secure_port = Some(port(s)?),
            "secureClientPortAddress" => *secure_ip = Some(ip(s)?),
            "ssl.keyStore.location" => tls.key_store.location = Some(path(s)?),
            "ssl.keyStore.password" => tls.key_store.password = Some(v.to_owned()),
            "ssl.keyStore.type" => tls.key_store.kind = Some(store_type(s)?),
            "ssl.trustStore.location" => tls.trust_store.location = Some(path(s)?),
            "ssl.trustStore.password" => tls.trust_store.password = Some(v.to_owned()),
            "ssl.trustStore.type" => tls.trust_store.kind = Some(store_type(s)?),
            "ssl.clientAuth" => {
                tls.client_auth = match v.to_ascii_lowercase().as_str() {
                    "none" => ClientAuth::None,
                    "want" => ClientAuth::Want,
                    "need" | "" => ClientAuth::Need,
                    _ => return Err(invalid(s, "expected none, want or need")),
                }
            }
            "ssl.protocol" => tls.protocol = Some(tls_version(s, v)?),
            "ssl.enabledProtocols" => {
                let versions = list()
                    .iter()
                    .map(|p| tls_version(s, p))
                    .collect::<Result<Vec<_>, _>>()?;
                tls.enabled_protocols = Some(versions);
            }
            "ssl.ciphersuites" => tls.ciphersuites = Some(list()),
            "client.certReload" => tls.cert_reload = boolean(s)?,
            "X509AuthenticationProvider.superUser" => tls.x509_super_user = Some(v.to_owned()),
            // rzk has one network layer: the Netty/NIO choice has nothing to
            // choose, and x509 is always the secure port's provider.
            "serverCnxnFactory" | "ssl.authProvider" | "authProvider.x509" => {}
            "ssl.crl" | "ssl.ocsp" => refuse_revocation_checks(s)?,
            "ssl.hostnameVerification" | "ssl.handshakeDetectionTimeoutMillis" => {
                self.warnings.push(format!(
                    "{}: {} is not supported by rzk's secure client port; ignored",
                    s.origin, s.key
                ));
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The quorum TLS keys (`sslQuorum`, `ssl.quorum.*`); `Ok(false)` for any
    /// other key.
    fn apply_quorum_tls(&mut self, s: &Setting) -> Result<bool, ConfigError> {
        let key = s.key.strip_prefix("zookeeper.").unwrap_or(&s.key);
        let v = s.value.as_str();
        if key == "sslQuorum" {
            self.ssl_quorum = boolean(s)?;
            return Ok(true);
        }
        if key == "portUnification" || key == "sslQuorumReloadCertFiles" {
            self.warnings.push(format!(
                "{}: {} is not supported by rzk's quorum port; ignored",
                s.origin, s.key
            ));
            return Ok(true);
        }
        let Some(sub) = key.strip_prefix("ssl.quorum.") else {
            return Ok(false);
        };
        let list = || -> Vec<String> {
            v.split(',')
                .map(|x| x.trim().to_owned())
                .filter(|x| !x.is_empty())
                .collect()
        };
        let tls = &mut self.quorum_tls;
        match sub {
            "keyStore.location" => tls.key_store.location = Some(path(s)?),
            "keyStore.password" => tls.key_store.password = Some(v.to_owned()),
            "keyStore.type" => tls.key_store.kind = Some(store_type(s)?),
            "trustStore.location" => tls.trust_store.location = Some(path(s)?),
            "trustStore.password" => tls.trust_store.password = Some(v.to_owned()),
            "trustStore.type" => tls.trust_store.kind = Some(store_type(s)?),
            "protocol" => tls.protocol = Some(tls_version(s, v)?),
            "enabledProtocols" => {
                let versions = list()
                    .iter()
                    .map(|p| tls_version(s, p))
                    .collect::<Result<Vec<_>, _>>()?;
                tls.enabled_protocols = Some(versions);
            }
            "ciphersuites" => tls.ciphersuites = Some(list()),
            "hostnameVerification" => self.quorum_hostname_verification = boolean(s)?,
            "clientAuth" => {
                // Members always authenticate each other: a weaker setting
                // would let anyone with network access vote.
                if !v.trim().eq_ignore_ascii_case("need") {
                    return Err(invalid(
                        s,
                        "rzk's quorum TLS is always mutual: only need is accepted",
                    ));
                }
            }
            "crl" | "ocsp" => refuse_revocation_checks(s)?,
            "handshakeDetectionTimeoutMillis" => {
                self.warnings.push(format!(
                    "{}: {} is not supported by rzk's quorum port; ignored",
                    s.origin, s.key
                ));
            }
            _ => self.warnings.push(format!(
                "{}: unknown quorum TLS key {:?}; ignored",
                s.origin, s.key
            )),
        }
        Ok(true)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.min_session_timeout_ms > self.max_session_timeout_ms {
            return Err(ConfigError::Inconsistent(format!(
                "minSessionTimeout ({}) is greater than maxSessionTimeout ({})",
                self.min_session_timeout_ms, self.max_session_timeout_ms
            )));
        }
        self.validate_roles()?;
        let mut seen = BTreeMap::new();
        for (id, peer) in &self.servers {
            if peer.quorum_port == peer.election_port {
                return Err(ConfigError::Inconsistent(format!(
                    "server.{id}: the quorum port and the election port must differ"
                )));
            }
            for port in [peer.quorum_port, peer.election_port] {
                if let Some(other) = seen.insert((peer.host.clone(), port), *id) {
                    return Err(ConfigError::Inconsistent(format!(
                        "server.{id} and server.{other} both use {}:{port}",
                        peer.host
                    )));
                }
            }
        }
        Ok(())
    }
}

impl ServerConfig {
    /// Observers need a quorum of voters to follow (ZooKeeper 3.8's rules:
    /// "Observers w/o participants" and, with one participant, "Observers w/o
    /// quorum" are invalid), and `peerType=observer` needs an ensemble. That
    /// `peerType` agrees with this member's own line needs `myid`: it is
    /// checked where the membership is read (`Membership::of`).
    fn validate_roles(&self) -> Result<(), ConfigError> {
        let observers: Vec<String> = self
            .servers
            .iter()
            .filter(|(_, p)| p.role == PeerRole::Observer)
            .map(|(id, p)| format!("server.{id} ({})", p.origin))
            .collect();
        let voters = self.servers.len() - observers.len();
        if !observers.is_empty() && voters < 2 {
            return Err(ConfigError::Inconsistent(format!(
                "{} observer(s) ({}) but {voters} participant(s): observers need an ensemble \
                 of at least two participants to follow (ZooKeeper: \"Observers w/o {}\")",
                observers.len(),
                observers.join(", "),
                if voters == 0 {
                    "participants"
                } else {
                    "quorum"
                }
            )));
        }
        if let Some(t) = &self.peer_type {
            if t.role == PeerRole::Observer && self.servers.is_empty() {
                return Err(ConfigError::Inconsistent(format!(
                    "{}: peerType=observer but there are no server.N lines: an observer \
                     needs an ensemble to follow",
                    t.origin
                )));
            }
        }
        self.validate_observer_master_ports()
    }

    /// `observerMasterPort` needs an ensemble; `observerMasterPort.N` must
    /// name a participant's `server.N` line (observers serve no observers).
    fn validate_observer_master_ports(&self) -> Result<(), ConfigError> {
        let given = self.observer_master_port.is_some() || !self.observer_master_ports.is_empty();
        if given && self.servers.is_empty() {
            return Err(ConfigError::Inconsistent(
                "observerMasterPort is set but there are no server.N lines: observer masters \
                 serve the observers of an ensemble"
                    .into(),
            ));
        }
        for id in self.observer_master_ports.keys() {
            match self.servers.get(id) {
                Some(p) if p.role == PeerRole::Participant => {}
                Some(p) => {
                    return Err(ConfigError::Inconsistent(format!(
                        "observerMasterPort.{id}: server.{id} ({}) is an observer; only \
                         participants serve observers",
                        p.origin
                    )))
                }
                None => {
                    return Err(ConfigError::Inconsistent(format!(
                        "observerMasterPort.{id}: there is no server.{id} line"
                    )))
                }
            }
        }
        Ok(())
    }
}

/// The AdminServer and metrics keys, gathered before defaults are applied.
#[derive(Default)]
struct HttpKeys {
    admin_enabled: Option<bool>,
    admin_ip: Option<IpAddr>,
    admin_port: Option<u16>,
    command_url: Option<String>,
    prometheus: bool,
    metrics_ip: Option<IpAddr>,
    metrics_port: Option<u16>,
}

/// ZooKeeper's Prometheus provider: the one `metricsProvider.className` rzk
/// serves.
const PROMETHEUS_PROVIDER: &str =
    "org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider";

impl HttpKeys {
    fn apply(&mut self, s: &Setting) -> Result<bool, ConfigError> {
        let key = s.key.strip_prefix("zookeeper.").unwrap_or(&s.key);
        match key {
            "admin.enableServer" => self.admin_enabled = Some(boolean(s)?),
            "admin.serverAddress" => self.admin_ip = Some(ip(s)?),
            "admin.serverPort" => self.admin_port = Some(port(s)?),
            "admin.commandURL" => {
                if !s.value.starts_with('/') {
                    return Err(invalid(s, "expected a path starting with /"));
                }
                self.command_url = Some(s.value.trim_end_matches('/').to_owned());
            }
            // Jetty's idle timeout; rzk's HTTP server closes idle connections itself.
            "admin.idleTimeout" => {
                let _: u64 = number(s)?;
            }
            "metricsProvider.className" => match s.value.as_str() {
                PROMETHEUS_PROVIDER => self.prometheus = true,
                // ZooKeeper's default: metrics only through mntr and the AdminServer.
                "org.apache.zookeeper.metrics.impl.DefaultMetricsProvider" => {
                    self.prometheus = false
                }
                _ => {
                    return Err(invalid(
                        s,
                        &format!("rzk serves only {PROMETHEUS_PROVIDER} (or the default provider)"),
                    ))
                }
            },
            "metricsProvider.httpHost" => self.metrics_ip = Some(ip(s)?),
            "metricsProvider.httpPort" => self.metrics_port = Some(port(s)?),
            // The JVM's own metrics: rzk has no JVM.
            "metricsProvider.exportJvmInfo" => {
                let _ = boolean(s)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// Reads Java-properties text into settings, in order.
fn parse_properties(text: &str, origin: &str) -> Result<Vec<Setting>, ConfigError> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let origin = format!("{origin} line {}", n + 1);
        let split = line
            .find(|c: char| c == '=' || c == ':' || c.is_whitespace())
            .ok_or_else(|| ConfigError::Syntax {
                origin: origin.clone(),
                line: line.to_owned(),
            })?;
        let key = line[..split].trim();
        let rest = line[split..].trim_start();
        let value = rest
            .strip_prefix('=')
            .or_else(|| rest.strip_prefix(':'))
            .unwrap_or(rest)
            .trim();
        if key.is_empty() {
            return Err(ConfigError::Syntax {
                origin,
                line: line.to_owned(),
            });
        }
        out.push(Setting {
            key: key.to_owned(),
            value: value.to_owned(),
            origin,
        });
    }
    Ok(out)
}

/// Authentication that ZooKeeper can be told to require and rzk does not
/// build: SASL between members (`quorum.auth.*`) and enforced client
/// authentication (`enforce.auth.enabled`, `sessionRequireClientSASLAuth`,
/// `requireClientAuthScheme=sasl`). Asked for, each stops the start with a
/// clear error: a warning would let the member run without the protection its
/// operator configured (unlike a tuning key, ignoring one is not safe).
/// Switched off, each is accepted and means what rzk does anyway. `Ok(false)`
/// for every other key.
fn refuse_unbuilt_auth(s: &Setting) -> Result<bool, ConfigError> {
    // ZooKeeper reads unknown zoo.cfg keys as `zookeeper.`-prefixed properties.
    let key = s.key.strip_prefix("zookeeper.").unwrap_or(&s.key);
    let why = match key {
        "quorum.auth.enableSasl"
        | "quorum.auth.learnerRequireSasl"
        | "quorum.auth.serverRequireSasl" => {
            "rzk does not build SASL between members; remove the key and use sslQuorum=true \
             (mutual TLS between members) to authenticate them"
        }
        "enforce.auth.enabled" | "sessionRequireClientSASLAuth" => {
            "rzk does not enforce client authentication; remove the key, and restrict \
             clients with ACLs or with secureClientPort and ssl.clientAuth=need"
        }
        "requireClientAuthScheme" => {
            if !s.value.eq_ignore_ascii_case("sasl") {
                return Err(invalid(s, "ZooKeeper knows only the value sasl here"));
            }
            return Err(invalid(
                s,
                "rzk does not build SASL; remove the key, and restrict clients with ACLs \
                 or with secureClientPort and ssl.clientAuth=need",
            ));
        }
        _ => return Ok(false),
    };
    if boolean(s)? {
        return Err(invalid(s, why));
    }
    Ok(true)
}

/// `ssl.crl` / `ssl.ocsp` and their `ssl.quorum.` forms: certificate
/// revocation checks, which rzk's TLS does not make. Switched on, the start
/// stops with a clear error (ignoring it would accept revoked certificates
/// the operator meant to refuse); switched off, the key is accepted.
fn refuse_revocation_checks(s: &Setting) -> Result<(), ConfigError> {
    if boolean(s)? {
        return Err(invalid(
            s,
            "rzk does not check certificate revocation (CRL or OCSP); remove the key \
             and take revoked certificates out of the trust store",
        ));
    }
    Ok(())
}

fn invalid(s: &Setting, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        origin: s.origin.clone(),
        key: s.key.clone(),
        value: s.value.clone(),
        reason: reason.to_owned(),
    }
}

fn number<T: std::str::FromStr>(s: &Setting) -> Result<T, ConfigError> {
    s.value
        .parse()
        .map_err(|_| invalid(s, "expected a non-negative whole number"))
}

/// `rzk.zxid.counterLimit`: decimal or `0x` hex, from
/// [`ZXID_COUNTER_LIMIT_MIN`] to `0xffffffff`.
fn counter_limit(s: &Setting) -> Result<u32, ConfigError> {
    let v = s.value.trim();
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u64::from_str_radix(hex, 16).ok()
        }
        Some(_) => None,
        None if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => v.parse::<u64>().ok(),
        None => None,
    };
    let Some(n) = parsed else {
        return Err(invalid(
            s,
            "expected a whole number, decimal or 0x hex (default 0xffffffff)",
        ));
    };
    if n < u64::from(ZXID_COUNTER_LIMIT_MIN) || n > u64::from(u32::MAX) {
        return Err(invalid(
            s,
            &format!(
                "must be from {ZXID_COUNTER_LIMIT_MIN} to 0xffffffff (the zxid counter is 32 bits; \
                 every rollover uses up one epoch)"
            ),
        ));
    }
    Ok(n as u32)
}

fn at_least<T: std::str::FromStr + PartialOrd + fmt::Display + Copy>(
    s: &Setting,
    min: T,
) -> Result<T, ConfigError> {
    let n: T = number(s)?;
    if n < min {
        return Err(invalid(s, &format!("must be at least {min}")));
    }
    Ok(n)
}

fn within<T: std::str::FromStr + PartialOrd + fmt::Display + Copy>(
    s: &Setting,
    min: T,
    max: T,
) -> Result<T, ConfigError> {
    let n: T = number(s)?;
    if n < min || n > max {
        return Err(invalid(s, &format!("must be from {min} to {max}")));
    }
    Ok(n)
}

fn positive<T: std::str::FromStr + PartialOrd + fmt::Display + Copy + From<u8>>(
    s: &Setting,
) -> Result<T, ConfigError> {
    at_least(s, T::from(1u8))
}

fn port(s: &Setting) -> Result<u16, ConfigError> {
    s.value
        .parse::<u16>()
        .map_err(|_| invalid(s, "expected a port number 0-65535"))
}

/// An `observerMasterPort`: 1-65535 (ZooKeeper treats 0 or less as "no
/// observer master"; rzk refuses it rather than ignore a line that says
/// something).
fn observer_master_port(s: &Setting) -> Result<u16, ConfigError> {
    match s.value.parse::<u16>() {
        Ok(0) | Err(_) => Err(invalid(
            s,
            "expected a port number 1-65535 (remove the line to disable observer masters)",
        )),
        Ok(p) => Ok(p),
    }
}

fn ip(s: &Setting) -> Result<IpAddr, ConfigError> {
    if s.value == "localhost" {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    s.value
        .parse()
        .map_err(|_| invalid(s, "expected an IP address such as 127.0.0.1"))
}

fn path(s: &Setting) -> Result<PathBuf, ConfigError> {
    if s.value.is_empty() {
        return Err(invalid(s, "expected a directory path"));
    }
    Ok(PathBuf::from(&s.value))
}

fn store_type(s: &Setting) -> Result<StoreType, ConfigError> {
    match s.value.to_ascii_uppercase().as_str() {
        "PEM" => Ok(StoreType::Pem),
        "PKCS12" => Ok(StoreType::Pkcs12),
        "JKS" => Ok(StoreType::Jks),
        "BCFKS" => Ok(StoreType::Bcfks),
        _ => Err(invalid(s, "expected PEM, PKCS12, JKS or BCFKS")),
    }
}

/// A TLS version by its Java name; rustls speaks TLS 1.2 and 1.3 only.
fn tls_version(s: &Setting, v: &str) -> Result<String, ConfigError> {
    match v.trim() {
        "TLSv1.2" | "TLSv1.3" => Ok(v.trim().to_owned()),
        // Java's "TLS" means "any supported version".
        "TLS" => Ok("TLS".to_owned()),
        other => Err(invalid(
            s,
            &format!("{other:?}: rzk speaks TLSv1.2 and TLSv1.3 (or TLS for both)"),
        )),
    }
}

fn boolean(s: &Setting) -> Result<bool, ConfigError> {
    match s.value.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(s, "expected true or false")),
    }
}

fn whitelist(s: &Setting) -> Result<FourLetterWhitelist, ConfigError> {
    let words: Vec<&str> = s
        .value
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .collect();
    if words.contains(&"*") {
        return Ok(FourLetterWhitelist::All);
    }
    let mut set = BTreeSet::new();
    for w in words {
        if !crate::commands::whitelistable(w) {
            return Err(invalid(
                s,
                &format!("{w:?} is not a four-letter word rzk knows"),
            ));
        }
        set.insert(w.to_owned());
    }
    Ok(FourLetterWhitelist::Only(set))
}

fn super_digest(s: &Setting) -> Result<String, ConfigError> {
    let Some((user, hash)) = s.value.split_once(':') else {
        return Err(invalid(s, "expected user:base64(sha1(user:password))"));
    };
    // A SHA-1 digest is 20 bytes: 28 characters of base64 with one '=' of padding.
    let base64_ok = hash.len() == 28
        && hash.ends_with('=')
        && hash[..27]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/');
    if user.is_empty() || !base64_ok {
        return Err(invalid(s, "expected user:base64(sha1(user:password))"));
    }
    Ok(s.value.clone())
}

fn peer_spec(s: &Setting) -> Result<PeerSpec, ConfigError> {
    let (addr, client) = match s.value.split_once(';') {
        Some((a, c)) => (a, Some(c)),
        None => (s.value.as_str(), None),
    };
    let parts: Vec<&str> = addr.split(':').collect();
    if parts.len() < 3 || parts.len() > 4 || parts[0].is_empty() {
        return Err(invalid(
            s,
            "expected host:quorumPort:electionPort[:participant|observer][;[clientHost:]clientPort]",
        ));
    }
    let port_of = |text: &str| {
        text.parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| invalid(s, &format!("{text:?} is not a port number 1-65535")))
    };
    let role = match parts.get(3).copied() {
        None | Some("participant") => PeerRole::Participant,
        Some("observer") => PeerRole::Observer,
        Some(other) => {
            return Err(invalid(
                s,
                &format!("role {other:?} is neither participant nor observer"),
            ))
        }
    };
    let client = match client {
        None => None,
        Some(c) => Some(match c.rsplit_once(':') {
            Some((host, p)) => (host.to_owned(), port_of(p)?),
            None => ("0.0.0.0".to_owned(), port_of(c)?),
        }),
    };
    Ok(PeerSpec {
        host: parts[0].to_owned(),
        quorum_port: port_of(parts[1])?,
        election_port: port_of(parts[2])?,
        role,
        client,
        origin: s.origin.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_serves_localhost_2181_with_data_in_data() {
        let cfg = ServerConfig::load(None, &[]).unwrap();
        assert_eq!(cfg.client_addr, "127.0.0.1:2181".parse().unwrap());
        assert_eq!(cfg.data_dir, PathBuf::from("data"));
        assert_eq!(cfg.data_log_dir, PathBuf::from("data"));
        assert_eq!(
            (cfg.min_session_timeout_ms, cfg.max_session_timeout_ms),
            (4000, 40000)
        );
        assert!(cfg.four_letter_words.allows("srvr"));
        assert!(!cfg.four_letter_words.allows("mntr"));
        assert!(cfg.warnings.is_empty());
    }

    #[test]
    fn reads_zookeeper_sample_config() {
        let cfg = ServerConfig::parse(
            "# The number of milliseconds of each tick\n\
             tickTime=3000\n\
             initLimit=10\n\
             syncLimit=5\n\
             dataDir=/var/lib/zookeeper\n\
             clientPort=2182\n\
             maxClientCnxns = 10\n\
             4lw.commands.whitelist=ruok, mntr ,srvr\n\
             zookeeper.extendedTypesEnabled=true\n\
             server.1=zk1:2888:3888\n\
             server.2=zk2:2888:3888:observer;127.0.0.1:2181\n\
             server.3=zk3:2888:3888:participant\n",
        )
        .unwrap();
        assert_eq!(cfg.tick_time_ms, 3000);
        assert_eq!(
            (cfg.min_session_timeout_ms, cfg.max_session_timeout_ms),
            (6000, 60000),
            "timeouts default to 2 and 20 ticks of the configured tickTime"
        );
        assert_eq!(cfg.client_addr, "0.0.0.0:2182".parse().unwrap());
        assert_eq!(cfg.data_log_dir, PathBuf::from("/var/lib/zookeeper"));
        assert_eq!(cfg.max_client_cnxns, 10);
        assert!(cfg.four_letter_words.allows("mntr"));
        assert!(!cfg.four_letter_words.allows("stat"));
        assert!(cfg.extended_types_enabled);
        assert_eq!(cfg.servers[&1].role, PeerRole::Participant);
        assert_eq!(cfg.servers[&2].role, PeerRole::Observer);
        assert_eq!(cfg.servers[&2].client, Some(("127.0.0.1".into(), 2181)));
    }

    #[test]
    fn command_line_overrides_the_file() {
        let dir = std::env::temp_dir().join(format!("rzk-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("zoo.cfg");
        std::fs::write(&file, "clientPort=2190\nclientPortAddress=127.0.0.1\n").unwrap();
        let cfg = ServerConfig::load(Some(&file), &[("clientPort".into(), "2191".into())]).unwrap();
        assert_eq!(cfg.client_addr, "127.0.0.1:2191".parse().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_key_is_a_warning_not_an_error() {
        let cfg = ServerConfig::parse("fancyOption=1\ntickTime=2000\n").unwrap();
        assert_eq!(cfg.warnings.len(), 1);
        assert!(
            cfg.warnings[0].contains("fancyOption"),
            "{:?}",
            cfg.warnings
        );
        assert!(cfg.warnings[0].contains("line 1"), "{:?}", cfg.warnings);
    }

    #[test]
    fn revocation_checks_rzk_does_not_make_stop_the_start_when_asked_for() {
        for key in ["ssl.crl", "ssl.ocsp", "ssl.quorum.crl", "ssl.quorum.ocsp"] {
            let err = ServerConfig::parse(&format!("tickTime=2000\n{key}=true\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{key}: {err}");
            assert!(err.contains("line 2"), "{key}: {err}");
            assert!(err.contains("revocation"), "{key}: {err}");
            let cfg = ServerConfig::parse(&format!("{key}=false\n")).unwrap();
            assert!(cfg.warnings.is_empty(), "{key}: {:?}", cfg.warnings);
        }
    }

    #[test]
    fn authentication_rzk_does_not_build_stops_the_start_when_asked_for() {
        for (text, says) in [
            ("quorum.auth.enableSasl=true", "sslQuorum=true"),
            ("quorum.auth.learnerRequireSasl=true", "sslQuorum=true"),
            ("quorum.auth.serverRequireSasl=TRUE", "sslQuorum=true"),
            (
                "enforce.auth.enabled=true",
                "does not enforce client authentication",
            ),
            (
                "zookeeper.enforce.auth.enabled=true",
                "does not enforce client authentication",
            ),
            (
                "sessionRequireClientSASLAuth=true",
                "does not enforce client authentication",
            ),
            ("requireClientAuthScheme=sasl", "does not build SASL"),
            ("requireClientAuthScheme=digest", "only the value sasl"),
            ("quorum.auth.enableSasl=maybe", "expected true or false"),
        ] {
            let err = ServerConfig::parse(&format!("tickTime=2000\n{text}\n")).unwrap_err();
            let msg = err.to_string();
            let key = text.split('=').next().unwrap();
            assert!(msg.contains(key), "{text}: {msg}");
            assert!(msg.contains("line 2"), "{text}: {msg}");
            assert!(msg.contains(says), "{text}: {msg}");
        }
        // Switched off they mean what rzk does anyway: accepted without a warning.
        let cfg = ServerConfig::parse(
            "quorum.auth.enableSasl=false\nquorum.auth.serverRequireSasl=false\n\
             enforce.auth.enabled=false\nsessionRequireClientSASLAuth=false\n",
        )
        .unwrap();
        assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
    }

    #[test]
    fn invalid_values_name_key_line_and_reason() {
        for (text, key) in [
            ("tickTime=0", "tickTime"),
            ("tickTime=fast", "tickTime"),
            ("clientPort=70000", "clientPort"),
            ("clientPortAddress=not-an-ip", "clientPortAddress"),
            (
                "zookeeper.extendedTypesEnabled=yes",
                "zookeeper.extendedTypesEnabled",
            ),
            ("4lw.commands.whitelist=ruok,nope", "4lw.commands.whitelist"),
            ("superDigest=super", "superDigest"),
            ("server.x=a:1:2", "server.x"),
            ("server.1=a:1", "server.1"),
            ("server.1=a:1:2:leader", "server.1"),
            ("jute.maxbuffer=10", "jute.maxbuffer"),
            ("forceSync=maybe", "forceSync"),
        ] {
            let err = ServerConfig::parse(&format!("# comment\n{text}\n")).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains(key), "{text}: {msg}");
            assert!(msg.contains("line 2"), "{text}: {msg}");
        }
    }

    #[test]
    fn inconsistent_values_are_refused() {
        let err =
            ServerConfig::parse("minSessionTimeout=50000\nmaxSessionTimeout=40000").unwrap_err();
        assert!(err.to_string().contains("minSessionTimeout"), "{err}");
        let err = ServerConfig::parse("server.1=a:2888:3888\nserver.1=b:2888:3888").unwrap_err();
        assert!(err.to_string().contains("server.1 is given twice"), "{err}");
        let err = ServerConfig::parse("server.1=a:2888:2888").unwrap_err();
        assert!(err.to_string().contains("must differ"), "{err}");
        let err = ServerConfig::parse("server.1=a:2888:3888\nserver.2=a:2888:3889").unwrap_err();
        assert!(err.to_string().contains("both use"), "{err}");
    }

    #[test]
    fn snap_retain_count_is_raised_to_three_with_a_warning() {
        let cfg = ServerConfig::parse("autopurge.snapRetainCount=1").unwrap();
        assert_eq!(cfg.snap_retain_count, 3);
        assert_eq!(cfg.warnings.len(), 1);
    }

    #[test]
    fn snapshot_write_rate_is_a_byte_count_and_zero_lifts_it() {
        let cfg = ServerConfig::parse("rzk.snapshot.writeBytesPerSecMax=1048576").unwrap();
        assert_eq!(cfg.snapshot_write_bytes_per_sec_max, Some(1 << 20));
        let cfg = ServerConfig::parse("rzk.snapshot.writeBytesPerSecMax=0").unwrap();
        assert_eq!(cfg.snapshot_write_bytes_per_sec_max, None);
        assert!(ServerConfig::parse("rzk.snapshot.writeBytesPerSecMax=-1").is_err());
    }

    #[test]
    fn force_sync_no_is_the_unsafe_switch() {
        assert!(ServerConfig::parse("forceSync=no").unwrap().unsafe_no_fsync);
        assert!(
            !ServerConfig::parse("forceSync=yes")
                .unwrap()
                .unsafe_no_fsync
        );
    }

    #[test]
    fn super_digest_accepts_zookeeper_form() {
        let cfg = ServerConfig::parse("superDigest=super:D/InIHSb7yEEbrWz8b9l71RjZJU=").unwrap();
        assert_eq!(
            cfg.super_digest.as_deref(),
            Some("super:D/InIHSb7yEEbrWz8b9l71RjZJU=")
        );
    }

    #[test]
    fn properties_separators_and_comments() {
        let cfg =
            ServerConfig::parse("! bang comment\n  tickTime : 1000\nclientPort 3000\n").unwrap();
        assert_eq!(cfg.tick_time_ms, 1000);
        assert_eq!(cfg.client_addr.port(), 3000);
    }

    #[test]
    fn the_log_window_keys_have_minimums_and_default_to_the_core() {
        let cfg = ServerConfig::parse("").unwrap();
        assert_eq!(
            (cfg.log_window_entries_max, cfg.log_window_bytes_max),
            (None, None)
        );
        let cfg =
            ServerConfig::parse("rzk.log.windowEntriesMax=500\nrzk.log.windowBytesMax=1048576\n")
                .unwrap();
        assert_eq!(cfg.log_window_entries_max, Some(500));
        assert_eq!(cfg.log_window_bytes_max, Some(1 << 20));
        for bad in [
            "rzk.log.windowEntriesMax=1",
            "rzk.log.windowEntriesMax=x",
            "rzk.log.windowBytesMax=63",
        ] {
            let err = ServerConfig::parse(bad).unwrap_err().to_string();
            assert!(err.contains(bad.split('=').next().unwrap()), "{bad}: {err}");
        }
    }

    /// I7: each bound of `rzk.snap.chunkBytesMax` is accepted and the value
    /// just past it refused with the key, the line and the range.
    #[test]
    fn the_snap_chunk_key_has_a_minimum_and_a_maximum() {
        let cfg = ServerConfig::parse("").unwrap();
        assert_eq!(cfg.snap_chunk_bytes_max, None, "the core's default");
        for ok in [SNAP_CHUNK_BYTES_MIN, 65536, SNAP_CHUNK_BYTES_MAX] {
            let cfg = ServerConfig::parse(&format!("rzk.snap.chunkBytesMax={ok}\n")).unwrap();
            assert_eq!(cfg.snap_chunk_bytes_max, Some(ok));
        }
        for bad in [
            (SNAP_CHUNK_BYTES_MIN - 1).to_string(),
            (SNAP_CHUNK_BYTES_MAX + 1).to_string(),
            "0".into(),
            "-1".into(),
            "1MiB".into(),
        ] {
            let err = ServerConfig::parse(&format!("# c\nrzk.snap.chunkBytesMax={bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("rzk.snap.chunkBytesMax"), "{bad}: {err}");
            assert!(err.contains("line 2"), "{bad}: {err}");
            if bad.bytes().all(|b| b.is_ascii_digit()) {
                assert!(err.contains("from 4096 to 8388608"), "{bad}: {err}");
            }
        }
    }

    /// The chunk bounds follow from the quorum core's in-flight limit of a
    /// SNAP and the gRPC transport's queue per peer (see
    /// [`SNAP_CHUNK_BYTES_MIN`]): if either default moves, so must they.
    #[test]
    fn the_snap_chunk_bounds_fit_the_core_and_the_transport() {
        let core = rzk_quorum::core::Config::new(rzk_quorum::PeerId(1), [rzk_quorum::PeerId(1)]);
        let grpc = rzk_quorum::grpc::GrpcConfig::new(rzk_quorum::PeerId(1), BTreeMap::new());
        assert_eq!(SNAP_CHUNK_BYTES_MAX as u64, core.snap_in_flight_bytes_max);
        let chunks_in_flight = core.snap_in_flight_bytes_max / SNAP_CHUNK_BYTES_MIN as u64;
        assert!(chunks_in_flight * 4 <= grpc.queue_max as u64);
        assert!((SNAP_CHUNK_BYTES_MIN..=SNAP_CHUNK_BYTES_MAX).contains(&core.snap_chunk_bytes_max));
    }

    #[test]
    fn zxid_counter_limit_is_a_test_knob_with_a_minimum() {
        let cfg = ServerConfig::parse("").unwrap();
        assert_eq!(
            cfg.zxid_counter_limit,
            u32::MAX,
            "the whole counter by default"
        );
        assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
        let cfg = ServerConfig::parse("rzk.zxid.counterLimit=0xffffffff\n").unwrap();
        assert_eq!(cfg.zxid_counter_limit, u32::MAX);
        assert!(cfg.warnings.is_empty(), "the default is no test knob");
        let cfg = ServerConfig::parse("rzk.zxid.counterLimit=1000\n").unwrap();
        assert_eq!(cfg.zxid_counter_limit, 1000);
        assert!(
            cfg.warnings.iter().any(|w| w.contains("test knob")),
            "{:?}",
            cfg.warnings
        );
        let cfg = ServerConfig::parse("rzk.zxid.counterLimit=0X10\n").unwrap();
        assert_eq!(cfg.zxid_counter_limit, ZXID_COUNTER_LIMIT_MIN);
        for bad in [
            "15",
            "0",
            "0x100000000",
            "4294967296",
            "-1",
            "1e3",
            "0x",
            "lots",
            "",
        ] {
            let err = ServerConfig::parse(&format!("rzk.zxid.counterLimit={bad}\n"))
                .expect_err(bad)
                .to_string();
            assert!(err.contains("rzk.zxid.counterLimit"), "{bad}: {err}");
        }
        let err = ServerConfig::parse("rzk.zxid.counterLimit=15\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("from 16 to 0xffffffff"), "{err}");
    }

    #[test]
    fn log_format_key_selects_json_or_text() {
        use crate::logging::LogFormat;
        assert_eq!(ServerConfig::parse("").unwrap().log_format, LogFormat::Text);
        let cfg = ServerConfig::parse("rzk.log.format=json\n").unwrap();
        assert_eq!(cfg.log_format, LogFormat::Json);
        assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
        let err = ServerConfig::parse("rzk.log.format=xml\n").unwrap_err();
        assert!(err.to_string().contains("rzk.log.format"), "{err}");
    }

    #[test]
    fn tls_keys_fill_the_secure_port_settings() {
        let cfg = ServerConfig::parse(
            "clientPortAddress=127.0.0.1\nsecureClientPort=2281\n\
             ssl.keyStore.location=/k/server.pem\nzookeeper.ssl.trustStore.location=/k/ca.p12\n\
             ssl.trustStore.password=pw\nssl.clientAuth=want\nssl.protocol=TLSv1.3\n\
             ssl.ciphersuites=TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384\n\
             client.certReload=true\nserverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n",
        )
        .unwrap();
        assert_eq!(
            cfg.secure_client_addr,
            Some("127.0.0.1:2281".parse().unwrap())
        );
        assert_eq!(cfg.tls.key_store.effective_type(), StoreType::Pem);
        assert_eq!(cfg.tls.trust_store.effective_type(), StoreType::Pkcs12);
        assert_eq!(cfg.tls.trust_store.password.as_deref(), Some("pw"));
        assert_eq!(cfg.tls.client_auth, ClientAuth::Want);
        assert_eq!(cfg.tls.protocol.as_deref(), Some("TLSv1.3"));
        assert_eq!(cfg.tls.ciphersuites.as_ref().unwrap().len(), 2);
        assert!(cfg.tls.cert_reload);
        assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
        assert_eq!(ServerConfig::parse("").unwrap().secure_client_addr, None);
        assert_eq!(
            ServerConfig::parse("").unwrap().tls.client_auth,
            ClientAuth::Need
        );
    }

    #[test]
    fn quorum_tls_keys_fill_their_own_settings() {
        let cfg = ServerConfig::parse(
            "sslQuorum=true\nssl.quorum.keyStore.location=/k/member.pem\n\
             zookeeper.ssl.quorum.trustStore.location=/k/ca.pem\nssl.quorum.keyStore.password=pw\n\
             ssl.quorum.protocol=TLSv1.3\nssl.quorum.enabledProtocols=TLSv1.2,TLSv1.3\n\
             ssl.quorum.ciphersuites=TLS_AES_128_GCM_SHA256\nssl.quorum.hostnameVerification=false\n\
             ssl.quorum.clientAuth=need\nportUnification=true\n",
        )
        .unwrap();
        assert!(cfg.ssl_quorum);
        let q = &cfg.quorum_tls;
        assert_eq!(
            q.key_store.location.as_deref(),
            Some(Path::new("/k/member.pem"))
        );
        assert_eq!(
            q.trust_store.location.as_deref(),
            Some(Path::new("/k/ca.pem"))
        );
        assert_eq!(q.key_store.password.as_deref(), Some("pw"));
        assert_eq!(q.protocol.as_deref(), Some("TLSv1.3"));
        assert_eq!(q.enabled_protocols.as_ref().unwrap().len(), 2);
        assert_eq!(q.ciphersuites.as_ref().unwrap().len(), 1);
        assert!(!cfg.quorum_hostname_verification);
        // The client port's settings are untouched.
        assert_eq!(cfg.tls, TlsSettings::default());
        assert!(cfg.warnings.iter().any(|w| w.contains("portUnification")));
        for bad in [
            "ssl.quorum.clientAuth=want",
            "ssl.quorum.protocol=SSLv3",
            "ssl.quorum.keyStore.type=XML",
            "sslQuorum=maybe",
        ] {
            let err = ServerConfig::parse(bad).unwrap_err().to_string();
            let key = bad.split('=').next().unwrap();
            assert!(err.contains(key), "{bad}: {err}");
        }
    }

    #[test]
    fn bad_tls_values_are_errors_naming_the_key() {
        for bad in [
            "ssl.clientAuth=sometimes",
            "ssl.protocol=TLSv1.1",
            "ssl.keyStore.type=XML",
            "secureClientPortAddress=127.0.0.1",
            "secureClientPort=99999",
        ] {
            let err = ServerConfig::parse(bad).unwrap_err().to_string();
            let key = bad.split('=').next().unwrap();
            assert!(err.contains(key), "{bad}: {err}");
        }
    }

    /// `observerMasterPort`: one port for every voter, or
    /// `observerMasterPort.N` per voter; bad values and lines that cannot apply
    /// are errors naming the key.
    #[test]
    fn observer_master_ports_parse_and_bad_ones_are_named() {
        let ens = "server.1=a:1:2\nserver.2=b:1:2\nserver.3=c:1:2:observer\n";
        let cfg = ServerConfig::parse(&format!(
            "{ens}observerMasterPort=2191\nobserverMasterPort.2=2192\n"
        ))
        .unwrap();
        assert_eq!(cfg.observer_master_port, Some(2191));
        assert_eq!(cfg.observer_master_ports.get(&2), Some(&2192));
        assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
        assert_eq!(ServerConfig::parse(ens).unwrap().observer_master_port, None);
        for (bad, says) in [
            ("observerMasterPort=0", "1-65535"),
            ("observerMasterPort=70000", "1-65535"),
            ("observerMasterPort=-1", "1-65535"),
            ("observerMasterPort=port", "1-65535"),
            ("observerMasterPort.x=2191", "must be a number"),
            ("observerMasterPort.2=0", "1-65535"),
            ("observerMasterPort.9=2191", "no server.9 line"),
            ("observerMasterPort.3=2191", "is an observer"),
        ] {
            let err = ServerConfig::parse(&format!("{ens}{bad}\n"))
                .unwrap_err()
                .to_string();
            let key = bad.split('=').next().unwrap();
            assert!(err.contains(key) && err.contains(says), "{bad}: {err}");
        }
        let err = ServerConfig::parse("observerMasterPort=2191\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no server.N lines"), "{err}");
    }

    #[test]
    fn admin_and_metrics_keys() {
        let cfg = ServerConfig::parse("").unwrap();
        assert_eq!(cfg.admin_addr, Some("0.0.0.0:8080".parse().unwrap()));
        assert_eq!(cfg.admin_command_url, "/commands");
        assert_eq!(cfg.metrics_addr, None);
        let cfg = ServerConfig::parse(
            "admin.serverAddress=127.0.0.1\nadmin.serverPort=9090\nadmin.commandURL=/cmd/\n\
             metricsProvider.className=org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider\n\
             metricsProvider.httpPort=7001\nmetricsProvider.exportJvmInfo=false\n",
        )
        .unwrap();
        assert_eq!(cfg.admin_addr, Some("127.0.0.1:9090".parse().unwrap()));
        assert_eq!(cfg.admin_command_url, "/cmd");
        assert_eq!(cfg.metrics_addr, Some("0.0.0.0:7001".parse().unwrap()));
        assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
        let cfg = ServerConfig::parse("admin.enableServer=false\n").unwrap();
        assert_eq!(cfg.admin_addr, None);
        let err =
            ServerConfig::parse("metricsProvider.className=com.example.Statsd\n").unwrap_err();
        assert!(
            err.to_string().contains("metricsProvider.className"),
            "{err}"
        );
        let no_file = ServerConfig::load(None, &[]).unwrap();
        assert_eq!(no_file.admin_addr, Some("127.0.0.1:8080".parse().unwrap()));
    }

    // Observers: ZooKeeper 3.8's QuorumPeerConfig rules, and stricter where
    // ZooKeeper only warns.

    #[test]
    fn peer_type_is_read_with_its_line() {
        let cfg = ServerConfig::parse(
            "server.1=a:1:2\nserver.2=b:1:2\nserver.3=c:1:2:observer\npeerType=observer\n",
        )
        .unwrap();
        let t = cfg.peer_type.unwrap();
        assert_eq!(
            (t.role, t.origin.as_str()),
            (PeerRole::Observer, "config line 4")
        );
        assert_eq!(cfg.servers[&3].origin, "config line 3");
        let cfg = ServerConfig::parse("peerType=PARTICIPANT\n").unwrap();
        assert_eq!(cfg.peer_type.unwrap().role, PeerRole::Participant);
        assert_eq!(ServerConfig::parse("").unwrap().peer_type, None);
        let err = ServerConfig::parse("peerType=witness\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("config line 1") && err.contains("peerType") && err.contains("observer"),
            "{err}"
        );
    }

    #[test]
    fn observers_without_two_participants_are_refused_naming_their_lines() {
        for (text, zk) in [
            ("server.1=a:1:2:observer\n", "w/o participants"),
            ("server.1=a:1:2\nserver.2=b:1:2:observer\n", "w/o quorum"),
        ] {
            let err = ServerConfig::parse(text).unwrap_err().to_string();
            assert!(err.contains(zk), "{text}: {err}");
            assert!(err.contains("observer(s) (server."), "{text}: {err}");
            assert!(err.contains("line"), "{text}: {err}");
        }
        let two = "server.1=a:1:2\nserver.2=b:1:2\nserver.3=c:1:2:observer\n";
        assert!(ServerConfig::parse(two).is_ok());
    }

    #[test]
    fn peer_type_observer_without_an_ensemble_is_refused() {
        let err = ServerConfig::parse("clientPort=2181\npeerType=observer\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("config line 2") && err.contains("no server.N lines"),
            "{err}"
        );
    }
}
