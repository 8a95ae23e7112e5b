//! The chaos config: how to start, probe and configure the members of one
//! kind of ensemble (see `chaos/configs/*.toml` and `chaos/README.md`).
//!
//! Templates are strings with placeholders, filled per member:
//! `{id}`, `{dir}` (the member's work directory), `{data_dir}`, `{client_port}`
//! (the port the member itself listens on), `{port.NAME}` for each of
//! `peer_ports`, `{server_lines}` (one `server_line` per member, see below),
//! `{host}` (127.0.0.1), and `{env.VAR}` for an environment variable.
//!
//! `server_line` is filled once per peer for each member's own config: `{peer}`
//! is the peer's id, `{port.NAME}` its port, `{client_port}` its client port.
//! For the member itself the ports are its real ones (it binds them); for
//! every other peer they are the ports of this member's proxies to that peer,
//! so every quorum link crosses a proxy the nemesis can cut.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// One ensemble kind.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// A name for reports ("zookeeper-3.8", "rzk").
    pub name: String,
    /// Number of members.
    pub members: u32,
    /// Named peer ports each member listens on (for example quorum and election).
    pub peer_ports: Vec<String>,
    /// The line describing one peer in a member's config (placeholders above).
    pub server_line: String,
    /// The command that runs one member in the foreground (argv templates).
    pub start: Vec<String>,
    /// The member's data directory (template).
    pub data_dir: String,
    /// Files written before each start (templates for path and content).
    #[serde(default)]
    pub files: Vec<FileTemplate>,
    /// Environment variables for the member processes (templates).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The four-letter word that tells a member's role, and the text a
    /// leader's answer contains.
    pub probe: Probe,
    /// The session timeout the workload asks for, in ms.
    #[serde(default = "default_session_timeout_ms")]
    pub session_timeout_ms: i32,
}

fn default_session_timeout_ms() -> i32 {
    10_000
}

/// A file written into a member's directory before it starts.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileTemplate {
    /// Path template.
    pub path: String,
    /// Content template.
    pub content: String,
}

/// How the role of a member is asked for.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Probe {
    /// The four-letter word (for example "srvr").
    pub word: String,
    /// Text in the answer of a member that serves (for example "Mode: ").
    pub serving: String,
    /// Text in the answer of the leader (for example "Mode: leader").
    pub leader: String,
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading chaos config {}", path.display()))?;
        let cfg: Config = toml::from_str(&text)
            .with_context(|| format!("parsing chaos config {}", path.display()))?;
        if cfg.members == 0 || cfg.members > 9 {
            bail!(
                "{}: members must be 1..=9, not {}",
                path.display(),
                cfg.members
            );
        }
        if cfg.start.is_empty() {
            bail!("{}: start must name a command", path.display());
        }
        if cfg.probe.word.len() != 4 {
            bail!("{}: probe.word must be a four-letter word", path.display());
        }
        Ok(cfg)
    }
}

/// Fills `{name}` placeholders from `vars` and `{env.VAR}` from the
/// environment; `{{` is a literal `{`; an unknown placeholder is an error
/// naming it.
pub fn fill(template: &str, vars: &BTreeMap<String, String>) -> Result<String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        // "{{" is a literal '{'.
        if let Some(literal) = after.strip_prefix('{') {
            out.push('{');
            rest = literal;
            continue;
        }
        let Some(end) = after.find('}') else {
            bail!("unclosed '{{' in template {template:?}");
        };
        let name = &after[..end];
        let value = if let Some(var) = name.strip_prefix("env.") {
            std::env::var(var).with_context(|| format!("template needs ${var}"))?
        } else {
            vars.get(name)
                .cloned()
                .with_context(|| format!("unknown placeholder {{{name}}} in {template:?}"))?
        };
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_replaces_placeholders_and_names_unknown_ones() {
        let mut vars = BTreeMap::new();
        vars.insert("id".to_string(), "2".to_string());
        vars.insert("port.quorum".to_string(), "4000".to_string());
        assert_eq!(
            fill("server.{id}=h:{port.quorum}", &vars).unwrap(),
            "server.2=h:4000"
        );
        assert_eq!(fill("%d{{ISO8601} {id}", &vars).unwrap(), "%d{ISO8601} 2");
        let err = fill("{nope}", &vars).unwrap_err().to_string();
        assert!(err.contains("{nope}"), "{err}");
    }

    #[test]
    fn the_shipped_configs_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                Config::load(&path).unwrap();
            }
        }
    }
}
