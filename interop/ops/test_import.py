"""`rzk import-zookeeper` checked through kazoo: a data dir written by a
real Apache ZooKeeper 3.8 under a load of every node type kazoo can make (persistent,
sequential, ephemeral, ACL'd with digest and world, data rewritten, children deleted, a
multi), with snapCount low enough that ZooKeeper rolls several snapshots and logs (so the
fuzzy-snapshot rule is used). ZooKeeper is killed with SIGKILL while the loader's session
is open, the dir is imported, and ZooKeeper (restarted on its own dir) and rzk (on the
imported one) are both read through kazoo: every znode's data, ACL and whole stat must be
equal, and the loader's session (with its ephemerals) must live on in both. The server
helpers come from the interop suite (interop/servers.py)."""

import os
import shutil
import subprocess
import tempfile
import time
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

import servers

STAT_FIELDS = (
    "czxid", "mzxid", "ctime", "mtime", "version", "cversion", "aversion",
    "ephemeralOwner", "dataLength", "numChildren", "pzxid",
)


def load(c, base):
    """Writes the tree the import must carry over; returns the ephemeral paths."""
    secret = make_digest_acl("importer", "pw", all=True)
    world_read = make_digest_acl("reader", "pw", read=True)
    c.create(base, b"root")
    for i in range(60):
        p = c.create(f"{base}/n{i:02}", f"v{i}".encode())
        c.set(p, f"w{i}".encode())
        if i % 3 == 0:
            c.set(p, f"x{i}".encode() * (i + 1))
    for i in range(40):
        c.create(f"{base}/seq-", b"s", sequence=True)
    c.create(f"{base}/acl", b"secret", acl=[secret, world_read])
    c.set_acls(f"{base}/n01", [world_read, secret])
    for i in range(0, 60, 7):
        c.delete(f"{base}/n{i:02}")
    ephemerals = [c.create(f"{base}/eph-{i}", b"e", ephemeral=True) for i in range(5)]
    ephemerals.append(c.create(f"{base}/eph-seq-", b"es", ephemeral=True, sequence=True))
    t = c.transaction()
    t.create(f"{base}/multi-a", b"ma")
    t.set_data(f"{base}/n02", b"multi")
    t.delete(f"{base}/n03")
    results = t.commit()
    assert not any(isinstance(r, Exception) for r in results), results
    # More plain writes so the log after the newest snapshot is not empty.
    for i in range(80):
        c.set(f"{base}/n05", f"tail{i}".encode())
    return ephemerals


def read_tree(c, path, out):
    """Every znode under `path`: data, ACL and stat (kazoo's ZnodeStat fields)."""
    data, stat = c.get(path)
    acls, _ = c.get_acls(path)
    out[path] = (
        data,
        sorted((a.perms, a.id.scheme, a.id.id) for a in acls),
        {f: getattr(stat, f) for f in STAT_FIELDS},
    )
    for child in sorted(c.get_children(path)):
        read_tree(c, f"{path.rstrip('/')}/{child}", out)
    return out


def connect(hosts, auth=True):
    c = KazooClient(hosts=hosts, timeout=20.0)
    c.start(timeout=30)
    if auth:
        c.add_auth("digest", "importer:pw")
    return c


@pytest.fixture
def work():
    d = tempfile.mkdtemp(prefix="rzk-import-kazoo-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.timeout(300)
def test_an_imported_zookeeper_dir_reads_the_same_through_kazoo(work):
    binary = os.environ.get("RZK_BIN")
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail("RZK_BIN must name the rzk binary (45-ops.sh builds it)")
    # Apache ZooKeeper with a low snapCount: several snapshots and logs.
    zk_root, zk_port, zk_cfg, zk_log = servers._prepare(
        "zookeeper-import", work, extra=("snapCount=50",)
    )
    argv, conf_dir = servers._zookeeper_argv(work, zk_cfg, servers.ZOOKEEPER_MAIN)
    zk = servers.Server("zookeeper", argv, conf_dir, zk_root, zk_port, zk_log, work).start()
    rzk = None
    try:
        loader = connect(zk.hosts)
        base = f"/import-{uuid.uuid4().hex[:8]}"
        ephemerals = load(loader, base)
        session = loader.client_id
        zk.proc.kill()  # SIGKILL, while the loader's session is open
        zk.proc.wait(timeout=30)
        # The loader stays open and unused: its session is what both servers must keep.
        snapshots = [f for f in os.listdir(f"{zk_root}/data/version-2") if f.startswith("snapshot.")]
        logs = [f for f in os.listdir(f"{zk_root}/datalog/version-2") if f.startswith("log.")]
        assert len(snapshots) >= 2 and len(logs) >= 2, (snapshots, logs)

        # Import a copy (ZooKeeper will write to its own dir again when it restarts).
        copy = os.path.join(work, "zk-copy")
        shutil.copytree(zk_root, copy)
        rzk_root = os.path.join(work, "rzk-root")
        os.makedirs(rzk_root)
        out = subprocess.run(
            [binary, "import-zookeeper", "--from", f"{copy}/data", "--from-log",
             f"{copy}/datalog", "--to", f"{rzk_root}/data", "--to-log", f"{rzk_root}/datalog"],
            capture_output=True, text=True, timeout=120,
        )
        assert out.returncode == 0, out.stderr

        zk.launch()
        zk.wait_ready(time.monotonic() + servers.READY_TIMEOUT_S)
        rzk_port = servers.free_port()
        rzk_cfg = os.path.join(work, "rzk-import-zoo.cfg")
        servers.write_zoo_cfg(rzk_cfg, rzk_port, rzk_root)
        rzk = servers.Server("rzk", [binary, rzk_cfg], None, rzk_root, rzk_port,
                             os.path.join(work, "rzk-import.log"), work).start()

        trees = {}
        for name, s in (("zookeeper", zk), ("rzk", rzk)):
            c = connect(s.hosts)
            try:
                trees[name] = read_tree(c, base, {})
            finally:
                c.stop()
                c.close()
        # base, 60 - 9 deleted - 1 by the multi, 40 sequential, acl, 6 ephemerals, multi-a.
        assert len(trees["zookeeper"]) == 99, len(trees["zookeeper"])
        assert set(trees["rzk"]) == set(trees["zookeeper"])
        for path, want in trees["zookeeper"].items():
            assert trees["rzk"][path] == want, path
        owners = {trees["rzk"][p][2]["ephemeralOwner"] for p in ephemerals}
        assert owners == {session[0]}, (owners, session)

        # The loader's session resumes on rzk with its password, ephemerals and all.
        loader.stop()
        resumed = KazooClient(hosts=rzk.hosts, timeout=20.0, client_id=session)
        resumed.start(timeout=30)
        try:
            assert resumed.client_id[0] == session[0]
            for p in ephemerals:
                assert resumed.exists(p) is not None, p
        finally:
            resumed.stop()
            resumed.close()
        loader.close()
    finally:
        if rzk is not None:
            rzk.stop()
        zk.stop()
