//! A simulated network between the nodes of a world, generic over the
//! messages it carries.
//!
//! Nodes are indices `0..n`. Each directed link is FIFO, like the gRPC
//! stream it stands for, unless a fault reorders a message. While faults are
//! on, a message may be lost, delayed, reordered or duplicated, with the
//! probabilities of [`LinkFaults`]; when they are off, it arrives after the
//! base delay, in order, exactly once. Messages wait in the network until the
//! world takes them ([`Network::pop`]); whether one is delivered is decided
//! on arrival ([`Network::reaches`]), so a partition or a cut made while a
//! message is on its way drops it.
//!
//! Two ways to disconnect nodes: random two-sided partitions
//! ([`Network::partition`], [`Network::heal`]), and raft-rs harness style
//! [`Network::cut`], [`Network::isolate`], [`Network::drop`] and
//! [`Network::recover`]. A connection reset ([`Network::reset_link`]) loses
//! what is in flight on one link.
//!
//! Every random choice is drawn from the caller's RNG, in a fixed order, and
//! only for the faults that are on; the network keeps no clock and no RNG of
//! its own. Its deliveries are ordered by simulated time, then by a
//! [`Sequence`] the world shares with its own events, so that the two queues
//! merge into one total order.

use std::collections::{BTreeMap, BTreeSet};

use rand::Rng;

/// The order of everything a world schedules: one counter shared by the
/// world's own events and the network's deliveries, so that two events due at
/// the same simulated time happen in the order they were scheduled, whichever
/// queue holds them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sequence(u64);

impl Sequence {
    /// The next number (the first is 1).
    pub fn take(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

/// Where a scheduled item sits in the total order: its simulated time, then
/// its [`Sequence`] number.
pub type Slot = (u64, u64);

/// A message on its way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet<M> {
    /// The sending node.
    pub from: usize,
    /// The receiving node.
    pub to: usize,
    /// The message.
    pub msg: M,
}

/// What can go wrong on a link while faults are on, and the delays. Times
/// are simulated milliseconds, ranges are `lo..hi`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkFaults {
    /// Probability that a message is lost.
    pub loss: f64,
    /// Probability that a message is delivered twice.
    pub duplicate: f64,
    /// Probability that a message may overtake earlier ones on its link.
    pub reorder: f64,
    /// The delay of every message.
    pub delay_ms: (u64, u64),
    /// Probability of an extra delay (a slow moment of the link).
    pub spike: f64,
    /// The extra delay.
    pub spike_ms: (u64, u64),
    /// How much later a duplicate arrives than its original.
    pub duplicate_gap_ms: (u64, u64),
}

impl LinkFaults {
    /// These loss, duplication and reordering probabilities with the quorum
    /// simulation's delays: 1 to 7 ms, 3% of messages 10 to 59 ms more, a
    /// duplicate up to 19 ms after its original.
    pub fn new(loss: f64, duplicate: f64, reorder: f64) -> LinkFaults {
        LinkFaults {
            loss,
            duplicate,
            reorder,
            delay_ms: (1, 8),
            spike: 0.03,
            spike_ms: (10, 60),
            duplicate_gap_ms: (0, 20),
        }
    }
}

/// The network: links between `n` nodes, and the messages on their way.
#[derive(Clone, Debug)]
pub struct Network<M> {
    /// Fault probabilities and delays.
    faults: LinkFaults,
    /// Partition groups, node → group: a message arrives only within a group.
    group: Vec<u8>,
    /// Directed links cut by hand ([`Network::cut`], [`Network::isolate`]).
    cut: BTreeSet<(usize, usize)>,
    /// Loss probabilities of single directed links set by hand
    /// ([`Network::drop`]), on top of [`LinkFaults::loss`].
    dropping: BTreeMap<(usize, usize), f64>,
    /// The latest delivery time scheduled per directed link (from, to): FIFO
    /// order, and where a stream's end goes ([`Network::end_of_stream`]).
    link_last: BTreeMap<(usize, usize), u64>,
    /// Messages on their way, by arrival.
    in_flight: BTreeMap<Slot, Packet<M>>,
}

impl<M: Clone> Network<M> {
    /// A network of `nodes` nodes, all connected, nothing in flight.
    pub fn new(nodes: usize, faults: LinkFaults) -> Network<M> {
        Network {
            faults,
            group: vec![0; nodes],
            cut: BTreeSet::new(),
            dropping: BTreeMap::new(),
            link_last: BTreeMap::new(),
            in_flight: BTreeMap::new(),
        }
    }

