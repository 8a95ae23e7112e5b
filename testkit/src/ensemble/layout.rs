//! What to start, and every member's zoo.cfg as key-value pairs.
//!
//! A [`Layout`] describes an ensemble the way an operator writes it down: how
//! many voters and observers, the zoo.cfg keys every member (or one member)
//! gets, and which optional ports each member has. [`Layout::zoo_cfg`] renders
//! one member's file from it and the addresses chosen for every member; it is a
//! pure function, so what a test or a script starts is exactly what it says.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

/// Whether a member votes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A participant: `server.N=host:quorum:election` (the default role).
    Voter,
    /// A non-voting learner: `:observer` on its line in every member's zoo.cfg
    /// and `peerType=observer` in its own (ZooKeeper's layout).
    Observer,
}

impl Role {
    /// `voter` or `observer` (the CLI's JSON).
    pub fn name(self) -> &'static str {
        match self {
            Role::Voter => "voter",
            Role::Observer => "observer",
        }
    }
}

/// How members serve observers on an observer-master port (observers then
/// follow a voter's relay instead of the leader).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObserverMaster {
    /// No observer-master port.
    Off,
    /// ZooKeeper's form: `observerMasterPort=P` in every zoo.cfg, one number
    /// that each member binds on its own address (members on one host need
    /// distinct addresses: [`Layout::net`]).
    Shared,
    /// rzk's per-member form: `observerMasterPort.N=P_N` for every voter N in
    /// every zoo.cfg, a port each (members may share an address).
    PerVoter,
}

/// Ports chosen by the caller instead of reserved: member N gets each base
/// plus N - 1 (a fixed, documented layout, as an operator's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedPorts {
    /// Member 1's client port.
    pub client: u16,
    /// Member 1's quorum port.
    pub quorum: u16,
    /// Member 1's election port.
    pub election: u16,
    /// Member 1's AdminServer port (with [`Layout::admin`]).
    pub admin: u16,
    /// Member 1's Prometheus port (with [`Layout::metrics`]).
    pub metrics: u16,
    /// Member 1's observer-master port (every voter's with
    /// [`ObserverMaster::Shared`]).
    pub observer_master: u16,
}

/// The addresses chosen for one member (see [`super::Ensemble::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Addrs {
    /// Its server id (`myid`).
    pub id: u64,
    /// Voter or observer.
    pub role: Role,
    /// Clients.
    pub client: SocketAddr,
    /// The quorum port of its `server.N` line (rzk's gRPC).
    pub quorum: SocketAddr,
    /// The election port of its `server.N` line (ZooKeeper's; rzk does not
    /// listen on it but it must be given and its own).
    pub election: SocketAddr,
    /// Its AdminServer, with [`Layout::admin`].
    pub admin: Option<SocketAddr>,
    /// Its Prometheus endpoint, with [`Layout::metrics`].
    pub metrics: Option<SocketAddr>,
    /// Its observer-master port (voters, with an [`ObserverMaster`] other than
    /// `Off`).
    pub observer_master: Option<SocketAddr>,
}

/// ZooKeeper's Prometheus provider class (rzk accepts the same key).
pub const PROMETHEUS_PROVIDER: &str =
    "org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider";

/// An ensemble to start: see the module docs.
#[derive(Clone, Debug)]
pub struct Layout {
    voters: usize,
    observers: usize,
    standalone: bool,
    /// Keys the caller set for every member, in the order they were set.
    settings: Vec<(String, String)>,
    /// The caller's defaults: under `settings`, over the library's.
    defaults: Vec<(String, String)>,
    /// Keys for one member, on top of `settings`.
    member_settings: Vec<(u64, String, String)>,
    observer_master: ObserverMaster,
    admin: bool,
    metrics: bool,
    data_log_dir: bool,
    client_on_server_lines: bool,
    /// The first three octets of the members' addresses (member N on
    /// `a.b.c.N`); `None`: every member on `host`.
    net: Option<[u8; 3]>,
    host: Ipv4Addr,
    fixed: Option<FixedPorts>,
}

impl Layout {
    /// `n` voters (ids 1..=n), no observer. One voter is still an ensemble
    /// (`server.1` line, `myid`); [`Layout::standalone`] is a server without.
    pub fn voters(n: usize) -> Layout {
        assert!(n >= 1, "an ensemble has a voter");
        Layout {
            voters: n,
            observers: 0,
            standalone: false,
            settings: Vec::new(),
            defaults: Vec::new(),
            member_settings: Vec::new(),
            observer_master: ObserverMaster::Off,
            admin: false,
            metrics: false,
            data_log_dir: false,
            client_on_server_lines: true,
            net: None,
            host: Ipv4Addr::LOCALHOST,
            fixed: None,
        }
    }

