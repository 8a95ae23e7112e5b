//! The nemesis: faults on a seeded schedule.
//!
//! `mixed` picks, after a quiet spell of 3–5 s, one of the enabled faults:
//! kill -9 of a random member or of the leader (restarted after 2–5 s),
//! SIGSTOP of a random member or the leader for 2–4 s, a partition of a random
//! member or of the leader from the others for 5–10 s, a full disk on one
//! member for 8–12 s, or a combination (leader killed while another member is
//! cut off). `isolate` (not in `mixed`) also cuts a member's clients off.
//! `failover` kills the leader every 10 s and restarts it 2 s later.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::Mutex;

use crate::cluster::Cluster;
use crate::workload::Recorder;
use rzk_chaos::history::Time;

/// One kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// kill -9 of a random member, restart after 2–5 s.
    Kill,
    /// kill -9 of the leader, restart after 2–5 s.
    KillLeader,
    /// SIGSTOP of a random member for 2–4 s.
    Pause,
    /// SIGSTOP of the leader for 2–4 s.
    PauseLeader,
    /// A random member cut off from the others for 5–10 s.
    Partition,
    /// The leader cut off from its followers for 5–10 s.
    PartitionLeader,
    /// A member's disk filled for 8–12 s.
    DiskFull,
    /// The leader killed while another member is cut off (5 s).
    KillLeaderAndPartition,
    /// A random member cut off from the others *and* from its clients for 5–10 s
    /// (its clients' requests wait unanswered until they time out).
    Isolate,
}

impl Fault {
    /// Its name in schedules and reports.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::KillLeader => "kill-leader",
            Fault::Pause => "pause",
            Fault::PauseLeader => "pause-leader",
            Fault::Partition => "partition",
            Fault::PartitionLeader => "partition-leader",
            Fault::DiskFull => "disk-full",
            Fault::KillLeaderAndPartition => "kill-leader+partition",
            Fault::Isolate => "isolate",
        }
    }

    const ALL: [Fault; 9] = [
        Fault::Kill,
        Fault::KillLeader,
        Fault::Pause,
        Fault::PauseLeader,
        Fault::Partition,
        Fault::PartitionLeader,
        Fault::DiskFull,
        Fault::KillLeaderAndPartition,
        Fault::Isolate,
    ];
}

impl FromStr for Fault {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Fault> {
        for f in Fault::ALL {
            if f.name() == s {
                return Ok(f);
            }
        }
        bail!(
            "unknown fault {s:?}; known: {}",
            Fault::ALL.map(|f| f.name()).join(", ")
        )
    }
}

/// A schedule: which faults, and how.
#[derive(Clone, Debug)]
pub enum Schedule {
    /// No faults.
    None,
    /// Random faults from the list, one at a time.
    Mixed(Vec<Fault>),
    /// kill -9 of the leader every 10 s.
    Failover,
}

impl FromStr for Schedule {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Schedule> {
        Ok(match s {
            "none" => Schedule::None,
            "failover" => Schedule::Failover,
            "mixed" => Schedule::Mixed(vec![
                Fault::Kill,
                Fault::KillLeader,
                Fault::Pause,
                Fault::PauseLeader,
                Fault::Partition,
                Fault::PartitionLeader,
                Fault::KillLeaderAndPartition,
            ]),
            list => Schedule::Mixed(list.split(',').map(str::parse).collect::<Result<_>>()?),
        })
    }
}

/// A period during which a fault was active.
#[derive(Clone, Debug)]
pub struct Phase {
    /// The fault's name.
    pub fault: &'static str,
    /// Member(s) it hit.
    pub members: Vec<u32>,
    /// When it started.
    pub start: Time,
    /// When it was undone.
    pub end: Time,
}

/// What the nemesis did.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// Every fault, in order.
    pub phases: Vec<Phase>,
    /// When a killed leader was dead (for the failover figure): after the
    /// kill returned (SIGKILL sent, the process reaped, its proxies closed),
    /// not before the signal. Timed from before the signal, a write the old
    /// leader committed in the moment before it died counted as the first
    /// write after failover (rzk: 8–20 ms "failovers" in the old epoch).
    pub leader_kills: Vec<Time>,
    /// Notes (disk-full log lines, failures to act).
    pub notes: Vec<String>,
}

