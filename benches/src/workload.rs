//! What each session of a run sends, and what the answers must say.
//!
//! Every session owns its keys (`<ns>/k<session>-<i>`), so that, ZooKeeper
//! answering each session's requests in order, the expected answer of every
//! read is known when the read is sent: the bytes and version of the last
//! write this session sent to that key. [`Expect`] carries that expectation
//! from the writer half to the reader half; [`check`] compares.
//!
//! Paths are built once where the set is known in advance (keys, directories)
//! and otherwise by [`PathBuilder`], which writes digits into a shared buffer
//! instead of going through `format!`.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rzk_wire::{
    Acl, ByteString, CreateMode, CreateRequest, DeleteRequest, ErrorCode, ExistsRequest,
    GetChildrenRequest, GetDataRequest, Id, MultiOp, MultiRequest, MultiResult, OpCode, Perms,
    Request, Response, SetDataRequest,
};

/// How many children each directory of the `children` workload has.
pub const CHILDREN_PER_DIR: u32 = 16;

/// How many creates one op of the `multi` workload holds.
pub const MULTI_CREATES: usize = 10;

/// How many distinct values the pool holds; writes cycle through them so that
/// a read that returns an older value is noticed.
pub const VALUE_VARIANTS: usize = 16;

/// The workloads of `rzk-bench run`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadKind {
    /// create of new persistent znodes.
    Create,
    /// setData on this session's keys.
    Set,
    /// getData on this session's keys.
    Get,
    /// exists on this session's keys.
    Exists,
    /// getChildren of this session's directory.
    Children,
    /// delete of pre-created znodes.
    Delete,
    /// getData with probability --read-ratio, else setData.
    Mixed,
    /// 10% create, 40% setData, 40% getData, 10% delete.
    Mix,
    /// multi of 10 creates.
    Multi,
    /// data watches: one writer, --watchers watching sessions.
    Watch,
    /// connect + closeSession, as fast as possible.
    Storm,
}

impl WorkloadKind {
    /// The name used on the command line and in the JSON output.
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::Create => "create",
            WorkloadKind::Set => "set",
            WorkloadKind::Get => "get",
            WorkloadKind::Exists => "exists",
            WorkloadKind::Children => "children",
            WorkloadKind::Delete => "delete",
            WorkloadKind::Mixed => "mixed",
            WorkloadKind::Mix => "mix",
            WorkloadKind::Multi => "multi",
            WorkloadKind::Watch => "watch",
            WorkloadKind::Storm => "storm",
        }
    }
}

/// One request and what its reply must say.
#[derive(Debug)]
pub struct Op {
    /// The request.
    pub request: Request,
    /// The expectation the reader checks the reply against.
    pub expect: Expect,
}

/// What a reply must say. Every variant names the path, for error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// create: success, and the reply names exactly this path.
    Created {
        /// The path asked for.
        path: ByteString,
    },
    /// setData: success, and the node now has this version and length.
    Written {
        /// The node.
        path: ByteString,
        /// Its version after this write.
        version: i32,
        /// Its data length after this write.
        data_len: i32,
    },
    /// getData: exactly these bytes.
    Data {
        /// The node.
        path: ByteString,
        /// The bytes last written by this run.
        value: Bytes,
        /// The node's version after that write.
        version: i32,
    },
    /// exists: the node exists with this version and data length.
    Exists {
        /// The node.
        path: ByteString,
        /// Its version.
        version: i32,
        /// Its data length.
        data_len: i32,
    },
    /// getChildren: exactly the children `c0` .. `c<count-1>`.
    Children {
        /// The directory.
        path: ByteString,
        /// How many children it has (at most 64).
        count: u32,
    },
    /// delete: success.
    Deleted {
        /// The node.
        path: ByteString,
    },
    /// multi of creates: one create result per path, naming it, in order.
    MultiCreated {
        /// The paths asked for.
        paths: Vec<ByteString>,
    },
    /// closeSession or any request whose body does not matter: success.
    Ok {
        /// The path, if any ("" otherwise).
        path: ByteString,
    },
}

impl Expect {
    /// The path the expectation is about (the first one of a multi).
    pub fn path(&self) -> &str {
        match self {
            Expect::Created { path }
            | Expect::Written { path, .. }
            | Expect::Data { path, .. }
            | Expect::Exists { path, .. }
            | Expect::Children { path, .. }
            | Expect::Deleted { path }
            | Expect::Ok { path } => path,
            Expect::MultiCreated { paths } => paths.first().map(|p| &**p).unwrap_or(""),
        }
    }
}

