// The recipe scenarios of rzk-election-client's tests/recipes_zk.rs, run against Apache
// Curator 5.4's CuratorCache, PersistentNode, InterProcessReadWriteLock and
// InterProcessSemaphoreV2, and the recipe benchmarks of BENCHMARKS.md. Curator may
// misbehave here: the program records what it does as RESULT lines, which
// .ci/stages/32-recipes-curator.sh checks against interop/curator/RECIPES.md.
//
// Scenarios start their own Apache ZooKeeper 3.8 as a child process, as the Rust
// harness does (tickTime 500, containers reaped every 500 ms, a free loopback port, its
// own data dir), so they can kill and restart it. Benchmarks use a server given by
// connect string.
//
// Usage: java RecipeScenarios cache|node|rwlock|semaphore
//        java RecipeScenarios bench-cache-load <connect> <root> <nodes>
//        java RecipeScenarios bench-cache-events <connect> <root> <writes/s> <seconds>
//        java RecipeScenarios bench-lock <connect> <path> <write|semaphore> <contenders> <cycles each>

import java.io.*;
import java.net.*;
import java.nio.file.*;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.cache.ChildData;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.nodes.PersistentNode;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.RetryForever;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.data.Stat;

public class RecipeScenarios {
    static final int SESSION_MS = 2000;
    static final long T0 = System.nanoTime();

    static void log(String fmt, Object... args) {
        System.out.printf("[%6d ms] %s%n", (System.nanoTime() - T0) / 1_000_000, String.format(fmt, args));
        System.out.flush();
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    static boolean ruok(int port) {
        try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
            s.setSoTimeout(1000);
            s.getOutputStream().write("ruok".getBytes());
            byte[] b = new byte[4];
            return s.getInputStream().read(b) == 4 && new String(b).equals("imok");
        } catch (IOException e) {
            return false;
        }
    }

    /** Apache ZooKeeper 3.8 as a child process, killed and started again on the same port and data. */
    static class Zk implements Closeable {
        final int port;
        final Path dir;
        Process p;

        Zk() throws Exception {
            port = freePort();
            dir = Files.createTempDirectory("rzk-curator-recipes");
            Files.createDirectories(dir.resolve("data"));
            Files.writeString(dir.resolve("zoo.cfg"), "tickTime=500\ndataDir=" + dir.resolve("data") + "\nclientPort=" + port
                + "\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\n4lw.commands.whitelist=*\nadmin.enableServer=false\n");
            // A scenario stopped from outside (timeout's SIGTERM) must not leave the server running.
            Runtime.getRuntime().addShutdownHook(new Thread(this::close));
            start();
        }

        void start() throws Exception {
            p = new ProcessBuilder("java", "-Dzookeeper.admin.enableServer=false", "-Dznode.container.checkIntervalMs=500",
                "-cp", "/usr/share/java/zookeeper.jar", "org.apache.zookeeper.server.ZooKeeperServerMain", dir.resolve("zoo.cfg").toString())
                .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.appendTo(dir.resolve("zk.log").toFile())).start();
            long end = System.nanoTime() + 60_000_000_000L;
            while (!ruok(port)) {
                if (!p.isAlive()) throw new IllegalStateException("ZooKeeper exited: see " + dir);
                if (System.nanoTime() > end) throw new IllegalStateException("ZooKeeper did not start: see " + dir);
                Thread.sleep(50);
            }
        }

        String connect() { return "127.0.0.1:" + port; }

        /** Kill (SIGKILL) and start again: a restart of the only member, its leader. */
        void restart(long downMs) throws Exception {
            p.destroyForcibly().waitFor();
            Thread.sleep(downMs);
            start();
        }

