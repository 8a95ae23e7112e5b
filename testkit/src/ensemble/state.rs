//! The record of an ensemble that outlives the process that started it: the
//! `rzk-ensemble` CLI's `start` writes `<root>/ensemble.json` and leaves the
//! members running; its other commands read it back ([`Ensemble::attach`]).
//! Members are known by pid and start time, so a pid the kernel has given to
//! another process since is not taken for a member.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::member::Member;
use super::{Addrs, Ensemble, Launch, Program, Role};

/// The record's file name under the ensemble's root.
pub const STATE_FILE: &str = "ensemble.json";

impl Ensemble {
    /// The record: every member's addresses, directory, command and process.
    pub fn state(&self) -> Value {
        json!({
            "program": if self.program.is_zookeeper() { "zookeeper" } else { "rzk" },
            "standalone": self.standalone,
            "root": self.root.display().to_string(),
            "connect": self.connect_string(),
            "members": self.members.iter().map(member_state).collect::<Vec<_>>(),
        })
    }

    /// Writes [`Ensemble::state`] to `<root>/ensemble.json`.
    pub fn save_state(&self) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(&self.state()).expect("JSON of an ensemble");
        std::fs::write(self.root.join(STATE_FILE), text + "\n")
    }

    /// Forgets the processes it started without stopping them: they keep
    /// running after this process exits (known by pid from then on).
    pub fn detach(&mut self) {
        for m in &mut self.members {
            m.detach();
        }
    }

    /// The ensemble recorded under `root` by another process.
    pub fn attach(root: &Path) -> Result<Ensemble, String> {
        let path = root.join(STATE_FILE);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("{}: {e} (no ensemble started there?)", path.display()))?;
        let v: Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let bad = |what: &str| format!("{}: {what}", path.display());
        let members = v["members"]
            .as_array()
            .ok_or_else(|| bad("no members"))?
            .iter()
            .map(|m| read_member(m).ok_or_else(|| bad(&format!("a bad member: {m}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let first = members.first().ok_or_else(|| bad("no members"))?;
        let program = match v["program"].as_str() {
            Some("zookeeper") => Program::zookeeper(),
            _ => Program::rzk(first.launch.program.clone()),
        };
        Ok(Ensemble {
            members,
            program,
            root: root.to_path_buf(),
            standalone: v["standalone"].as_bool().unwrap_or(false),
            _ports: Vec::new(),
        })
    }
}

fn member_state(m: &Member) -> Value {
    let addr = |a: Option<SocketAddr>| a.map(|a| a.to_string());
    json!({
        "id": m.id,
        "role": m.role.name(),
        "client": m.client.to_string(),
        "quorum": m.quorum.to_string(),
        "election": m.election.to_string(),
        "admin": addr(m.admin),
        "metrics": addr(m.metrics),
        "observer_master": addr(m.observer_master),
        "dir": m.dir.display().to_string(),
        "cfg": m.cfg.display().to_string(),
        "log": m.log_path.display().to_string(),
        "pid": m.pid_opt().unwrap_or(0),
        "start_ticks": m.start_ticks(),
        "launch": {
            "program": m.launch.program.display().to_string(),
            "args": m.launch.args,
            "env": m.launch.env,
            "env_remove": m.launch.env_remove,
        },
    })
}

fn read_member(v: &Value) -> Option<Member> {
    let addr = |k: &str| v[k].as_str()?.parse::<SocketAddr>().ok();
    let strings = |v: &Value| -> Option<Vec<String>> {
        v.as_array()?
            .iter()
            .map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    let l = &v["launch"];
    let launch = Launch {
        program: PathBuf::from(l["program"].as_str()?),
        args: strings(&l["args"])?,
        env: l["env"]
            .as_array()?
            .iter()
            .map(|kv| Some((kv[0].as_str()?.to_owned(), kv[1].as_str()?.to_owned())))
            .collect::<Option<_>>()?,
        env_remove: strings(&l["env_remove"])?,
    };
    let a = Addrs {
        id: v["id"].as_u64()?,
        role: match v["role"].as_str()? {
            "observer" => Role::Observer,
            _ => Role::Voter,
        },
        client: addr("client")?,
        quorum: addr("quorum")?,
        election: addr("election")?,
        admin: addr("admin"),
        metrics: addr("metrics"),
        observer_master: addr("observer_master"),
    };
    let pid = u32::try_from(v["pid"].as_u64()?).ok()?;
    let m = Member::new(&a, PathBuf::from(v["dir"].as_str()?), launch);
    Some(m.attached(pid, v["start_ticks"].as_u64()?))
}
