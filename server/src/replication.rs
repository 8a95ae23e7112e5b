//! How a server opens its replicator from zoo.cfg: one code path for every
//! ensemble size. Standalone (no `server.N` lines) is an ensemble of one voter,
//! `ZabReplicator` on the local log; with `server.N` lines the members talk ZAB
//! over gRPC on their quorum ports.
//!
//! Ports: the gRPC service (election notifications, discovery, sync, broadcast,
//! forwarded requests) listens on the member's *quorum* port. The *election*
//! port of a `server.N` line is parsed and checked (it must differ from the
//! quorum port, as ZooKeeper requires) but rzk does not listen on it: its
//! election travels on the quorum port's gRPC streams.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rzk_quorum::core::Config;
use rzk_quorum::grpc::{GrpcConfig, GrpcTransport};
use rzk_quorum::transport::MemNetwork;
use rzk_quorum::wal_storage::WalStorage;
use rzk_quorum::{DriverConfig, PeerId, ReplicateError, WalOptions, ZabReplicator};
use rzk_wal::SnapshotPreload;
use tokio::net::TcpListener;

use crate::config::{PeerRole, ServerConfig};
use crate::preload::Preloaded;

/// Why the replicator could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    /// `myid` could not be read.
    #[error("cannot read {path}: {reason}")]
    MyId {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The configuration does not describe a usable ensemble.
    #[error("invalid ensemble configuration: {0}")]
    Config(String),
    /// A member's host name does not resolve.
    #[error("server.{id}: cannot resolve {host}:{port}: {reason}")]
    Resolve {
        /// The member.
        id: u64,
        /// Its host.
        host: String,
        /// Its quorum port.
        port: u16,
        /// Why.
        reason: String,
    },
    /// The quorum port could not be opened.
    #[error("cannot listen on the quorum port {addr}: {reason}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The durable log could not be opened or recovered.
    #[error("opening the data directory {dir}: {reason}")]
    Storage {
        /// The data directory.
        dir: PathBuf,
        /// What the log reported.
        reason: String,
    },
    /// The replicator did not start.
    #[error(transparent)]
    Replicate(#[from] ReplicateError),
}

/// The server id: 1 standalone (as ZooKeeper), or `myid` from the data
/// directory when the configuration has `server.N` lines.
pub fn server_id(config: &ServerConfig) -> Result<u64, ReplicationError> {
    if let Some(id) = config.my_id {
        return Ok(id);
    }
    if config.servers.is_empty() {
        return Ok(1);
    }
    let path = config.data_dir.join("myid");
    let text = std::fs::read_to_string(&path).map_err(|e| ReplicationError::MyId {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    text.trim()
        .parse::<u64>()
        .map_err(|e| ReplicationError::MyId {
            path,
            reason: format!("not a number: {e}"),
        })
}

/// Who is in the ensemble, as this member sees it.
#[derive(Debug, Clone)]
pub struct Membership {
    /// This member.
    pub id: u64,
    /// This member's role: its own `server.N` line's, which its `peerType`
    /// must agree with.
    pub role: PeerRole,
    /// The voting members (this one included, unless it observes): the
    /// participant lines only; the quorum size is counted from these.
    pub voters: Vec<u64>,
    /// The observers (`:observer` lines), this one included if it observes.
    pub observers: Vec<u64>,
    /// The quorum address of every member but this one.
    pub peers: BTreeMap<u64, (String, u16)>,
    /// This member's quorum address, when it has peers.
    pub quorum_addr: Option<(String, u16)>,
    /// The address clients connect to: the `;[host:]port` of this member's
    /// `server.N` line when it has one, else clientPortAddress:clientPort.
    pub client_addr: SocketAddr,
}

impl Membership {
    /// Reads the membership from the configuration and `myid`. A member whose id
    /// is not among the `server.N` lines is refused with a clear message, and so
    /// is one whose `peerType` disagrees with its own line (ZooKeeper 3.8 warns
    /// and follows the line; rzk refuses, naming both).
    pub fn of(config: &ServerConfig) -> Result<Membership, ReplicationError> {
        let id = server_id(config)?;
        if config.servers.is_empty() {
            return Ok(Membership {
                id,
                role: PeerRole::Participant,
                voters: vec![id],
                observers: Vec::new(),
                peers: BTreeMap::new(),
                quorum_addr: None,
                client_addr: config.client_addr,
            });
        }
        let Some(me) = config.servers.get(&id) else {
            let ids: Vec<String> = config.servers.keys().map(u64::to_string).collect();
            return Err(ReplicationError::Config(format!(
                "myid is {id} but the server lines are for {}",
                ids.join(", ")
            )));
        };
        check_peer_type(config, id, me)?;
        let of_role = |role: PeerRole| -> Vec<u64> {
            config
                .servers
                .iter()
                .filter(|(_, s)| s.role == role)
                .map(|(id, _)| *id)
                .collect()
        };
        let voters = of_role(PeerRole::Participant);
        let observers = of_role(PeerRole::Observer);
        let peers = config
            .servers
            .iter()
            .filter(|(p, _)| **p != id)
            .map(|(p, s)| (*p, (s.host.clone(), s.quorum_port)))
            .collect();
        let client_addr = match &me.client {
            None => config.client_addr,
            Some((host, port)) => {
                let ip = host.parse().map_err(|_| {
                    ReplicationError::Config(format!(
                        "server.{id}: the client address {host:?} must be an IP address"
                    ))
                })?;
                SocketAddr::new(ip, *port)
            }
        };
        Ok(Membership {
            id,
            role: me.role,
            voters,
            observers,
            peers,
            quorum_addr: Some((me.host.clone(), me.quorum_port)),
            client_addr,
        })
    }
}

/// An observer's own line says `:observer` and its zoo.cfg `peerType=observer`;
/// a participant's line does not, and its `peerType` (if set) is participant.
fn check_peer_type(
    config: &ServerConfig,
    id: u64,
    me: &crate::config::PeerSpec,
) -> Result<(), ReplicationError> {
    let stated = config.peer_type.as_ref();
    let stated_role = stated.map_or(PeerRole::Participant, |t| t.role);
    if stated_role == me.role {
        return Ok(());
    }
    let stated_text = match stated {
        Some(t) => format!("{} says peerType={}", t.origin, role_name(t.role)),
        None => "peerType is not set (participant by default)".to_owned(),
    };
    let fix = match me.role {
        PeerRole::Observer => "add peerType=observer to this member's zoo.cfg",
        PeerRole::Participant => {
            "add :observer to server.N on every member, or remove peerType=observer"
        }
    };
    Err(ReplicationError::Config(format!(
        "server.{id} ({}) makes this member {} but {stated_text}: {fix}",
        me.origin,
        match me.role {
            PeerRole::Participant => "a participant",
            PeerRole::Observer => "an observer",
        }
    )))
}

fn role_name(role: PeerRole) -> &'static str {
    match role {
        PeerRole::Participant => "participant",
        PeerRole::Observer => "observer",
    }
}

/// The log's options from the configuration.
fn wal_options(config: &ServerConfig) -> WalOptions {
    let mut wal = WalOptions {
        snap_retain_count: config.snap_retain_count as usize,
        snapshot_write_bytes_per_sec_max: config.snapshot_write_bytes_per_sec_max,
        ..WalOptions::default()
    };
    wal.log.unsafe_no_fsync = config.unsafe_no_fsync;
    if config.data_log_dir != config.data_dir {
        wal.log_dir = Some(absolute(&config.data_log_dir));
    }
    wal
}

/// The log fsyncs a directory's parent, which a bare relative name such as
/// `data` does not have: hand it absolute paths.
fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_owned())
}

