//! The ensemble under test: member processes started from the config, the
//! proxies on every quorum and client link, and the faults applied to them.
//!
//! Only processes this module started are ever signalled, by the PID their
//! `Child` holds. Every member's directory lives under the run's work
//! directory; with a disk size, each member's `{disk}` is a tmpfs of that
//! size (root only), which the disk-full fault fills with a ballast file.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

use crate::config::{fill, Config};
use rzk_chaos::proxy::Link;

/// One member.
pub struct Member {
    /// Its id (1-based, as in `server.N`).
    pub id: u32,
    /// Its work directory.
    pub dir: PathBuf,
    /// Where its disk (data) lives; a tmpfs mount point when sized.
    pub disk: PathBuf,
    /// The port it serves clients on itself.
    pub client_port: u16,
    /// Its peer ports by name.
    pub ports: BTreeMap<String, u16>,
    /// The running process, if any.
    child: Option<Child>,
    /// Whether it is stopped with SIGSTOP.
    paused: bool,
    /// Whether `disk` is a tmpfs this run mounted.
    mounted: bool,
    /// Its log (stdout and stderr).
    pub log: PathBuf,
    /// The sockets that keep its ports for it between restarts ([`free_port`]).
    _held: Vec<socket2::Socket>,
}

/// The ensemble.
pub struct Cluster {
    cfg: Config,
    /// Members by index (id - 1).
    pub members: Vec<Member>,
    /// Quorum links: (from, to, port name) -> proxy.
    links: HashMap<(u32, u32, String), Link>,
    /// Client links, one per member (index id - 1).
    client_links: Vec<Link>,
}

/// A free loopback port for a member, and the socket that holds it for the
/// run. Binding port 0 and closing the socket would leave the number free for
/// anything else until the member binds it, and again while a killed member is
/// down (a proxy's outgoing connection or another bind to port 0 can take it,
/// and the member then cannot start). The held socket is bound with
/// SO_REUSEADDR and never listens: Linux gives the number to nothing else,
/// while the member (rzk's and ZooKeeper's sockets set SO_REUSEADDR) binds it.
/// The same technique as `rzk_testkit::ports` for the tests.
fn free_port() -> Result<(u16, socket2::Socket)> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())?;
    let port = s
        .local_addr()?
        .as_socket()
        .context("a loopback port")?
        .port();
    Ok((port, s))
}

/// A port from `pick` that no earlier pick of the run has; a repeated one is
/// kept open in `rejected` so that the next pick cannot return it again.
fn distinct<S>(
    used: &mut HashSet<u16>,
    rejected: &mut Vec<S>,
    pick: impl Fn() -> Result<(u16, S)>,
) -> Result<(u16, S)> {
    loop {
        let (port, socket) = pick()?;
        if used.insert(port) {
            return Ok((port, socket));
        }
        rejected.push(socket);
    }
}

fn signal(pid: u32, sig: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .context("running kill")?;
    if !status.success() {
        bail!("kill -{sig} {pid} failed");
    }
    Ok(())
}

impl Cluster {
    /// Lays out the members under `work`, starts the proxies and writes each
    /// member's files. With `disk_mb`, mounts a tmpfs of that size as each
    /// member's disk (needs root).
    pub async fn create(cfg: Config, work: &Path, disk_mb: Option<u64>) -> Result<Cluster> {
        let mut members = Vec::new();
        // Every port of the run is a different number: a member's own port
        // equal to one of its proxies' made rzk refuse its config ("server.2
        // and server.1 both use 127.0.0.1:35267", seen once in a run while
        // other test suites bound ports on the same host).
        let mut used = HashSet::new();
        let mut rejected = Vec::new();
        let mut rejected_links = Vec::new();
        for id in 1..=cfg.members {
            let dir = work.join(format!("m{id}"));
            let disk = dir.join("disk");
            std::fs::create_dir_all(&disk)
                .with_context(|| format!("creating {}", disk.display()))?;
            let mut mounted = false;
            if let Some(mb) = disk_mb {
                let status = std::process::Command::new("mount")
                    .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
                    .arg(&disk)
                    .status()
                    .context("running mount")?;
                if !status.success() {
                    bail!(
                        "mounting a {mb} MiB tmpfs on {} failed (the disk-full fault needs root and mount)",
                        disk.display()
                    );
                }
                mounted = true;
            }
            let mut ports = BTreeMap::new();
            let mut held = Vec::new();
            for name in &cfg.peer_ports {
                let (port, socket) = distinct(&mut used, &mut rejected, free_port)?;
                ports.insert(name.clone(), port);
                held.push(socket);
            }
            let (client_port, socket) = distinct(&mut used, &mut rejected, free_port)?;
            held.push(socket);
            members.push(Member {
                id,
                log: dir.join("member.log"),
                dir,
                disk,
                client_port,
                ports,
                child: None,
                paused: false,
                mounted,
                _held: held,
            });
        }
        let mut links = HashMap::new();
        for from in &members {
            for to in &members {
                if from.id == to.id {
                    continue;
                }
                for (name, port) in &to.ports {
                    let target: SocketAddr = ([127, 0, 0, 1], *port).into();
                    let link = loop {
                        let link = Link::start(target).await?;
                        if used.insert(link.local().port()) {
                            break link;
                        }
                        rejected_links.push(link);
                    };
                    links.insert((from.id, to.id, name.clone()), link);
                }
            }
        }
        let mut client_links = Vec::new();
        for m in &members {
            let link = loop {
                let link = Link::start(([127, 0, 0, 1], m.client_port).into()).await?;
                if used.insert(link.local().port()) {
                    break link;
                }
                rejected_links.push(link);
            };
            client_links.push(link);
        }
        // Held until every port is chosen, so that a retry cannot get one back.
        drop((rejected, rejected_links));
        let cluster = Cluster {
            cfg,
            members,
            links,
            client_links,
        };
        for m in &cluster.members {
            cluster.write_files(m.id)?;
        }
        Ok(cluster)
    }

