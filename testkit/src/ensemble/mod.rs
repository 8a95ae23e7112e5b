//! Ensembles of real server processes on this host, rzk or Apache ZooKeeper,
//! configured the way an operator configures one: every member gets a zoo.cfg
//! with the same `server.N` lines and its own `myid` in its dataDir.
//!
//! - [`Layout`] says what to start: voters, observers, zoo.cfg keys (for every
//!   member or one), observer-master, admin and metrics ports, addresses.
//! - [`Ensemble::new`] chooses every port ([`crate::ports`]: reserved for the
//!   ensemble's life, so a restarted member finds its ports free; or fixed),
//!   writes `<root>/m<id>/zoo.cfg` and `<root>/m<id>/data/myid` (a standalone
//!   server: `<root>/zoo.cfg`, `<root>/data`), and starts nothing.
//! - [`Member`] starts, kills (SIGKILL), stops (SIGTERM), pauses (SIGSTOP,
//!   every thread) and resumes (SIGCONT) one process, appending its output to
//!   `server.log` in its directory.
//! - Waiting is on four-letter words over the client ports with a deadline:
//!   [`Ensemble::settled`] (exactly one leader, every other voter following,
//!   every observer observing), [`Ensemble::wait_serving_blocking`] (every
//!   member answers `srvr` with a mode). A member that exits while waited for
//!   fails the wait at once, with its log's tail.
//!
//! ```no_run
//! use rzk_testkit::ensemble::{Ensemble, Layout, Program};
//! # async fn f() {
//! let root = std::env::temp_dir().join("doc-ensemble");
//! let layout = Layout::voters(3).observers(1).tick_ms(200).set("snapCount", 400);
//! let mut ens = Ensemble::new(Program::rzk("target/release/rzk"), &root, &layout);
//! ens.spawn_all();
//! let leader = ens.settled().await; // index into ens.members
//! ens.members[leader].kill9();
//! ens.members[leader].spawn(); // same ports, same data
//! println!("{}", ens.connect_string());
//! # }
//! ```
//!
//! The `rzk-ensemble` binary of this crate is the same for shell scripts and
//! Python: `rzk-ensemble start --dir D --rzk BIN` leaves the members running
//! and records them in `D/ensemble.json`, which its other commands read.

mod layout;
mod member;
mod program;
mod state;

pub use layout::{render, Addrs, FixedPorts, Layout, ObserverMaster, Role, PROMETHEUS_PROVIDER};
pub use member::{Member, TERM_GRACE};
pub use program::{Launch, Program, LOG4J_PROPERTIES, ZOOKEEPER_PROPERTIES};
pub use state::STATE_FILE;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::ports::{reserve_common, reserve_on, Port};

/// How long [`Ensemble::settled`] waits.
pub const SETTLE_MAX: Duration = Duration::from_secs(60);

/// Members described by a [`Layout`], running or not.
pub struct Ensemble {
    /// Voters first (ids 1..), then observers.
    pub members: Vec<Member>,
    /// Which server the members run.
    pub program: Program,
    /// Where the members' directories are.
    pub root: PathBuf,
    /// Whether this is a standalone server.
    pub standalone: bool,
    /// Every reserved port, held while the ensemble lives.
    _ports: Vec<Port>,
}

/// Every member's addresses, chosen for a [`Layout`], with the reserved ports
/// held while the plan lives; and the files each member reads. [`Ensemble`]
/// runs processes from it; a test that runs its members inside its own
/// process builds them from [`Plan::write_member`]'s pairs.
pub struct Plan {
    /// Every member's addresses, by id (index = id - 1).
    pub addrs: Vec<Addrs>,
    ports: Vec<Port>,
}

impl Plan {
    /// Chooses every member's ports (reserved, or the layout's fixed ones).
    pub fn new(layout: &Layout) -> Plan {
        let (addrs, ports) = choose_addrs(layout);
        Plan { addrs, ports }
    }

    /// Writes member `id`'s directory `dir`: its zoo.cfg and, in an ensemble,
    /// `data/myid`. Returns the zoo.cfg's pairs.
    pub fn write_member(
        &self,
        layout: &Layout,
        id: u64,
        dir: &Path,
    ) -> std::io::Result<Vec<(String, String)>> {
        let a = &self.addrs[(id - 1) as usize];
        std::fs::create_dir_all(dir.join("data"))?;
        if !layout.is_standalone() {
            std::fs::write(dir.join("data").join("myid"), format!("{id}\n"))?;
        }
        let settings = layout.zoo_cfg(a, &self.addrs, dir);
        std::fs::write(dir.join("zoo.cfg"), render(&settings))?;
        Ok(settings)
    }
}

