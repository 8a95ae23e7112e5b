//! Linearizability of one register's history: Wing & Gong's search with
//! Lowe's memoisation (the algorithm Porcupine and Knossos' "wgl" use), for a
//! nondeterministic model so that indeterminate operations may take effect or
//! not, with a budget on time and remembered states.
//!
//! The model is a ZooKeeper znode's data with its version: `setData(-1)` sets
//! the value and increments the version (the reply carries the new version),
//! `setData(v)` does the same only if the version is `v` (else BADVERSION), and
//! a `sync`+`getData` reads both. Because versions are in the model, an
//! acknowledged write pins its place in the order, which keeps the search
//! almost linear on real histories.
//!
//! Plain reads are not part of this check: ZooKeeper promises them sequential
//! consistency only (a follower may serve an older value), so they are checked
//! by [`super::direct`] against what that is allowed to mean.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use crate::history::{Call, Op, Outcome, Ret, Time, NEVER};

/// A register's state: the id of its value (an index into the key's value
/// table) and its data version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RegState {
    /// Index into the value table of the key.
    pub value: u32,
    /// The znode's data version.
    pub version: i32,
}

/// One operation as the search sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegOp {
    /// A linearizable read that returned this state.
    Read(RegState),
    /// An acknowledged write (`setData -1`) that produced this state.
    WriteOk(RegState),
    /// A write with unknown outcome, of this value id.
    WriteInfo(u32),
    /// An acknowledged CAS from `expected` that produced this state.
    CasOk {
        /// The version it was conditional on.
        expected: i32,
        /// The state it produced.
        to: RegState,
    },
    /// A CAS that failed with BADVERSION: the version was not `expected`.
    CasBadVersion {
        /// The version it was conditional on.
        expected: i32,
    },
    /// A CAS with unknown outcome.
    CasInfo {
        /// The version it was conditional on.
        expected: i32,
        /// Its value id.
        value: u32,
    },
}

impl RegOp {
    /// The states the register may be in after this operation from `state`
    /// (`None` = unknown, used for windows that start mid-history). Empty if
    /// the operation cannot happen in `state`. Indeterminate operations have
    /// two outcomes: no effect, or their effect.
    fn step(&self, state: Option<RegState>, out: &mut Vec<Option<RegState>>) {
        out.clear();
        match (*self, state) {
            (RegOp::Read(r), Some(s)) => {
                if r == s {
                    out.push(Some(s));
                }
            }
            (RegOp::Read(r), None) => out.push(Some(r)),
            (RegOp::WriteOk(to), Some(s)) => {
                if to.version == s.version.wrapping_add(1) {
                    out.push(Some(to));
                }
            }
            (RegOp::WriteOk(to), None) => out.push(Some(to)),
            (RegOp::WriteInfo(value), Some(s)) => {
                out.push(Some(s));
                out.push(Some(RegState {
                    value,
                    version: s.version.wrapping_add(1),
                }));
            }
            (RegOp::WriteInfo(_), None) => out.push(None),
            (RegOp::CasOk { expected, to }, Some(s)) => {
                if s.version == expected && to.version == expected.wrapping_add(1) {
                    out.push(Some(to));
                }
            }
            (RegOp::CasOk { expected, to }, None) => {
                if to.version == expected.wrapping_add(1) {
                    out.push(Some(to));
                }
            }
            (RegOp::CasBadVersion { expected }, Some(s)) => {
                if s.version != expected {
                    out.push(Some(s));
                }
            }
            (RegOp::CasBadVersion { .. }, None) => out.push(None),
            (RegOp::CasInfo { expected, value }, Some(s)) => {
                out.push(Some(s));
                if s.version == expected {
                    out.push(Some(RegState {
                        value,
                        version: expected.wrapping_add(1),
                    }));
                }
            }
            (RegOp::CasInfo { .. }, None) => out.push(None),
        }
    }
}