/// The quorum core's timing from zoo.cfg (one tick of the core = 1 ms).
fn core_config(config: &ServerConfig, m: &Membership) -> Config {
    // Only participants count in any quorum; observers are listed so the core
    // knows them as non-voting learners (docs/ensemble.md, "Observers in the
    // quorum core").
    let mut c = Config::new(PeerId(m.id), m.voters.iter().map(|v| PeerId(*v)))
        .with_observers(m.observers.iter().map(|o| PeerId(*o)));
    let tick = u64::from(config.tick_time_ms.max(1));
    c.init_limit_ticks = tick * u64::from(config.init_limit);
    c.sync_limit_ticks = tick * u64::from(config.sync_limit);
    // ZooKeeper's leader pings its learners every half tick.
    c.ping_interval_ticks = (tick / 2).max(1);
    // I3: the leader rolls to the next epoch at this counter (a test knob;
    // the default is the whole 32-bit counter).
    c.counter_limit = rzk_zxid::CounterLimit::new(config.zxid_counter_limit);
    // The bounded in-memory log (zoo.cfg rzk.log.window*); the core's
    // defaults otherwise.
    if let Some(n) = config.log_window_entries_max {
        c.log_window_entries_max = n;
    }
    if let Some(n) = config.log_window_bytes_max {
        c.log_window_bytes_max = n;
    }
    // The SNAP chunk (zoo.cfg rzk.snap.chunkBytesMax, bounded there so that
    // the chunks in flight fit the transport's queue).
    if let Some(n) = config.snap_chunk_bytes_max {
        c.snap_chunk_bytes_max = n;
    }
    if m.voters.len() == 1 {
        // Nobody else can vote: the election is decided at once.
        c.finalize_wait_ticks = 0;
    }
    // Different at every start, so learner session ids never repeat.
    c.incarnation = u64::from(rand::random::<u32>());
    c
}