    /// Where clients connect to member `id` (through its client proxy).
    pub fn client_addr(&self, id: u32) -> SocketAddr {
        self.client_links[(id - 1) as usize].local()
    }

    fn member(&self, id: u32) -> &Member {
        &self.members[(id - 1) as usize]
    }

    fn member_mut(&mut self, id: u32) -> &mut Member {
        &mut self.members[(id - 1) as usize]
    }

    /// The placeholder values of member `id`.
    fn vars(&self, id: u32) -> Result<BTreeMap<String, String>> {
        let m = self.member(id);
        let mut v = BTreeMap::new();
        v.insert("id".into(), id.to_string());
        v.insert("host".into(), "127.0.0.1".into());
        v.insert("dir".into(), m.dir.display().to_string());
        v.insert("disk".into(), m.disk.display().to_string());
        v.insert("client_port".into(), m.client_port.to_string());
        for (name, port) in &m.ports {
            v.insert(format!("port.{name}"), port.to_string());
        }
        let data_dir = fill(&self.cfg.data_dir, &v)?;
        v.insert("data_dir".into(), data_dir);
        let mut lines = Vec::new();
        for peer in &self.members {
            let mut pv = BTreeMap::new();
            pv.insert("peer".to_string(), peer.id.to_string());
            pv.insert("host".into(), "127.0.0.1".into());
            pv.insert("client_port".into(), peer.client_port.to_string());
            for (name, port) in &peer.ports {
                let port = if peer.id == id {
                    *port
                } else {
                    self.links[&(id, peer.id, name.clone())].local().port()
                };
                pv.insert(format!("port.{name}"), port.to_string());
            }
            lines.push(fill(&self.cfg.server_line, &pv)?);
        }
        v.insert("server_lines".into(), lines.join("\n"));
        Ok(v)
    }