/// An operation of the search: the model op and its interval.
#[derive(Clone, Debug)]
pub struct Timed {
    /// The op's index in the caller's list (for reports).
    pub index: usize,
    /// The model operation.
    pub op: RegOp,
    /// Invocation time.
    pub invoke: Time,
    /// Completion time; [`NEVER`] for indeterminate operations.
    pub complete: Time,
}

/// Limits of one search.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Wall-clock time for one search.
    pub time: Duration,
    /// Remembered (linearized set, state) pairs; each costs about n/8 bytes.
    pub states_max: usize,
    /// Bytes the remembered pairs may take (bounds `states_max` for long
    /// histories).
    pub memo_bytes_max: usize,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            time: Duration::from_secs(60),
            states_max: 4_000_000,
            memo_bytes_max: 1 << 30,
        }
    }
}

/// The answer of one search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A linearization exists.
    Linearizable,
    /// None exists.
    NotLinearizable,
    /// The budget ran out first ("could not decide").
    Undecided {
        /// What ran out, and how far the search got.
        why: String,
    },
}

const NIL: usize = usize::MAX;

/// Entries of the doubly linked list of calls and returns (Lowe's "lift").
struct Entries {
    /// For entry e: the op index, and whether it is the call (true) or return.
    op: Vec<usize>,
    is_call: Vec<bool>,
    /// For a call entry: its return entry.
    partner: Vec<usize>,
    next: Vec<usize>,
    prev: Vec<usize>,
    /// The sentinel at index `len - 1`.
    head: usize,
}

impl Entries {
    fn new(ops: &[Timed]) -> Entries {
        // (time, 0 = call before 1 = return at equal times: equal times overlap,
        // which is the permissive reading of a clock tick)
        let mut order: Vec<(Time, u8, usize)> = Vec::with_capacity(ops.len() * 2);
        for (i, o) in ops.iter().enumerate() {
            order.push((o.invoke, 0, i));
            order.push((o.complete, 1, i));
        }
        order.sort_unstable();
        let n = order.len();
        let mut e = Entries {
            op: vec![0; n + 1],
            is_call: vec![false; n + 1],
            partner: vec![NIL; n + 1],
            next: vec![NIL; n + 1],
            prev: vec![NIL; n + 1],
            head: n,
        };
        let mut call_entry = vec![NIL; ops.len()];
        let mut last = e.head;
        for (k, &(_, kind, i)) in order.iter().enumerate() {
            e.op[k] = i;
            e.is_call[k] = kind == 0;
            if kind == 0 {
                call_entry[i] = k;
            } else {
                e.partner[call_entry[i]] = k;
            }
            e.next[last] = k;
            e.prev[k] = last;
            last = k;
        }
        e.next[last] = NIL;
        e
    }

    fn unlink(&mut self, k: usize) {
        let (p, n) = (self.prev[k], self.next[k]);
        self.next[p] = n;
        if n != NIL {
            self.prev[n] = p;
        }
    }

    fn relink(&mut self, k: usize) {
        let (p, n) = (self.prev[k], self.next[k]);
        self.next[p] = k;
        if n != NIL {
            self.prev[n] = k;
        }
    }

    /// Removes a call and its return from the list.
    fn lift(&mut self, call: usize) {
        self.unlink(call);
        self.unlink(self.partner[call]);
    }

    /// Puts them back (the reverse of [`Entries::lift`]).
    fn unlift(&mut self, call: usize) {
        self.relink(self.partner[call]);
        self.relink(call);
    }
}

/// One remembered configuration: the linearized set and the state.
type Remembered = (Box<[u64]>, Option<RegState>);

/// Remembered configurations (which ops are linearized, and the state),
/// bucketed by a hash of both; a lookup allocates nothing.
#[derive(Default)]
struct Memo {
    buckets: HashMap<u64, Vec<Remembered>>,
    len: usize,
}

