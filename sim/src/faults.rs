//! Fault injection: crashes (a kill -9 or a power loss, with what the disk
//! keeps of the commands in flight) and restarts, random partitions, and
//! connection resets, each reported to the peers' transports as the kernel
//! would report it (or not: a crash can be silent). While faults are on each
//! kind schedules its next occurrence; when they stop, the network heals and
//! every peer restarts.

use rand::Rng;

use crate::checker::Violation;
use crate::{Event, World};

impl World {
    pub(crate) fn stop_faults(&mut self) -> Result<(), Violation> {
        self.faults_on = false;
        self.note(|| "faults stop; heal and restart all".into());
        self.net.heal();
        for i in 0..self.nodes.len() {
            if self.nodes[i].peer.is_none() {
                self.start(i)?;
            }
        }
        Ok(())
    }

    /// Tells `to` that its connection to `peer` ended, after everything already
    /// on its way from `peer` (a stream's end follows its data), and before
    /// anything `peer` sends later (which travels on a new connection).
    pub(crate) fn schedule_link_down(&mut self, to: usize, peer: usize) {
        let at = self.net.end_of_stream(&mut self.rng, self.now, peer, to);
        let incarnation = self.nodes[to].incarnation;
        self.schedule(
            at,
            Event::LinkDown {
                to,
                peer,
                incarnation,
            },
        );
    }

    /// Resets the connection between two random peers: what is in flight on it
    /// is lost and both ends are told. A lone peer (a single voter without
    /// observer members, as standalone rzk runs) has no connection to reset.
    pub(crate) fn link_reset(&mut self) -> Result<(), Violation> {
        if !self.faults_on {
            return Ok(());
        }
        let (lo, hi) = self.opts.link_reset_interval_ms;
        let at = self.now + self.rng.random_range(lo..hi);
        self.schedule(at, Event::LinkReset);
        let n = self.nodes.len();
        if n < 2 {
            // Checked after the draws every run makes, so runs of two or more
            // peers draw exactly what they drew before single peers ran.
            return Ok(());
        }
        let a = self.rng.random_range(0..n);
        let b = (a + self.rng.random_range(1..n)) % n;
        let count = self.net.reset_link(a, b);
        let (ia, ib) = (self.nodes[a].id, self.nodes[b].id);
        self.note(|| format!("link {ia:?}-{ib:?} reset ({count} messages lost)"));
        for (to, peer) in [(a, b), (b, a)] {
            if self.nodes[to].peer.is_some() {
                self.schedule_link_down(to, peer);
            }
        }
        Ok(())
    }

    pub(crate) fn crash(&mut self, i: usize) -> Result<(), Violation> {
        if self.faults_on {
            let (lo, hi) = self.opts.crash_interval_ms;
            let at = self.now + self.rng.random_range(lo..hi);
            let node = self.rng.random_range(0..self.nodes.len());
            self.schedule(at, Event::Crash { node });
        }
        if self.nodes[i].peer.is_none() || !self.faults_on {
            return Ok(());
        }
        self.kill(i)?;
        let at = self.now + self.rng.random_range(50..800);
        self.schedule(at, Event::Restart { node: i });
        Ok(())
    }

    /// Stops peer `i` as a kill -9 or a power loss does.
    pub(crate) fn kill(&mut self, i: usize) -> Result<(), Violation> {
        self.report.crashes += 1;
        // A prefix of the commands not yet completed survives; the last surviving
        // append may be torn (only some of its records made it).
        let remains = self.nodes[i].disk.crash(&mut self.rng);
        let (survive, n) = (remains.survivors.len(), remains.issued);
        self.note(|| {
            format!(
                "crash {} ({survive} of {n} unsynced commands survive)",
                i + 1
            )
        });
        for (k, cmd) in remains.survivors.into_iter().enumerate() {
            let keep = if k + 1 == survive {
                remains.torn
            } else {
                usize::MAX
            };
            self.apply_to_disk(i, cmd, keep)?;
        }
        self.harvest(i);
        self.nodes[i].peer = None;
        if self.server.is_some() {
            self.server_kill(i);
        }
        self.relays.drop_relay(i);
        self.notice_crash(i);
        Ok(())
    }

    /// The peers that can reach crashed `i` learn of it from their transport
    /// (most of the time: a crash can also be silent).
    pub(crate) fn notice_crash(&mut self, i: usize) {
        for j in 0..self.nodes.len() {
            if j == i || self.nodes[j].peer.is_none() || !self.net.reaches(i, j) {
                continue;
            }
            if self.rng.random_bool(self.opts.disconnect_notice) {
                self.schedule_link_down(j, i);
            }
        }
    }

    pub(crate) fn partition(&mut self) -> Result<(), Violation> {
        if !self.faults_on {
            return Ok(());
        }
        self.report.partitions += 1;
        let groups = self.net.partition(&mut self.rng);
        self.note(|| format!("partition {groups:?}"));
        let heal = self.now + self.rng.random_range(100..1500);
        self.schedule(heal, Event::Heal);
        let (lo, hi) = self.opts.partition_gap_ms;
        let next = heal + self.rng.random_range(lo..hi);
        self.schedule(next, Event::Partition);
        Ok(())
    }
}
