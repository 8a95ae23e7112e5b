//! A replicated log on real processes: ZAB over gRPC, durable on `rzk-wal`.
//!
//! ```sh
//! # three terminals (or background jobs), one data directory each:
//! cargo run -p rzk-quorum --example replicated_log -- --id 1 \
//!   --peers 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003 \
//!   --client 127.0.0.1:8001 --dir /tmp/rzk1
//! # ...same with --id 2 / --client :8002 / --dir /tmp/rzk2, and --id 3.
//! printf 'ROLE\nPUT hello\nGET\n' | nc 127.0.0.1 8001
//! ```
//!
//! Client protocol (one line per request, on `--client`):
//! `PUT <text>` → `OK <zxid>` once committed and applied here, or `ERR <why>`;
//! `GET` → `LOG <n>`, then n lines `<zxid> <text>`, then `END`;
//! `ROLE` → `ROLE <Leader|Follower|Looking> <leader id, 0 if none>`;
//! `STATS` → `STATS durable=<zxid> applied=<zxid> diff=<n> trunc=<n> snap=<n>`;
//! `SYNC` → `OK <zxid>` once this peer applied everything committed before;
//! `SNAP` → `OK <zxid>`: snapshot of the applied state (streamed to storage in
//! 64 KiB chunks, plus `--snapshot-pad-bytes` of padding records that loading
//! skips: a large snapshot without a large state), then log purge;
//! `BENCH <in flight> <millis> <bytes>` (on the leader) → closed-loop load,
//! `BENCH n=<committed> per_s=<rate> p50_us=<..> p99_us=<..>`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use rzk_quorum::core::Config;
use rzk_quorum::grpc::{GrpcConfig, GrpcTransport};
use rzk_quorum::wal_storage::WalStorage;
use rzk_quorum::{
    Committed, DriverConfig, PeerId, ReplicateError, Replicator, Role, SnapshotSource,
    SnapshotWriteError, SnapshotWriter, ZabReplicator,
};
use rzk_wal::WalOptions;
use rzk_zxid::Zxid;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Command-line options of one node.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// This node's server id.
    pub id: PeerId,
    /// Every node's quorum (gRPC) address.
    pub peers: BTreeMap<PeerId, SocketAddr>,
    /// Where this node serves the line protocol.
    pub client: SocketAddr,
    /// The data directory (`rzk-wal`).
    pub dir: std::path::PathBuf,
    /// Log entries kept in memory below the latest snapshot (DIFF window).
    pub retain_below_snapshot: usize,
    /// Silence after which a learner or leader gives up (syncLimit).
    pub sync_limit_ms: u64,
    /// Padding added to every snapshot (skipped when loading): a large
    /// snapshot file without a large state, to exercise SNAP transfers.
    pub snapshot_pad_bytes: u64,
    /// The core's `snap_chunk_bytes_max` and `snap_in_flight_bytes_max`, if set.
    pub snap_chunk_bytes: Option<usize>,
    /// See `snap_chunk_bytes`.
    pub snap_in_flight_bytes: Option<u64>,
    /// Snapshots the log retains (`rzk-wal`'s `snap_retain_count`; the log is
    /// kept after the oldest), if set.
    pub snap_retain: Option<usize>,
    /// The log's segment size (`rzk-wal` purges whole segments), if set.
    pub segment_bytes: Option<u64>,
}

