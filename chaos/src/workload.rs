//! The workload: processes that each drive one session at a time against the
//! members (through their client proxies), issue register and ephemeral
//! operations one at a time, and record every one of them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rzk_wire::{
    Acl, CreateMode, CreateRequest, DeleteRequest, GetChildrenRequest, GetDataRequest, Request,
    Response, SetDataRequest, SyncRequest,
};
use tokio::sync::watch;

use crate::client::{Answer, CallError, Conn, ConnectError, SessionState};
use rzk_chaos::history::{Call, Op, Outcome, Ret, Time, FINAL_PROCESS, NEVER, UNAVAILABLE};

/// The znode under which everything of a run lives.
pub const ROOT: &str = "/chaos";
/// Registers: `/chaos/r/k{n}`.
pub const REGISTERS: &str = "/chaos/r";
/// Ephemerals of all sessions.
pub const EPHEMERALS: &str = "/chaos/eph";

/// The path of register `key`.
pub fn key_path(key: u32) -> String {
    format!("{REGISTERS}/k{key}")
}

/// Workload settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Concurrent processes (each one session at a time).
    pub processes: u32,
    /// Registers.
    pub keys: u32,
    /// Pause between two operations of a process, ms (uniform in the range).
    pub think_ms: (u64, u64),
    /// How long an operation may wait for its answer before it is indeterminate.
    pub op_timeout: Duration,
    /// The session timeout asked for.
    pub session_timeout_ms: i32,
    /// The run's seed.
    pub seed: u64,
}

/// The shared, append-only history of a run.
pub struct Recorder {
    start: Instant,
    ops: Mutex<Vec<Op>>,
}

impl Recorder {
    /// A recorder whose clock starts now.
    pub fn new() -> Recorder {
        Recorder {
            start: Instant::now(),
            ops: Mutex::new(Vec::new()),
        }
    }

    /// Nanoseconds since the start.
    pub fn now(&self) -> Time {
        self.start.elapsed().as_nanos() as Time
    }

    /// Appends an op (its id is assigned here).
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        process: u32,
        session: i64,
        member: Option<u32>,
        invoke: Time,
        call: Call,
        outcome: Outcome,
        zxid: Option<i64>,
    ) {
        let complete = if outcome.is_info() { NEVER } else { self.now() };
        let mut ops = self.ops.lock().expect("recorder lock");
        let id = ops.len() as u64;
        ops.push(Op {
            id,
            process,
            session,
            member,
            invoke,
            complete,
            call,
            outcome,
            zxid,
        });
    }

    /// The history so far.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().expect("recorder lock").clone()
    }
}

/// Creates the run's znodes (registers at "init", version 0) through `addr`.
pub async fn setup(addr: SocketAddr, keys: u32, timeout_ms: i32) -> Result<()> {
    let mut state = SessionState::default();
    let mut conn = match Conn::connect(addr, &mut state, timeout_ms, Duration::from_secs(10)).await
    {
        Ok(c) => c,
        Err(e) => bail!("setup: connect to {addr}: {e:?}"),
    };
    let mut paths = vec![
        (ROOT.to_string(), ""),
        (REGISTERS.to_string(), ""),
        (EPHEMERALS.to_string(), ""),
    ];
    for k in 0..keys {
        paths.push((key_path(k), rzk_chaos::check::linear::INITIAL_VALUE));
    }
    for (path, data) in paths {
        let req = Request::Create(CreateRequest {
            path: path.clone().into(),
            data: Some(Bytes::from(data.to_string())),
            acl: Acl::open_unsafe(),
            flags: CreateMode::Persistent.as_i32(),
        });
        let answers = conn
            .call(&[req], &mut state, Duration::from_secs(10))
            .await
            .map_err(|e| anyhow::anyhow!("setup: create {path}: {e:?}"))?;
        if let Err(code) = &answers[0].1 {
            bail!("setup: create {path}: {code}");
        }
    }
    let _ = conn
        .call(&[Request::CloseSession], &mut state, Duration::from_secs(5))
        .await;
    Ok(())
}