impl Ensemble {
    /// Chooses the ports, writes every member's directory, zoo.cfg and `myid`
    /// under `root`; starts nothing. Panics if a file cannot be written.
    pub fn new(program: Program, root: &Path, layout: &Layout) -> Ensemble {
        let plan = Plan::new(layout);
        let members = plan
            .addrs
            .iter()
            .map(|a| {
                let dir = if layout.is_standalone() {
                    root.to_path_buf()
                } else {
                    root.join(format!("m{}", a.id))
                };
                let launch = plan.write_member(layout, a.id, &dir).and_then(|settings| {
                    program.launch(
                        &dir,
                        &dir.join("zoo.cfg"),
                        &settings,
                        layout.is_standalone(),
                    )
                });
                match launch {
                    Ok(launch) => Member::new(a, dir, launch),
                    Err(e) => panic!("writing member {}: {e}", a.id),
                }
            })
            .collect();
        Ensemble {
            members,
            program,
            root: root.to_path_buf(),
            standalone: layout.is_standalone(),
            _ports: plan.ports,
        }
    }

    /// Starts every member that is not running.
    pub fn spawn_all(&mut self) {
        for m in self.members.iter_mut().filter(|m| !m.running()) {
            m.spawn();
        }
    }

    /// Every member's client address, comma-separated.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(Member::addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The indexes of the observers.
    pub fn observers(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|i| self.members[*i].role == Role::Observer)
            .collect()
    }

    /// The index of the member with server id `id`.
    pub fn index_of(&self, id: u64) -> Option<usize> {
        self.members.iter().position(|m| m.id == id)
    }

    /// Waits ([`SETTLE_MAX`] at most) until exactly one running member leads,
    /// every other running voter follows and every running observer observes
    /// (a standalone server: says `standalone`); returns the leader's index.
    /// Panics with every member's log tail if not.
    pub async fn settled(&self) -> usize {
        let deadline = Instant::now() + SETTLE_MAX;
        loop {
            let mut modes = Vec::new();
            for m in &self.members {
                modes.push(m.running().then_some(m.mode().await).flatten());
            }
            let view = self.view(&modes);
            if let Some(leader) = leader_if_settled(&view, self.standalone) {
                return leader;
            }
            if Instant::now() > deadline {
                panic!("{}", self.not_settled(&view));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// [`Ensemble::settled`], blocking the calling thread, waiting up to
    /// `within`, and failing at once when a member exits; the error says why,
    /// with the log tails.
    pub fn wait_settled_blocking(&mut self, within: Duration) -> Result<usize, String> {
        let standalone = self.standalone;
        self.wait_blocking(within, "settled", |view| {
            leader_if_settled(view, standalone)
        })
    }

    /// Waits until every running member answers `srvr` with a mode (it
    /// serves clients), blocking, up to `within`; fails at once when one exits.
    pub fn wait_serving_blocking(&mut self, within: Duration) -> Result<(), String> {
        self.wait_blocking(within, "serving", |view| {
            view.iter()
                .all(|(_, running, mode)| !running || mode.is_some())
                .then_some(())
        })
    }

    /// The index of the member whose `srvr` says `leader` (or `standalone`)
    /// now, if one does.
    pub fn leader_blocking(&self) -> Option<usize> {
        self.members.iter().position(|m| {
            m.running()
                && matches!(
                    m.mode_blocking().as_deref(),
                    Some("leader") | Some("standalone")
                )
        })
    }

    fn wait_blocking<T>(
        &mut self,
        within: Duration,
        what: &str,
        done: impl Fn(&[(Role, bool, Option<String>)]) -> Option<T>,
    ) -> Result<T, String> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(m) = self.members.iter_mut().find_map(|m| {
                let how = m.exited()?;
                Some(format!("member {} {how}", m.id))
            }) {
                return Err(format!("{m}\n{}", self.log_tails(30)));
            }
            let modes: Vec<Option<String>> =
                self.members.iter().map(Member::mode_blocking).collect();
            let view = self.view(&modes);
            if let Some(out) = done(&view) {
                return Ok(out);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "not {what} within {within:?} (modes {:?})\n{}",
                    modes,
                    self.log_tails(30)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// (role, running, mode) of every member.
    fn view(&self, modes: &[Option<String>]) -> Vec<(Role, bool, Option<String>)> {
        self.members
            .iter()
            .zip(modes)
            .map(|(m, mode)| (m.role, m.running(), mode.clone()))
            .collect()
    }

    fn not_settled(&self, view: &[(Role, bool, Option<String>)]) -> String {
        let modes: Vec<_> = view.iter().map(|(_, _, m)| m.clone()).collect();
        format!(
            "no settled ensemble within {SETTLE_MAX:?} (modes {modes:?})\n{}",
            self.log_tails(30)
        )
    }

    /// Every member's last `n` log lines, headed by its id.
    pub fn log_tails(&self, n: usize) -> String {
        self.members
            .iter()
            .map(|m| {
                format!(
                    "--- member {} ({}):\n{}",
                    m.id,
                    m.log_path.display(),
                    m.log_tail(n)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// SIGTERM to every running member, then SIGKILL to those still running
    /// after `grace`.
    pub fn stop_all(&mut self, grace: Duration) {
        for m in &mut self.members {
            m.send_term();
        }
        let deadline = Instant::now() + grace;
        for m in &mut self.members {
            m.wait_exit(deadline);
        }
    }
}

/// The leader's index if `view` ((role, running, `srvr` mode) of every
/// member) is settled: exactly one running voter leads (says `standalone`, for
/// a standalone server), every other running voter follows, every running
/// observer observes.
pub fn leader_if_settled(view: &[(Role, bool, Option<String>)], standalone: bool) -> Option<usize> {
    let mut leaders = Vec::new();
    for (i, (role, running, mode)) in view.iter().enumerate() {
        if !running {
            continue;
        }
        match (role, mode.as_deref()) {
            (Role::Voter, Some("leader")) => leaders.push(i),
            (Role::Voter, Some("standalone")) if standalone => leaders.push(i),
            (Role::Voter, Some("follower")) | (Role::Observer, Some("observer")) => {}
            _ => return None,
        }
    }
    (leaders.len() == 1).then(|| leaders[0])
}

/// Every member's addresses, and the reservations that hold them.
fn choose_addrs(layout: &Layout) -> (Vec<Addrs>, Vec<Port>) {
    let n = layout.size() as u64;
    let mut held = Vec::new();
    let shared_om = match (layout.observer_master_kind(), layout.fixed()) {
        (ObserverMaster::Shared, None) => {
            let ips: Vec<Ipv4Addr> = (1..=n).map(|id| layout.host_of(id)).collect();
            let ports = reserve_common(&ips);
            let p = ports[0].get();
            held.extend(ports);
            Some(p)
        }
        _ => None,
    };
    let addrs = (1..=n)
        .map(|id| {
            let ip = layout.host_of(id);
            let role = layout.role(id);
            let mut port = |which: fn(&FixedPorts) -> u16| match layout.fixed() {
                Some(f) => which(&f) + (id - 1) as u16,
                None => {
                    let p = reserve_on(ip);
                    let n = p.get();
                    held.push(p);
                    n
                }
            };
            let at = |p: u16| SocketAddr::from((ip, p));
            let client = at(port(|f| f.client));
            let quorum = at(port(|f| f.quorum));
            let election = at(port(|f| f.election));
            let admin = layout.has_admin().then(|| at(port(|f| f.admin)));
            let metrics = layout.has_metrics().then(|| at(port(|f| f.metrics)));
            let observer_master = match (layout.observer_master_kind(), role) {
                (ObserverMaster::Off, _) | (_, Role::Observer) => None,
                (ObserverMaster::Shared, Role::Voter) => Some(at(match layout.fixed() {
                    Some(f) => f.observer_master,
                    None => shared_om.expect("reserved above"),
                })),
                (ObserverMaster::PerVoter, Role::Voter) => Some(at(port(|f| f.observer_master))),
            };
            Addrs {
                id,
                role,
                client,
                quorum,
                election,
                admin,
                metrics,
                observer_master,
            }
        })
        .collect();
    (addrs, held)
}

#[cfg(test)]
mod tests;