async fn resolve(id: u64, host: &str, port: u16) -> Result<SocketAddr, ReplicationError> {
    let err = |reason: String| ReplicationError::Resolve {
        id,
        host: host.to_owned(),
        port,
        reason,
    };
    let mut addrs = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| err(e.to_string()))?;
    addrs.next().ok_or_else(|| err("no address".into()))
}

/// Opens this member's replicator: the durable log in the data directory and,
/// with peers, the gRPC transport on the quorum port (`quorum_listener` when
/// the caller bound it already, as tests do).
pub async fn open_replicator(
    config: &ServerConfig,
    membership: &Membership,
    quorum_listener: Option<TcpListener>,
) -> Result<Arc<ZabReplicator>, ReplicationError> {
    open_with(config, membership, quorum_listener, None).await
}

/// [`open_replicator`], with the newest snapshot loaded into a tree while the
/// log is recovered (crate::preload); the core takes the tree from the end
/// returned.
pub(crate) async fn open_replicator_preloading(
    config: &ServerConfig,
    membership: &Membership,
    quorum_listener: Option<TcpListener>,
) -> Result<(Arc<ZabReplicator>, Preloaded), ReplicationError> {
    let (hook, preloaded) = crate::preload::preload();
    let replicator = open_with(config, membership, quorum_listener, Some(hook)).await?;
    Ok((replicator, preloaded))
}

async fn open_with(
    config: &ServerConfig,
    membership: &Membership,
    quorum_listener: Option<TcpListener>,
    preload: Option<SnapshotPreload>,
) -> Result<Arc<ZabReplicator>, ReplicationError> {
    let data_dir = absolute(&config.data_dir);
    let mut options = wal_options(config);
    options.preload = preload;
    let open_dir = data_dir.clone();
    let storage = tokio::task::spawn_blocking(move || WalStorage::open(&open_dir, options))
        .await
        .map_err(|e| ReplicationError::Storage {
            dir: data_dir.clone(),
            reason: e.to_string(),
        })?
        .map_err(|e| ReplicationError::Storage {
            dir: data_dir.clone(),
            reason: e.to_string(),
        })?;
    let mut driver = DriverConfig::new(core_config(config, membership));
    driver.tick_interval = Duration::from_millis(u64::from(config.tick_time_ms).clamp(1, 10));
    let observer_port = observer_master_listener(config, membership).await?;
    if observer_port.is_some() {
        driver.enable_observer_relay();
    }
    driver.observer_masters = observer_masters(config, membership).await?;
    let replicator = if membership.peers.is_empty() {
        // An ensemble of one: nobody to talk to.
        let (transport, inbox) = MemNetwork::new().join(PeerId(membership.id));
        ZabReplicator::start(driver, storage, transport, inbox).await?
    } else {
        let mut peers = BTreeMap::new();
        for (id, (host, port)) in &membership.peers {
            peers.insert(PeerId(*id), resolve(*id, host, *port).await?);
        }
        let listener = match quorum_listener {
            Some(l) => l,
            None => {
                let (host, port) = membership.quorum_addr.clone().expect("members have peers");
                let addr = resolve(membership.id, &host, port).await?;
                TcpListener::bind(addr)
                    .await
                    .map_err(|e| ReplicationError::Listen {
                        addr: addr.to_string(),
                        reason: e.to_string(),
                    })?
            }
        };
        let mut grpc = GrpcConfig::new(PeerId(membership.id), peers);
        // sslQuorum: a bad store stops the start with its reason.
        grpc.tls = crate::tls::quorum_tls(
            config,
            membership
                .peers
                .iter()
                .map(|(id, (h, _))| (*id, h.as_str())),
        )
        .map_err(|e| ReplicationError::Config(format!("sslQuorum: {e}")))?;
        let (transport, inbox) =
            GrpcTransport::start(grpc, listener).map_err(|e| ReplicationError::Listen {
                addr: format!("{:?}", membership.quorum_addr),
                reason: e.to_string(),
            })?;
        ZabReplicator::start(driver, storage, transport, inbox).await?
    };
    if let Some(listener) = observer_port {
        let addr = listener.local_addr().ok();
        replicator.serve_observers(listener)?;
        tracing::info!(?addr, "serving observers (observerMasterPort)");
    }
    tracing::info!(
        id = membership.id,
        voters = ?membership.voters,
        dir = %data_dir.display(),
        "replicator open"
    );
    Ok(Arc::new(replicator))
}