/// Checks one reply against its expectation. The error message names the
/// operation and the path and says what differed.
pub fn check(
    op: OpCode,
    expect: &Expect,
    result: &Result<Response, ErrorCode>,
) -> Result<(), String> {
    let name = op.zk_name();
    let path = expect.path();
    let response = match result {
        Ok(response) => response,
        Err(code) => {
            return Err(format!(
                "{name} {path}: server answered {code}, expected OK"
            ))
        }
    };
    let wrong = |what: String| Err(format!("{name} {path}: {what}"));
    match (expect, response) {
        (Expect::Created { path }, Response::Create(r)) => {
            if r.path != *path {
                return wrong(format!(
                    "reply names {:?}, expected {:?}",
                    &*r.path, &**path
                ));
            }
        }
        (
            Expect::Written {
                version, data_len, ..
            },
            Response::Stat(stat),
        ) => {
            if stat.version != *version || stat.data_length != *data_len {
                return wrong(format!(
                    "stat says version {} length {}, expected version {version} length {data_len}",
                    stat.version, stat.data_length
                ));
            }
        }
        (Expect::Data { value, version, .. }, Response::GetData(r)) => {
            let got = r.data.as_deref().unwrap_or(&[]);
            if got != &value[..] {
                return wrong(format!(
                    "returned {} bytes starting {:?}, expected the {} bytes starting {:?} last written by this run",
                    got.len(),
                    preview(got),
                    value.len(),
                    preview(value)
                ));
            }
            if r.stat.version != *version {
                return wrong(format!(
                    "stat version {}, expected {version}",
                    r.stat.version
                ));
            }
        }
        (
            Expect::Exists {
                version, data_len, ..
            },
            Response::Stat(stat),
        ) => {
            if stat.version != *version || stat.data_length != *data_len {
                return wrong(format!(
                    "stat says version {} length {}, expected version {version} length {data_len}",
                    stat.version, stat.data_length
                ));
            }
        }
        (Expect::Children { count, .. }, Response::GetChildren(r)) => {
            check_children(&r.children, *count).or_else(wrong)?;
        }
        (Expect::Deleted { .. }, Response::Empty) | (Expect::Ok { .. }, _) => {}
        (Expect::MultiCreated { paths }, Response::Multi(r)) => {
            if r.results.len() != paths.len() {
                return wrong(format!(
                    "{} results, expected {}",
                    r.results.len(),
                    paths.len()
                ));
            }
            for (i, (result, path)) in r.results.iter().zip(paths).enumerate() {
                match result {
                    MultiResult::Create(c) if c.path == *path => {}
                    other => {
                        return wrong(format!(
                            "result {i} is {other:?}, expected the creation of {:?}",
                            &**path
                        ))
                    }
                }
            }
        }
        (expect, response) => {
            return wrong(format!(
                "reply body {response:?} does not fit the request (expected {expect:?})"
            ))
        }
    }
    Ok(())
}

/// At most the first 16 bytes, for messages.
fn preview(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(16)]).into_owned()
}

/// The children must be exactly `c0` .. `c<count-1>`, each once, any order.
fn check_children(children: &[ByteString], count: u32) -> Result<(), String> {
    if children.len() != count as usize {
        return Err(format!("{} children, expected {count}", children.len()));
    }
    let mut seen = 0u64;
    for child in children {
        let index = child
            .strip_prefix('c')
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|i| *i < count && *i < 64);
        let Some(index) = index else {
            return Err(format!("unexpected child {:?}", &**child));
        };
        if seen & (1 << index) != 0 {
            return Err(format!("child {:?} listed twice", &**child));
        }
        seen |= 1 << index;
    }
    Ok(())
}

/// One session's source of requests for the pipelined driver.
pub trait Workload: Send {
    /// The next request, or `None` when this session has nothing more to send.
    fn next_op(&mut self) -> Option<Op>;

    /// True when [`Workload::next_op`] would return `None`; checked before an
    /// operation is taken from a shared op budget, so that a session that has
    /// run out does not use up a unit another session could spend.
    fn exhausted(&self) -> bool {
        false
    }
}

