"""Every create mode: ephemeral, sequential, ephemeral-sequential, container (op 19) and TTL
(op 21, when the server runs with zookeeper.extendedTypesEnabled=true), including the
container and TTL reaper when INTEROP_CONTAINER_REAPER=1 (docs/client-protocol.md, "Create
modes" to "TTL nodes")."""

import re
import threading

import pytest
from kazoo.exceptions import (
    BadArgumentsError,
    NoChildrenForEphemeralsError,
)
from kazoo.security import OPEN_ACL_UNSAFE

import helpers
from helpers import (
    CreateContainer,
    CreateTTL,
    CreateWithFlags,
    GetEphemerals,
    call,
    wait_event,
)

requires_ttl = pytest.mark.skipif(
    not helpers.TTL_ENABLED, reason="INTEROP_TTL=1 not set: the server has TTL nodes off"
)
requires_reaper = pytest.mark.skipif(
    not helpers.CONTAINER_REAPER,
    reason="INTEROP_CONTAINER_REAPER=1 not set: the reaper interval is unknown",
)


def test_ephemeral_node_is_owned_by_the_session(zk, base):
    zk.create(f"{base}/e", b"", ephemeral=True)
    stat = zk.exists(f"{base}/e")
    assert stat.ephemeralOwner == zk.client_id[0]
    assert stat.ephemeralOwner != 0


def test_persistent_node_has_no_owner(zk, base):
    zk.create(f"{base}/p", b"")
    assert zk.exists(f"{base}/p").ephemeralOwner == 0


def test_ephemeral_node_cannot_have_children(zk, base):
    zk.create(f"{base}/e", b"", ephemeral=True)
    with pytest.raises(NoChildrenForEphemeralsError):
        zk.create(f"{base}/e/child", b"")


def test_sequential_names_have_ten_digit_increasing_suffixes(zk, base):
    paths = [zk.create(f"{base}/s-", b"", sequence=True) for _ in range(3)]
    assert paths == [f"{base}/s-{i:010d}" for i in range(3)]


def test_sequence_counter_is_per_parent_and_counts_every_child(zk, base):
    # The suffix is the parent's count of child creations so far, sequential or not
    # (docs/client-protocol.md, "Sequential names"), and deletions do not lower it.
    zk.create(f"{base}/plain", b"")
    zk.delete(f"{base}/plain")
    zk.create(f"{base}/other", b"")
    path = zk.create(f"{base}/s-", b"", sequence=True)
    assert path == f"{base}/s-0000000002"
    zk.create(f"{base}/sub", b"")
    assert zk.create(f"{base}/sub/s-", b"", sequence=True) == f"{base}/sub/s-0000000000"


def test_sequential_path_ending_in_slash_gets_bare_number(zk, base):
    path = zk.create(f"{base}/", b"", sequence=True)
    assert re.fullmatch(re.escape(base) + r"/\d{10}", path)


def test_ephemeral_sequential_node(zk, base):
    path = zk.create(f"{base}/es-", b"x", ephemeral=True, sequence=True)
    assert path == f"{base}/es-0000000000"
    assert zk.exists(path).ephemeralOwner == zk.client_id[0]