impl Memo {
    fn key(set_hash: u64, state: Option<RegState>) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        state.hash(&mut h);
        set_hash ^ h.finish()
    }

    /// Inserts a configuration not yet remembered.
    fn insert(&mut self, set_hash: u64, bits: &[u64], state: Option<RegState>) {
        let bucket = self.buckets.entry(Memo::key(set_hash, state)).or_default();
        bucket.push((bits.into(), state));
        self.len += 1;
    }

    fn contains(&self, set_hash: u64, bits: &[u64], state: Option<RegState>) -> bool {
        self.buckets
            .get(&Memo::key(set_hash, state))
            .is_some_and(|bucket| bucket.iter().any(|(b, s)| *s == state && **b == *bits))
    }
}

/// SplitMix64: per-op random keys for the incremental (Zobrist) hash of the
/// linearized set.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Decides whether `ops`, starting from `init` (`None`: unknown), has a
/// linearization. Deterministic: the same input gives the same answer (the
/// time budget aside).
pub fn check(ops: &[Timed], init: Option<RegState>, budget: Budget) -> Verdict {
    let started = Instant::now();
    let mut entries = Entries::new(ops);
    let words = ops.len().div_ceil(64);
    // Each remembered pair: its bit set, the hash, the state, the table's slot.
    let states_max = budget
        .states_max
        .min(budget.memo_bytes_max / (words * 8 + 48).max(1));
    let mut bits = vec![0u64; words];
    let mut hash = 0u64;
    let mut memo = Memo::default();
    // (call entry, state before it, outcome index taken)
    let mut stack: Vec<(usize, Option<RegState>, usize)> = Vec::new();
    let mut state = init;
    let mut outcomes = Vec::with_capacity(2);
    let mut entry = entries.next[entries.head];
    // When set, the call entry `entry` is retried starting at this outcome.
    let mut first_outcome = 0usize;
    let mut steps = 0u64;
    loop {
        if entries.next[entries.head] == NIL {
            return Verdict::Linearizable;
        }
        steps += 1;
        if steps % 4096 == 0 && started.elapsed() > budget.time {
            return Verdict::Undecided {
                why: format!(
                    "time budget of {:?} spent; {} states remembered, {} of {} ops linearized at the deepest point",
                    budget.time,
                    memo.len,
                    stack.len(),
                    ops.len()
                ),
            };
        }
        if entry == NIL {
            // Every remaining entry was tried; only returns can end a scan, so
            // this cannot happen with a well-formed list. Treat as a dead end.
            return Verdict::NotLinearizable;
        }
        if entries.is_call[entry] {
            let i = entries.op[entry];
            ops[i].op.step(state, &mut outcomes);
            let mut taken = None;
            for (c, next_state) in outcomes.iter().enumerate().skip(first_outcome) {
                bits[i / 64] ^= 1 << (i % 64);
                let h = hash ^ mix(i as u64);
                let known = memo.contains(h, &bits, *next_state);
                if !known && memo.len >= states_max {
                    return Verdict::Undecided {
                        why: format!(
                            "state budget of {} spent after {:?}; {} of {} ops linearized at the deepest point",
                            states_max,
                            started.elapsed(),
                            stack.len(),
                            ops.len()
                        ),
                    };
                }
                if !known {
                    memo.insert(h, &bits, *next_state);
                }
                bits[i / 64] ^= 1 << (i % 64);
                if known {
                    continue;
                }
                taken = Some((c, *next_state));
                break;
            }
            first_outcome = 0;
            match taken {
                Some((c, next_state)) => {
                    stack.push((entry, state, c));
                    state = next_state;
                    bits[i / 64] ^= 1 << (i % 64);
                    hash ^= mix(i as u64);
                    entries.lift(entry);
                    entry = entries.next[entries.head];
                }
                None => entry = entries.next[entry],
            }
        } else {
            // A return whose call is not linearized yet: undo the last choice.
            let Some((call, before, c)) = stack.pop() else {
                return Verdict::NotLinearizable;
            };
            let i = entries.op[call];
            state = before;
            bits[i / 64] ^= 1 << (i % 64);
            hash ^= mix(i as u64);
            entries.unlift(call);
            entry = call;
            first_outcome = c + 1;
        }
    }
}

