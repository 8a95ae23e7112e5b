"""kazoo's recipes, each built from sequential ephemerals, watches and versioned writes:
Lock, ReadLock/WriteLock, Semaphore, Election, Counter, Barrier, DoubleBarrier, Queue,
LockingQueue, Party, ShallowParty, NonBlockingLease and TreeCache. Contending clients are
separate sessions; hand-overs are awaited with deadlines."""

import datetime
import threading

import pytest
from kazoo.recipe.cache import TreeCache, TreeEvent

from helpers import EVENT_TIMEOUT, Recorder, expire_session, wait_event, wait_until


def run_in_thread(fn, *args):
    """Runs fn(*args) in a daemon thread; returns (thread, done Event, result list)."""
    done = threading.Event()
    result = []

    def target():
        try:
            result.append(fn(*args))
        except BaseException as exc:  # reported through `result`
            result.append(exc)
        finally:
            done.set()

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, done, result


# --- Lock -------------------------------------------------------------------------------


def test_lock_is_exclusive_and_handed_over_on_release(new_client, base, members):
    a, b = new_client(), new_client()
    lock_a = a.Lock(f"{base}/lock", "a")
    lock_b = b.Lock(f"{base}/lock", "b")
    assert lock_a.acquire(timeout=EVENT_TIMEOUT)
    assert lock_b.acquire(blocking=False) is False
    _, got_it, result = run_in_thread(lock_b.acquire, True, EVENT_TIMEOUT)
    wait_until(lambda: lock_a.contenders() == ["a", "b"], "both contenders are listed")
    assert not got_it.is_set()
    lock_a.release()
    wait_event(got_it, "b to get the lock after a released it")
    assert result == [True]
    assert lock_b.contenders() == ["b"]
    lock_b.release()
    members.settle()  # b's release is seen by a on another member after a sync
    assert a.get_children(f"{base}/lock") == []


def test_lock_as_context_manager(zk, base):
    lock = zk.Lock(f"{base}/lock", "me")
    with lock:
        assert lock.is_acquired
        assert len(zk.get_children(f"{base}/lock")) == 1
    assert not lock.is_acquired
    assert zk.get_children(f"{base}/lock") == []


def test_lock_is_freed_when_holder_session_closes(new_client, base):
    a, b = new_client(), new_client()
    assert a.Lock(f"{base}/lock", "a").acquire(timeout=EVENT_TIMEOUT)
    lock_b = b.Lock(f"{base}/lock", "b")
    _, got_it, result = run_in_thread(lock_b.acquire, True, EVENT_TIMEOUT)
    wait_until(lambda: len(b.get_children(f"{base}/lock")) == 2, "b is queued")
    a.stop()
    wait_event(got_it, "b to get the lock after a's session closed")
    assert result == [True]


def test_lock_is_freed_when_holder_session_expires(new_client, base):
    a, b = new_client(), new_client()
    lock_a = a.Lock(f"{base}/lock", "a")
    assert lock_a.acquire(timeout=EVENT_TIMEOUT)
    lock_b = b.Lock(f"{base}/lock", "b")
    _, got_it, result = run_in_thread(lock_b.acquire, True, EVENT_TIMEOUT)
    wait_until(lambda: len(b.get_children(f"{base}/lock")) == 2, "b is queued")
    expire_session(a)
    wait_event(got_it, "b to get the lock after a's session expired")
    assert result == [True]
    assert lock_b.contenders() == ["b"]


def test_read_locks_share_and_write_lock_excludes(new_client, base, members):
    r1, r2, w = new_client(), new_client(), new_client()
    read1 = r1.ReadLock(f"{base}/rw", "r1")
    read2 = r2.ReadLock(f"{base}/rw", "r2")
    write = w.WriteLock(f"{base}/rw", "w")
    assert read1.acquire(timeout=EVENT_TIMEOUT)
    assert read2.acquire(timeout=EVENT_TIMEOUT)
    members.settle()  # w's member lists the readers' nodes
    assert write.acquire(blocking=False) is False
    read1.release()
    read2.release()
    assert write.acquire(timeout=EVENT_TIMEOUT)
    members.settle()
    assert r1.ReadLock(f"{base}/rw", "r3").acquire(blocking=False) is False
    write.release()


def test_semaphore_grants_at_most_max_leases(new_client, base, members):
    clients = [new_client() for _ in range(3)]
    sems = [c.Semaphore(f"{base}/sem", f"s{i}", max_leases=2) for i, c in enumerate(clients)]
    assert sems[0].acquire(timeout=EVENT_TIMEOUT)
    assert sems[1].acquire(timeout=EVENT_TIMEOUT)
    members.settle()  # every member lists both leases
    assert sems[2].acquire(blocking=False) is False
    assert sorted(sems[0].lease_holders()) == ["s0", "s1"]
    _, got_it, result = run_in_thread(sems[2].acquire, True, EVENT_TIMEOUT)
    sems[0].release()
    wait_event(got_it, "the third client to get a lease")
    assert result == [True]
    members.settle()
    assert sorted(sems[1].lease_holders()) == ["s1", "s2"]


