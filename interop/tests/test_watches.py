"""One-shot watches set by get / exists / get_children, and kazoo's DataWatch and
ChildrenWatch recipes (docs/client-protocol.md, "Watches").

To show that a watch did *not* fire, a test arms a second "sentinel" watch on another node
and triggers it after the operation under test. The server sends notifications in
transaction order and kazoo runs watch callbacks in order on one thread, so once the
sentinel's callback has run, any notification caused by the earlier operation has been
delivered too. No test sleeps to wait for something not to happen."""

import queue

import pytest
from kazoo.protocol.states import EventType, KeeperState
from kazoo.security import READ_ACL_UNSAFE

from helpers import EVENT_TIMEOUT, Recorder


def events(recorder):
    return [(e.type, e.path) for e in recorder.items]


def sentinel(client, path):
    """Arms a watch on a fresh node `path`; calling the returned function fires it and
    waits until its callback has run."""
    client.create(path, b"")
    fired = Recorder()
    client.get(path, watch=fired)

    def trigger(writer=None):
        (writer or client).set(path, b"go")
        fired.wait_count(1, "the sentinel watch")

    return trigger


def test_data_watch_fires_changed_once(zk, zk2, base):
    zk.create(f"{base}/n", b"v0")
    rec = Recorder()
    zk.get(f"{base}/n", watch=rec)
    flush = sentinel(zk, f"{base}/sentinel")
    zk2.set(f"{base}/n", b"v1")
    rec.wait_count(1, "NodeDataChanged")
    zk2.set(f"{base}/n", b"v2")  # one-shot: the watch is gone now
    flush(zk2)
    assert events(rec) == [(EventType.CHANGED, f"{base}/n")]
    assert rec.items[0].state == KeeperState.CONNECTED


def test_data_watch_fires_deleted(zk, zk2, base):
    zk.create(f"{base}/n", b"")
    rec = Recorder()
    zk.get(f"{base}/n", watch=rec)
    zk2.delete(f"{base}/n")
    rec.wait_count(1, "NodeDeleted")
    assert events(rec) == [(EventType.DELETED, f"{base}/n")]


def test_exists_watch_on_missing_node_fires_created(zk, zk2, base):
    rec = Recorder()
    assert zk.exists(f"{base}/n", watch=rec) is None
    zk2.create(f"{base}/n", b"")
    rec.wait_count(1, "NodeCreated")
    assert events(rec) == [(EventType.CREATED, f"{base}/n")]


def test_exists_watch_on_existing_node_fires_on_change(zk, zk2, base):
    zk.create(f"{base}/n", b"")
    rec = Recorder()
    assert zk.exists(f"{base}/n", watch=rec) is not None
    zk2.set(f"{base}/n", b"x")
    rec.wait_count(1, "NodeDataChanged")
    assert events(rec) == [(EventType.CHANGED, f"{base}/n")]


def test_get_on_missing_node_sets_no_watch(zk, zk2, base):
    rec = Recorder()
    with pytest.raises(Exception):
        zk.get(f"{base}/n", watch=rec)
    flush = sentinel(zk, f"{base}/sentinel")
    zk2.create(f"{base}/n", b"")
    flush(zk2)
    assert events(rec) == []


def test_child_watch_fires_on_child_create_once(zk, zk2, base, aux):
    rec = Recorder()
    assert zk.get_children(base, watch=rec) == []
    flush = sentinel(zk, f"{aux}/sentinel")
    zk2.create(f"{base}/a", b"")
    rec.wait_count(1, "NodeChildrenChanged")
    zk2.create(f"{base}/b", b"")
    flush(zk2)
    assert events(rec) == [(EventType.CHILD, base)]


def test_child_watch_fires_on_child_delete(zk, zk2, base):
    zk.create(f"{base}/a", b"")
    rec = Recorder()
    zk.get_children(base, watch=rec)
    zk2.delete(f"{base}/a")
    rec.wait_count(1, "NodeChildrenChanged")
    assert events(rec) == [(EventType.CHILD, base)]


def test_child_watch_fires_deleted_when_the_node_itself_goes(zk, zk2, base):
    zk.create(f"{base}/p", b"")
    rec = Recorder()
    zk.get_children(f"{base}/p", watch=rec)
    zk2.delete(f"{base}/p")
    rec.wait_count(1, "NodeDeleted")
    assert events(rec) == [(EventType.DELETED, f"{base}/p")]


def test_child_data_change_does_not_fire_child_watch(zk, zk2, base, aux):
    zk.create(f"{base}/a", b"")
    rec = Recorder()
    zk.get_children(base, watch=rec)
    flush = sentinel(zk, f"{aux}/sentinel")
    zk2.set(f"{base}/a", b"changed")
    flush(zk2)
    assert events(rec) == []


def test_child_create_does_not_fire_data_watch_on_parent(zk, zk2, base, aux):
    rec = Recorder()
    zk.get(base, watch=rec)
    flush = sentinel(zk, f"{aux}/sentinel")
    zk2.create(f"{base}/a", b"")
    flush(zk2)
    assert events(rec) == []