/// The register operations of one key, in the checker's terms.
pub struct KeyHistory {
    /// The model ops with their intervals; `index` points into `sources`.
    pub ops: Vec<Timed>,
    /// The history ops they came from.
    pub sources: Vec<Op>,
    /// Value table: id -> value (id 0 is the initial value).
    pub values: Vec<String>,
}

/// The value every register holds after set-up, at version 0.
pub const INITIAL_VALUE: &str = "init";

impl KeyHistory {
    /// Builds the checker's view of `ops` (all touching one key). Plain reads,
    /// failed reads and writes that definitely failed for a reason other than
    /// BADVERSION are left out: they constrain nothing in this model.
    pub fn build(ops: &[&Op]) -> KeyHistory {
        let mut values = vec![INITIAL_VALUE.to_string()];
        let mut ids = std::collections::HashMap::new();
        ids.insert(INITIAL_VALUE.to_string(), 0u32);
        let mut id_of = |v: &str| -> u32 {
            if let Some(&id) = ids.get(v) {
                return id;
            }
            let id = values.len() as u32;
            values.push(v.to_string());
            ids.insert(v.to_string(), id);
            id
        };
        let mut out = KeyHistory {
            ops: Vec::new(),
            sources: Vec::new(),
            values: Vec::new(),
        };
        for op in ops {
            let reg = match (&op.call, &op.outcome) {
                (Call::SyncRead { .. }, Outcome::Ok(Ret::Data { value, version })) => {
                    RegOp::Read(RegState {
                        value: id_of(value),
                        version: *version,
                    })
                }
                (Call::Write { value, .. }, Outcome::Ok(Ret::Version { version })) => {
                    RegOp::WriteOk(RegState {
                        value: id_of(value),
                        version: *version,
                    })
                }
                (Call::Write { value, .. }, Outcome::Info { .. }) => RegOp::WriteInfo(id_of(value)),
                (
                    Call::Cas {
                        expected, value, ..
                    },
                    Outcome::Ok(Ret::Version { version }),
                ) => RegOp::CasOk {
                    expected: *expected,
                    to: RegState {
                        value: id_of(value),
                        version: *version,
                    },
                },
                (Call::Cas { expected, .. }, Outcome::Fail { error }) if error == "BADVERSION" => {
                    RegOp::CasBadVersion {
                        expected: *expected,
                    }
                }
                (
                    Call::Cas {
                        expected, value, ..
                    },
                    Outcome::Info { .. },
                ) => RegOp::CasInfo {
                    expected: *expected,
                    value: id_of(value),
                },
                _ => continue,
            };
            let complete = if op.outcome.is_info() {
                NEVER
            } else {
                op.complete
            };
            out.ops.push(Timed {
                index: out.sources.len(),
                op: reg,
                invoke: op.invoke,
                complete,
            });
            out.sources.push((*op).clone());
        }
        out.values = values;
        out.resolve_indeterminate(ops);
        out
    }