/// [`VALUE_VARIANTS`] distinct values of the run's size; value `v` is
/// `value_bytes` letters starting at `'a' + v`, so two variants differ in
/// every byte.
#[derive(Clone, Debug)]
pub struct ValuePool {
    values: Vec<Bytes>,
}

impl ValuePool {
    /// The pool for values of `value_bytes` bytes.
    pub fn new(value_bytes: usize) -> ValuePool {
        let values = (0..VALUE_VARIANTS)
            .map(|v| {
                (0..value_bytes)
                    .map(|j| b'a' + ((j + v) % 26) as u8)
                    .collect::<Vec<u8>>()
                    .into()
            })
            .collect();
        ValuePool { values }
    }

    /// Variant `v` (modulo the pool size).
    pub fn get(&self, v: usize) -> &Bytes {
        &self.values[v % VALUE_VARIANTS]
    }

    /// The length of every value.
    pub fn value_len(&self) -> i32 {
        self.values[0].len() as i32
    }
}

/// Builds `<prefix><a>-<b>` paths without `format!`: the digits are written
/// into one growing buffer and each path is a frozen slice of it.
#[derive(Debug, Default)]
pub struct PathBuilder {
    buf: BytesMut,
}

impl PathBuilder {
    /// `<prefix><a>` followed by `-<b>` when `b` is given.
    pub fn build(&mut self, prefix: &[u8], a: u64, b: Option<u64>) -> ByteString {
        if self.buf.capacity() < 256 {
            self.buf.reserve(16 * 1024);
        }
        self.buf.put_slice(prefix);
        put_decimal(&mut self.buf, a);
        if let Some(b) = b {
            self.buf.put_u8(b'-');
            put_decimal(&mut self.buf, b);
        }
        let bytes = self.buf.split().freeze();
        ByteString::try_from(bytes).expect("ASCII prefix and digits are UTF-8")
    }
}

/// Appends `n` in decimal.
fn put_decimal(buf: &mut BytesMut, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.put_slice(&digits[i..]);
}

/// The ACL every znode of a run gets: world:anyone, all permissions.
pub fn open_acl() -> Vec<Acl> {
    vec![Acl {
        perms: Perms::ALL,
        id: Id {
            scheme: "world".into(),
            id: "anyone".into(),
        },
    }]
}

/// A persistent create of `path` with `data`.
pub fn create_request(path: ByteString, data: Bytes, acl: &[Acl]) -> Request {
    Request::Create(CreateRequest {
        path,
        data: Some(data),
        acl: acl.to_vec(),
        flags: CreateMode::Persistent.as_i32(),
    })
}

/// A fixed list of operations (pre-population, cleanup), sent in order.
#[derive(Debug, Default)]
pub struct Script {
    ops: std::collections::VecDeque<Op>,
}

impl Script {
    /// A script of `ops`.
    pub fn new(ops: Vec<Op>) -> Script {
        Script { ops: ops.into() }
    }

    /// How many operations are left.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether nothing is left.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

impl Workload for Script {
    fn next_op(&mut self) -> Option<Op> {
        self.ops.pop_front()
    }

