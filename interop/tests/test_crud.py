"""create / get / set / delete / exists / getChildren through kazoo, with the error codes
each returns (docs/client-protocol.md, "Operations")."""

import pytest
from kazoo.exceptions import (
    BadArgumentsError,
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.security import OPEN_ACL_UNSAFE

from helpers import CreateWithFlags, call


def test_create_returns_path_and_get_returns_data(zk, base):
    path = zk.create(f"{base}/a", b"hello")
    assert path == f"{base}/a"
    data, stat = zk.get(path)
    assert data == b"hello"
    assert stat.dataLength == 5


def test_create2_returns_path_and_stat(zk, base):
    # kazoo's include_data=True sends create2 (op 15); the reply carries the new Stat.
    path, stat = zk.create(f"{base}/a", b"xyz", include_data=True)
    assert path == f"{base}/a"
    assert stat.dataLength == 3
    assert stat.version == 0
    assert stat.czxid == stat.mzxid == stat.pzxid
    assert zk.exists(path) == stat


def test_create_on_existing_node_raises_node_exists(zk, base):
    zk.create(f"{base}/a", b"first")
    with pytest.raises(NodeExistsError):
        zk.create(f"{base}/a", b"second")
    assert zk.get(f"{base}/a")[0] == b"first"


def test_create_without_parent_raises_no_node(zk, base):
    with pytest.raises(NoNodeError):
        zk.create(f"{base}/missing/child", b"")
    assert zk.exists(f"{base}/missing") is None


def test_create_makepath_creates_missing_parents(zk, base):
    zk.create(f"{base}/p/q/r", b"leaf", makepath=True)
    assert zk.get(f"{base}/p/q/r")[0] == b"leaf"
    assert zk.get_children(f"{base}/p") == ["q"]


def test_ensure_path_is_idempotent(zk, base):
    zk.ensure_path(f"{base}/x/y")
    zk.ensure_path(f"{base}/x/y")
    assert zk.exists(f"{base}/x/y") is not None


def test_empty_and_null_data_are_kept_apart(zk, base):
    # kazoo sends b"" as a zero-length buffer and None as a null buffer (-1). ZooKeeper
    # stores both with dataLength 0 but hands back what it was given.
    zk.create(f"{base}/empty", b"")
    zk.create(f"{base}/null", None)
    empty, empty_stat = zk.get(f"{base}/empty")
    null, null_stat = zk.get(f"{base}/null")
    assert empty == b""
    assert null is None
    assert empty_stat.dataLength == 0
    assert null_stat.dataLength == 0


def test_binary_data_round_trips_byte_for_byte(zk, base):
    blob = bytes(range(256)) * 4
    zk.create(f"{base}/bin", blob)
    assert zk.get(f"{base}/bin")[0] == blob


def test_large_data_near_the_packet_limit_round_trips(zk, base):
    # The default jute.maxbuffer is 1,048,575 bytes per frame; 1,000,000 bytes of data
    # plus headers fits.
    blob = bytes((i * 7) % 251 for i in range(1_000_000))
    zk.create(f"{base}/big", blob)
    data, stat = zk.get(f"{base}/big")
    assert stat.dataLength == 1_000_000
    assert data == blob


def test_unicode_path_and_data(zk, base):
    path = zk.create(f"{base}/ünïcødé-节点", "données €".encode())
    assert path == f"{base}/ünïcødé-节点"
    assert zk.get(path)[0] == "données €".encode()
    assert zk.get_children(base) == ["ünïcødé-节点"]


def test_set_replaces_data_and_bumps_version(zk, base):
    zk.create(f"{base}/a", b"one")
    stat = zk.set(f"{base}/a", b"two!")
    assert stat.version == 1
    assert stat.dataLength == 4
    assert zk.get(f"{base}/a")[0] == b"two!"


def test_set_with_matching_version_succeeds(zk, base):
    zk.create(f"{base}/a", b"one")
    stat = zk.set(f"{base}/a", b"two", version=0)
    stat = zk.set(f"{base}/a", b"three", version=stat.version)
    assert stat.version == 2


def test_set_with_stale_version_raises_bad_version(zk, base):
    zk.create(f"{base}/a", b"one")
    zk.set(f"{base}/a", b"two")
    with pytest.raises(BadVersionError):
        zk.set(f"{base}/a", b"stale", version=0)
    assert zk.get(f"{base}/a")[0] == b"two"


def test_set_on_missing_node_raises_no_node(zk, base):
    with pytest.raises(NoNodeError):
        zk.set(f"{base}/nope", b"x")


def test_delete_removes_node(zk, base):
    zk.create(f"{base}/a", b"")
    zk.delete(f"{base}/a")
    assert zk.exists(f"{base}/a") is None
    assert zk.get_children(base) == []


def test_delete_with_stale_version_raises_bad_version(zk, base):
    zk.create(f"{base}/a", b"")
    zk.set(f"{base}/a", b"changed")
    with pytest.raises(BadVersionError):
        zk.delete(f"{base}/a", version=0)
    zk.delete(f"{base}/a", version=1)
    assert zk.exists(f"{base}/a") is None


def test_delete_node_with_children_raises_not_empty(zk, base):
    zk.create(f"{base}/a/b", b"", makepath=True)
    with pytest.raises(NotEmptyError):
        zk.delete(f"{base}/a")
    assert zk.exists(f"{base}/a/b") is not None


def test_delete_recursive_removes_subtree(zk, base):
    for p in ("a/b/c", "a/b/d", "a/e"):
        zk.create(f"{base}/{p}", b"", makepath=True)
    zk.delete(f"{base}/a", recursive=True)
    assert zk.exists(f"{base}/a") is None


def test_delete_missing_node_raises_no_node(zk, base):
    with pytest.raises(NoNodeError):
        zk.delete(f"{base}/nope")


def test_exists_returns_stat_or_none(zk, base):
    assert zk.exists(f"{base}/a") is None
    zk.create(f"{base}/a", b"abc")
    stat = zk.exists(f"{base}/a")
    assert stat is not None
    assert stat.dataLength == 3
    assert stat == zk.get(f"{base}/a")[1]


def test_get_on_missing_node_raises_no_node(zk, base):
    with pytest.raises(NoNodeError):
        zk.get(f"{base}/nope")
    with pytest.raises(NoNodeError):
        zk.get_children(f"{base}/nope")


def test_get_children_returns_names_not_paths(zk, base):
    for name in ("c", "a", "b"):
        zk.create(f"{base}/{name}", b"")
    zk.create(f"{base}/a/grandchild", b"")
    # The order is not defined by the protocol (ZooKeeper returns hash order).
    assert sorted(zk.get_children(base)) == ["a", "b", "c"]


def test_get_children_with_stat_uses_get_children2(zk, base):
    zk.create(f"{base}/a", b"")
    zk.create(f"{base}/b", b"")
    children, stat = zk.get_children(base, include_data=True)
    assert sorted(children) == ["a", "b"]
    assert stat.numChildren == 2
    assert stat == zk.exists(base)


def test_many_children_are_all_listed(zk, base):
    results = [zk.create_async(f"{base}/n{i:04d}", b"") for i in range(300)]
    for r in results:
        r.get(timeout=30)
    children = zk.get_children(base)
    assert len(children) == 300
    assert set(children) == {f"n{i:04d}" for i in range(300)}


def test_invalid_paths_are_rejected_with_bad_arguments(zk, base):
    # kazoo normalises paths itself, so these go out as raw create requests: a '.' or
    # '..' component, a trailing '/', and a control character all fail full path
    # validation (docs/client-protocol.md, "Paths") once the parent is found.
    zk.create(f"{base}/p", b"")
    for bad in (f"{base}/p/.", f"{base}/p/..", f"{base}/p/", f"{base}/p/a\u0001b"):
        with pytest.raises(BadArgumentsError):
            call(zk, CreateWithFlags(bad, b"", OPEN_ACL_UNSAFE, 0))
    assert zk.get_children(f"{base}/p") == []


def test_create_with_unknown_flags_raises_bad_arguments(zk, base):
    with pytest.raises(BadArgumentsError):
        call(zk, CreateWithFlags(f"{base}/f7", b"", OPEN_ACL_UNSAFE, 7))
    assert zk.exists(f"{base}/f7") is None


def test_protected_nodes_cannot_be_deleted(zk):
    with pytest.raises(BadArgumentsError):
        zk.delete("/")
    with pytest.raises(BadArgumentsError):
        zk.delete("/zookeeper")


def test_pipelined_async_requests_complete_in_order(zk, base):
    # 200 requests in flight at once on one connection. kazoo matches replies to requests
    # by xid and fails the connection on any mismatch, so this checks one reply per
    # request, in request order.
    ops = []
    for i in range(100):
        ops.append(("create", zk.create_async(f"{base}/k{i}", str(i).encode())))
        ops.append(("get", zk.get_async(f"{base}/k{i}")))
    for i, (kind, result) in enumerate(ops):
        value = result.get(timeout=30)
        n = i // 2
        if kind == "create":
            assert value == f"{base}/k{n}"
        else:
            assert value[0] == str(n).encode()