    /// Narrows indeterminate writes with what the rest of the history shows,
    /// which keeps the search from carrying each of them as an open choice
    /// (the cost of a refutation grows with the number of open choices):
    ///
    /// - a write whose value some read returned took effect (values are unique
    ///   per write), at the version that read saw: it becomes a write that
    ///   must apply, at that version, any time after its invocation;
    /// - a write whose value nobody read can only have produced a version
    ///   nobody saw (a seen version belongs to the write of the value seen
    ///   with it): a *gap* below the highest version seen, or one above it. It
    ///   cannot produce gap `k` if it was invoked after an operation that saw a
    ///   version above `k` completed. Above the highest version it is ordered
    ///   after every operation that saw a version, where only a failed CAS
    ///   that expected exactly the highest version could tell. So a write
    ///   that fits no gap is dropped, unless such a failed CAS exists.
    ///
    /// Both are exact: the history has a linearization iff the narrowed one has.
    fn resolve_indeterminate(&mut self, sources: &[&Op]) {
        let mut seen: std::collections::HashMap<u32, i32> = std::collections::HashMap::new();
        // Version -> earliest completion of a determinate op that saw it.
        let mut seen_at: std::collections::BTreeMap<i32, Time> = std::collections::BTreeMap::new();
        seen_at.insert(0, 0);
        for op in sources {
            let version = match (&op.call, &op.outcome) {
                (
                    Call::Read { .. } | Call::SyncRead { .. },
                    Outcome::Ok(Ret::Data { value, version }),
                ) => {
                    if let Some(id) = self.values.iter().position(|v| v == value) {
                        seen.insert(id as u32, *version);
                    }
                    *version
                }
                (Call::Write { .. } | Call::Cas { .. }, Outcome::Ok(Ret::Version { version })) => {
                    *version
                }
                _ => continue,
            };
            let t = seen_at.entry(version).or_insert(op.complete);
            *t = (*t).min(op.complete);
        }
        let max = seen_at.keys().copied().max().unwrap_or(0);
        // For each gap k: the earliest completion of an op that saw a version above k.
        let mut gaps: Vec<(i32, Time)> = Vec::new();
        let mut earliest_above = Time::MAX;
        for v in (1..=max).rev() {
            match seen_at.get(&v) {
                Some(&t) => earliest_above = earliest_above.min(t),
                None => gaps.push((v, earliest_above)),
            }
        }
        let tail_matters = self
            .ops
            .iter()
            .any(|t| matches!(t.op, RegOp::CasBadVersion { expected } if expected == max));
        let fits = |invoke: Time| tail_matters || gaps.iter().any(|&(_, before)| invoke < before);
        let mut kept = Vec::with_capacity(self.ops.len());
        for mut t in std::mem::take(&mut self.ops) {
            match t.op {
                RegOp::WriteInfo(value) => match seen.get(&value) {
                    Some(&version) => t.op = RegOp::WriteOk(RegState { value, version }),
                    None if !fits(t.invoke) => continue,
                    None => {}
                },
                RegOp::CasInfo { expected, value } => match seen.get(&value) {
                    Some(&version) => {
                        t.op = RegOp::CasOk {
                            expected,
                            to: RegState { value, version },
                        }
                    }
                    None if !fits(t.invoke) => continue,
                    None => {}
                },
                RegOp::Read(_)
                | RegOp::WriteOk(_)
                | RegOp::CasOk { .. }
                | RegOp::CasBadVersion { .. } => {}
            }
            kept.push(t);
        }
        self.ops = kept;
    }

    /// The initial state of every register: [`INITIAL_VALUE`] at version 0.
    pub fn initial_state() -> RegState {
        RegState {
            value: 0,
            version: 0,
        }
    }

    /// The sub-history of the window `[from, to]`: determinate ops that
    /// completed at or after `from'` (see below) and were invoked at or before
    /// `to`, ops still running at `to` turned indeterminate (a read among them
    /// dropped), indeterminate ops invoked by `to` kept. `from'` is lowered
    /// until no dropped op could be ordered after a kept one, and the window
    /// starts in an unknown state; both keep the check sound: if the whole
    /// history is linearizable, so is every window.
    pub fn window(&self, from: Time, to: Time) -> Vec<Timed> {
        let mut start = from;
        loop {
            let lowest = self
                .ops
                .iter()
                .filter(|o| o.complete != NEVER && o.complete >= start && o.invoke <= to)
                .map(|o| o.invoke)
                .min()
                .unwrap_or(start);
            if lowest >= start {
                break;
            }
            start = lowest;
        }
        let mut out = Vec::new();
        for o in &self.ops {
            if o.invoke > to {
                continue;
            }
            if o.complete == NEVER {
                // A write known to apply (its value was read) may apply after
                // the window ends: inside the window it is optional.
                let op = match o.op {
                    RegOp::WriteOk(s) => RegOp::WriteInfo(s.value),
                    RegOp::CasOk { expected, to } => RegOp::CasInfo {
                        expected,
                        value: to.value,
                    },
                    other => other,
                };
                out.push(Timed { op, ..o.clone() });
                continue;
            }
            if o.complete < start {
                continue;
            }
            if o.complete <= to {
                out.push(o.clone());
                continue;
            }
            // Still running at `to`: its outcome is unknown inside the window.
            let op = match o.op {
                RegOp::Read(_) => continue,
                RegOp::WriteOk(s) => RegOp::WriteInfo(s.value),
                RegOp::WriteInfo(v) => RegOp::WriteInfo(v),
                RegOp::CasOk { expected, to } => RegOp::CasInfo {
                    expected,
                    value: to.value,
                },
                RegOp::CasBadVersion { .. } => continue,
                RegOp::CasInfo { expected, value } => RegOp::CasInfo { expected, value },
            };
            out.push(Timed {
                index: o.index,
                op,
                invoke: o.invoke,
                complete: NEVER,
            });
        }
        out
    }
}