/// What one operation is, before it runs.
enum Plan {
    Register(Call),
    Create(String),
    Delete(String),
    List,
}

/// One process: runs until `stop` turns true, then closes its session.
pub async fn process(
    p: u32,
    members: Vec<(u32, SocketAddr)>,
    settings: Settings,
    rec: Arc<Recorder>,
    mut stop: watch::Receiver<bool>,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(
        settings.seed ^ (u64::from(p) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
    );
    let mut state = SessionState::default();
    let mut conn: Option<(Conn, u32)> = None;
    let mut seq = 0u64;
    let mut seen_version: HashMap<u32, i32> = HashMap::new();
    let mut ephemerals: Vec<String> = Vec::new();
    while !*stop.borrow() {
        seq += 1;
        let plan = pick(
            &mut rng,
            p,
            seq,
            &settings,
            &seen_version,
            &ephemerals,
            state.id,
        );
        let invoke = rec.now();
        if conn.is_none() {
            let (id, addr) = members[rng.random_range(0..members.len())];
            let resume = state.id;
            match Conn::connect(
                addr,
                &mut state,
                settings.session_timeout_ms,
                Duration::from_secs(2),
            )
            .await
            {
                Ok(c) => {
                    rec.record(
                        p,
                        state.id,
                        Some(id),
                        invoke,
                        Call::Connect { resume },
                        Outcome::Ok(Ret::Session { id: state.id }),
                        None,
                    );
                    conn = Some((c, id));
                }
                Err(ConnectError::Expired) => {
                    rec.record(
                        p,
                        resume,
                        Some(id),
                        invoke,
                        Call::Connect { resume },
                        Outcome::Fail {
                            error: "SESSIONEXPIRED".into(),
                        },
                        None,
                    );
                    state = SessionState::default();
                    ephemerals.clear();
                    continue;
                }
                Err(ConnectError::Failed(_)) => {
                    if let Some(call) = plan_call(&plan) {
                        rec.record(
                            p,
                            state.id,
                            Some(id),
                            invoke,
                            call,
                            Outcome::Fail {
                                error: UNAVAILABLE.into(),
                            },
                            None,
                        );
                    }
                    backoff(&mut rng, &mut stop).await;
                    continue;
                }
            }
        }
        let Some((c, member)) = conn.as_mut() else {
            continue;
        };
        let member = *member;
        let invoke = rec.now();
        let call = plan_call(&plan).expect("every plan has a call");
        let requests = requests_of(&plan);
        let result = c.call(&requests, &mut state, settings.op_timeout).await;
        let (outcome, zxid, drop_conn) = outcome_of(&plan, result);
        match (&plan, &outcome) {
            (
                Plan::Register(Call::Read { key } | Call::SyncRead { key }),
                Outcome::Ok(Ret::Data { version, .. }),
            )
            | (
                Plan::Register(Call::Write { key, .. } | Call::Cas { key, .. }),
                Outcome::Ok(Ret::Version { version }),
            ) => {
                let v = seen_version.entry(*key).or_insert(0);
                *v = (*v).max(*version);
            }
            (Plan::Create(name), Outcome::Ok(_)) => ephemerals.push(name.clone()),
            (Plan::Delete(name), Outcome::Ok(_) | Outcome::Fail { .. }) => {
                ephemerals.retain(|n| n != name)
            }
            _ => {}
        }
        let expired = matches!(&outcome, Outcome::Fail { error } if error == "SESSIONEXPIRED");
        rec.record(p, state.id, Some(member), invoke, call, outcome, zxid);
        if drop_conn || expired {
            conn = None;
        }
        if expired {
            state = SessionState::default();
            ephemerals.clear();
        }
        let think = rng.random_range(settings.think_ms.0..=settings.think_ms.1);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(think)) => {}
            _ = stop.changed() => {}
        }
    }
    // Close the session so that its ephemerals must vanish.
    if let Some((mut c, member)) = conn {
        let invoke = rec.now();
        let result = c
            .call(&[Request::CloseSession], &mut state, settings.op_timeout)
            .await;
        let (outcome, zxid) = match result {
            Ok(a) => match &a[0].1 {
                Ok(_) => (Outcome::Ok(Ret::Unit), Some(a[0].0.as_i64())),
                Err(code) => (
                    Outcome::Fail {
                        error: code.zk_name().into(),
                    },
                    Some(a[0].0.as_i64()),
                ),
            },
            Err(CallError::NotSent(e)) => (
                Outcome::Fail {
                    error: format!("{UNAVAILABLE}: {e}"),
                },
                None,
            ),
            Err(CallError::Lost(e)) => (Outcome::Info { reason: e }, None),
        };
        rec.record(
            p,
            state.id,
            Some(member),
            invoke,
            Call::Close,
            outcome,
            zxid,
        );
    }
}