    fn exhausted(&self) -> bool {
        self.ops.is_empty()
    }
}

/// The parameters shared by every session of a run.
#[derive(Clone, Debug)]
pub struct Shape {
    /// The workload.
    pub kind: WorkloadKind,
    /// The run's namespace, e.g. `/rzk-bench-1a2b`.
    pub namespace: String,
    /// Keys each session owns (get, set, exists, mixed, mix, delete).
    pub keys_per_session: usize,
    /// Probability of a read in `mixed`.
    pub read_ratio: f64,
    /// The run's seed; session `s` uses `seed + s`.
    pub seed: u64,
}

/// One session's state for the pipelined workloads: its keys, what it last
/// wrote to each, and its counters.
#[derive(Debug)]
pub struct SessionWork {
    kind: WorkloadKind,
    session: u64,
    /// `<ns>/k`, `<ns>/c`, `<ns>/m` prefixes.
    key_prefix: Bytes,
    create_prefix: Bytes,
    multi_prefix: Bytes,
    /// The session's directory (children workload).
    dir: ByteString,
    /// Live keys, the value variant and version each had after the last write
    /// sent (index-aligned).
    keys: Vec<ByteString>,
    variants: Vec<u8>,
    versions: Vec<i32>,
    /// Next fresh index for create, multi and mix's creates.
    next_index: u64,
    /// Next key to delete (delete workload).
    delete_cursor: usize,
    pool: Arc<ValuePool>,
    acl: Vec<Acl>,
    rng: ChaCha8Rng,
    read_ratio: f64,
    paths: PathBuilder,
}

impl SessionWork {
    /// The state of session `session` (0-based).
    pub fn new(shape: &Shape, session: u64, pool: Arc<ValuePool>) -> SessionWork {
        let ns = shape.namespace.as_bytes();
        let prefix = |tag: &[u8]| -> Bytes { [ns, b"/", tag].concat().into() };
        let mut paths = PathBuilder::default();
        let key_prefix = prefix(b"k");
        let uses_keys = matches!(
            shape.kind,
            WorkloadKind::Get
                | WorkloadKind::Set
                | WorkloadKind::Exists
                | WorkloadKind::Mixed
                | WorkloadKind::Mix
                | WorkloadKind::Delete
        );
        let key_count = if uses_keys { shape.keys_per_session } else { 0 };
        let keys: Vec<ByteString> = (0..key_count as u64)
            .map(|i| paths.build(&key_prefix, session, Some(i)))
            .collect();
        let dir_prefix = prefix(b"d");
        SessionWork {
            kind: shape.kind,
            session,
            create_prefix: prefix(b"c"),
            multi_prefix: prefix(b"m"),
            dir: paths.build(&dir_prefix, session, None),
            key_prefix,
            variants: vec![0; keys.len()],
            versions: vec![0; keys.len()],
            next_index: keys.len() as u64,
            keys,
            delete_cursor: 0,
            pool,
            acl: open_acl(),
            rng: ChaCha8Rng::seed_from_u64(shape.seed.wrapping_add(session)),
            read_ratio: shape.read_ratio,
            paths,
        }
    }

    /// The untimed operations that create what the timed phase needs: this
    /// session's keys with value variant 0, or its directory and children.
    pub fn prepopulate(&mut self) -> Script {
        let value = self.pool.get(0).clone();
        let mut ops: Vec<Op> = self
            .keys
            .iter()
            .map(|k| Op {
                request: create_request(k.clone(), value.clone(), &self.acl),
                expect: Expect::Created { path: k.clone() },
            })
            .collect();
        if self.kind == WorkloadKind::Children {
            ops.push(Op {
                request: create_request(self.dir.clone(), Bytes::new(), &self.acl),
                expect: Expect::Created {
                    path: self.dir.clone(),
                },
            });
            let prefix: Bytes = [self.dir.as_bytes(), &b"/c"[..]].concat().into();
            for i in 0..CHILDREN_PER_DIR {
                let path = self.paths.build(&prefix, u64::from(i), None);
                ops.push(Op {
                    request: create_request(path.clone(), value.clone(), &self.acl),
                    expect: Expect::Created { path },
                });
            }
        }
        Script::new(ops)
    }

    /// How many znodes this session's work has left under the namespace.
    pub fn live_znodes(&self) -> u64 {
        match self.kind {
            WorkloadKind::Create | WorkloadKind::Multi => self.next_index,
            WorkloadKind::Children => 1 + u64::from(CHILDREN_PER_DIR),
            WorkloadKind::Delete => (self.keys.len() - self.delete_cursor) as u64,
            WorkloadKind::Get
            | WorkloadKind::Set
            | WorkloadKind::Exists
            | WorkloadKind::Mixed
            | WorkloadKind::Mix => self.keys.len() as u64,
            WorkloadKind::Watch | WorkloadKind::Storm => 0,
        }
    }

    fn fresh_path(&mut self, prefix_of: fn(&SessionWork) -> &Bytes) -> ByteString {
        let index = self.next_index;
        self.next_index += 1;
        let prefix = prefix_of(self).clone();
        self.paths.build(&prefix, self.session, Some(index))
    }

    fn random_key(&mut self) -> Option<usize> {
        if self.keys.is_empty() {
            return None;
        }
        Some(self.rng.random_range(0..self.keys.len()))
    }

    fn create(&mut self) -> Op {
        let path = self.fresh_path(|w| &w.create_prefix);
        Op {
            request: create_request(path.clone(), self.pool.get(0).clone(), &self.acl),
            expect: Expect::Created { path },
        }
    }