    /// Sends `packet` at `now`. With `faulty`, it may be lost, delayed,
    /// reordered or duplicated; without, nothing but the base delay is drawn.
    /// Returns how many copies are on their way (0: lost).
    pub fn send<R: Rng>(
        &mut self,
        rng: &mut R,
        seq: &mut Sequence,
        now: u64,
        faulty: bool,
        packet: Packet<M>,
    ) -> usize {
        let f = self.faults;
        let link = (packet.from, packet.to);
        if faulty && rng.random_bool(f.loss) {
            return 0;
        }
        if let Some(p) = self.dropping.get(&link) {
            if rng.random_bool(*p) {
                return 0;
            }
        }
        let mut at = now + rng.random_range(f.delay_ms.0..f.delay_ms.1);
        if faulty && rng.random_bool(f.spike) {
            at += rng.random_range(f.spike_ms.0..f.spike_ms.1);
        }
        let reorder = faulty && rng.random_bool(f.reorder);
        let last = self.link_last.entry(link).or_insert(0);
        if !reorder {
            at = at.max(*last);
            *last = at;
        }
        let copies = if faulty && rng.random_bool(f.duplicate) {
            2
        } else {
            1
        };
        for c in 0..copies {
            let gap = rng.random_range(f.duplicate_gap_ms.0..f.duplicate_gap_ms.1);
            self.in_flight
                .insert((at + c * gap, seq.take()), packet.clone());
        }
        copies as usize
    }

    /// When the next message arrives, if one is on its way.
    pub fn next_slot(&self) -> Option<Slot> {
        self.in_flight.keys().next().copied()
    }

    /// Takes the next message to arrive, with its arrival time. Whether it is
    /// delivered is the caller's to ask ([`Network::reaches`]).
    pub fn pop(&mut self) -> Option<(u64, Packet<M>)> {
        self.in_flight
            .pop_first()
            .map(|((at, _), packet)| (at, packet))
    }

    /// Whether a message from `from` arriving now reaches `to`: both are in
    /// one partition group and the link is not cut.
    pub fn reaches(&self, from: usize, to: usize) -> bool {
        self.group[from] == self.group[to] && !self.cut.contains(&(from, to))
    }

    /// When the end of the stream from `from` to `to` (a connection that
    /// ended) reaches `to`, drawn from `now`: after everything already on its
    /// way on that link, and before anything `from` sends later (which
    /// travels on a new connection).
    pub fn end_of_stream<R: Rng>(&mut self, rng: &mut R, now: u64, from: usize, to: usize) -> u64 {
        let at = now + rng.random_range(1..5);
        let last = self.link_last.entry((from, to)).or_insert(0);
        let at = at.max(*last);
        *last = at;
        at
    }

    /// A connection reset between `a` and `b`: what is on its way between
    /// them, either way, is lost. Returns how many messages.
    pub fn reset_link(&mut self, a: usize, b: usize) -> usize {
        let before = self.in_flight.len();
        self.in_flight
            .retain(|_, p| (p.to, p.from) != (a, b) && (p.to, p.from) != (b, a));
        before - self.in_flight.len()
    }

    /// Splits the nodes into two random groups (either may be empty); only
    /// messages within a group arrive. Returns the groups, node → group.
    pub fn partition<R: Rng>(&mut self, rng: &mut R) -> Vec<u8> {
        for g in self.group.iter_mut() {
            *g = rng.random_range(0..2);
        }
        self.group.clone()
    }

    /// Ends a partition: every node is in one group again.
    pub fn heal(&mut self) {
        self.group.iter_mut().for_each(|g| *g = 0);
    }

    /// Cuts the link between `a` and `b`, both ways, until
    /// [`Network::recover`].
    pub fn cut(&mut self, a: usize, b: usize) {
        self.cut.insert((a, b));
        self.cut.insert((b, a));
    }

    /// Cuts every link of `node`.
    pub fn isolate(&mut self, node: usize) {
        for other in 0..self.group.len() {
            if other != node {
                self.cut(node, other);
            }
        }
    }

    /// Loses a message from `from` to `to` with probability `p` (on top of
    /// the link faults, and whether they are on or not), until
    /// [`Network::recover`].
    pub fn drop(&mut self, from: usize, to: usize, p: f64) {
        self.dropping.insert((from, to), p);
    }