/// Reads `--id`, `--peers`, `--client`, `--dir`, and optional
/// `--retain-below-snapshot`, `--sync-limit-ms`, `--snapshot-pad-bytes`,
/// `--snap-chunk-bytes`, `--snap-in-flight-bytes`, `--snap-retain`,
/// `--segment-bytes`.
pub fn parse_args(args: &[String]) -> anyhow::Result<NodeOptions> {
    let get = |name: &str| -> Option<&String> {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let id = PeerId(get("--id").context("--id N")?.parse()?);
    let mut peers = BTreeMap::new();
    for item in get("--peers")
        .context("--peers 1=host:port,...")?
        .split(',')
    {
        let (n, addr) = item
            .split_once('=')
            .ok_or_else(|| anyhow!("peer {item:?}: expected N=host:port"))?;
        peers.insert(PeerId(n.parse()?), addr.parse()?);
    }
    if !peers.contains_key(&id) {
        bail!("--peers does not list this node's id {}", id.0);
    }
    Ok(NodeOptions {
        id,
        peers,
        client: get("--client").context("--client host:port")?.parse()?,
        dir: get("--dir").context("--dir DIR")?.into(),
        retain_below_snapshot: get("--retain-below-snapshot")
            .map(|v| v.parse())
            .transpose()?
            .unwrap_or(500),
        sync_limit_ms: get("--sync-limit-ms")
            .map(|v| v.parse())
            .transpose()?
            .unwrap_or(2_000),
        snapshot_pad_bytes: get("--snapshot-pad-bytes")
            .map(|v| v.parse())
            .transpose()?
            .unwrap_or(0),
        snap_chunk_bytes: get("--snap-chunk-bytes").map(|v| v.parse()).transpose()?,
        snap_in_flight_bytes: get("--snap-in-flight-bytes")
            .map(|v| v.parse())
            .transpose()?,
        snap_retain: get("--snap-retain").map(|v| v.parse()).transpose()?,
        segment_bytes: get("--segment-bytes").map(|v| v.parse()).transpose()?,
    })
}

type State = Arc<Mutex<Vec<(Zxid, Bytes)>>>;

/// Snapshot chunks handed to the replicator's writer.
const CHUNK_BYTES: usize = 64 << 10;
/// Snapshot record header: zxid u64, payload length u32 (little endian). A
/// record with zxid 0 is padding.
const HEAD_BYTES: usize = 12;

fn record(out: &mut Vec<u8>, z: Zxid, payload: &[u8]) {
    out.extend_from_slice(&z.as_u64().to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Queues a chunk, waiting while the writer's queue is full.
async fn put(w: &mut SnapshotWriter, mut chunk: Bytes) -> Result<(), ReplicateError> {
    loop {
        match w.try_write(chunk) {
            Ok(()) => return Ok(()),
            Err(SnapshotWriteError::Full(back)) => {
                chunk = back;
                w.ready().await;
            }
            Err(SnapshotWriteError::Failed(e)) => return Err(e),
        }
    }
}

/// Streams a snapshot of `state` at `at`, then `pad` bytes of padding.
async fn write_snapshot(
    rep: &ZabReplicator,
    at: Zxid,
    state: Vec<(Zxid, Bytes)>,
    pad: u64,
) -> Result<Zxid, ReplicateError> {
    let mut w = rep.snapshot_writer(at);
    let mut buf = Vec::with_capacity(CHUNK_BYTES);
    for (z, p) in &state {
        record(&mut buf, *z, p);
        if buf.len() >= CHUNK_BYTES {
            put(&mut w, Bytes::from(std::mem::take(&mut buf))).await?;
        }
    }
    let zeros = vec![0u8; CHUNK_BYTES - HEAD_BYTES];
    let mut left = pad;
    while left > 0 {
        let n = (left as usize).min(zeros.len());
        record(&mut buf, Zxid::ZERO, &zeros[..n]);
        left -= n as u64;
        put(&mut w, Bytes::from(std::mem::take(&mut buf))).await?;
    }
    if !buf.is_empty() {
        put(&mut w, Bytes::from(buf)).await?;
    }
    w.finish().await
}

/// Reads as much of `buf` as the stream has; 0 at its end.
fn read_full(r: &mut impl std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Loads a snapshot while reading it (padding skipped, never buffered); the
/// reader checks the file's checksum when it reaches the end.
fn load(source: &SnapshotSource) -> anyhow::Result<Vec<(Zxid, Bytes)>> {
    let mut r = std::io::BufReader::with_capacity(CHUNK_BYTES, source.reader()?);
    let mut out = Vec::new();
    let mut head = [0u8; HEAD_BYTES];
    loop {
        match read_full(&mut r, &mut head)? {
            0 => return Ok(out),
            HEAD_BYTES => {}
            n => bail!("truncated snapshot: a record header of {n} bytes"),
        }
        let z = Zxid::from_u64(u64::from_le_bytes(head[..8].try_into()?));
        let n = u32::from_le_bytes(head[8..].try_into()?) as u64;
        if z == Zxid::ZERO {
            let skipped = std::io::copy(&mut std::io::Read::take(&mut r, n), &mut std::io::sink())?;
            anyhow::ensure!(skipped == n, "truncated snapshot padding");
            continue;
        }
        let mut p = vec![0u8; n as usize];
        std::io::Read::read_exact(&mut r, &mut p).context("truncated snapshot")?;
        out.push((z, Bytes::from(p)));
    }
}

/// Runs one node until the process is killed.
pub async fn run_node(o: NodeOptions) -> anyhow::Result<()> {
    let mut wal_options = WalOptions::default();
    if let Some(n) = o.snap_retain {
        wal_options.snap_retain_count = n;
    }
    if let Some(n) = o.segment_bytes {
        wal_options.log.segment_bytes = n;
    }
    let storage = WalStorage::open(&o.dir, wal_options).map_err(|e| anyhow!("{e}"))?;
    let listener = TcpListener::bind(o.peers[&o.id]).await?;
    let (transport, inbox) =
        GrpcTransport::start(GrpcConfig::new(o.id, o.peers.clone()), listener)?;
    let mut cfg = Config::new(o.id, o.peers.keys().copied());
    cfg.sync_limit_ticks = o.sync_limit_ms;
    cfg.init_limit_ticks = o.sync_limit_ms * 2;
    cfg.ping_interval_ticks = (o.sync_limit_ms / 5).max(10);
    cfg.finalize_wait_ticks = 50;
    cfg.notification_interval_ticks_min = 50;
    cfg.notification_interval_ticks_max = 1_000;
    cfg.log_retained_below_snapshot_max = o.retain_below_snapshot;
    cfg.incarnation = std::process::id() as u64;
    if let Some(b) = o.snap_chunk_bytes {
        cfg.snap_chunk_bytes_max = b;
    }
    if let Some(b) = o.snap_in_flight_bytes {
        cfg.snap_in_flight_bytes_max = b;
    }
    let rep = Arc::new(
        ZabReplicator::start(DriverConfig::new(cfg), storage, transport, inbox)
            .await
            .map_err(|e| anyhow!("{e}"))?,
    );
    let state: State = Arc::new(Mutex::new(Vec::new()));
    let mut commits = rep.take_commits().context("commit stream")?;
    let st = state.clone();
    tokio::spawn(async move {
        while let Some(c) = commits.next().await {
            match c {
                Committed::Snapshot { source, .. } => {
                    // Loaded into a new state off the runtime's threads, then
                    // swapped in: a snapshot that fails its checksum changes
                    // nothing.
                    match tokio::task::spawn_blocking(move || load(&source)).await {
                        Ok(Ok(v)) => *st.lock().expect("not poisoned") = v,
                        Ok(Err(e)) => {
                            eprintln!("bad snapshot: {e}");
                            std::process::exit(2);
                        }
                        Err(e) => {
                            eprintln!("snapshot loader: {e}");
                            std::process::exit(2);
                        }
                    }
                }
                Committed::Txn { zxid, payload } => {
                    st.lock().expect("not poisoned").push((zxid, payload))
                }
                Committed::Role { .. } | Committed::Forwarded { .. } => {}
            }
        }
    });
    let clients = TcpListener::bind(o.client).await?;
    println!("READY {}", o.id.0);
    loop {
        let (sock, _) = clients.accept().await?;
        tokio::spawn(serve(
            sock,
            rep.clone(),
            state.clone(),
            o.snapshot_pad_bytes,
        ));
    }
}

fn applied_zxid(state: &State) -> Zxid {
    state
        .lock()
        .expect("not poisoned")
        .last()
        .map(|s| s.0)
        .unwrap_or(Zxid::ZERO)
}

async fn serve(sock: TcpStream, rep: Arc<ZabReplicator>, state: State, pad: u64) {
    let (r, mut w) = sock.into_split();
    let mut lines = BufReader::new(r).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let reply = handle(&line, &rep, &state, pad).await;
        if w.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

async fn wait_applied(state: &State, z: Zxid) {
    while applied_zxid(state) < z {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn handle(line: &str, rep: &Arc<ZabReplicator>, state: &State, pad: u64) -> String {
    let (cmd, rest) = line.split_once(' ').unwrap_or((line, ""));
    match cmd {
        "PUT" => match rep.propose(Bytes::copy_from_slice(rest.as_bytes())).await {
            Ok(z) => {
                wait_applied(state, z).await;
                format!("OK {z}\n")
            }
            Err(e) => format!("ERR {e}\n"),
        },
        "GET" => {
            let s = state.lock().expect("not poisoned");
            let mut out = format!("LOG {}\n", s.len());
            for (z, p) in s.iter() {
                out.push_str(&format!("{z} {}\n", String::from_utf8_lossy(p)));
            }
            out.push_str("END\n");
            out
        }
        "ROLE" => {
            let role = match rep.role() {
                Role::Leader => "Leader",
                Role::Follower => "Follower",
                Role::Observer => "Observer",
                Role::Looking => "Looking",
            };
            format!("ROLE {role} {}\n", rep.leader().map(|p| p.0).unwrap_or(0))
        }
        "STATS" => {
            let s = rep.stats();
            format!(
                "STATS durable={} applied={} diff={} trunc={} snap={}\n",
                s.last_durable, s.applied, s.syncs[0], s.syncs[1], s.syncs[2]
            )
        }
        "SYNC" => match rep.sync().await {
            Ok(z) => {
                wait_applied(state, z).await;
                format!("OK {z}\n")
            }
            Err(e) => format!("ERR {e}\n"),
        },
        "SNAP" => {
            // The entries are shared (`Bytes`), not copied.
            let entries = state.lock().expect("not poisoned").clone();
            let z = entries.last().map(|x| x.0).unwrap_or(Zxid::ZERO);
            match write_snapshot(rep, z, entries, pad).await {
                Ok(z) => format!("OK {z}\n"),
                Err(e) => format!("ERR {e}\n"),
            }
        }
        "BENCH" => bench(rest, rep)
            .await
            .unwrap_or_else(|e| format!("ERR {e}\n")),
        _ => format!("ERR unknown command {cmd:?}\n"),
    }
}

/// Closed loop: `inflight` workers each propose, wait for the commit, repeat.
async fn bench(args: &str, rep: &Arc<ZabReplicator>) -> anyhow::Result<String> {
    let mut it = args.split_whitespace().map(|v| v.parse::<u64>());
    let inflight = it.next().context("in flight")??;
    let millis = it.next().context("millis")??;
    let size = it.next().context("bytes")?? as usize;
    let end = Instant::now() + Duration::from_millis(millis);
    let mut tasks = Vec::new();
    for _ in 0..inflight {
        let rep = rep.clone();
        let payload = Bytes::from(vec![b'x'; size]);
        tasks.push(tokio::spawn(async move {
            let mut h = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
            while Instant::now() < end {
                let t = Instant::now();
                rep.propose(payload.clone())
                    .await
                    .map_err(|e| anyhow!("{e}"))?;
                h.record(t.elapsed().as_micros() as u64)?;
            }
            anyhow::Ok(h)
        }));
    }
    let started = Instant::now();
    let mut all = hdrhistogram::Histogram::<u64>::new(3)?;
    for t in tasks {
        all.add(t.await??)?;
    }
    let secs = started.elapsed().as_secs_f64();
    Ok(format!(
        "BENCH n={} per_s={:.0} p50_us={} p99_us={}\n",
        all.len(),
        all.len() as f64 / secs,
        all.value_at_quantile(0.5),
        all.value_at_quantile(0.99)
    ))
}

#[allow(dead_code)]
fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let opts = parse_args(&args)?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run_node(opts))
}