def test_set_acl_fires_no_watch(zk, zk2, base):
    zk.create(f"{base}/n", b"")
    rec = Recorder()
    zk.get(f"{base}/n", watch=rec)
    zk.get_children(f"{base}/n", watch=rec)
    flush = sentinel(zk, f"{base}/sentinel")
    zk2.set_acls(f"{base}/n", READ_ACL_UNSAFE)
    flush(zk2)
    assert events(rec) == []


def test_create_fires_node_created_before_parent_child_event(zk, zk2, base):
    # One transaction's events come in a fixed order: the node's own event, then the
    # parent's NodeChildrenChanged (docs/client-protocol.md, "What fires what").
    rec = Recorder()
    zk.exists(f"{base}/n", watch=rec)
    zk.get_children(base, watch=rec)
    zk2.create(f"{base}/n", b"")
    rec.wait_count(2)
    assert events(rec) == [(EventType.CREATED, f"{base}/n"), (EventType.CHILD, base)]


def test_delete_fires_node_deleted_before_parent_child_event(zk, zk2, base):
    zk.create(f"{base}/n", b"")
    rec = Recorder()
    zk.get(f"{base}/n", watch=rec)
    zk.get_children(base, watch=rec)
    zk2.delete(f"{base}/n")
    rec.wait_count(2)
    assert events(rec) == [(EventType.DELETED, f"{base}/n"), (EventType.CHILD, base)]


def test_watches_of_several_sessions_all_fire(new_client, base):
    writer = new_client()
    writer.create(f"{base}/n", b"")
    watchers = [new_client() for _ in range(3)]
    recs = []
    for client in watchers:
        rec = Recorder()
        client.get(f"{base}/n", watch=rec)
        recs.append(rec)
    writer.set(f"{base}/n", b"x")
    for rec in recs:
        rec.wait_count(1)
        assert events(rec) == [(EventType.CHANGED, f"{base}/n")]


def test_own_write_notifies_own_watch(zk, base):
    zk.create(f"{base}/n", b"")
    rec = Recorder()
    zk.get(f"{base}/n", watch=rec)
    zk.set(f"{base}/n", b"mine")
    rec.wait_count(1)
    assert events(rec) == [(EventType.CHANGED, f"{base}/n")]


def test_read_after_event_sees_the_new_data(zk, zk2, base):
    zk.create(f"{base}/n", b"old")
    seen = queue.Queue()
    zk.get(f"{base}/n", watch=lambda ev: seen.put(zk.get(f"{base}/n")[0]))
    zk2.set(f"{base}/n", b"new")
    assert seen.get(timeout=EVENT_TIMEOUT) == b"new"


def test_transaction_fires_watches_of_each_operation(zk, zk2, base):
    zk.create(f"{base}/a", b"")
    rec = Recorder()
    zk.get(f"{base}/a", watch=rec)
    zk.exists(f"{base}/b", watch=rec)
    t = zk2.transaction()
    t.set_data(f"{base}/a", b"x")
    t.create(f"{base}/b", b"")
    t.commit()
    rec.wait_count(2)
    assert events(rec) == [
        (EventType.CHANGED, f"{base}/a"),
        (EventType.CREATED, f"{base}/b"),
    ]


def test_data_watch_recipe_follows_create_change_delete(zk, zk2, base):
    calls = Recorder()

    @zk.DataWatch(f"{base}/n")
    def watcher(data, stat):
        calls((data, stat.version if stat else None))

    calls.wait_count(1, "the initial call")
    zk2.create(f"{base}/n", b"a")
    calls.wait_for(lambda c: (b"a", 0) in c, "the create")
    zk2.set(f"{base}/n", b"b")
    calls.wait_for(lambda c: (b"b", 1) in c, "the change")
    zk2.delete(f"{base}/n")
    items = calls.wait_for(lambda c: len(c) >= 4 and c[-1] == (None, None), "the delete")
    assert items[0] == (None, None)
    assert items == [(None, None), (b"a", 0), (b"b", 1), (None, None)]


def test_children_watch_recipe_follows_membership(zk, zk2, base):
    calls = Recorder()
    zk.ChildrenWatch(base, lambda children: calls(sorted(children)))
    calls.wait_count(1, "the initial call")
    zk2.create(f"{base}/a", b"")
    calls.wait_for(lambda c: c[-1] == ["a"], "child a")
    zk2.create(f"{base}/b", b"")
    calls.wait_for(lambda c: c[-1] == ["a", "b"], "child b")
    zk2.delete(f"{base}/a")
    calls.wait_for(lambda c: c[-1] == ["b"], "a removed")
    assert calls.items == [[], ["a"], ["a", "b"], ["b"]]


def test_data_watch_recipe_can_stop_itself(zk, zk2, base):
    zk.create(f"{base}/n", b"0")
    calls = Recorder()

    def watcher(data, stat):
        calls(data)
        return data != b"1"  # returning False unregisters the DataWatch

    zk.DataWatch(f"{base}/n", watcher)
    calls.wait_count(1)
    zk2.set(f"{base}/n", b"1")
    calls.wait_count(2)
    flush = sentinel(zk, f"{base}/sentinel")
    zk2.set(f"{base}/n", b"2")
    flush(zk2)
    assert calls.items == [b"0", b"1"]