/// The result of checking one key.
#[derive(Clone, Debug)]
pub struct KeyVerdict {
    /// The verdict on the whole history of the key.
    pub verdict: Verdict,
    /// For [`Verdict::NotLinearizable`]: the ops of the shortest window found
    /// that is not linearizable on its own (indices into the key's sources).
    pub window: Vec<usize>,
}

/// A cheap refutation tried before the full search, which is slow to refute
/// a history with many open indeterminate writes: a read that began after an
/// operation with a newer version completed. The window from that
/// operation's completion to the read's is checked on its own; if it has no
/// linearization, neither has the whole history (see [`KeyHistory::window`]).
fn stale_read_window(key: &KeyHistory, budget: Budget) -> Option<Vec<usize>> {
    let version_of = |op: &RegOp| match op {
        RegOp::Read(s) | RegOp::WriteOk(s) => Some(s.version),
        RegOp::CasOk { to, .. } => Some(to.version),
        RegOp::WriteInfo(_) | RegOp::CasBadVersion { .. } | RegOp::CasInfo { .. } => None,
    };
    let mut done: Vec<(Time, i32)> = key
        .ops
        .iter()
        .filter(|o| o.complete != NEVER)
        .filter_map(|o| version_of(&o.op).map(|v| (o.complete, v)))
        .collect();
    done.sort_unstable();
    // Newest version completed by each time, with the time it completed.
    let mut newest: Vec<(Time, i32, Time)> = Vec::with_capacity(done.len());
    for (t, v) in done {
        match newest.last() {
            Some(&(_, nv, nt)) if nv >= v => newest.push((t, nv, nt)),
            _ => newest.push((t, v, t)),
        }
    }
    let small = Budget {
        time: budget.time.min(Duration::from_secs(5)),
        ..budget
    };
    for o in &key.ops {
        let RegOp::Read(s) = o.op else { continue };
        let idx = newest.partition_point(|&(t, _, _)| t < o.invoke);
        let Some(&(_, v, since)) = idx.checked_sub(1).and_then(|i| newest.get(i)) else {
            continue;
        };
        if v <= s.version {
            continue;
        }
        let window = key.window(since, o.complete);
        if check(&window, None, small) == Verdict::NotLinearizable {
            let mut ids: Vec<usize> = window.iter().map(|t| t.index).collect();
            ids.sort_unstable();
            ids.dedup();
            return Some(ids);
        }
    }
    None
}

