//! The recipe benchmarks of BENCHMARKS.md ("Recipes"), run beside Curator 5.4's
//! (`interop/curator/RecipeScenarios.java bench-*`) on the same server by
//! `interop/curator/bench.sh`. Prints one `BENCH rust ...` line per run.
//!
//! ```sh
//! recipe_bench populate     <connect> <root> <nodes>           # root/d<i/1000>/n<i>, 16-byte data
//! recipe_bench cache-load   <connect> <root>                   # TreeCache initial load
//! recipe_bench cache-events <connect> <root> <writes/s> <secs> # setData at a rate; event delay
//! recipe_bench lock         <connect> <path> <write|semaphore> <contenders> <cycles each>
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rzk_election_client::recipe::{CacheConfig, CacheEvent, ReadWriteLock, Semaphore, TreeCache};
use rzk_election_client::{Acl, Client, ClientConfig, CreateMode, Error};

type Res<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

async fn connect(connect: &str) -> Res<Client> {
    let mut cfg = ClientConfig::new(connect)?;
    cfg.session_timeout = Duration::from_secs(30);
    Ok(Client::connect(cfg).await?)
}

/// Resident memory of this process, bytes.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p) as usize).min(sorted.len() - 1);
    sorted[i].as_secs_f64() * 1e3
}

