// Apache Curator 5.4 against the server under test (one server, or every member of an
// ensemble): LeaderLatch and InterProcessMutex, each client on its own member, so the
// hand-overs cross members. Run by tests/test_curator.py:
//   java -cp <curator + zookeeper jars>:<classes> CuratorSmoke <base path> host:port...
// Prints one line per step; exits 0 when every step held, 1 (with the reason) otherwise.
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryForever;

public class CuratorSmoke {
    static final long DEADLINE_MS = 20_000;

    static void fail(String why) {
        System.out.println("FAIL " + why);
        System.out.flush();
        System.exit(1);
    }

    /** Polls `cond` until it holds, failing after DEADLINE_MS (waiting on a condition). */
    static void await(String what, BooleanSupplier cond) throws InterruptedException {
        long end = System.currentTimeMillis() + DEADLINE_MS;
        while (!cond.getAsBoolean()) {
            if (System.currentTimeMillis() > end) fail("timed out waiting for: " + what);
            Thread.sleep(10);
        }
    }

    static int leaders(List<LeaderLatch> latches) {
        int n = 0;
        for (LeaderLatch l : latches) if (l.hasLeadership()) n++;
        return n;
    }

    public static void main(String[] args) throws Exception {
        String base = args[0];
        List<CuratorFramework> clients = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            // Client i on member i (mod their number), alone in its connect string.
            String member = args[1 + i % (args.length - 1)];
            CuratorFramework c = CuratorFrameworkFactory.builder().connectString(member)
                .sessionTimeoutMs(10_000).connectionTimeoutMs(10_000)
                .retryPolicy(new RetryForever(100)).build();
            c.start();
            if (!c.blockUntilConnected(20, TimeUnit.SECONDS)) fail("client " + i + " did not connect to " + member);
            clients.add(c);
        }
        System.out.println("connected 3 clients");

        // LeaderLatch: exactly one leader among the three; when it closes, exactly one other.
        List<LeaderLatch> latches = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            LeaderLatch l = new LeaderLatch(clients.get(i), base + "/latch", "c" + i);
            l.start();
            latches.add(l);
        }
        await("one leader", () -> leaders(latches) == 1);
        int first = -1;
        for (int i = 0; i < 3; i++) if (latches.get(i).hasLeadership()) first = i;
        if (leaders(latches) != 1) fail("leaders: " + leaders(latches));
        System.out.println("latch: c" + first + " leads");
        LeaderLatch gone = latches.remove(first);
        gone.close();
        await("a new leader after the first closed its latch", () -> leaders(latches) == 1);
        if (gone.hasLeadership()) fail("the closed latch still leads");
        System.out.println("latch: leadership handed over after close");
        for (LeaderLatch l : latches) l.close();

        // InterProcessMutex: exclusive, and handed over on release across members.
        InterProcessMutex m0 = new InterProcessMutex(clients.get(0), base + "/mutex");
        InterProcessMutex m1 = new InterProcessMutex(clients.get(1), base + "/mutex");
        if (!m0.acquire(20, TimeUnit.SECONDS)) fail("c0 could not take the free mutex");
        if (m1.acquire(0, TimeUnit.MILLISECONDS)) fail("c1 took the mutex c0 holds");
        m0.release();
        if (!m1.acquire(20, TimeUnit.SECONDS)) fail("c1 did not get the mutex after c0 released it");
        m1.release();
        System.out.println("mutex: exclusive, handed over on release");

        for (CuratorFramework c : clients) c.close();
        System.out.println("OK");
        System.out.flush();
        System.exit(0);
    }
}