    fn get(&mut self, k: usize) -> Op {
        let path = self.keys[k].clone();
        Op {
            request: Request::GetData(GetDataRequest {
                path: path.clone(),
                watch: false,
            }),
            expect: Expect::Data {
                path,
                value: self.pool.get(usize::from(self.variants[k])).clone(),
                version: self.versions[k],
            },
        }
    }

    fn set(&mut self, k: usize) -> Op {
        let variant = (self.variants[k] + 1) % VALUE_VARIANTS as u8;
        self.variants[k] = variant;
        self.versions[k] += 1;
        let path = self.keys[k].clone();
        Op {
            request: Request::SetData(SetDataRequest {
                path: path.clone(),
                data: Some(self.pool.get(usize::from(variant)).clone()),
                version: -1,
            }),
            expect: Expect::Written {
                path,
                version: self.versions[k],
                data_len: self.pool.value_len(),
            },
        }
    }

    fn exists(&mut self, k: usize) -> Op {
        let path = self.keys[k].clone();
        Op {
            request: Request::Exists(ExistsRequest {
                path: path.clone(),
                watch: false,
            }),
            expect: Expect::Exists {
                path,
                version: self.versions[k],
                data_len: self.pool.value_len(),
            },
        }
    }

    fn delete_key(&mut self, k: usize) -> Op {
        let path = self.keys.swap_remove(k);
        self.variants.swap_remove(k);
        self.versions.swap_remove(k);
        Op {
            request: Request::Delete(DeleteRequest {
                path: path.clone(),
                version: -1,
            }),
            expect: Expect::Deleted { path },
        }
    }

    fn mix_create(&mut self) -> Op {
        let index = self.next_index;
        self.next_index += 1;
        let prefix = self.key_prefix.clone();
        let path = self.paths.build(&prefix, self.session, Some(index));
        self.keys.push(path.clone());
        self.variants.push(0);
        self.versions.push(0);
        Op {
            request: create_request(path.clone(), self.pool.get(0).clone(), &self.acl),
            expect: Expect::Created { path },
        }
    }

    fn multi(&mut self) -> Op {
        let mut paths = Vec::with_capacity(MULTI_CREATES);
        let mut ops = Vec::with_capacity(MULTI_CREATES);
        for _ in 0..MULTI_CREATES {
            let path = self.fresh_path(|w| &w.multi_prefix);
            ops.push(MultiOp::Create(CreateRequest {
                path: path.clone(),
                data: Some(self.pool.get(0).clone()),
                acl: self.acl.clone(),
                flags: CreateMode::Persistent.as_i32(),
            }));
            paths.push(path);
        }
        Op {
            request: Request::Multi(MultiRequest { ops }),
            expect: Expect::MultiCreated { paths },
        }
    }

    fn children(&mut self) -> Op {
        let path = self.dir.clone();
        Op {
            request: Request::GetChildren(GetChildrenRequest {
                path: path.clone(),
                watch: false,
            }),
            expect: Expect::Children {
                path,
                count: CHILDREN_PER_DIR,
            },
        }
    }

    fn mix(&mut self) -> Op {
        let roll: u32 = self.rng.random_range(0..100);
        let Some(k) = self.random_key() else {
            return self.mix_create();
        };
        match roll {
            0..10 => self.mix_create(),
            10..50 => self.set(k),
            50..90 => self.get(k),
            _ => self.delete_key(k),
        }
    }
}

impl Workload for SessionWork {
    fn next_op(&mut self) -> Option<Op> {
        let op = match self.kind {
            WorkloadKind::Create => self.create(),
            WorkloadKind::Get => {
                let k = self.random_key()?;
                self.get(k)
            }
            WorkloadKind::Set => {
                let k = self.random_key()?;
                self.set(k)
            }
            WorkloadKind::Exists => {
                let k = self.random_key()?;
                self.exists(k)
            }
            WorkloadKind::Children => self.children(),
            WorkloadKind::Delete => {
                let k = self.delete_cursor;
                if k >= self.keys.len() {
                    return None;
                }
                self.delete_cursor += 1;
                let path = self.keys[k].clone();
                Op {
                    request: Request::Delete(DeleteRequest {
                        path: path.clone(),
                        version: -1,
                    }),
                    expect: Expect::Deleted { path },
                }
            }
            WorkloadKind::Mixed => {
                let k = self.random_key()?;
                if self.rng.random_bool(self.read_ratio) {
                    self.get(k)
                } else {
                    self.set(k)
                }
            }
            WorkloadKind::Mix => self.mix(),
            WorkloadKind::Multi => self.multi(),
            WorkloadKind::Watch | WorkloadKind::Storm => return None,
        };
        Some(op)
    }

