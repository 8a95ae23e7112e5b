"""Fixtures for the interop suite. The server under test comes from INTEROP_ZK_SERVER
(host:port); interop/README.md lists the other variables."""

import os
import re
import time
import uuid

import pytest

import helpers
from helpers import HOST, PORT, SERVER, SUPER_AUTH, delete_tree, start_client, stop_client


def pytest_configure(config):
    if not SERVER:
        pytest.exit(
            "INTEROP_ZK_SERVER is not set: point it at a ZooKeeper-protocol server, "
            "e.g. INTEROP_ZK_SERVER=127.0.0.1:2182 (interop/run starts one for you)",
            returncode=4,
        )


# A server that hangs requests would make every test wait for its own timeout (pytest.ini);
# past this many seconds for the whole run, the remaining tests fail at once instead, so a
# broken server costs minutes, not hours, and the per-test table still lists every test.
SUITE_DEADLINE_S = float(os.environ.get("INTEROP_SUITE_DEADLINE_S", "480"))
_started = time.monotonic()


def pytest_runtest_setup(item):
    helpers.place_clients_for(item.nodeid)
    elapsed = time.monotonic() - _started
    if elapsed > SUITE_DEADLINE_S:
        pytest.fail(
            f"suite deadline passed ({elapsed:.0f} s > {SUITE_DEADLINE_S:.0f} s, "
            "INTEROP_SUITE_DEADLINE_S): not run",
            pytrace=False,
        )


def pytest_report_header(config):
    return [
        f"interop target: {SERVER} (ttl={'on' if helpers.TTL_ENABLED else 'off'}, "
        f"super={'yes' if SUPER_AUTH else 'no'}, "
        f"session timeout {helpers.MIN_SESSION_TIMEOUT_MS}..{helpers.MAX_SESSION_TIMEOUT_MS} ms)"
    ]


@pytest.fixture(scope="session")
def members():
    """A client per member: `members.settle()` is the barrier of helpers.Members."""
    m = helpers.Members()
    yield m
    m.stop()


@pytest.fixture(scope="session")
def admin():
    """A client that cleans up after tests; authenticated as the super user when the
    server has one, so it can remove nodes whose ACLs shut everyone else out. On an
    ensemble it is on the first member."""
    client = start_client(hosts=f"{HOST}:{PORT}")
    if SUPER_AUTH:
        client.add_auth("digest", SUPER_AUTH)
    yield client
    stop_client(client)


@pytest.fixture
def new_client():
    """Factory: new_client(**KazooClient kwargs) starts a client that is stopped at teardown."""
    clients = []

    def make(**kwargs):
        client = start_client(**kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        try:
            stop_client(client)
        except Exception:  # teardown of a client the test already broke
            pass


@pytest.fixture
def zk(new_client):
    return new_client()


@pytest.fixture
def zk2(new_client):
    return new_client()


def _unique_node(request, admin, members, tag):
    name = re.sub(r"[^A-Za-z0-9_-]", "_", request.node.name)[:48]
    path = f"/{tag}-{name}-{uuid.uuid4().hex[:8]}"
    admin.create(path, b"")
    # Every member has it before the test's clients, on any member, use it.
    members.settle()
    return path


@pytest.fixture
def base(request, admin, members):
    """A fresh persistent node, unique to this test, removed with its subtree afterwards."""
    path = _unique_node(request, admin, members, "it")
    yield path
    members.settle()  # admin, on the first member, sees what the test left everywhere
    delete_tree(admin, path)


@pytest.fixture
def aux(request, admin, members):
    """A second fresh node outside `base`, for helpers (sentinel watches) that must not
    disturb it."""
    path = _unique_node(request, admin, members, "aux")
    yield path
    members.settle()
    delete_tree(admin, path)