/// Runs `schedule` until `duration` has passed since it began, then heals.
pub async fn run(
    cluster: Arc<Mutex<Cluster>>,
    schedule: Schedule,
    duration: Duration,
    seed: u64,
    rec: Arc<Recorder>,
) -> Result<Timeline> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6e65_6d65_7369_7321);
    let mut tl = Timeline::default();
    let end = rec.now() + duration.as_nanos() as Time;
    let members: Vec<u32> = cluster.lock().await.members.iter().map(|m| m.id).collect();
    match schedule {
        Schedule::None => sleep_until(&rec, end).await,
        Schedule::Failover => {
            let mut next = rec.now() + 10_000_000_000;
            while next < end {
                sleep_until(&rec, next).await;
                let mut c = cluster.lock().await;
                let Some(leader) = c.leader().await else {
                    tl.notes
                        .push(format!("{:.1}s: no leader to kill", secs(rec.now())));
                    next += 10_000_000_000;
                    continue;
                };
                let start = rec.now();
                c.kill(leader).await?;
                tl.leader_kills.push(rec.now());
                drop(c);
                sleep_for(2000).await;
                cluster.lock().await.start(leader)?;
                tl.phases.push(Phase {
                    fault: "kill-leader",
                    members: vec![leader],
                    start,
                    end: rec.now(),
                });
                next += 10_000_000_000;
            }
            sleep_until(&rec, end).await;
        }
        Schedule::Mixed(faults) => {
            if faults.is_empty() {
                bail!("an empty fault list");
            }
            loop {
                sleep_for(rng.random_range(3000..=5000)).await;
                if rec.now() >= end {
                    break;
                }
                let fault = faults[rng.random_range(0..faults.len())];
                apply(&cluster, fault, &members, &mut rng, &rec, &mut tl).await?;
            }
        }
    }
    let mut c = cluster.lock().await;
    c.heal()?;
    for &id in &members {
        c.free_disk(id).ok();
        if !c.is_running(id) {
            c.start(id)?;
        }
    }
    Ok(tl)
}

fn secs(t: Time) -> f64 {
    t as f64 / 1e9
}

async fn sleep_for(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

async fn sleep_until(rec: &Recorder, t: Time) {
    let now = rec.now();
    if t > now {
        tokio::time::sleep(Duration::from_nanos(t - now)).await;
    }
}

async fn apply(
    cluster: &Arc<Mutex<Cluster>>,
    fault: Fault,
    members: &[u32],
    rng: &mut ChaCha8Rng,
    rec: &Recorder,
    tl: &mut Timeline,
) -> Result<()> {
    let random = members[rng.random_range(0..members.len())];
    let leader = cluster.lock().await.leader().await;
    let target = match fault {
        Fault::KillLeader
        | Fault::PauseLeader
        | Fault::PartitionLeader
        | Fault::KillLeaderAndPartition => match leader {
            Some(l) => l,
            None => {
                tl.notes.push(format!(
                    "{:.1}s: {}: no leader, used member {random}",
                    secs(rec.now()),
                    fault.name()
                ));
                random
            }
        },
        Fault::Kill | Fault::Pause | Fault::Partition | Fault::DiskFull | Fault::Isolate => random,
    };
    let others: Vec<u32> = members.iter().copied().filter(|&m| m != target).collect();
    let start = rec.now();
    let mut hit = vec![target];
    match fault {
        Fault::Kill | Fault::KillLeader => {
            cluster.lock().await.kill(target).await?;
            if fault == Fault::KillLeader && leader == Some(target) {
                tl.leader_kills.push(rec.now());
            }
            sleep_for(rng.random_range(2000..=5000)).await;
            cluster.lock().await.start(target)?;
        }
        Fault::Pause | Fault::PauseLeader => {
            cluster.lock().await.pause(target, true)?;
            sleep_for(rng.random_range(2000..=4000)).await;
            cluster.lock().await.pause(target, false)?;
        }
        Fault::Partition | Fault::PartitionLeader => {
            cluster.lock().await.partition(target, &others, false);
            sleep_for(rng.random_range(5000..=10000)).await;
            cluster.lock().await.partition(target, &others, true);
        }
        Fault::Isolate => {
            {
                let c = cluster.lock().await;
                c.partition(target, &others, false);
                c.client_link(target, false);
            }
            sleep_for(rng.random_range(5000..=10000)).await;
            let c = cluster.lock().await;
            c.partition(target, &others, true);
            c.client_link(target, true);
        }
        Fault::DiskFull => {
            let bytes = cluster.lock().await.fill_disk(target)?;
            tl.notes.push(format!(
                "{:.1}s: member {target}'s disk filled ({} MiB of ballast)",
                secs(start),
                bytes >> 20
            ));
            sleep_for(rng.random_range(8000..=12000)).await;
            cluster.lock().await.free_disk(target)?;
        }
        Fault::KillLeaderAndPartition => {
            let cut = others[rng.random_range(0..others.len())];
            let rest: Vec<u32> = members.iter().copied().filter(|&m| m != cut).collect();
            hit.push(cut);
            let mut c = cluster.lock().await;
            c.partition(cut, &rest, false);
            c.kill(target).await?;
            if leader == Some(target) {
                tl.leader_kills.push(rec.now());
            }
            drop(c);
            sleep_for(5000).await;
            let mut c = cluster.lock().await;
            c.start(target)?;
            c.partition(cut, &rest, true);
        }
    }
    tl.phases.push(Phase {
        fault: fault.name(),
        members: hit,
        start,
        end: rec.now(),
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_parse_and_unknown_faults_are_named() {
        assert!(matches!(
            "failover".parse::<Schedule>().unwrap(),
            Schedule::Failover
        ));
        match "kill,isolate".parse::<Schedule>().unwrap() {
            Schedule::Mixed(f) => assert_eq!(f, vec![Fault::Kill, Fault::Isolate]),
            other => panic!("{other:?}"),
        }
        for f in Fault::ALL {
            assert_eq!(f.name().parse::<Fault>().unwrap(), f);
        }
        let err = "kill,nope".parse::<Schedule>().unwrap_err().to_string();
        assert!(
            err.contains("nope") && err.contains("partition-leader"),
            "{err}"
        );
    }
}