    fn write_files(&self, id: u32) -> Result<()> {
        let vars = self.vars(id)?;
        std::fs::create_dir_all(&vars["data_dir"])
            .with_context(|| format!("creating {}", vars["data_dir"]))?;
        for f in &self.cfg.files {
            let path = PathBuf::from(fill(&f.path, &vars)?);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&path, fill(&f.content, &vars)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }

    /// Starts member `id` (not waiting for it to serve).
    pub fn start(&mut self, id: u32) -> Result<()> {
        let vars = self.vars(id)?;
        let argv: Vec<String> = self
            .cfg
            .start
            .iter()
            .map(|a| fill(a, &vars))
            .collect::<Result<_>>()?;
        let env: Vec<(String, String)> = self
            .cfg
            .env
            .iter()
            .map(|(k, v)| Ok((k.clone(), fill(v, &vars)?)))
            .collect::<Result<_>>()?;
        let m = self.member_mut(id);
        if m.child.is_some() {
            bail!("member {id} is already running");
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .with_context(|| format!("opening {}", m.log.display()))?;
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .envs(env)
            .current_dir(&m.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting member {id}: {argv:?}"))?;
        m.child = Some(child);
        m.paused = false;
        self.set_listening(id, true)
    }

    /// Opens or closes the listeners of every link that leads to member `id`
    /// (closed while it is down, so connecting is refused as it would be).
    fn set_listening(&mut self, id: u32, listening: bool) -> Result<()> {
        for ((_, to, _), link) in self.links.iter_mut() {
            if *to == id {
                link.set_listening(listening)?;
            }
        }
        self.client_links[(id - 1) as usize].set_listening(listening)?;
        Ok(())
    }

    /// Whether member `id` has a process.
    pub fn is_running(&self, id: u32) -> bool {
        self.member(id).child.is_some()
    }

    /// The PID of member `id`'s process.
    pub fn pid(&self, id: u32) -> Option<u32> {
        self.member(id).child.as_ref().and_then(|c| c.id())
    }

    /// kill -9 of member `id`, waiting until it is gone.
    pub async fn kill(&mut self, id: u32) -> Result<()> {
        let m = self.member_mut(id);
        if let Some(mut child) = m.child.take() {
            child.start_kill().ok();
            child.wait().await.ok();
        }
        m.paused = false;
        self.set_listening(id, false)
    }

    /// SIGSTOP (pause) or SIGCONT (resume) of member `id`.
    pub fn pause(&mut self, id: u32, stop: bool) -> Result<()> {
        let Some(pid) = self.pid(id) else {
            return Ok(());
        };
        signal(pid, if stop { "STOP" } else { "CONT" })?;
        self.member_mut(id).paused = stop;
        Ok(())
    }

    /// Cuts (up = false) or restores every quorum link between member `id`
    /// and each of `others`, both directions.
    pub fn partition(&self, id: u32, others: &[u32], up: bool) {
        for ((from, to, _), link) in &self.links {
            if (*from == id && others.contains(to)) || (*to == id && others.contains(from)) {
                link.set_up(up);
            }
        }
    }

    /// Takes the client link of member `id` up or down.
    pub fn client_link(&self, id: u32, up: bool) {
        self.client_links[(id - 1) as usize].set_up(up);
    }

    /// Every link up, every paused member resumed.
    pub fn heal(&mut self) -> Result<()> {
        for link in self.links.values() {
            link.set_up(true);
        }
        for link in &self.client_links {
            link.set_up(true);
        }
        let ids: Vec<u32> = self.members.iter().map(|m| m.id).collect();
        for id in ids {
            if self.member(id).paused {
                self.pause(id, false)?;
            }
        }
        Ok(())
    }

    /// Asks member `id` its four-letter probe word directly (not through a
    /// proxy); None if it does not answer within 1 s.
    pub async fn probe(&self, id: u32) -> Option<String> {
        let port = self.member(id).client_port;
        let word = self.cfg.probe.word.clone();
        let ask = async move {
            let mut s = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
            s.write_all(word.as_bytes()).await.ok()?;
            let mut out = String::new();
            s.read_to_string(&mut out).await.ok()?;
            Some(out)
        };
        tokio::time::timeout(Duration::from_secs(1), ask)
            .await
            .ok()
            .flatten()
    }

    /// The member that says it leads, if exactly one running member does.
    pub async fn leader(&self) -> Option<u32> {
        let mut leaders = Vec::new();
        for m in &self.members {
            if m.child.is_none() || m.paused {
                continue;
            }
            if let Some(answer) = self.probe(m.id).await {
                if answer.contains(&self.cfg.probe.leader) {
                    leaders.push(m.id);
                }
            }
        }
        if leaders.len() == 1 {
            leaders.pop()
        } else {
            None
        }
    }

    /// Waits until every running member serves and one leads, or fails with
    /// the tail of each log that does not.
    pub async fn wait_serving(&self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let mut waiting = Vec::new();
            for m in &self.members {
                if m.child.is_none() || m.paused {
                    continue;
                }
                let serving = self
                    .probe(m.id)
                    .await
                    .is_some_and(|a| a.contains(&self.cfg.probe.serving));
                if !serving {
                    waiting.push(m.id);
                }
            }
            if waiting.is_empty() && self.leader().await.is_some() {
                return Ok(());
            }
            if Instant::now() > deadline {
                let mut msg = format!("members {waiting:?} not serving after {limit:?}");
                for id in waiting {
                    msg.push_str(&format!(
                        "\n--- tail of {}:\n{}",
                        self.member(id).log.display(),
                        tail(&self.member(id).log, 15)
                    ));
                }
                bail!(msg);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Fills member `id`'s disk with a ballast file until the filesystem is
    /// full; returns the bytes written.
    pub fn fill_disk(&self, id: u32) -> Result<u64> {
        use std::io::Write;
        let m = self.member(id);
        if !m.mounted {
            bail!("member {id} has no sized disk (run with --disk-mb)");
        }
        let path = m.disk.join("chaos-ballast");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        let chunk = vec![0u8; 64 * 1024];
        let mut written = 0u64;
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
                Err(e) => return Err(e.into()),
            }
        }
        Ok(written)
    }

    /// Removes member `id`'s ballast.
    pub fn free_disk(&self, id: u32) -> Result<()> {
        let path = self.member(id).disk.join("chaos-ballast");
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Stops every member (SIGCONT, SIGTERM, then SIGKILL after 10 s) and
    /// unmounts the disks this run mounted.
    pub async fn shutdown(&mut self) {
        for m in &mut self.members {
            let Some(mut child) = m.child.take() else {
                continue;
            };
            if let Some(pid) = child.id() {
                let _ = signal(pid, "CONT");
                let _ = signal(pid, "TERM");
            }
            if tokio::time::timeout(Duration::from_secs(10), child.wait())
                .await
                .is_err()
            {
                child.start_kill().ok();
                child.wait().await.ok();
            }
        }
        for m in &mut self.members {
            if m.mounted {
                let ok = std::process::Command::new("umount")
                    .arg(&m.disk)
                    .status()
                    .is_ok_and(|s| s.success());
                if ok {
                    m.mounted = false;
                } else {
                    eprintln!("rzk-chaos: could not unmount {}", m.disk.display());
                }
            }
        }
    }
}

/// The last `lines` lines of a file (for error messages).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_members_port_is_held_for_it_and_only_for_it() {
        let (port, _held) = free_port().unwrap();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        // Nothing that binds without SO_REUSEADDR takes it, nor a bind to port 0...
        let plain =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        assert!(plain.bind(&addr.into()).is_err());
        let others: Vec<_> = (0..2_000)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        assert!(others
            .iter()
            .all(|l| l.local_addr().unwrap().port() != port));
        // ...while the member (std, tokio, mio and ZooKeeper set SO_REUSEADDR)
        // binds it, and binds it again after a restart.
        drop(std::net::TcpListener::bind(addr).unwrap());
        std::net::TcpListener::bind(addr).unwrap();
    }

    fn config() -> Config {
        toml::from_str(
            r#"
            name = "test"
            members = 3
            peer_ports = ["quorum", "election"]
            server_line = "server.{peer}={host}:{port.quorum}:{port.election}"
            data_dir = "{disk}/data"
            start = ["true"]
            [probe]
            word = "srvr"
            serving = "Mode: "
            leader = "Mode: leader"
            [[files]]
            path = "{dir}/zoo.cfg"
            content = "id={id}\n{server_lines}\n"
            "#,
        )
        .unwrap()
    }

    #[tokio::test]
    async fn each_member_binds_its_own_ports_and_reaches_peers_through_its_proxies() {
        let work = tempfile::tempdir().unwrap();
        let cluster = Cluster::create(config(), work.path(), None).await.unwrap();
        for m in &cluster.members {
            let cfg = std::fs::read_to_string(m.dir.join("zoo.cfg")).unwrap();
            for peer in &cluster.members {
                let line = cfg
                    .lines()
                    .find(|l| l.starts_with(&format!("server.{}=", peer.id)))
                    .unwrap();
                let (q, e) = if peer.id == m.id {
                    (peer.ports["quorum"], peer.ports["election"])
                } else {
                    let q = cluster.links[&(m.id, peer.id, "quorum".to_string())]
                        .local()
                        .port();
                    let e = cluster.links[&(m.id, peer.id, "election".to_string())]
                        .local()
                        .port();
                    assert_ne!(
                        q, peer.ports["quorum"],
                        "a peer's real port leaked into {cfg}"
                    );
                    (q, e)
                };
                assert_eq!(line, format!("server.{}=127.0.0.1:{q}:{e}", peer.id));
            }
        }
    }

    #[test]
    fn a_port_picked_twice_is_held_aside_and_picked_again() {
        let picks = std::cell::RefCell::new(vec![7, 5, 5, 3].into_iter());
        let pick = || Ok::<_, anyhow::Error>((picks.borrow_mut().next().unwrap(), ()));
        let (mut used, mut rejected) = (HashSet::new(), Vec::new());
        assert_eq!(distinct(&mut used, &mut rejected, pick).unwrap().0, 7);
        assert_eq!(distinct(&mut used, &mut rejected, pick).unwrap().0, 5);
        assert_eq!(distinct(&mut used, &mut rejected, pick).unwrap().0, 3);
        assert_eq!(rejected.len(), 1);
    }

    #[tokio::test]
    async fn a_partition_cuts_both_directions_of_that_member_only() {
        let work = tempfile::tempdir().unwrap();
        let mut cluster = Cluster::create(config(), work.path(), None).await.unwrap();
        cluster.partition(1, &[2, 3], false);
        for ((from, to, _), link) in &cluster.links {
            assert_eq!(link.is_up(), *from != 1 && *to != 1, "{from}->{to}");
        }
        cluster.heal().unwrap();
        assert!(cluster.links.values().all(|l| l.is_up()));
    }
}