async fn create_ok(client: &Client, path: &str, data: Bytes) -> Res<()> {
    match client
        .create(path, data, Acl::open_unsafe(), CreateMode::Persistent)
        .await
    {
        Ok(_) | Err(Error::NodeExists { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn populate(connect_to: &str, root: &str, nodes: usize) -> Res<()> {
    let client = Arc::new(connect(connect_to).await?);
    match client
        .create_with_parents(
            root,
            Bytes::new(),
            CreateMode::Persistent,
            CreateMode::Persistent,
        )
        .await
    {
        Ok(_) | Err(Error::NodeExists { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    for d in 0..nodes.div_ceil(1000) {
        create_ok(&client, &format!("{root}/d{d}"), Bytes::new()).await?;
    }
    let start = Instant::now();
    let sem = Arc::new(tokio::sync::Semaphore::new(512));
    let mut tasks = Vec::with_capacity(nodes);
    for i in 0..nodes {
        let permit = sem.clone().acquire_owned().await?;
        let (client, path) = (client.clone(), format!("{root}/d{}/n{i}", i / 1000));
        tasks.push(tokio::spawn(async move {
            let r = create_ok(&client, &path, Bytes::from(format!("{i:016}"))).await;
            drop(permit);
            r.map_err(|e| e.to_string())
        }));
    }
    for t in tasks {
        t.await?.map_err(|e| e.to_string())?;
    }
    println!(
        "populated {nodes} nodes under {root} in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    client.close().await;
    Ok(())
}

async fn cache_load(connect_to: &str, root: &str) -> Res<()> {
    let client = Arc::new(connect(connect_to).await?);
    let before = rss_bytes();
    let start = Instant::now();
    let mut cache = TreeCache::start(client.clone(), CacheConfig::new(root));
    let nodes = match cache.next_event().await {
        Some(CacheEvent::Initialized { nodes }) => nodes,
        other => return Err(format!("expected Initialized, got {other:?}").into()),
    };
    let secs = start.elapsed().as_secs_f64();
    let after = rss_bytes();
    println!(
        "BENCH rust cache-load nodes={nodes} seconds={secs:.3} nodes_per_s={:.0} rss_bytes_per_node={:.0}",
        nodes as f64 / secs,
        after.saturating_sub(before) as f64 / nodes as f64
    );
    cache.close().await;
    client.close().await;
    Ok(())
}

async fn cache_events(connect_to: &str, root: &str, rate: u64, seconds: u64) -> Res<()> {
    const KEYS: u64 = 1000;
    let reader = Arc::new(connect(connect_to).await?);
    let writer = Arc::new(connect(connect_to).await?);
    match writer
        .create_with_parents(
            root,
            Bytes::new(),
            CreateMode::Persistent,
            CreateMode::Persistent,
        )
        .await
    {
        Ok(_) | Err(Error::NodeExists { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    for k in 0..KEYS {
        create_ok(&writer, &format!("{root}/k{k}"), Bytes::from_static(b"0")).await?;
    }
    let mut cache = TreeCache::start(reader.clone(), CacheConfig::new(root));
    match cache.next_event().await {
        Some(CacheEvent::Initialized { .. }) => {}
        other => return Err(format!("expected Initialized, got {other:?}").into()),
    }
    let sent: Arc<Mutex<HashMap<Bytes, Instant>>> = Arc::new(Mutex::new(HashMap::new()));
    let lat = Arc::new(Mutex::new(Vec::new()));
    let listener = {
        let (sent, lat) = (sent.clone(), lat.clone());
        tokio::spawn(async move {
            while let Some(e) = cache.next_event().await {
                if let CacheEvent::Changed { new, .. } = e {
                    if let Some(at) = sent.lock().expect("sent").remove(&new.data) {
                        lat.lock().expect("lat").push(at.elapsed());
                    }
                }
            }
            cache
        })
    };
    let total = rate * seconds;
    let inflight = Arc::new(tokio::sync::Semaphore::new(256));
    let start = Instant::now();
    for i in 0..total {
        let due = start + Duration::from_nanos(i * 1_000_000_000 / rate);
        tokio::time::sleep_until(due.into()).await;
        let v = Bytes::from(format!("w{i}"));
        let permit = inflight.clone().acquire_owned().await?;
        sent.lock().expect("sent").insert(v.clone(), Instant::now());
        let (writer, path) = (writer.clone(), format!("{root}/k{}", i % KEYS));
        tokio::spawn(async move {
            let _ = writer.set_data(&path, v, -1).await;
            drop(permit);
        });
    }
    let sending = start.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sent.lock().expect("sent").is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let all = start.elapsed().as_secs_f64();
    let mut l = lat.lock().expect("lat").clone();
    l.sort();
    let missed = sent.lock().expect("sent").len();
    println!(
        "BENCH rust cache-events writes={total} rate={:.0}/s events={} events_per_s={:.0} p50_ms={:.2} p99_ms={:.2} missed={missed}",
        total as f64 / sending,
        l.len(),
        l.len() as f64 / all,
        percentile(&l, 0.5),
        percentile(&l, 0.99)
    );
    reader.close().await;
    let cache = listener.await?;
    cache.close().await;
    writer.close().await;
    Ok(())
}

async fn lock(
    connect_to: &str,
    path: &str,
    kind: &str,
    contenders: usize,
    cycles: usize,
) -> Res<()> {
    let mut clients = Vec::new();
    for _ in 0..contenders {
        clients.push(Arc::new(connect(connect_to).await?));
    }
    let go = Arc::new(tokio::sync::Barrier::new(contenders));
    let mut tasks = Vec::new();
    let start = Arc::new(Mutex::new(None::<Instant>));
    for client in clients.iter() {
        let (client, go, start, path, kind) = (
            client.clone(),
            go.clone(),
            start.clone(),
            path.to_owned(),
            kind.to_owned(),
        );
        tasks.push(tokio::spawn(async move {
            let rw = ReadWriteLock::new(client.clone(), &path);
            let sem = Semaphore::new(client.clone(), &path, 4);
            go.wait().await;
            start
                .lock()
                .expect("start")
                .get_or_insert_with(Instant::now);
            let mut lat = Vec::with_capacity(cycles);
            for _ in 0..cycles {
                let t0 = Instant::now();
                let guard = if kind == "semaphore" {
                    sem.acquire().await
                } else {
                    rw.write().await
                };
                guard.map_err(|e| e.to_string())?.release().await;
                lat.push(t0.elapsed());
            }
            Ok::<_, String>(lat)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    let secs = start
        .lock()
        .expect("start")
        .map(|s| s.elapsed().as_secs_f64())
        .unwrap_or(1.0);
    all.sort();
    println!(
        "BENCH rust lock kind={kind} contenders={contenders} cycles={} p50_ms={:.2} p99_ms={:.2} cycles_per_s={:.0}",
        all.len(),
        percentile(&all, 0.5),
        percentile(&all, 0.99),
        all.len() as f64 / secs
    );
    for c in clients {
        c.close().await;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| {
        args.get(i)
            .cloned()
            .ok_or_else(|| format!("missing argument {i}: see the module docs"))
    };
    let num = |i: usize| -> Res<u64> { Ok(arg(i)?.parse()?) };
    match arg(0)?.as_str() {
        "populate" => populate(&arg(1)?, &arg(2)?, num(3)? as usize).await,
        "cache-load" => cache_load(&arg(1)?, &arg(2)?).await,
        "cache-events" => cache_events(&arg(1)?, &arg(2)?, num(3)?, num(4)?).await,
        "lock" => {
            lock(
                &arg(1)?,
                &arg(2)?,
                &arg(3)?,
                num(4)? as usize,
                num(5)? as usize,
            )
            .await
        }
        other => Err(format!("unknown command {other}").into()),
    }
}