        public void close() {
            if (p != null) p.destroyForcibly();
            try (var w = Files.walk(dir)) { w.sorted(Comparator.reverseOrder()).forEach(f -> f.toFile().delete()); } catch (IOException e) { }
        }
    }

    /** A TCP proxy in front of one server: cut closes every connection and refuses new ones. */
    static class Proxy implements Closeable {
        final ServerSocket listener;
        final int target;
        volatile boolean cut;
        final List<Socket> open = Collections.synchronizedList(new ArrayList<>());

        Proxy(int target) throws IOException {
            this.target = target;
            listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            Thread t = new Thread(this::acceptLoop, "proxy");
            t.setDaemon(true);
            t.start();
        }

        String connect() { return "127.0.0.1:" + listener.getLocalPort(); }

        void acceptLoop() {
            while (!listener.isClosed()) {
                try {
                    Socket c = listener.accept();
                    if (cut) { c.close(); continue; }
                    Socket s;
                    try { s = new Socket(InetAddress.getLoopbackAddress(), target); } catch (IOException e) { c.close(); continue; }
                    open.add(c); open.add(s);
                    pump(c, s); pump(s, c);
                } catch (IOException e) { /* closed */ }
            }
        }

        void pump(Socket from, Socket to) {
            Thread t = new Thread(() -> {
                byte[] buf = new byte[8192];
                try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream()) {
                    int n;
                    while ((n = in.read(buf)) > 0) out.write(buf, 0, n);
                } catch (IOException e) { /* cut */ }
                try { from.close(); to.close(); } catch (IOException e) { }
            });
            t.setDaemon(true);
            t.start();
        }

        void cut() {
            cut = true;
            synchronized (open) { for (Socket s : open) { try { s.close(); } catch (IOException e) { } } open.clear(); }
        }

        void pass() { cut = false; }

        public void close() throws IOException { cut(); listener.close(); }
    }

    static CuratorFramework client(String connect, String name, int sessionMs) {
        CuratorFramework c = CuratorFrameworkFactory.builder()
            .connectString(connect)
            .sessionTimeoutMs(sessionMs)
            .connectionTimeoutMs(Math.max(1000, sessionMs / 2))
            .retryPolicy(new RetryForever(50))
            .build();
        if (name != null) c.getConnectionStateListenable().addListener((cl, st) -> log("%s connection state %s", name, st));
        c.start();
        return c;
    }

    static boolean waitFor(long ms, java.util.function.BooleanSupplier f) throws InterruptedException {
        long end = System.nanoTime() + ms * 1_000_000L;
        while (System.nanoTime() < end) { if (f.getAsBoolean()) return true; Thread.sleep(5); }
        return f.getAsBoolean();
    }

    enum Fault { SUSPEND, LOSE, RESTART }

    static void apply(Fault f, Zk zk, Proxy p) throws Exception {
        switch (f) {
            case SUSPEND: p.cut(); Thread.sleep(SESSION_MS / 3); p.pass(); break;
            case LOSE: p.cut(); Thread.sleep(2L * SESSION_MS + 300); p.pass(); break;
            case RESTART: zk.restart(200); break;
        }
    }

    static String name(Fault f) { return f.name().toLowerCase(); }

    /** A fresh recursive read: path -> (data, mzxid). */
    static Map<String, String> readTree(CuratorFramework c, String root) throws Exception {
        Map<String, String> out = new TreeMap<>();
        Deque<String> todo = new ArrayDeque<>(List.of(root));
        while (!todo.isEmpty()) {
            String p = todo.pop();
            try {
                Stat st = new Stat();
                byte[] d = c.getData().storingStatIn(st).forPath(p);
                out.put(p, new String(d == null ? new byte[0] : d) + "@" + st.getMzxid());
                for (String ch : c.getChildren().forPath(p)) todo.push(p + "/" + ch);
            } catch (KeeperException.NoNodeException e) { }
        }
        return out;
    }

    static Map<String, String> view(CuratorCache cache) {
        Map<String, String> out = new TreeMap<>();
        cache.stream().forEach(d -> out.put(d.getPath(), new String(d.getData() == null ? new byte[0] : d.getData()) + "@" + d.getStat().getMzxid()));
        return out;
    }

    // ----- CuratorCache ---------------------------------------------------------------

    static void cache() throws Exception {
        try (Zk zk = new Zk(); Proxy p = new Proxy(zk.port)) {
            CuratorFramework admin = client(zk.connect(), null, 10_000);
            String root = "/curator-cache";
            admin.create().forPath(root);
            for (int i = 0; i < 8; i++) admin.create().forPath(root + "/n" + i, "v".getBytes());
            CuratorFramework c = client(p.connect(), "cache", SESSION_MS);
            CuratorCache cache = CuratorCache.build(c, root);
            // Events replayed on a map; inconsistencies counted.
            Map<String, Long> replica = new ConcurrentHashMap<>();
            AtomicInteger bad = new AtomicInteger();
            AtomicInteger events = new AtomicInteger();
            List<String> badWhat = Collections.synchronizedList(new ArrayList<>());
            CountDownLatch init = new CountDownLatch(1);
            cache.listenable().addListener(CuratorCacheListener.builder()
                .forCreates(d -> { events.incrementAndGet(); if (replica.put(d.getPath(), d.getStat().getMzxid()) != null) { bad.incrementAndGet(); badWhat.add("created again: " + d.getPath()); } })
                .forChanges((o, n) -> {
                    events.incrementAndGet();
                    Long had = replica.put(n.getPath(), n.getStat().getMzxid());
                    if (had == null || had != o.getStat().getMzxid()) { bad.incrementAndGet(); badWhat.add("changed from a state never reported: " + n.getPath()); }
                    else if (o.getStat().getMzxid() == n.getStat().getMzxid()) { bad.incrementAndGet(); badWhat.add("changed without a change: " + n.getPath()); }
                })
                .forDeletes(d -> { events.incrementAndGet(); if (replica.remove(d.getPath()) == null) { bad.incrementAndGet(); badWhat.add("deleted twice: " + d.getPath()); } })
                .forInitialized(init::countDown)
                .build());
            cache.start();
            if (!init.await(15, TimeUnit.SECONDS)) { System.out.println("RESULT curator cache: never initialized"); return; }
            AtomicBoolean paused = new AtomicBoolean(true), stop = new AtomicBoolean(false), idle = new AtomicBoolean(true);
            CuratorFramework w = client(zk.connect(), null, 10_000);
            Thread writer = new Thread(() -> {
                Random r = new Random(17);
                while (!stop.get()) {
                    if (paused.get()) { idle.set(true); sleep(5); continue; }
                    idle.set(false);
                    String path = root + "/n" + r.nextInt(8) + (r.nextDouble() < 0.3 ? "/c" + r.nextInt(3) : "");
                    byte[] data = ("v" + r.nextInt(1000)).getBytes();
                    try {
                        if (w.checkExists().forPath(path) != null) {
                            if (r.nextDouble() < 0.3) w.delete().forPath(path); else w.setData().forPath(path, data);
                        } else {
                            w.create().forPath(path, data);
                        }
                    } catch (Exception e) { /* races and restarts */ }
                    sleep(5);
                }
            });
            writer.setDaemon(true);
            writer.start();
            for (Fault f : Fault.values()) {
                paused.set(false);
                Thread.sleep(300);
                apply(f, zk, p);
                Thread.sleep(300);
                paused.set(true);
                waitFor(5000, idle::get);
                Map<String, String> fresh = readTree(w, root);
                long t0 = System.nanoTime();
                boolean equal = waitFor(3L * SESSION_MS + 5000, () -> view(cache).equals(fresh));
                long ms = (System.nanoTime() - t0) / 1_000_000;
                Map<String, String> v = view(cache);
                int missing = 0, extra = 0, differ = 0;
                for (String k : fresh.keySet()) if (!v.containsKey(k)) missing++; else if (!v.get(k).equals(fresh.get(k))) differ++;
                for (String k : v.keySet()) if (!fresh.containsKey(k)) extra++;
                System.out.printf("RESULT curator cache %s: equal=%s %s missing=%d extra=%d differ=%d inconsistent_events=%d%s%n",
                    name(f), equal, equal ? "after_ms=" + ms : "(waited " + ms + " ms)", missing, extra, differ, bad.get(),
                    badWhat.isEmpty() ? "" : " (" + String.join("; ", badWhat) + ")");
                badWhat.clear();
                bad.set(0);
            }
            stop.set(true);
            writer.join(5000);
            cache.close(); c.close(); w.close(); admin.close();
        }
    }

    static void sleep(long ms) { try { Thread.sleep(ms); } catch (InterruptedException e) { Thread.currentThread().interrupt(); } }

    // ----- PersistentNode -------------------------------------------------------------

    static void node() throws Exception {
        try (Zk zk = new Zk(); Proxy p = new Proxy(zk.port)) {
            CuratorFramework admin = client(zk.connect(), null, 10_000);
            String path = "/curator-node/svc/host-1";
            CuratorFramework c = client(p.connect(), "node", SESSION_MS);
            PersistentNode node = new PersistentNode(c, CreateMode.EPHEMERAL, false, path, "10.0.0.1:80".getBytes());
            node.start();
            if (!node.waitForInitialCreate(15, TimeUnit.SECONDS)) { System.out.println("RESULT curator node: never created"); return; }
            for (Fault f : Fault.values()) {
                apply(f, zk, p);
                long t0 = System.nanoTime();
                boolean back = waitFor(5L * SESSION_MS, () -> {
                    try {
                        Stat st = admin.checkExists().forPath(path);
                        return st != null && st.getEphemeralOwner() == c.getZookeeperClient().getZooKeeper().getSessionId();
                    } catch (Exception e) { return false; }
                });
                long ms = (System.nanoTime() - t0) / 1_000_000;
                System.out.printf("RESULT curator node %s: present_again=%s %s (limit: one session timeout, %d ms)%n",
                    name(f), back && ms <= SESSION_MS, back ? "after_ms=" + ms : "(waited " + ms + " ms)", SESSION_MS);
            }
            node.close();
            boolean gone = waitFor(5000, () -> { try { return admin.checkExists().forPath(path) == null; } catch (Exception e) { return false; } });
            System.out.printf("RESULT curator node close: deleted=%s%n", gone);
            c.close(); admin.close();
        }
    }

    // ----- InterProcessReadWriteLock and InterProcessSemaphoreV2 -------------------------

    /** Who acts as a holder; the invariant is checked at every grant. */
    static class Holders {
        final Set<Long> writers = new HashSet<>(), readers = new HashSet<>();
        long grants, violations;
        int mostLeases;
        String first;

        synchronized void enter(long id, boolean write, int leases) {
            grants++;
            (write ? writers : readers).add(id);
            String bad = null;
            if (leases > 0) {
                mostLeases = Math.max(mostLeases, readers.size());
                if (readers.size() > leases) bad = readers.size() + " leases of " + leases;
            } else if (writers.size() > 1) bad = "two writers";
            else if (!writers.isEmpty() && !readers.isEmpty()) bad = "a reader beside a writer";
            if (bad != null) { violations++; if (first == null) first = bad; }
        }

        synchronized void leave(long id) { writers.remove(id); readers.remove(id); }
    }

    /**
     * Each client loops: acquire (read or write, or a lease), act until released or until
     * Curator reports SUSPENDED or LOST (its documented advice: the holder cannot be sure
     * any more), release. Faults hit a random client, or the server.
     */
    static void exclusion(int clients, int leases) throws Exception {
        String kind = leases > 0 ? "semaphore" : "rwlock";
        try (Zk zk = new Zk()) {
            String path = "/curator-" + kind + "/lock";
            Holders h = new Holders();
            AtomicBoolean stop = new AtomicBoolean(false);
            AtomicLong ids = new AtomicLong();
            List<Proxy> proxies = new ArrayList<>();
            List<Thread> threads = new ArrayList<>();
            AtomicLong failures = new AtomicLong();
            for (int i = 0; i < clients; i++) {
                Proxy p = new Proxy(zk.port);
                proxies.add(p);
                CuratorFramework c = client(p.connect(), null, SESSION_MS);
                // Acting stops at SUSPENDED/LOST; it resumes only with a new acquisition.
                Set<Long> acting = ConcurrentHashMap.newKeySet();
                c.getConnectionStateListenable().addListener((cl, st) -> {
                    if (st == ConnectionState.SUSPENDED || st == ConnectionState.LOST) {
                        for (Long id : acting) { h.leave(id); acting.remove(id); }
                    }
                });
                InterProcessReadWriteLock rw = new InterProcessReadWriteLock(c, path);
                InterProcessSemaphoreV2 sem = leases > 0 ? new InterProcessSemaphoreV2(c, path, leases) : null;
                final int seed = 31 + i;
                Thread t = new Thread(() -> {
                    Random r = new Random(seed);
                    while (!stop.get()) {
                        boolean write = leases == 0 && r.nextDouble() < 0.4;
                        long id = ids.incrementAndGet();
                        try {
                            Lease lease = null;
                            InterProcessMutex m = null;
                            if (sem != null) {
                                lease = sem.acquire(4L * SESSION_MS, TimeUnit.MILLISECONDS);
                                if (lease == null) continue;
                            } else {
                                m = write ? rw.writeLock() : rw.readLock();
                                if (!m.acquire(4L * SESSION_MS, TimeUnit.MILLISECONDS)) continue;
                            }
                            if (c.getZookeeperClient().isConnected()) {
                                acting.add(id);
                                h.enter(id, write, leases);
                            }
                            Thread.sleep(10 + r.nextInt(50));
                            acting.remove(id);
                            h.leave(id);
                            if (sem != null) sem.returnLease(lease); else m.release();
                        } catch (Exception e) {
                            acting.remove(id);
                            h.leave(id);
                            failures.incrementAndGet();
                        }
                    }
                    c.close();
                });
                t.setDaemon(true);
                t.start();
                threads.add(t);
            }
            Random r = new Random(5);
            long stalled = 0;
            for (int round = 0; round < 2; round++) {
                for (Fault f : Fault.values()) {
                    long before;
                    synchronized (h) { before = h.grants; }
                    apply(f, zk, proxies.get(r.nextInt(clients)));
                    boolean progress = waitFor(4L * SESSION_MS, () -> { synchronized (h) { return h.grants > before + 2; } });
                    if (!progress) stalled++;
                }
            }
            stop.set(true);
            for (Thread t : threads) t.join(10_000);
            synchronized (h) {
                System.out.printf("RESULT curator %s clients=%d%s: grants=%d violations=%d%s stalled_after_faults=%d failed_calls=%d%n",
                    kind, clients, leases > 0 ? " n=" + leases : "", h.grants, h.violations,
                    h.first == null ? "" : " (first: " + h.first + ")", stalled, failures.get());
            }
            for (Proxy p : proxies) p.close();
        }
    }

    // ----- benchmarks -------------------------------------------------------------------

    static long usedHeap() {
        Runtime rt = Runtime.getRuntime();
        for (int i = 0; i < 3; i++) { System.gc(); sleep(100); }
        return rt.totalMemory() - rt.freeMemory();
    }

    static void benchCacheLoad(String connect, String root, int nodes) throws Exception {
        CuratorFramework c = client(connect, null, 30_000);
        c.blockUntilConnected();
        long before = usedHeap();
        CuratorCache cache = CuratorCache.build(c, root);
        CountDownLatch init = new CountDownLatch(1);
        cache.listenable().addListener(CuratorCacheListener.builder().forInitialized(init::countDown).build());
        long t0 = System.nanoTime();
        cache.start();
        init.await();
        double secs = (System.nanoTime() - t0) / 1e9;
        long atInit = cache.size();
        // CuratorCache may report initialized before it holds the whole subtree: wait for
        // the count to stop growing (or reach the tree), and time that too.
        long last = -1, size = atInit;
        long stableSince = System.nanoTime();
        while (size < nodes && System.nanoTime() - stableSince < 3_000_000_000L) {
            Thread.sleep(50);
            size = cache.size();
            if (size != last) { last = size; stableSince = System.nanoTime(); }
        }
        double full = (System.nanoTime() - t0) / 1e9;
        long after = usedHeap();
        System.out.printf("BENCH curator cache-load nodes_at_initialized=%d seconds=%.3f nodes=%d seconds_to_all=%.3f nodes_per_s=%.0f heap_bytes_per_node=%.0f%n",
            atInit, secs, size, full, size / full, (after - before) / (double) size);
        cache.close();
        c.close();
    }

    static void benchCacheEvents(String connect, String root, int rate, int seconds) throws Exception {
        CuratorFramework c = client(connect, null, 30_000);
        CuratorFramework w = client(connect, null, 30_000);
        c.blockUntilConnected(); w.blockUntilConnected();
        int keys = 1000;
        try { w.create().creatingParentsIfNeeded().forPath(root); } catch (KeeperException.NodeExistsException e) { }
        for (int i = 0; i < keys; i++) try { w.create().forPath(root + "/k" + i, "0".getBytes()); } catch (KeeperException.NodeExistsException e) { }
        CuratorCache cache = CuratorCache.build(c, root);
        ConcurrentHashMap<String, Long> sentAt = new ConcurrentHashMap<>();
        long[] lat = new long[rate * seconds + 16];
        AtomicInteger got = new AtomicInteger();
        CountDownLatch init = new CountDownLatch(1);
        cache.listenable().addListener(CuratorCacheListener.builder()
            .forChanges((o, n) -> {
                Long at = sentAt.remove(new String(n.getData()));
                if (at != null) { int i = got.getAndIncrement(); if (i < lat.length) lat[i] = System.nanoTime() - at; }
            })
            .forInitialized(init::countDown).build());
        cache.start();
        init.await();
        long start = System.nanoTime();
        long total = (long) rate * seconds;
        Semaphore inflight = new Semaphore(256);
        for (long i = 0; i < total; i++) {
            long due = start + i * 1_000_000_000L / rate;
            while (System.nanoTime() < due) Thread.onSpinWait();
            String v = "w" + i;
            inflight.acquire();
            sentAt.put(v, System.nanoTime());
            w.setData().inBackground((cl, ev) -> inflight.release()).forPath(root + "/k" + (i % keys), v.getBytes());
        }
        double sent = (System.nanoTime() - start) / 1e9;
        waitFor(10_000, () -> sentAt.isEmpty());
        double all = (System.nanoTime() - start) / 1e9;
        int n = Math.min(got.get(), lat.length);
        long[] l = Arrays.copyOf(lat, n);
        Arrays.sort(l);
        System.out.printf("BENCH curator cache-events writes=%d rate=%.0f/s events=%d events_per_s=%.0f p50_ms=%.2f p99_ms=%.2f missed=%d%n",
            total, total / sent, n, n / all, n == 0 ? 0 : l[n / 2] / 1e6, n == 0 ? 0 : l[Math.min(n - 1, n * 99 / 100)] / 1e6, sentAt.size());
        cache.close(); c.close(); w.close();
    }

    static void benchLock(String connect, String path, String kind, int contenders, int cycles) throws Exception {
        List<CuratorFramework> clients = new ArrayList<>();
        for (int i = 0; i < contenders; i++) { CuratorFramework c = client(connect, null, 30_000); c.blockUntilConnected(); clients.add(c); }
        long[][] lat = new long[contenders][cycles];
        CyclicBarrier go = new CyclicBarrier(contenders);
        List<Thread> ts = new ArrayList<>();
        long[] wall = new long[2];
        for (int i = 0; i < contenders; i++) {
            final int me = i;
            CuratorFramework c = clients.get(i);
            Thread t = new Thread(() -> {
                try {
                    InterProcessMutex m = new InterProcessReadWriteLock(c, path).writeLock();
                    InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(c, path, 4);
                    go.await();
                    if (me == 0) wall[0] = System.nanoTime();
                    for (int k = 0; k < cycles; k++) {
                        long t0 = System.nanoTime();
                        if (kind.equals("semaphore")) { Lease l = sem.acquire(); sem.returnLease(l); }
                        else { m.acquire(); m.release(); }
                        lat[me][k] = System.nanoTime() - t0;
                    }
                } catch (Exception e) { throw new RuntimeException(e); }
            });
            t.start();
            ts.add(t);
        }
        for (Thread t : ts) t.join();
        double secs = (System.nanoTime() - wall[0]) / 1e9;
        long[] all = Arrays.stream(lat).flatMapToLong(Arrays::stream).sorted().toArray();
        System.out.printf("BENCH curator lock kind=%s contenders=%d cycles=%d p50_ms=%.2f p99_ms=%.2f cycles_per_s=%.0f%n",
            kind, contenders, all.length, all[all.length / 2] / 1e6, all[Math.min(all.length - 1, all.length * 99 / 100)] / 1e6, all.length / secs);
        for (CuratorFramework c : clients) c.close();
    }

    public static void main(String[] args) throws Exception {
        // Curator logs through slf4j; without a binding it prints one warning and nothing else.
        switch (args[0]) {
            case "cache": cache(); break;
            case "node": node(); break;
            case "rwlock": exclusion(3, 0); break;
            case "semaphore": exclusion(4, 2); break;
            case "bench-cache-load": benchCacheLoad(args[1], args[2], Integer.parseInt(args[3])); break;
            case "bench-cache-events": benchCacheEvents(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4])); break;
            case "bench-lock": benchLock(args[1], args[2], args[3], Integer.parseInt(args[4]), Integer.parseInt(args[5])); break;
            default: throw new IllegalArgumentException("unknown scenario " + args[0]);
        }
        System.exit(0);
    }
}