    /// One server without `server.N` lines or `myid`: ZooKeeper's standalone
    /// mode (rzk runs it as an ensemble of one). Its directory is the root
    /// itself (`<root>/zoo.cfg`, `<root>/data`).
    pub fn standalone() -> Layout {
        let mut l = Layout::voters(1);
        l.standalone = true;
        l
    }

    /// What every member gets unless the caller sets the key: ZooKeeper's
    /// sample timing (`initLimit` and `syncLimit` only in an ensemble), every
    /// four-letter word (the launcher waits on `srvr`; ZooKeeper allows only
    /// `srvr` by default) and no AdminServer (it would bind 8080 on every
    /// member; [`Layout::admin`] gives each its own port instead).
    fn library_defaults(&self) -> Vec<(String, String)> {
        let mut d = vec![("tickTime", "2000")];
        if !self.standalone {
            d.extend([("initLimit", "10"), ("syncLimit", "5")]);
        }
        d.extend([
            ("4lw.commands.whitelist", "*"),
            ("admin.enableServer", "false"),
        ]);
        d.into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    /// Adds `n` observers after the voters (ids voters+1..).
    pub fn observers(mut self, n: usize) -> Layout {
        assert!(
            !self.standalone || n == 0,
            "a standalone server has no observers"
        );
        self.observers = n;
        self
    }

    /// Sets a zoo.cfg key for every member (a key set before keeps its place).
    pub fn set(mut self, key: &str, value: impl ToString) -> Layout {
        put(&mut self.settings, key, value.to_string());
        self
    }

    /// Sets a default for every member: [`Layout::set`] and
    /// [`Layout::set_for`] win over it (a harness's defaults under what a test
    /// asks for), and it wins over the library's.
    pub fn set_default(mut self, key: &str, value: impl ToString) -> Layout {
        put(&mut self.defaults, key, value.to_string());
        self
    }

    /// Sets a zoo.cfg key for member `id` only (on top of [`Layout::set`]).
    pub fn set_for(mut self, id: u64, key: &str, value: impl ToString) -> Layout {
        self.member_settings
            .retain(|(i, k, _)| *i != id || k != key);
        self.member_settings
            .push((id, key.to_owned(), value.to_string()));
        self
    }

    /// `tickTime` in ms.
    pub fn tick_ms(self, ms: u64) -> Layout {
        self.set("tickTime", ms)
    }

    /// `initLimit` in ticks.
    pub fn init_limit_ticks(self, ticks: u64) -> Layout {
        self.set("initLimit", ticks)
    }

    /// `syncLimit` in ticks.
    pub fn sync_limit_ticks(self, ticks: u64) -> Layout {
        self.set("syncLimit", ticks)
    }

    /// Observer-master ports (see [`ObserverMaster`]).
    pub fn observer_master(mut self, how: ObserverMaster) -> Layout {
        self.observer_master = how;
        self
    }

    /// An AdminServer per member on its own port, on the member's address.
    pub fn admin(mut self, on: bool) -> Layout {
        self.admin = on;
        self
    }

    /// A Prometheus endpoint per member on its own port, on its address.
    pub fn metrics(mut self, on: bool) -> Layout {
        self.metrics = on;
        self
    }

    /// `dataLogDir=<member dir>/datalog` (the txn log apart from snapshots).
    pub fn data_log_dir(mut self, on: bool) -> Layout {
        self.data_log_dir = on;
        self
    }

    /// Whether `server.N` lines carry `;host:clientPort` (default yes). Without
    /// it each member takes its client port from its own `clientPort`.
    pub fn client_on_server_lines(mut self, on: bool) -> Layout {
        self.client_on_server_lines = on;
        self
    }

    /// Every member on `host` (default 127.0.0.1).
    pub fn host(mut self, host: Ipv4Addr) -> Layout {
        self.host = host;
        self.net = None;
        self
    }

    /// Member N on `a.b.c.N` (all of 127/8 is loopback on Linux): what
    /// [`ObserverMaster::Shared`] needs on one host.
    pub fn net(mut self, abc: [u8; 3]) -> Layout {
        self.net = Some(abc);
        self
    }

    /// Fixed ports instead of reserved ones.
    pub fn fixed_ports(mut self, ports: FixedPorts) -> Layout {
        self.fixed = Some(ports);
        self
    }

    /// How many members (voters and observers).
    pub fn size(&self) -> usize {
        self.voters + self.observers
    }

    /// Whether this is a standalone server (no `server.N` lines, no `myid`).
    pub fn is_standalone(&self) -> bool {
        self.standalone
    }

    /// Member `id`'s role.
    pub fn role(&self, id: u64) -> Role {
        if id as usize <= self.voters {
            Role::Voter
        } else {
            Role::Observer
        }
    }

    /// Member `id`'s address.
    pub fn host_of(&self, id: u64) -> Ipv4Addr {
        match self.net {
            Some([a, b, c]) => Ipv4Addr::new(a, b, c, id as u8),
            None => self.host,
        }
    }

    pub(crate) fn observer_master_kind(&self) -> ObserverMaster {
        self.observer_master
    }

    pub(crate) fn has_admin(&self) -> bool {
        self.admin
    }

    pub(crate) fn has_metrics(&self) -> bool {
        self.metrics
    }

    pub(crate) fn fixed(&self) -> Option<FixedPorts> {
        self.fixed
    }

    /// Member `me`'s zoo.cfg as ordered key-value pairs: the layout's keys
    /// (with `set_for`'s on top), then what the addresses and the member's
    /// directory decide (a key the caller set keeps the caller's value), then
    /// the `server.N` lines. `all` holds every member's addresses, by id.
    pub fn zoo_cfg(&self, me: &Addrs, all: &[Addrs], dir: &Path) -> Vec<(String, String)> {
        let mut cfg = self.library_defaults();
        for (k, v) in self.defaults.iter().chain(&self.settings) {
            put(&mut cfg, k, v.clone());
        }
        for (_, k, v) in self.member_settings.iter().filter(|(i, _, _)| *i == me.id) {
            put(&mut cfg, k, v.clone());
        }
        let host = me.client.ip().to_string();
        let mut derived = vec![("dataDir".to_owned(), dir.join("data").display().to_string())];
        if self.data_log_dir {
            derived.push((
                "dataLogDir".to_owned(),
                dir.join("datalog").display().to_string(),
            ));
        }
        derived.push(("clientPort".to_owned(), me.client.port().to_string()));
        derived.push(("clientPortAddress".to_owned(), host.clone()));
        if let Some(a) = me.admin {
            derived.push(("admin.enableServer".to_owned(), "true".to_owned()));
            derived.push(("admin.serverAddress".to_owned(), a.ip().to_string()));
            derived.push(("admin.serverPort".to_owned(), a.port().to_string()));
        }
        if let Some(m) = me.metrics {
            derived.push((
                "metricsProvider.className".to_owned(),
                PROMETHEUS_PROVIDER.to_owned(),
            ));
            derived.push(("metricsProvider.httpHost".to_owned(), m.ip().to_string()));
            derived.push(("metricsProvider.httpPort".to_owned(), m.port().to_string()));
        }
        if me.role == Role::Observer {
            derived.push(("peerType".to_owned(), "observer".to_owned()));
        }
        derived.extend(self.observer_master_keys(all));
        for (k, v) in derived {
            if !self.explicit(me.id, &k) {
                put(&mut cfg, &k, v);
            }
        }
        if !self.standalone {
            cfg.extend(all.iter().map(|a| self.server_line(a)));
        }
        cfg
    }

    /// Whether the caller set `key` (for every member or for `id`).
    fn explicit(&self, id: u64, key: &str) -> bool {
        self.member_settings
            .iter()
            .any(|(i, k, _)| *i == id && k == key)
            || self.settings.iter().any(|(k, _)| k == key)
    }

    fn observer_master_keys(&self, all: &[Addrs]) -> Vec<(String, String)> {
        match self.observer_master {
            ObserverMaster::Off => Vec::new(),
            ObserverMaster::Shared => all
                .iter()
                .find_map(|a| a.observer_master)
                .map(|p| ("observerMasterPort".to_owned(), p.port().to_string()))
                .into_iter()
                .collect(),
            ObserverMaster::PerVoter => all
                .iter()
                .filter_map(|a| {
                    let p = a.observer_master?;
                    Some((format!("observerMasterPort.{}", a.id), p.port().to_string()))
                })
                .collect(),
        }
    }

    /// `server.N=host:quorum:election[:observer][;host:client]`.
    fn server_line(&self, a: &Addrs) -> (String, String) {
        let role = match a.role {
            Role::Voter => "",
            Role::Observer => ":observer",
        };
        let client = if self.client_on_server_lines {
            format!(";{}", a.client)
        } else {
            String::new()
        };
        (
            format!("server.{}", a.id),
            format!(
                "{}:{}:{}{role}{client}",
                a.quorum.ip(),
                a.quorum.port(),
                a.election.port()
            ),
        )
    }
}

/// Sets `key` in `cfg`: in place if present, else at the end.
fn put(cfg: &mut Vec<(String, String)>, key: &str, value: String) {
    match cfg.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value,
        None => cfg.push((key.to_owned(), value)),
    }
}

/// The text of a zoo.cfg from its pairs.
pub fn render(cfg: &[(String, String)]) -> String {
    cfg.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}
