//! Real `rzk` processes on loopback, for the tests that need a process to die
//! (kill -9), stop (SIGSTOP) or be measured (/proc RSS), started by
//! `rzk_testkit::ensemble`: each member with its own directory, `myid` and
//! zoo.cfg, every port reserved for the ensemble's life (a member finds its
//! ports free after each restart), every member's output in its
//! `server.log`.
//!
//! ```ignore
//! let root = tempfile::tempdir().unwrap();
//! let mut ens = procs(root.path(), &Layout::voters(3).observers(2));
//! ens.spawn_all();
//! let leader = ens.settled().await;   // one leader, followers, observers
//! ens.members[leader].kill9();
//! ens.members[leader].spawn();        // same ports, same data
//! ```
//!
//! Everything waits on a condition with a deadline; the members' log tails
//! are printed when a wait fails. Dropping a member kills its process.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rzk_testkit::ensemble::Program;
pub use rzk_testkit::ensemble::{Ensemble, Layout, Member, Role};
pub use rzk_testkit::fourlw::{field, mntr_row as row};
use rzk_testkit::ports::Port;

/// The `rzk` binary of this package.
pub fn rzk() -> Program {
    Program::rzk(env!("CARGO_BIN_EXE_rzk"))
}

/// What every member gets unless the test's layout sets the key: fast ticks
/// for tests, every four-letter word, no AdminServer.
const TEST_DEFAULTS: &[(&str, &str)] = &[
    ("tickTime", "200"),
    ("initLimit", "10"),
    ("syncLimit", "5"),
    ("minSessionTimeout", "400"),
    ("maxClientCnxns", "0"),
    ("4lw.commands.whitelist", "*"),
    ("admin.enableServer", "false"),
];

/// Writes every member's directory (`<root>/m<id>/`), `myid` and zoo.cfg for
/// `layout` on top of the tests' defaults; starts nothing.
pub fn procs(root: &Path, layout: &Layout) -> Ensemble {
    let layout = TEST_DEFAULTS
        .iter()
        .fold(layout.clone(), |l, (k, v)| l.set_default(k, v));
    Ensemble::new(rzk(), root, &layout)
}

/// A port for a server the test starts, held until the `Port` drops
/// (`rzk_testkit::ports`): keep it alive as long as the server runs.
pub fn free_port() -> Port {
    rzk_testkit::ports::reserve()
}

/// One standalone `rzk` process started with zoo.cfg lines (on top of
/// tickTime 200, every four-letter word, its data in `<dir>/data`), `RUST_LOG`
/// unset; its output in `<dir>/server.log`. Dropping it kills the process.
pub struct Rzk {
    /// Its client port on 127.0.0.1.
    pub port: u16,
    /// Its log.
    pub log: PathBuf,
    ens: Ensemble,
}

impl Rzk {
    /// Writes `<dir>/zoo.cfg` from `lines` (`key=value`) and starts rzk.
    pub fn spawn(dir: &Path, lines: &[String]) -> Rzk {
        let mut layout = Layout::standalone()
            .tick_ms(200)
            // The server's own default (the key unset, as an operator's file).
            .set("admin.enableServer", "true");
        for l in lines {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("a zoo.cfg line key=value: {l}"));
            layout = layout.set(k, v);
        }
        let mut ens = Ensemble::new(rzk().env_remove("RUST_LOG"), dir, &layout);
        ens.spawn_all();
        let m = &ens.members[0];
        Rzk {
            port: m.client.port(),
            log: m.log_path.clone(),
            ens,
        }
    }

    pub fn addr(&self) -> String {
        self.ens.members[0].addr()
    }

    pub fn log_text(&self) -> String {
        self.ens.members[0].log()
    }

    /// Waits (30 s at most) until rzk serves (`srvr` has a mode); panics with
    /// its log if it exits or does not.
    pub async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let m = &mut self.ens.members[0];
            if let Some(how) = m.exited() {
                panic!("rzk {how}:\n{}", m.log());
            }
            if m.mode().await.is_some() {
                return;
            }
            assert!(Instant::now() < deadline, "rzk did not start:\n{}", m.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