/// Checks a key's history; when it is not linearizable, narrows it to a short
/// window that is not linearizable on its own (the smallest end time, then the
/// latest start time, each by binary search over completion times), within a
/// second time budget; the whole history is the window if that runs out first.
pub fn check_key(key: &KeyHistory, budget: Budget) -> KeyVerdict {
    if let Some(window) = stale_read_window(key, budget) {
        return KeyVerdict {
            verdict: Verdict::NotLinearizable,
            window,
        };
    }
    let verdict = check(&key.ops, Some(KeyHistory::initial_state()), budget);
    if verdict != Verdict::NotLinearizable {
        return KeyVerdict {
            verdict,
            window: Vec::new(),
        };
    }
    let mut ends: Vec<Time> = key
        .ops
        .iter()
        .filter(|o| o.complete != NEVER)
        .map(|o| o.complete)
        .collect();
    ends.sort_unstable();
    ends.dedup();
    // The prefix ends at the last determinate completion, or (only
    // indeterminate ops) at the last invocation.
    let last = key.ops.iter().map(|o| o.invoke).max().unwrap_or(0);
    ends.push(last.max(ends.last().copied().unwrap_or(0)));
    // Narrowing shares one time budget with the search: once it is spent, a
    // window counts as "not shown bad", so the narrowing stops where it got.
    let deadline = Instant::now() + budget.time;
    let bad = |from: Time, to: Time, init: Option<RegState>| {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let b = Budget {
            time: left,
            ..budget
        };
        check(&key.window(from, to), init, b) == Verdict::NotLinearizable
    };
    // Smallest end: prefixes start at the known initial state.
    let (mut lo, mut hi) = (0usize, ends.len() - 1);
    if !bad(0, ends[hi], Some(KeyHistory::initial_state())) {
        return KeyVerdict {
            verdict,
            window: (0..key.sources.len()).collect(),
        };
    }
    while lo < hi {
        let mid = (lo + hi) / 2;
        if bad(0, ends[mid], Some(KeyHistory::initial_state())) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let to = ends[hi];
    // Latest start with an unknown initial state; fall back to the prefix.
    let starts: Vec<Time> = ends.iter().copied().filter(|&t| t <= to).collect();
    let (mut lo, mut hi) = (0usize, starts.len());
    while lo + 1 < hi {
        let mid = (lo + hi) / 2;
        if bad(starts[mid], to, None) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let window_ops = if lo > 0 && bad(starts[lo], to, None) {
        key.window(starts[lo], to)
    } else {
        key.window(0, to)
    };
    let mut window: Vec<usize> = window_ops.iter().map(|t| t.index).collect();
    window.sort_unstable();
    window.dedup();
    KeyVerdict { verdict, window }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(value: u32, version: i32) -> RegState {
        RegState { value, version }
    }

    fn t(index: usize, op: RegOp, invoke: Time, complete: Time) -> Timed {
        Timed {
            index,
            op,
            invoke,
            complete,
        }
    }

    const BUDGET: Budget = Budget {
        time: Duration::from_secs(10),
        states_max: 1_000_000,
        memo_bytes_max: 1 << 30,
    };

    #[test]
    fn sequential_writes_and_reads_are_linearizable() {
        let ops = vec![
            t(0, RegOp::WriteOk(s(1, 1)), 0, 10),
            t(1, RegOp::Read(s(1, 1)), 20, 30),
            t(
                2,
                RegOp::CasOk {
                    expected: 1,
                    to: s(2, 2),
                },
                40,
                50,
            ),
            t(3, RegOp::CasBadVersion { expected: 1 }, 60, 70),
            t(4, RegOp::Read(s(2, 2)), 80, 90),
        ];
        assert_eq!(check(&ops, Some(s(0, 0)), BUDGET), Verdict::Linearizable);
    }

    #[test]
    fn concurrent_ops_may_be_reordered() {
        // The read overlaps the write and sees its effect; the write's reply
        // came later.
        let ops = vec![
            t(0, RegOp::WriteOk(s(1, 1)), 0, 100),
            t(1, RegOp::Read(s(1, 1)), 10, 20),
            t(2, RegOp::Read(s(0, 0)), 5, 15),
        ];
        assert_eq!(check(&ops, Some(s(0, 0)), BUDGET), Verdict::Linearizable);
    }

    #[test]
    fn a_read_going_back_in_time_is_not_linearizable() {
        let ops = vec![
            t(0, RegOp::WriteOk(s(1, 1)), 0, 10),
            t(1, RegOp::Read(s(1, 1)), 20, 30),
            t(2, RegOp::Read(s(0, 0)), 40, 50),
        ];
        assert_eq!(check(&ops, Some(s(0, 0)), BUDGET), Verdict::NotLinearizable);
    }

    #[test]
    fn indeterminate_writes_may_or_may_not_take_effect() {
        // Took effect (its value is read later, after its "completion" is unknown).
        let seen = vec![
            t(0, RegOp::WriteInfo(1), 0, NEVER),
            t(1, RegOp::Read(s(1, 1)), 1000, 1010),
        ];
        assert_eq!(check(&seen, Some(s(0, 0)), BUDGET), Verdict::Linearizable);
        // Did not take effect: a later acknowledged write has version 1.
        let unseen = vec![
            t(0, RegOp::WriteInfo(1), 0, NEVER),
            t(1, RegOp::WriteOk(s(2, 1)), 100, 110),
            t(2, RegOp::Read(s(2, 1)), 200, 210),
        ];
        assert_eq!(check(&unseen, Some(s(0, 0)), BUDGET), Verdict::Linearizable);
        // But it cannot take effect before it was invoked.
        let early = vec![
            t(0, RegOp::Read(s(1, 1)), 0, 10),
            t(1, RegOp::WriteInfo(1), 20, NEVER),
        ];
        assert_eq!(
            check(&early, Some(s(0, 0)), BUDGET),
            Verdict::NotLinearizable
        );
    }

    #[test]
    fn an_acknowledged_cas_needs_its_expected_version() {
        let ops = vec![
            t(0, RegOp::WriteOk(s(1, 1)), 0, 10),
            t(
                1,
                RegOp::CasOk {
                    expected: 0,
                    to: s(2, 1),
                },
                20,
                30,
            ),
        ];
        assert_eq!(check(&ops, Some(s(0, 0)), BUDGET), Verdict::NotLinearizable);
        let bad_version_wrong = vec![t(0, RegOp::CasBadVersion { expected: 0 }, 0, 10)];
        assert_eq!(
            check(&bad_version_wrong, Some(s(0, 0)), BUDGET),
            Verdict::NotLinearizable
        );
    }

    #[test]
    fn the_state_budget_gives_a_clear_undecided() {
        // Many concurrent indeterminate writes, then a read no order explains:
        // with a budget of 10 states the search cannot finish; with a real
        // budget it refutes (with fewer of them: the refutation explores
        // every subset of the open writes).
        let mut ops: Vec<Timed> = (0..12)
            .map(|i| t(i, RegOp::WriteInfo(i as u32 + 1), 0, NEVER))
            .collect();
        ops.push(t(12, RegOp::Read(s(99, 50)), 10, 20));
        let tiny = Budget {
            states_max: 10,
            ..BUDGET
        };
        match check(&ops, Some(s(0, 0)), tiny) {
            Verdict::Undecided { why } => assert!(why.contains("state budget"), "{why}"),
            other => panic!("expected undecided, got {other:?}"),
        }
        let mut fewer: Vec<Timed> = (0..8)
            .map(|i| t(i, RegOp::WriteInfo(i as u32 + 1), 0, NEVER))
            .collect();
        fewer.push(t(8, RegOp::Read(s(99, 50)), 10, 20));
        assert_eq!(
            check(&fewer, Some(s(0, 0)), BUDGET),
            Verdict::NotLinearizable
        );
    }

    #[test]
    fn a_window_of_a_linearizable_history_is_linearizable() {
        // Each op of an unknown start must be explainable from "any state".
        let ops = vec![
            t(0, RegOp::WriteOk(s(1, 1)), 0, 10),
            t(1, RegOp::WriteOk(s(2, 2)), 20, 30),
            t(2, RegOp::WriteInfo(3), 25, NEVER),
            t(3, RegOp::Read(s(3, 3)), 40, 50),
            t(
                4,
                RegOp::CasOk {
                    expected: 3,
                    to: s(4, 4),
                },
                60,
                70,
            ),
        ];
        let key = KeyHistory {
            ops: ops.clone(),
            sources: Vec::new(),
            values: Vec::new(),
        };
        assert_eq!(check(&ops, Some(s(0, 0)), BUDGET), Verdict::Linearizable);
        for from in [0, 10, 30, 50, 70] {
            for to in [10, 30, 50, 70] {
                let w = key.window(from, to);
                assert_eq!(
                    check(&w, None, BUDGET),
                    Verdict::Linearizable,
                    "[{from}, {to}]"
                );
            }
        }
    }
}