# --- Election ---------------------------------------------------------------------------


def test_election_elects_one_leader_and_fails_over(new_client, base):
    a, b = new_client(), new_client()
    leader = Recorder()
    resign = {"a": threading.Event(), "b": threading.Event()}

    def lead(name):
        leader(name)
        resign[name].wait(EVENT_TIMEOUT * 2)

    elect_a = a.Election(f"{base}/election", "a")
    elect_b = b.Election(f"{base}/election", "b")
    run_in_thread(elect_a.run, lead, "a")
    leader.wait_for(lambda l: l == ["a"], "a to lead")
    _, b_done, _ = run_in_thread(elect_b.run, lead, "b")
    wait_until(lambda: elect_a.contenders() == ["a", "b"], "both candidates are listed")
    assert leader.items == ["a"]
    resign["a"].set()
    leader.wait_for(lambda l: l == ["a", "b"], "b to lead after a resigned")
    assert elect_b.contenders() == ["b"]
    resign["b"].set()
    wait_event(b_done, "b's run() to return")


def test_election_fails_over_when_leader_session_closes(new_client, base):
    a, b = new_client(), new_client()
    leader = Recorder()
    forever = threading.Event()

    def lead(name):
        leader(name)
        forever.wait(EVENT_TIMEOUT * 2)

    run_in_thread(a.Election(f"{base}/election", "a").run, lead, "a")
    leader.wait_for(lambda l: l == ["a"], "a to lead")
    elect_b = b.Election(f"{base}/election", "b")
    run_in_thread(elect_b.run, lead, "b")
    wait_until(lambda: len(elect_b.contenders()) == 2, "b is a candidate")
    a.stop()
    leader.wait_for(lambda l: l == ["a", "b"], "b to lead after a's session closed")
    forever.set()


# --- Counter ----------------------------------------------------------------------------


def test_counter_adds_and_subtracts(zk, base):
    counter = zk.Counter(f"{base}/counter")
    assert counter.value == 0
    counter += 5
    counter -= 2
    assert counter.value == 3
    assert counter.pre_value == 5 and counter.post_value == 3
    float_counter = zk.Counter(f"{base}/fcounter", default=0.5)
    float_counter += 1.25
    assert float_counter.value == 1.75


def test_counter_is_exact_under_concurrent_increments(new_client, base, members):
    clients = [new_client() for _ in range(3)]

    def bump(client):
        counter = client.Counter(f"{base}/counter")
        for _ in range(15):
            counter += 1

    threads = [run_in_thread(bump, c) for c in clients]
    for _, done, result in threads:
        wait_event(done, "the increments to finish")
        assert result == [None]
    # Every increment is a setData with the version last read; a lost update would
    # show as a smaller total.
    members.settle()  # clients[0] reads what the others wrote through their members
    assert clients[0].Counter(f"{base}/counter").value == 45


# --- Barriers ---------------------------------------------------------------------------


def test_barrier_blocks_until_removed(new_client, base, members):
    a, b = new_client(), new_client()
    barrier = a.Barrier(f"{base}/barrier")
    barrier.create()
    members.settle()  # b may be on another member: the barrier is up there too
    waiter = b.Barrier(f"{base}/barrier")
    _, released, result = run_in_thread(waiter.wait, EVENT_TIMEOUT)
    assert not released.wait(0.3), "wait() returned while the barrier was up"
    barrier.remove()
    wait_event(released, "wait() to return after the barrier was removed")
    assert result == [True]


def test_barrier_wait_without_barrier_returns_at_once(zk, base):
    assert zk.Barrier(f"{base}/none").wait(timeout=EVENT_TIMEOUT) is True


def test_double_barrier_enters_and_leaves_together(new_client, base):
    a, b = new_client(), new_client()
    bar_a = a.DoubleBarrier(f"{base}/dbl", 2)
    bar_b = b.DoubleBarrier(f"{base}/dbl", 2)
    _, a_in, a_res = run_in_thread(bar_a.enter)
    assert not a_in.wait(0.3), "entered before the second participant arrived"
    _, b_in, b_res = run_in_thread(bar_b.enter)
    wait_event(a_in, "a to enter")
    wait_event(b_in, "b to enter")
    assert bar_a.participating and bar_b.participating
    _, a_out, _ = run_in_thread(bar_a.leave)
    _, b_out, _ = run_in_thread(bar_b.leave)
    wait_event(a_out, "a to leave")
    wait_event(b_out, "b to leave")
    assert not bar_a.participating and not bar_b.participating
    assert a_res == [None] and b_res == [None]


