//! A recorded history: every operation a workload client invoked, with its
//! invocation and completion time and what came back.
//!
//! Times are nanoseconds since the start of the run, from one monotonic clock
//! shared by every client of the run. An operation whose outcome is unknown
//! (connection lost, timed out) is *indeterminate*: it may or may not have
//! taken effect, at any time after its invocation, so its completion is
//! [`NEVER`]. Histories are stored as JSON lines (one [`Op`] per line) so that a
//! run can be checked again with `rzk-chaos check`.

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

/// Nanoseconds since the start of the run.
pub type Time = u64;

/// The completion time of an indeterminate operation: it may take effect at
/// any time after its invocation.
pub const NEVER: Time = u64::MAX;

/// The workload slot a session belongs to for [`Op::process`] of the final
/// reads the checker itself issues once the ensemble healed.
pub const FINAL_PROCESS: u32 = u32::MAX;

/// What a client asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "f", rename_all = "kebab-case")]
pub enum Call {
    /// getData of register `key` (sequentially consistent in ZooKeeper: may be stale).
    Read {
        /// The register.
        key: u32,
    },
    /// sync then getData of register `key` on the same connection (I6b: must be
    /// linearizable).
    SyncRead {
        /// The register.
        key: u32,
    },
    /// setData with version -1.
    Write {
        /// The register.
        key: u32,
        /// The value written; unique in the run.
        value: String,
    },
    /// setData with the version this session last saw.
    Cas {
        /// The register.
        key: u32,
        /// The version the write is conditional on.
        expected: i32,
        /// The value written; unique in the run.
        value: String,
    },
    /// create of an ephemeral node owned by the calling session.
    CreateEphemeral {
        /// The node's name (under the ephemerals parent).
        name: String,
    },
    /// delete of one of the calling session's ephemerals.
    DeleteEphemeral {
        /// The node's name.
        name: String,
    },
    /// sync then getChildren of the ephemerals parent.
    SyncList,
    /// A (re)connect with an existing session (`resume` != 0) or a new one.
    Connect {
        /// The session resumed, 0 for a new session.
        resume: i64,
    },
    /// closeSession.
    Close,
}

impl Call {
    /// The register this call touches, if it is a register operation.
    pub fn key(&self) -> Option<u32> {
        match self {
            Call::Read { key }
            | Call::SyncRead { key }
            | Call::Write { key, .. }
            | Call::Cas { key, .. } => Some(*key),
            Call::CreateEphemeral { .. }
            | Call::DeleteEphemeral { .. }
            | Call::SyncList
            | Call::Connect { .. }
            | Call::Close => None,
        }
    }

    /// Whether the call changes the register (write or CAS).
    pub fn is_register_write(&self) -> bool {
        matches!(self, Call::Write { .. } | Call::Cas { .. })
    }

    /// A short name for tables.
    pub fn name(&self) -> &'static str {
        match self {
            Call::Read { .. } => "read",
            Call::SyncRead { .. } => "sync-read",
            Call::Write { .. } => "write",
            Call::Cas { .. } => "cas",
            Call::CreateEphemeral { .. } => "create-ephemeral",
            Call::DeleteEphemeral { .. } => "delete-ephemeral",
            Call::SyncList => "sync-list",
            Call::Connect { .. } => "connect",
            Call::Close => "close",
        }
    }
}

/// What came back for a call that succeeded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "r", rename_all = "kebab-case")]
pub enum Ret {
    /// No data (create, delete, close).
    Unit,
    /// A register read: its value and version.
    Data {
        /// The value read.
        value: String,
        /// The znode's data version.
        version: i32,
    },
    /// A register write: the version it produced.
    Version {
        /// The znode's new data version.
        version: i32,
    },
    /// The ephemerals parent's children.
    Names {
        /// Child names.
        names: Vec<String>,
    },
    /// A connect: the session id the server gave.
    Session {
        /// The session id.
        id: i64,
    },
}

/// How an operation ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "o", rename_all = "kebab-case")]
pub enum Outcome {
    /// The server acknowledged it.
    Ok(Ret),
    /// Definitely not applied: a server error reply (BADVERSION, ...), or the
    /// request was never sent (no connection: `error` is "unavailable").
    Fail {
        /// The server's error name, or "unavailable".
        error: String,
    },
    /// Unknown: connection lost or timed out after the request may have left.
    Info {
        /// Why the outcome is unknown.
        reason: String,
    },
}

/// The error of a [`Outcome::Fail`] for a request that never left the client.
pub const UNAVAILABLE: &str = "unavailable";

impl Outcome {
    /// True for [`Outcome::Ok`].
    pub fn is_ok(&self) -> bool {
        matches!(self, Outcome::Ok(_))
    }

    /// True for [`Outcome::Info`].
    pub fn is_info(&self) -> bool {
        matches!(self, Outcome::Info { .. })
    }