def test_concurrent_sequential_creates_get_distinct_numbers(new_client, base):
    clients = [new_client() for _ in range(3)]
    made = []
    lock = threading.Lock()

    def worker(client):
        for _ in range(20):
            p = client.create(f"{base}/q-", b"", sequence=True)
            with lock:
                made.append(p)

    threads = [threading.Thread(target=worker, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(made) == 60
    assert sorted(made) == [f"{base}/q-{i:010d}" for i in range(60)]


def test_get_ephemerals_lists_only_this_sessions_nodes(zk, zk2, base):
    mine = [zk.create(f"{base}/e{i}", b"", ephemeral=True) for i in range(2)]
    zk2.create(f"{base}/theirs", b"", ephemeral=True)
    zk.create(f"{base}/persistent", b"")
    assert sorted(call(zk, GetEphemerals(base))) == sorted(mine)
    assert call(zk2, GetEphemerals(base)) == [f"{base}/theirs"]
    # The prefix is a plain string prefix, not a path (docs/client-protocol.md,
    # "getEphemerals, getAllChildrenNumber, whoAmI").
    assert call(zk, GetEphemerals(f"{base}/e1")) == [f"{base}/e1"]


def test_container_node_is_created_with_op_19(zk, base):
    path, stat = call(zk, CreateContainer(f"{base}/c", b"data", OPEN_ACL_UNSAFE))
    assert path == f"{base}/c"
    # Containers are reported with ephemeralOwner 0 (docs/client-protocol.md, "Stat
    # fields").
    assert stat.ephemeralOwner == 0
    assert stat.dataLength == 4
    zk.create(f"{base}/c/child", b"")
    assert zk.get_children(f"{base}/c") == ["child"]


@requires_ttl
def test_ttl_node_is_created_with_op_21(zk, base):
    path, stat = call(zk, CreateTTL(f"{base}/t", b"ttl", OPEN_ACL_UNSAFE, 5, 3_600_000))
    assert path == f"{base}/t"
    assert stat.ephemeralOwner == 0
    assert zk.get(path)[0] == b"ttl"
    zk.create(f"{base}/t/child", b"")


@requires_ttl
def test_ttl_sequential_node_gets_a_suffix(zk, base):
    path, _ = call(zk, CreateTTL(f"{base}/ts-", b"", OPEN_ACL_UNSAFE, 6, 3_600_000))
    assert path == f"{base}/ts-0000000000"


@requires_ttl
def test_ttl_out_of_range_raises_bad_arguments(zk, base):
    for ttl in (0, -5, 1 << 40):
        with pytest.raises(BadArgumentsError):
            call(zk, CreateTTL(f"{base}/t", b"", OPEN_ACL_UNSAFE, 5, ttl))
    assert zk.exists(f"{base}/t") is None


@requires_ttl
def test_ttl_modes_need_the_ttl_opcode(zk, base):
    # A TTL mode via plain create (op 1), and a non-TTL mode via createTTL, are both
    # rejected (docs/client-protocol.md, "create", step 2).
    with pytest.raises(BadArgumentsError):
        call(zk, CreateWithFlags(f"{base}/t", b"", OPEN_ACL_UNSAFE, 5))
    with pytest.raises(BadArgumentsError):
        call(zk, CreateTTL(f"{base}/t", b"", OPEN_ACL_UNSAFE, 0, 1000))
    assert zk.exists(f"{base}/t") is None


@requires_reaper
def test_container_is_reaped_after_its_last_child_goes(zk, zk2, base, members):
    call(zk, CreateContainer(f"{base}/c", b"", OPEN_ACL_UNSAFE))
    zk.create(f"{base}/c/child", b"")
    members.settle()  # zk2 may be on another member: it sees the container
    gone = threading.Event()
    zk2.exists(f"{base}/c", watch=lambda ev: ev.type == "DELETED" and gone.set())
    zk.delete(f"{base}/c/child")
    wait_event(gone, "the reaper to delete the emptied container")
    # The reaper's delete is no write of zk's session: zk's member may apply it after
    # zk2's did, so zk syncs first, as a ZooKeeper application would.
    zk.sync(base)
    assert zk.exists(f"{base}/c") is None


@requires_reaper
def test_container_that_never_had_children_is_kept(zk, base):
    call(zk, CreateContainer(f"{base}/never-used", b"", OPEN_ACL_UNSAFE))
    # A second container that is emptied is reaped by a pass of the reaper; that same
    # pass looked at the never-used container and must have left it alone.
    call(zk, CreateContainer(f"{base}/used", b"", OPEN_ACL_UNSAFE))
    zk.create(f"{base}/used/child", b"")
    gone = threading.Event()
    zk.exists(f"{base}/used", watch=lambda ev: ev.type == "DELETED" and gone.set())
    zk.delete(f"{base}/used/child")
    wait_event(gone, "the reaper to delete the emptied container")
    assert zk.exists(f"{base}/never-used") is not None


@requires_ttl
@requires_reaper
def test_ttl_node_is_reaped_after_its_ttl(zk, base):
    call(zk, CreateTTL(f"{base}/short", b"", OPEN_ACL_UNSAFE, 5, 200))
    call(zk, CreateTTL(f"{base}/long", b"", OPEN_ACL_UNSAFE, 5, 3_600_000))
    gone = threading.Event()
    zk.exists(f"{base}/short", watch=lambda ev: ev.type == "DELETED" and gone.set())
    wait_event(gone, "the reaper to delete the TTL node")
    assert zk.exists(f"{base}/short") is None
    assert zk.exists(f"{base}/long") is not None