    /// Undoes every partition, cut and drop.
    pub fn recover(&mut self) {
        self.heal();
        self.cut.clear();
        self.dropping.clear();
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;

    fn net() -> (Network<u32>, ChaCha8Rng, Sequence) {
        let faults = LinkFaults::new(0.5, 0.5, 0.5);
        (
            Network::new(3, faults),
            ChaCha8Rng::seed_from_u64(7),
            Sequence::default(),
        )
    }

    fn packet(from: usize, to: usize, msg: u32) -> Packet<u32> {
        Packet { from, to, msg }
    }

    /// Everything in flight, in arrival order: (time, from, to, msg).
    fn drain(n: &mut Network<u32>) -> Vec<(u64, usize, usize, u32)> {
        std::iter::from_fn(|| n.pop())
            .map(|(at, p)| (at, p.from, p.to, p.msg))
            .collect()
    }

    #[test]
    fn without_faults_a_link_is_fifo_and_loses_nothing() {
        let (mut n, mut rng, mut seq) = net();
        for m in 0..100 {
            assert_eq!(
                n.send(&mut rng, &mut seq, m as u64 / 10, false, packet(0, 1, m)),
                1
            );
        }
        let got = drain(&mut n);
        let msgs: Vec<u32> = got.iter().map(|g| g.3).collect();
        assert_eq!(msgs, (0..100).collect::<Vec<_>>());
        assert!(got.windows(2).all(|w| w[0].0 <= w[1].0));
        assert!(got
            .iter()
            .all(|g| (1..8).contains(&(g.0 - g.3 as u64 / 10))));
    }

    #[test]
    fn faults_lose_duplicate_and_reorder() {
        let (mut n, mut rng, mut seq) = net();
        let sent: usize = (0..200)
            .map(|m| n.send(&mut rng, &mut seq, 0, true, packet(0, 1, m)))
            .sum();
        let msgs: Vec<u32> = drain(&mut n).iter().map(|g| g.3).collect();
        assert_eq!(msgs.len(), sent);
        assert!(sent < 200 + 100, "some are lost: {sent}");
        let mut unique = msgs.clone();
        unique.sort_unstable();
        unique.dedup();
        assert!(unique.len() < 200, "some are lost");
        assert!(unique.len() < msgs.len(), "some are duplicated");
        assert!(msgs.windows(2).any(|w| w[0] > w[1]), "some are reordered");
    }

    #[test]
    fn a_reset_loses_what_is_in_flight_on_that_link_only() {
        let (mut n, mut rng, mut seq) = net();
        n.send(&mut rng, &mut seq, 0, false, packet(0, 1, 1));
        n.send(&mut rng, &mut seq, 0, false, packet(1, 0, 2));
        n.send(&mut rng, &mut seq, 0, false, packet(0, 2, 3));
        assert_eq!(n.reset_link(1, 0), 2);
        assert_eq!(drain(&mut n).iter().map(|g| g.3).collect::<Vec<_>>(), [3]);
    }

    #[test]
    fn the_end_of_a_stream_follows_its_data() {
        let (mut n, mut rng, mut seq) = net();
        n.send(&mut rng, &mut seq, 0, true, packet(0, 1, 1));
        let data = n.next_slot().map_or(0, |s| s.0);
        assert!(n.end_of_stream(&mut rng, 0, 0, 1) >= data);
        let end = n.end_of_stream(&mut rng, 0, 0, 1);
        n.send(&mut rng, &mut seq, 0, false, packet(0, 1, 2));
        let later = drain(&mut n).last().expect("sent").0;
        assert!(later >= end, "what is sent after the end arrives after it");
    }

    #[test]
    fn partitions_cuts_isolation_and_drops_until_recover() {
        let (mut n, mut rng, mut seq) = net();
        n.cut(0, 1);
        assert!(!n.reaches(0, 1) && !n.reaches(1, 0) && n.reaches(0, 2));
        n.isolate(2);
        assert!(!n.reaches(2, 0) && !n.reaches(1, 2));
        n.drop(1, 0, 1.0);
        assert_eq!(n.send(&mut rng, &mut seq, 0, false, packet(1, 0, 1)), 0);
        n.recover();
        assert!((0..3).all(|a| (0..3).all(|b| n.reaches(a, b))));
        assert_eq!(n.send(&mut rng, &mut seq, 0, false, packet(1, 0, 1)), 1);
        let groups = (0..20)
            .map(|_| n.partition(&mut rng))
            .find(|g| g.iter().any(|x| *x != g[0]))
            .expect("some partition splits the nodes");
        let (a, b) = (
            0,
            groups.iter().position(|g| *g != groups[0]).expect("split"),
        );
        assert!(!n.reaches(a, b) && !n.reaches(b, a));
        n.heal();
        assert!(n.reaches(a, b));
    }
}
