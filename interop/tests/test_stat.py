"""The Stat record after each kind of write: which fields change and which stay
(docs/client-protocol.md, "Stat fields"). Zxids are compared with each other, never with
fixed numbers, so the checks hold on any server whatever its history."""

import time

from kazoo.security import make_digest_acl, READ_ACL_UNSAFE

from helpers import expected_config_znode

# The server's clock and ours are the same machine's; allow for slow CI all the same.
CLOCK_SLACK_MS = 60_000


def now_ms():
    return int(time.time() * 1000)


def test_stat_of_a_new_node(zk, base):
    before = now_ms()
    zk.create(f"{base}/n", b"12345")
    after = now_ms()
    stat = zk.exists(f"{base}/n")
    assert stat.czxid > 0
    assert stat.mzxid == stat.czxid
    assert stat.pzxid == stat.czxid
    assert stat.ctime == stat.mtime
    assert before - CLOCK_SLACK_MS <= stat.ctime <= after + CLOCK_SLACK_MS
    assert (stat.version, stat.cversion, stat.aversion) == (0, 0, 0)
    assert stat.ephemeralOwner == 0
    assert stat.dataLength == 5
    assert stat.numChildren == 0


def test_set_data_changes_mzxid_mtime_version_and_length_only(zk, base):
    zk.create(f"{base}/n", b"one")
    created = zk.exists(f"{base}/n")
    stat = zk.set(f"{base}/n", b"three")
    assert stat.czxid == created.czxid
    assert stat.ctime == created.ctime
    assert stat.mzxid > created.mzxid
    assert stat.mtime >= created.mtime
    assert stat.version == 1
    assert stat.dataLength == 5
    assert stat.pzxid == created.pzxid
    assert (stat.cversion, stat.aversion, stat.numChildren) == (0, 0, 0)
    assert zk.exists(f"{base}/n") == stat


def test_set_with_identical_data_still_bumps_version(zk, base):
    zk.create(f"{base}/n", b"same")
    s1 = zk.set(f"{base}/n", b"same")
    s2 = zk.set(f"{base}/n", b"same")
    assert (s1.version, s2.version) == (1, 2)
    assert s2.mzxid > s1.mzxid


def test_child_create_updates_parent_cversion_numchildren_pzxid(zk, base):
    zk.create(f"{base}/p", b"data")
    parent = zk.exists(f"{base}/p")
    _, child = zk.create(f"{base}/p/c", b"", include_data=True)
    after = zk.exists(f"{base}/p")
    assert after.cversion == parent.cversion + 1
    assert after.numChildren == 1
    assert after.pzxid == child.czxid
    # The parent's own data is untouched.
    assert (after.version, after.mzxid, after.mtime) == (
        parent.version,
        parent.mzxid,
        parent.mtime,
    )


def test_child_delete_counts_in_cversion_and_moves_pzxid(zk, base):
    zk.create(f"{base}/p", b"")
    _, child = zk.create(f"{base}/p/c", b"", include_data=True)
    zk.delete(f"{base}/p/c")
    after = zk.exists(f"{base}/p")
    # cversion counts creates plus deletes (docs/client-protocol.md, "Stat fields"):
    # 1 + 1.
    assert after.cversion == 2
    assert after.numChildren == 0
    assert after.pzxid > child.czxid


def test_cversion_after_several_creates_and_deletes(zk, base):
    zk.create(f"{base}/p", b"")
    for i in range(4):
        zk.create(f"{base}/p/c{i}", b"")
    zk.delete(f"{base}/p/c0")
    stat = zk.exists(f"{base}/p")
    assert stat.cversion == 5
    assert stat.numChildren == 3


def test_child_set_data_does_not_touch_parent(zk, base):
    zk.create(f"{base}/p/c", b"", makepath=True)
    parent = zk.exists(f"{base}/p")
    zk.set(f"{base}/p/c", b"new")
    assert zk.exists(f"{base}/p") == parent


def test_grandchild_create_does_not_touch_grandparent(zk, base):
    zk.create(f"{base}/p/c", b"", makepath=True)
    grandparent = zk.exists(f"{base}/p")
    zk.create(f"{base}/p/c/g", b"")
    assert zk.exists(f"{base}/p") == grandparent


def test_set_acl_bumps_aversion_only(zk, base):
    zk.create(f"{base}/n", b"x")
    before = zk.exists(f"{base}/n")
    stat = zk.set_acls(f"{base}/n", READ_ACL_UNSAFE + [make_digest_acl("a", "b", all=True)])
    assert stat.aversion == 1
    assert (stat.version, stat.mzxid, stat.mtime, stat.cversion, stat.pzxid) == (
        before.version,
        before.mzxid,
        before.mtime,
        before.cversion,
        before.pzxid,
    )


def test_zxids_increase_with_every_write(zk, base):
    zxids = []
    for i in range(5):
        _, stat = zk.create(f"{base}/n{i}", b"", include_data=True)
        zxids.append(stat.czxid)
        zxids.append(zk.set(f"{base}/n{i}", b"x").mzxid)
    assert zxids == sorted(zxids)
    assert len(set(zxids)) == len(zxids)


def test_writes_from_two_sessions_are_totally_ordered(zk, zk2, base):
    a = zk.create(f"{base}/a", b"", include_data=True)[1].czxid
    b = zk2.create(f"{base}/b", b"", include_data=True)[1].czxid
    c = zk.create(f"{base}/c", b"", include_data=True)[1].czxid
    assert a < b < c


def test_nodes_created_in_one_transaction_share_czxid_and_ctime(zk, base):
    t = zk.transaction()
    t.create(f"{base}/x", b"")
    t.create(f"{base}/y", b"")
    t.create(f"{base}/x/z", b"")
    assert t.commit() == [f"{base}/x", f"{base}/y", f"{base}/x/z"]
    stats = [zk.exists(f"{base}/{p}") for p in ("x", "y", "x/z")]
    assert len({s.czxid for s in stats}) == 1
    assert len({s.ctime for s in stats}) == 1
    # The parent saw three creates in that one zxid.
    parent = zk.exists(base)
    assert parent.pzxid == stats[0].czxid
    assert parent.cversion == 2


def test_builtin_zookeeper_nodes(zk):
    children = zk.get_children("/")
    assert "zookeeper" in children
    assert {"quota", "config"} <= set(zk.get_children("/zookeeper"))
    # /zookeeper/config is readable by anyone, writable by nobody (READ only:
    # docs/client-protocol.md, "The initial tree"),
    # empty on a standalone server and the membership on an ensemble.
    data, stat = zk.get("/zookeeper/config")
    assert data == expected_config_znode()
    assert stat.dataLength == len(data)
    acl, _ = zk.get_acls("/zookeeper/config")
    assert [(a.perms, a.id.scheme, a.id.id) for a in acl] == [(1, "world", "anyone")]
    acl, _ = zk.get_acls("/")
    assert [(a.perms, a.id.scheme, a.id.id) for a in acl] == [(31, "world", "anyone")]
