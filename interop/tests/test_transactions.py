"""multi (op 14) through kazoo's transaction(): check / create / delete / set_data, the
results of a committed transaction, and the all-or-nothing results of a failed one
(docs/client-protocol.md, "multi and multiRead")."""

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)

from helpers import Recorder


def kinds(results):
    return [type(r) for r in results]


def test_successful_transaction_returns_one_result_per_operation(zk, base):
    zk.create(f"{base}/old", b"")
    zk.create(f"{base}/data", b"v0")
    t = zk.transaction()
    t.check(base, 0)
    t.create(f"{base}/new", b"fresh")
    t.delete(f"{base}/old")
    t.set_data(f"{base}/data", b"v1", version=0)
    results = t.commit()
    assert results[0] is True  # check
    assert results[1] == f"{base}/new"  # create returns the path
    assert results[2] is True  # delete
    assert results[3].version == 1  # set_data returns the new Stat
    assert results[3].dataLength == 2
    assert zk.get(f"{base}/new")[0] == b"fresh"
    assert zk.exists(f"{base}/old") is None
    assert zk.get(f"{base}/data")[0] == b"v1"


def test_failed_check_rolls_back_everything(zk, base):
    zk.create(f"{base}/data", b"v0")
    zk.set(f"{base}/data", b"v1")
    t = zk.transaction()
    t.create(f"{base}/new", b"")
    t.check(f"{base}/data", 0)  # actual version is 1
    t.set_data(f"{base}/data", b"never")
    results = t.commit()
    # Earlier ops report "rolled back", the failing op its own error, later ops
    # "runtime inconsistency" (docs/client-protocol.md, "Result layout").
    assert kinds(results) == [RolledBackError, BadVersionError, RuntimeInconsistency]
    assert zk.exists(f"{base}/new") is None
    data, stat = zk.get(f"{base}/data")
    assert (data, stat.version) == (b"v1", 1)


def test_failed_create_of_existing_node(zk, base):
    zk.create(f"{base}/exists", b"")
    t = zk.transaction()
    t.set_data(base, b"changed")
    t.create(f"{base}/exists", b"")
    results = t.commit()
    assert kinds(results) == [RolledBackError, NodeExistsError]
    assert zk.get(base)[1].version == 0


def test_failed_delete_of_node_with_children(zk, base):
    zk.create(f"{base}/p/c", b"", makepath=True)
    t = zk.transaction()
    t.delete(f"{base}/p")
    t.create(f"{base}/other", b"")
    results = t.commit()
    assert kinds(results) == [NotEmptyError, RuntimeInconsistency]
    assert zk.exists(f"{base}/other") is None


def test_check_of_missing_node_fails_with_no_node(zk, base):
    t = zk.transaction()
    t.check(f"{base}/missing", 0)
    results = t.commit()
    assert kinds(results) == [NoNodeError]


def test_later_operations_see_earlier_ones(zk, base):
    t = zk.transaction()
    t.create(f"{base}/p", b"")
    t.create(f"{base}/p/c", b"")
    t.set_data(f"{base}/p/c", b"x", version=0)
    t.check(f"{base}/p/c", 1)
    t.delete(f"{base}/p/c", version=1)
    results = t.commit()
    assert results[:2] == [f"{base}/p", f"{base}/p/c"]
    assert results[2].version == 1
    assert results[3:] == [True, True]
    assert zk.get_children(f"{base}/p") == []


def test_sequential_creates_in_a_transaction_get_consecutive_numbers(zk, base):
    t = zk.transaction()
    t.create(f"{base}/s-", b"", sequence=True)
    t.create(f"{base}/s-", b"", sequence=True)
    t.create(f"{base}/e-", b"", ephemeral=True, sequence=True)
    results = t.commit()
    assert results == [f"{base}/s-0000000000", f"{base}/s-0000000001", f"{base}/e-0000000002"]
    assert zk.exists(results[2]).ephemeralOwner == zk.client_id[0]


def test_transaction_as_context_manager_commits(zk, base):
    with zk.transaction() as t:
        t.create(f"{base}/a", b"")
        t.create(f"{base}/b", b"")
    assert sorted(zk.get_children(base)) == ["a", "b"]


def test_transaction_operations_share_one_zxid(zk, base):
    zk.create(f"{base}/a", b"")
    t = zk.transaction()
    t.create(f"{base}/b", b"")
    t.set_data(f"{base}/a", b"x")
    results = t.commit()
    b = zk.exists(f"{base}/b")
    assert results[1].mzxid == b.czxid


def test_failed_transaction_fires_no_watch(zk, zk2, base):
    zk.create(f"{base}/a", b"")
    zk.create(f"{base}/sentinel", b"")
    rec = Recorder()
    zk.get(f"{base}/a", watch=rec)
    zk.exists(f"{base}/b", watch=rec)
    t = zk2.transaction()
    t.set_data(f"{base}/a", b"x")
    t.create(f"{base}/b", b"")
    t.check(f"{base}/a", 99)
    assert kinds(t.commit()) == [RolledBackError, RolledBackError, BadVersionError]
    sentinel = Recorder()
    zk.get(f"{base}/sentinel", watch=sentinel)
    zk2.set(f"{base}/sentinel", b"go")
    sentinel.wait_count(1, "the sentinel watch")
    assert rec.items == []


def test_empty_transaction_commits_to_nothing(zk, base):
    assert zk.transaction().commit() == []
    assert zk.get_children(base) == []