# --- Queues -----------------------------------------------------------------------------


def test_queue_is_fifo_within_priority(new_client, base, members):
    producer, consumer = new_client(), new_client()
    q = producer.Queue(f"{base}/queue")
    q.put(b"first")
    q.put(b"second")
    q.put(b"urgent", priority=1)
    assert len(q) == 3
    members.settle()  # the consumer may be on another member: it sees all three
    cq = consumer.Queue(f"{base}/queue")
    assert [cq.get(), cq.get(), cq.get()] == [b"urgent", b"first", b"second"]
    assert cq.get() is None
    assert len(q) == 0


def test_locking_queue_holds_item_until_consumed(new_client, base, members):
    producer, consumer, other = new_client(), new_client(), new_client()
    q = producer.LockingQueue(f"{base}/lq")
    q.put_all([b"a", b"b"])
    cq = consumer.LockingQueue(f"{base}/lq")
    assert cq.get(timeout=EVENT_TIMEOUT) == b"a"
    assert cq.holds_lock()
    # Another consumer skips the locked item.
    oq = other.LockingQueue(f"{base}/lq")
    assert oq.get(timeout=EVENT_TIMEOUT) == b"b"
    assert oq.release()  # give "b" back
    assert cq.consume()
    members.settle()  # q counts, on the producer's member, what cq deleted through its own
    assert len(q) == 1
    assert cq.get(timeout=EVENT_TIMEOUT) == b"b"
    assert cq.consume()
    members.settle()
    assert len(q) == 0


def test_locking_queue_get_waits_for_put(new_client, base):
    producer, consumer = new_client(), new_client()
    cq = consumer.LockingQueue(f"{base}/lq")
    _, got, result = run_in_thread(cq.get, EVENT_TIMEOUT)
    producer.LockingQueue(f"{base}/lq").put(b"late")
    wait_event(got, "get() to see the new item")
    assert result == [b"late"]


# --- Parties and leases -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["Party", "ShallowParty"])
def test_party_membership_follows_sessions(new_client, base, kind, members):
    a, b, c = new_client(), new_client(), new_client()
    pa = getattr(a, kind)(f"{base}/party", "alice")
    pb = getattr(b, kind)(f"{base}/party", "bob")
    pc = getattr(c, kind)(f"{base}/party", "carol")
    for p in (pa, pb, pc):
        p.join()
    members.settle()  # a lists, on its member, what b and c wrote through theirs
    assert sorted(pa) == ["alice", "bob", "carol"]
    assert len(pa) == 3
    pb.leave()
    members.settle()
    assert sorted(pa) == ["alice", "carol"]
    # Membership is an ephemeral node: closing carol's session removes her.
    c.stop()
    wait_until(lambda: sorted(pa) == ["alice"], "carol's membership to vanish")


def test_non_blocking_lease_goes_to_one_holder(new_client, base, members):
    a, b = new_client(), new_client()
    duration = datetime.timedelta(minutes=5)
    lease_a = a.NonBlockingLease(f"{base}/lease", duration, identifier="a")
    # The lease is tried when it is constructed: b's member must have a's first.
    members.settle()
    lease_b = b.NonBlockingLease(f"{base}/lease", duration, identifier="b")
    assert bool(lease_a) is True
    assert bool(lease_b) is False


# --- TreeCache --------------------------------------------------------------------------


def test_tree_cache_mirrors_a_subtree(new_client, base, members):
    reader, writer = new_client(), new_client()
    writer.create(f"{base}/a", b"1")
    members.settle()  # the reader's first load includes a
    cache = TreeCache(reader, base)
    seen = Recorder()
    cache.listen(lambda ev: seen((ev.event_type, ev.event_data and ev.event_data.path)))
    cache.start()
    try:
        seen.wait_for(lambda s: (TreeEvent.INITIALIZED, None) in s, "the initial load")
        writer.create(f"{base}/a/b", b"2")
        seen.wait_for(lambda s: (TreeEvent.NODE_ADDED, f"{base}/a/b") in s, "a/b added")
        writer.set(f"{base}/a", b"1+")
        seen.wait_for(lambda s: (TreeEvent.NODE_UPDATED, f"{base}/a") in s, "a updated")
        assert cache.get_data(f"{base}/a").data == b"1+"
        writer.delete(f"{base}/a/b")
        seen.wait_for(lambda s: (TreeEvent.NODE_REMOVED, f"{base}/a/b") in s, "a/b removed")
        assert sorted(cache.get_children(base)) == ["a"]
        assert cache.get_children(f"{base}/a") == frozenset()
    finally:
        cache.close()