async fn backoff(rng: &mut ChaCha8Rng, stop: &mut watch::Receiver<bool>) {
    let ms = rng.random_range(10..=30);
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
        _ = stop.changed() => {}
    }
}

fn pick(
    rng: &mut ChaCha8Rng,
    p: u32,
    seq: u64,
    settings: &Settings,
    seen: &HashMap<u32, i32>,
    ephemerals: &[String],
    session: i64,
) -> Plan {
    let key = rng.random_range(0..settings.keys);
    let value = format!("p{p}-{seq}");
    match rng.random_range(0..100) {
        0..25 => Plan::Register(Call::Read { key }),
        25..40 => Plan::Register(Call::SyncRead { key }),
        40..60 => Plan::Register(Call::Write { key, value }),
        60..80 => Plan::Register(Call::Cas {
            key,
            expected: seen.get(&key).copied().unwrap_or(0),
            value,
        }),
        80..87 if session != 0 && ephemerals.len() < 4 => {
            Plan::Create(format!("{session:016x}-{seq}"))
        }
        80..92 if !ephemerals.is_empty() => {
            Plan::Delete(ephemerals[rng.random_range(0..ephemerals.len())].clone())
        }
        _ => Plan::List,
    }
}

fn plan_call(plan: &Plan) -> Option<Call> {
    Some(match plan {
        Plan::Register(c) => c.clone(),
        Plan::Create(name) => Call::CreateEphemeral { name: name.clone() },
        Plan::Delete(name) => Call::DeleteEphemeral { name: name.clone() },
        Plan::List => Call::SyncList,
    })
}

fn requests_of(plan: &Plan) -> Vec<Request> {
    let sync = |path: &str| {
        Request::Sync(SyncRequest {
            path: path.to_string().into(),
        })
    };
    match plan {
        Plan::Register(Call::Read { key }) => vec![get(&key_path(*key))],
        Plan::Register(Call::SyncRead { key }) => vec![sync(&key_path(*key)), get(&key_path(*key))],
        Plan::Register(Call::Write { key, value }) => vec![set(&key_path(*key), value, -1)],
        Plan::Register(Call::Cas {
            key,
            expected,
            value,
        }) => vec![set(&key_path(*key), value, *expected)],
        Plan::Create(name) => vec![Request::Create(CreateRequest {
            path: format!("{EPHEMERALS}/{name}").into(),
            data: Some(Bytes::new()),
            acl: Acl::open_unsafe(),
            flags: CreateMode::Ephemeral.as_i32(),
        })],
        Plan::Delete(name) => vec![Request::Delete(DeleteRequest {
            path: format!("{EPHEMERALS}/{name}").into(),
            version: -1,
        })],
        Plan::List | Plan::Register(_) => vec![
            sync(EPHEMERALS),
            Request::GetChildren(GetChildrenRequest {
                path: EPHEMERALS.to_string().into(),
                watch: false,
            }),
        ],
    }
}

fn get(path: &str) -> Request {
    Request::GetData(GetDataRequest {
        path: path.to_string().into(),
        watch: false,
    })
}

fn set(path: &str, value: &str, version: i32) -> Request {
    Request::SetData(SetDataRequest {
        path: path.to_string().into(),
        data: Some(Bytes::from(value.to_string())),
        version,
    })
}