    /// The server error of a [`Outcome::Fail`] (not "unavailable").
    pub fn server_error(&self) -> Option<&str> {
        match self {
            Outcome::Fail { error } if error != UNAVAILABLE => Some(error),
            Outcome::Ok(_) | Outcome::Fail { .. } | Outcome::Info { .. } => None,
        }
    }
}

/// One operation of the history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// Index in the history (unique).
    pub id: u64,
    /// The workload slot (one operation at a time per slot); [`FINAL_PROCESS`]
    /// for the checker's final reads.
    pub process: u32,
    /// The ZooKeeper session the call was made in (0 if none).
    pub session: i64,
    /// The member the connection was to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<u32>,
    /// When the client started the call.
    pub invoke: Time,
    /// When the answer arrived; [`NEVER`] for an indeterminate operation.
    pub complete: Time,
    /// What was asked.
    pub call: Call,
    /// What came back.
    pub outcome: Outcome,
    /// The zxid of the reply header, when there was a reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zxid: Option<i64>,
}

impl Op {
    /// One line of text for reports: `#id p3 s0x.. m2 [t0, t1] write k1 "v" -> ok v=3`.
    pub fn describe(&self) -> String {
        let end = if self.complete == NEVER {
            "?".to_string()
        } else {
            format!("{:.3}", self.complete as f64 / 1e9)
        };
        let who = if self.process == FINAL_PROCESS {
            "final".to_string()
        } else {
            format!("p{}", self.process)
        };
        let member = self.member.map(|m| format!(" m{m}")).unwrap_or_default();
        let call = match &self.call {
            Call::Read { key } => format!("read k{key}"),
            Call::SyncRead { key } => format!("sync-read k{key}"),
            Call::Write { key, value } => format!("write k{key} {value:?}"),
            Call::Cas {
                key,
                expected,
                value,
            } => format!("cas k{key} if v={expected} {value:?}"),
            Call::CreateEphemeral { name } => format!("create-ephemeral {name}"),
            Call::DeleteEphemeral { name } => format!("delete-ephemeral {name}"),
            Call::SyncList => "sync-list".into(),
            Call::Connect { resume } => format!("connect resume={resume:#x}"),
            Call::Close => "close".into(),
        };
        let outcome = match &self.outcome {
            Outcome::Ok(Ret::Unit) => "ok".into(),
            Outcome::Ok(Ret::Data { value, version }) => format!("ok {value:?} v={version}"),
            Outcome::Ok(Ret::Version { version }) => format!("ok v={version}"),
            Outcome::Ok(Ret::Names { names }) => format!("ok {names:?}"),
            Outcome::Ok(Ret::Session { id }) => format!("ok session {id:#x}"),
            Outcome::Fail { error } => format!("fail {error}"),
            Outcome::Info { reason } => format!("unknown ({reason})"),
        };
        format!(
            "#{} {who} s{:#x}{member} [{:.3}, {end}] {call} -> {outcome}",
            self.id,
            self.session,
            self.invoke as f64 / 1e9
        )
    }
}

/// Writes `ops` as JSON lines.
pub fn write_jsonl(ops: &[Op], out: &mut dyn Write) -> std::io::Result<()> {
    for op in ops {
        serde_json::to_writer(&mut *out, op)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// Reads JSON lines written by [`write_jsonl`]; a bad line is an error naming it.
pub fn read_jsonl(input: &mut dyn BufRead) -> std::io::Result<Vec<Op>> {
    let mut ops = Vec::new();
    for (n, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let op = serde_json::from_str(&line).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("history line {}: {e}", n + 1),
            )
        })?;
        ops.push(op);
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonl_round_trips_every_kind_of_op() {
        let ops = vec![
            Op {
                id: 0,
                process: 1,
                session: 0x100,
                member: Some(2),
                invoke: 5,
                complete: 9,
                call: Call::Cas {
                    key: 3,
                    expected: 1,
                    value: "p1-4".into(),
                },
                outcome: Outcome::Ok(Ret::Version { version: 2 }),
                zxid: Some(0x1_0000_0004),
            },
            Op {
                id: 1,
                process: FINAL_PROCESS,
                session: 0,
                member: None,
                invoke: 10,
                complete: NEVER,
                call: Call::SyncList,
                outcome: Outcome::Info {
                    reason: "timeout".into(),
                },
                zxid: None,
            },
        ];
        let mut buf = Vec::new();
        write_jsonl(&ops, &mut buf).unwrap();
        let back = read_jsonl(&mut buf.as_slice()).unwrap();
        assert_eq!(back, ops);
    }

    #[test]
    fn a_bad_line_is_an_error_naming_it() {
        let err = read_jsonl(&mut "{}\n".as_bytes()).unwrap_err();
        assert!(err.to_string().contains("history line 1"), "{err}");
    }
}