    fn exhausted(&self) -> bool {
        match self.kind {
            WorkloadKind::Delete => self.delete_cursor >= self.keys.len(),
            WorkloadKind::Get | WorkloadKind::Set | WorkloadKind::Exists | WorkloadKind::Mixed => {
                self.keys.is_empty()
            }
            WorkloadKind::Create
            | WorkloadKind::Children
            | WorkloadKind::Mix
            | WorkloadKind::Multi
            | WorkloadKind::Watch
            | WorkloadKind::Storm => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rzk_wire::{CreateResponse, GetChildrenResponse, GetDataResponse, MultiResponse, Stat};

    fn stat(version: i32, data_length: i32) -> Stat {
        Stat {
            version,
            data_length,
            ..Stat::default()
        }
    }

    fn data(path: &str, value: &'static [u8], version: i32) -> Expect {
        Expect::Data {
            path: path.into(),
            value: Bytes::from_static(value),
            version,
        }
    }

    #[test]
    fn get_data_must_return_the_bytes_and_version_last_written() {
        let e = data("/ns/k0-1", b"abc", 2);
        let ok = Ok(Response::GetData(GetDataResponse {
            data: Some(Bytes::from_static(b"abc")),
            stat: stat(2, 3),
        }));
        assert_eq!(check(OpCode::GetData, &e, &ok), Ok(()));
        let other = Ok(Response::GetData(GetDataResponse {
            data: Some(Bytes::from_static(b"abd")),
            stat: stat(2, 3),
        }));
        let msg = check(OpCode::GetData, &e, &other).unwrap_err();
        assert!(
            msg.starts_with("getData /ns/k0-1: returned 3 bytes"),
            "{msg}"
        );
        let old = Ok(Response::GetData(GetDataResponse {
            data: Some(Bytes::from_static(b"abc")),
            stat: stat(1, 3),
        }));
        assert!(check(OpCode::GetData, &e, &old)
            .unwrap_err()
            .contains("stat version 1, expected 2"));
        let null = Ok(Response::GetData(GetDataResponse {
            data: None,
            stat: stat(2, 0),
        }));
        assert!(check(OpCode::GetData, &e, &null).is_err());
    }

    #[test]
    fn an_error_code_where_success_is_due_names_op_path_and_code() {
        let e = Expect::Deleted {
            path: "/ns/k1-0".into(),
        };
        let msg = check(OpCode::Delete, &e, &Err(ErrorCode::NoNode)).unwrap_err();
        assert_eq!(
            msg,
            "delete /ns/k1-0: server answered NONODE (-101), expected OK"
        );
    }

    #[test]
    fn children_must_be_exactly_c0_to_cn() {
        let e = Expect::Children {
            path: "/ns/d0".into(),
            count: 3,
        };
        let reply = |names: &[&str]| {
            Ok(Response::GetChildren(GetChildrenResponse {
                children: names.iter().map(|n| (*n).into()).collect(),
            }))
        };
        assert_eq!(
            check(OpCode::GetChildren, &e, &reply(&["c2", "c0", "c1"])),
            Ok(())
        );
        assert!(check(OpCode::GetChildren, &e, &reply(&["c0", "c1"]))
            .unwrap_err()
            .contains("2 children, expected 3"));
        assert!(check(OpCode::GetChildren, &e, &reply(&["c0", "c1", "c1"]))
            .unwrap_err()
            .contains("twice"));
        assert!(check(OpCode::GetChildren, &e, &reply(&["c0", "c1", "c3"]))
            .unwrap_err()
            .contains("unexpected child"));
        assert!(check(OpCode::GetChildren, &e, &reply(&["c0", "c1", "x"])).is_err());
    }

    #[test]
    fn a_multi_must_report_each_created_path_in_order() {
        let paths: Vec<ByteString> = (0..10).map(|i| format!("/ns/m0-{i}").into()).collect();
        let e = Expect::MultiCreated {
            paths: paths.clone(),
        };
        let results = |paths: &[ByteString]| {
            Ok(Response::Multi(MultiResponse {
                results: paths
                    .iter()
                    .map(|p| MultiResult::Create(CreateResponse { path: p.clone() }))
                    .collect(),
            }))
        };
        assert_eq!(check(OpCode::Multi, &e, &results(&paths)), Ok(()));
        assert!(check(OpCode::Multi, &e, &results(&paths[..9]))
            .unwrap_err()
            .contains("9 results, expected 10"));
        let mut swapped = paths.clone();
        swapped.swap(3, 4);
        assert!(check(OpCode::Multi, &e, &results(&swapped))
            .unwrap_err()
            .contains("result 3"));
        // A failed multi: err 0 in the header, the failure in the results.
        let failed = Ok(Response::Multi(MultiResponse::failed(
            10,
            2,
            ErrorCode::NodeExists,
        )));
        assert!(check(OpCode::Multi, &e, &failed).is_err());
    }

    #[test]
    fn set_and_exists_check_version_and_length() {
        let e = Expect::Written {
            path: "/ns/k0-0".into(),
            version: 4,
            data_len: 128,
        };
        assert_eq!(
            check(OpCode::SetData, &e, &Ok(Response::Stat(stat(4, 128)))),
            Ok(())
        );
        assert!(check(OpCode::SetData, &e, &Ok(Response::Stat(stat(3, 128)))).is_err());
        let e = Expect::Exists {
            path: "/ns/k0-0".into(),
            version: 0,
            data_len: 128,
        };
        assert!(check(OpCode::Exists, &e, &Ok(Response::Stat(stat(0, 127)))).is_err());
    }

    #[test]
    fn a_create_must_name_the_requested_path_and_a_body_must_fit_the_op() {
        let e = Expect::Created {
            path: "/ns/c0-0".into(),
        };
        let named = |p: &str| Ok(Response::Create(CreateResponse { path: p.into() }));
        assert_eq!(check(OpCode::Create, &e, &named("/ns/c0-0")), Ok(()));
        assert!(check(OpCode::Create, &e, &named("/ns/c0-1")).is_err());
        assert!(check(OpCode::Create, &e, &Ok(Response::Empty))
            .unwrap_err()
            .contains("does not fit"));
    }

    #[test]
    fn value_variants_differ_in_every_byte() {
        let pool = ValuePool::new(5);
        for a in 0..VALUE_VARIANTS {
            for b in 0..VALUE_VARIANTS {
                if a % 26 != b % 26 {
                    assert!(pool
                        .get(a)
                        .iter()
                        .zip(pool.get(b).iter())
                        .all(|(x, y)| x != y));
                }
            }
        }
        assert_eq!(pool.value_len(), 5);
    }

    #[test]
    fn paths_are_built_without_format() {
        let mut paths = PathBuilder::default();
        assert_eq!(&*paths.build(b"/ns/k", 3, Some(1207)), "/ns/k3-1207");
        assert_eq!(&*paths.build(b"/ns/d", 0, None), "/ns/d0");
        assert_eq!(
            &*paths.build(b"/x/", u64::MAX, None),
            "/x/18446744073709551615"
        );
    }

    #[test]
    fn sessions_with_the_same_seed_send_the_same_ops() {
        let shape = Shape {
            kind: WorkloadKind::Mix,
            namespace: "/ns".into(),
            keys_per_session: 4,
            read_ratio: 0.5,
            seed: 9,
        };
        let pool = Arc::new(ValuePool::new(8));
        let ops = |s| {
            let mut w = SessionWork::new(&shape, s, pool.clone());
            (0..50)
                .map(|_| w.next_op().unwrap().request)
                .collect::<Vec<_>>()
        };
        assert_eq!(ops(0), ops(0));
        assert_ne!(ops(0), ops(1));
    }

    #[test]
    fn a_read_after_writes_expects_the_last_write() {
        let shape = Shape {
            kind: WorkloadKind::Set,
            namespace: "/ns".into(),
            keys_per_session: 1,
            read_ratio: 0.0,
            seed: 1,
        };
        let pool = Arc::new(ValuePool::new(8));
        let mut w = SessionWork::new(&shape, 0, pool.clone());
        let _ = w.next_op();
        let second = w.next_op().unwrap();
        assert_eq!(
            second.expect,
            Expect::Written {
                path: "/ns/k0-0".into(),
                version: 2,
                data_len: 8
            }
        );
        assert_eq!(
            w.get(0).expect,
            Expect::Data {
                path: "/ns/k0-0".into(),
                value: pool.get(2).clone(),
                version: 2
            }
        );
    }
}