/// The port `id` serves observers on, if any: `observerMasterPort.N`, else
/// `observerMasterPort` (ZooKeeper: one port on every voter's host).
fn observer_master_port_of(config: &ServerConfig, id: u64) -> Option<u16> {
    config
        .observer_master_ports
        .get(&id)
        .copied()
        .or(config.observer_master_port)
}

/// A participant with an `observerMasterPort` serves observers on it, on
/// its own `server.N` line's host (a follower, and the leader too: observers
/// pick followers, and the leader's relay costs nothing while unused).
async fn observer_master_listener(
    config: &ServerConfig,
    m: &Membership,
) -> Result<Option<TcpListener>, ReplicationError> {
    if m.role != PeerRole::Participant || m.peers.is_empty() {
        return Ok(None);
    }
    let Some(port) = observer_master_port_of(config, m.id) else {
        return Ok(None);
    };
    let (host, _) = m.quorum_addr.clone().expect("members have peers");
    let addr = resolve(m.id, &host, port).await?;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| ReplicationError::Listen {
            addr: format!("{addr} (observerMasterPort)"),
            reason: e.to_string(),
        })?;
    Ok(Some(listener))
}

/// An observer with observer-master ports: every participant's address.
async fn observer_masters(
    config: &ServerConfig,
    m: &Membership,
) -> Result<Vec<(PeerId, SocketAddr)>, ReplicationError> {
    if m.role != PeerRole::Observer {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for v in &m.voters {
        let (Some(port), Some((host, _))) = (observer_master_port_of(config, *v), m.peers.get(v))
        else {
            continue;
        };
        out.push((PeerId(*v), resolve(*v, host, port).await?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str, dir: &Path) -> ServerConfig {
        ServerConfig::parse(&format!("dataDir={}\n{text}", dir.display())).unwrap()
    }

    #[test]
    fn server_id_is_one_standalone_and_myid_in_an_ensemble() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = cfg("", dir.path());
        assert_eq!(server_id(&c).unwrap(), 1);
        c = cfg("server.3=a:2888:3888\n", dir.path());
        assert!(matches!(server_id(&c), Err(ReplicationError::MyId { .. })));
        std::fs::write(dir.path().join("myid"), "3\n").unwrap();
        assert_eq!(server_id(&c).unwrap(), 3);
        std::fs::write(dir.path().join("myid"), "three").unwrap();
        assert!(server_id(&c).is_err());
        c.my_id = Some(2);
        assert_eq!(server_id(&c).unwrap(), 2, "--id overrides myid");
    }

    #[test]
    fn membership_of_an_ensemble() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("myid"), "2").unwrap();
        let c = cfg(
            "clientPort=2181\n\
             server.1=127.0.0.1:2888:3888\n\
             server.2=127.0.0.1:2889:3889;127.0.0.1:2182\n\
             server.3=127.0.0.1:2890:3890\n",
            dir.path(),
        );
        let m = Membership::of(&c).unwrap();
        assert_eq!(m.id, 2);
        assert_eq!(m.voters, vec![1, 2, 3]);
        assert_eq!(m.peers.keys().copied().collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(m.quorum_addr, Some(("127.0.0.1".to_owned(), 2889)));
        assert_eq!(m.client_addr, "127.0.0.1:2182".parse().unwrap());
    }

    #[test]
    fn myid_outside_the_server_lines_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("myid"), "7").unwrap();
        let c = cfg("server.1=a:2888:3888\nserver.2=b:2888:3888\n", dir.path());
        let err = Membership::of(&c).unwrap_err().to_string();
        assert!(err.contains("myid is 7") && err.contains("1, 2"), "{err}");
    }

    #[test]
    fn standalone_is_an_ensemble_of_one() {
        let dir = tempfile::tempdir().unwrap();
        let m = Membership::of(&cfg("", dir.path())).unwrap();
        assert_eq!((m.id, m.voters.clone()), (1, vec![1]));
        assert!(m.peers.is_empty() && m.quorum_addr.is_none());
        let c = core_config(&cfg("", dir.path()), &m);
        assert_eq!(c.finalize_wait_ticks, 0);
    }

    #[test]
    fn timing_comes_from_tick_time_and_limits() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("myid"), "1").unwrap();
        let c = cfg(
            "tickTime=100\ninitLimit=7\nsyncLimit=3\nserver.1=a:1:2\nserver.2=b:1:2\nserver.3=c:1:2\n",
            dir.path(),
        );
        let m = Membership::of(&c).unwrap();
        let core = core_config(&c, &m);
        assert_eq!((core.init_limit_ticks, core.sync_limit_ticks), (700, 300));
        assert_eq!(core.ping_interval_ticks, 50);
        assert!(core.finalize_wait_ticks > 0);
    }

    #[test]
    fn the_counter_limit_reaches_the_core() {
        let dir = tempfile::tempdir().unwrap();
        let c = cfg("", dir.path());
        let m = Membership::of(&c).unwrap();
        assert_eq!(
            core_config(&c, &m).counter_limit,
            rzk_zxid::CounterLimit::DEFAULT
        );
        let c = cfg("rzk.zxid.counterLimit=1000\n", dir.path());
        let limit = core_config(&c, &m).counter_limit;
        assert_eq!(limit.max_counter().0, 1000);
    }

    #[test]
    fn the_snap_chunk_reaches_the_core() {
        let dir = tempfile::tempdir().unwrap();
        let c = cfg("", dir.path());
        let m = Membership::of(&c).unwrap();
        let default = Config::new(PeerId(1), [PeerId(1)]).snap_chunk_bytes_max;
        assert_eq!(core_config(&c, &m).snap_chunk_bytes_max, default);
        let c = cfg("rzk.snap.chunkBytesMax=4096\n", dir.path());
        assert_eq!(core_config(&c, &m).snap_chunk_bytes_max, 4096);
    }

    fn observer_layout(dir: &Path, myid: u64, extra: &str) -> ServerConfig {
        std::fs::write(dir.join("myid"), format!("{myid}\n")).unwrap();
        cfg(
            &format!(
                "server.1=127.0.0.1:2888:3888\n\
                 server.2=127.0.0.1:2889:3889\n\
                 server.3=127.0.0.1:2890:3890\n\
                 server.4=127.0.0.1:2891:3891:observer;127.0.0.1:2184\n\
                 server.5=127.0.0.1:2892:3892:observer\n{extra}"
            ),
            dir,
        )
    }

    #[test]
    fn voters_are_the_participant_lines_only() {
        let dir = tempfile::tempdir().unwrap();
        let m = Membership::of(&observer_layout(dir.path(), 1, "")).unwrap();
        assert_eq!(m.role, PeerRole::Participant);
        assert_eq!(m.voters, vec![1, 2, 3]);
        assert_eq!(m.observers, vec![4, 5]);
        assert_eq!(
            m.peers.keys().copied().collect::<Vec<_>>(),
            vec![2, 3, 4, 5],
            "a voter talks to the observers too"
        );
        let c = observer_layout(dir.path(), 4, "peerType=observer\n");
        let m = Membership::of(&c).unwrap();
        assert_eq!(m.role, PeerRole::Observer);
        assert_eq!(m.voters, vec![1, 2, 3], "an observer is not a voter");
        assert_eq!(m.client_addr, "127.0.0.1:2184".parse().unwrap());
        assert_eq!(m.quorum_addr, Some(("127.0.0.1".to_owned(), 2891)));
        // The quorum size: a majority of the three voters, whatever the
        // number of observers; the core knows this peer observes.
        let core = core_config(&c, &m);
        assert_eq!(core.voters.len(), 3);
        assert_eq!(core.observers.len(), 2);
        assert!(core.is_observer());
        core.validate().unwrap();
    }

    #[test]
    fn an_observer_line_without_peer_type_observer_is_refused_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        for extra in ["", "peerType=participant\n"] {
            let err = Membership::of(&observer_layout(dir.path(), 5, extra))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("server.5 (config line 6)")
                    && err.contains("observer")
                    && err.contains("add peerType=observer"),
                "{extra:?}: {err}"
            );
        }
    }

    #[test]
    fn peer_type_observer_on_a_participant_line_is_refused_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        let err = Membership::of(&observer_layout(dir.path(), 2, "peerType=observer\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("server.2 (config line 3)")
                && err.contains("config line 7 says peerType=observer")
                && err.contains("add :observer"),
            "{err}"
        );
        // peerType=participant on a participant is what it says.
        let c = observer_layout(dir.path(), 2, "peerType=participant\n");
        assert_eq!(Membership::of(&c).unwrap().role, PeerRole::Participant);
    }
}