/// The outcome of a plan's answers, the zxid to record, and whether the
/// connection must be dropped (its state is unknown).
fn outcome_of(plan: &Plan, result: Result<Vec<Answer>, CallError>) -> (Outcome, Option<i64>, bool) {
    let answers = match result {
        Ok(a) => a,
        Err(CallError::NotSent(e)) => {
            return (
                Outcome::Fail {
                    error: format!("{UNAVAILABLE}: {e}"),
                },
                None,
                true,
            )
        }
        Err(CallError::Lost(e)) => return (Outcome::Info { reason: e }, None, true),
    };
    let zxid = answers.last().map(|a| a.0.as_i64());
    // A failed sync fails the whole sync+read.
    for (_, r) in &answers {
        if let Err(code) = r {
            return (
                Outcome::Fail {
                    error: code.zk_name().into(),
                },
                zxid,
                false,
            );
        }
    }
    let last = answers.into_iter().last().map(|a| a.1);
    let ret = match (plan, last) {
        (
            Plan::Register(Call::Read { .. } | Call::SyncRead { .. }),
            Some(Ok(Response::GetData(d))),
        ) => Ret::Data {
            value: String::from_utf8_lossy(d.data.as_deref().unwrap_or_default()).into_owned(),
            version: d.stat.version,
        },
        (Plan::Register(Call::Write { .. } | Call::Cas { .. }), Some(Ok(Response::Stat(stat)))) => {
            Ret::Version {
                version: stat.version,
            }
        }
        (Plan::Create(_) | Plan::Delete(_), Some(Ok(_))) => Ret::Unit,
        (Plan::List, Some(Ok(Response::GetChildren(c)))) => Ret::Names {
            names: c.children.iter().map(|n| n.to_string()).collect(),
        },
        (_, other) => {
            return (
                Outcome::Info {
                    reason: format!("unexpected answer {other:?}"),
                },
                zxid,
                true,
            );
        }
    };
    (Outcome::Ok(ret), zxid, false)
}

/// After heal: on every member, one session that reads every register and
/// lists the ephemerals after `sync`, retrying the connection for up to
/// `limit`. Everything is recorded as the checker's final process.
pub async fn final_reads(
    members: Vec<(u32, SocketAddr)>,
    keys: u32,
    timeout_ms: i32,
    rec: Arc<Recorder>,
    limit: Duration,
) {
    for (id, addr) in members {
        let deadline = Instant::now() + limit;
        let mut state = SessionState::default();
        let mut last_error = String::new();
        let conn = loop {
            match Conn::connect(addr, &mut state, timeout_ms, Duration::from_secs(2)).await {
                Ok(c) => break Some(c),
                Err(e) if Instant::now() < deadline => {
                    last_error = e.to_string();
                    state = SessionState::default();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => {
                    last_error = e.to_string();
                    break None;
                }
            }
        };
        let mut plans: Vec<Plan> = (0..keys)
            .map(|key| Plan::Register(Call::SyncRead { key }))
            .collect();
        plans.push(Plan::List);
        let Some(mut conn) = conn else {
            for plan in &plans {
                let call = plan_call(plan).expect("call");
                rec.record(
                    FINAL_PROCESS,
                    0,
                    Some(id),
                    rec.now(),
                    call,
                    Outcome::Fail {
                        error: format!("{UNAVAILABLE}: no session within {limit:?}: {last_error}"),
                    },
                    None,
                );
            }
            continue;
        };
        for plan in &plans {
            let invoke = rec.now();
            let result = conn
                .call(&requests_of(plan), &mut state, Duration::from_secs(10))
                .await;
            let (outcome, zxid, _) = outcome_of(plan, result);
            rec.record(
                FINAL_PROCESS,
                state.id,
                Some(id),
                invoke,
                plan_call(plan).expect("call"),
                outcome,
                zxid,
            );
        }
        let _ = conn
            .call(&[Request::CloseSession], &mut state, Duration::from_secs(5))
            .await;
    }
}
