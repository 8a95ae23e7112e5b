"""Shared helpers for the interop tests: the target server, event recorders that wait with
deadlines, session expiry the way kazoo's test harness used to do it, and a few requests
kazoo 2.11 has no method for."""

import itertools
import os
import threading
import time
import zlib
from collections import namedtuple

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError, NotEmptyError
from kazoo.protocol.serialization import (
    int_struct,
    long_struct,
    read_string,
    stat_struct,
    write_buffer,
    write_string,
)
from kazoo.protocol.states import KazooState, ZnodeStat


def _members():
    value = os.environ.get("INTEROP_ZK_SERVER", "")
    out = []
    for member in filter(None, value.split(",")):
        host, _, port = member.strip().rpartition(":")
        out.append((host, int(port)))
    return out


# The connect string of the server under test, from INTEROP_ZK_SERVER: host:port, or
# host:port,host:port,... of every member of an ensemble (kazoo and zkCli.sh take it as it
# is). MEMBERS lists (host, port) of each; HOST and PORT are the first member's, for the
# tests that open a raw connection or send a four-letter word to one server.
SERVER = os.environ.get("INTEROP_ZK_SERVER", "") or None
MEMBERS = _members()
HOST, PORT = MEMBERS[0] if MEMBERS else (None, None)
# True when the target is an ensemble: the tests that check what a member reports about
# itself (its mode) expect a leader or a follower instead of a standalone server.
ENSEMBLE = len(MEMBERS) > 1
# The mode every member in INTEROP_ZK_SERVER must report when the runner says so
# (observer mode: the suite talks to an observer of an ensemble only).
EXPECT_MODE = os.environ.get("INTEROP_EXPECT_MODE") or None


def expected_config_znode():
    """What /zookeeper/config holds: nothing on a standalone server; on an ensemble with a
    static configuration, ZooKeeper's QuorumVerifier text: each `server.N=` line of zoo.cfg
    with its role made explicit (`:participant`), then `version=<hex>` (0: no reconfig
    yet). The runner passes the zoo.cfg lines in INTEROP_SERVER_LINES."""
    lines = os.environ.get("INTEROP_SERVER_LINES", "")
    if not lines:
        return b""
    out = []
    for line in lines.splitlines():
        key, _, value = line.partition("=")
        addresses, _, client = value.partition(";")
        # host:quorum:election, or with an explicit role (`:observer`) already.
        if addresses.count(":") == 2:
            addresses += ":participant"
        out.append(f"{key}={addresses};{client}\n")
    return ("".join(out) + "version=0").encode()

# How long to wait for anything the server should make happen "soon" (an event, a
# reconnect, a lock hand-over). Generous, because CI machines are slow; a healthy server
# takes milliseconds. A test that waits this long has failed.
EVENT_TIMEOUT = float(os.environ.get("INTEROP_EVENT_TIMEOUT", "20"))

# Server settings the runner configures; override them when pointing the suite at a
# server configured differently.
MIN_SESSION_TIMEOUT_MS = int(os.environ.get("INTEROP_MIN_SESSION_TIMEOUT_MS", "4000"))
MAX_SESSION_TIMEOUT_MS = int(os.environ.get("INTEROP_MAX_SESSION_TIMEOUT_MS", "40000"))
TTL_ENABLED = os.environ.get("INTEROP_TTL", "0") == "1"
CONTAINER_REAPER = os.environ.get("INTEROP_CONTAINER_REAPER", "0") == "1"
SUPER_AUTH = os.environ.get("INTEROP_SUPER_AUTH", "")
ZKCLI = os.environ.get("INTEROP_ZKCLI", "/usr/share/zookeeper/bin/zkCli.sh")


class Recorder:
    """Collects callback arguments from any thread; `wait_for` waits on a condition with a
    deadline and fails the test (showing what did arrive) when it passes."""

    def __init__(self):
        self._items = []
        self._cond = threading.Condition()

    def __call__(self, *args):
        with self._cond:
            self._items.append(args[0] if len(args) == 1 else args)
            self._cond.notify_all()

    @property
    def items(self):
        with self._cond:
            return list(self._items)

    def wait_for(self, predicate, what, timeout=EVENT_TIMEOUT):
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self._items):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    pytest.fail(
                        f"timed out after {timeout:.0f} s waiting for {what}; "
                        f"recorded: {self._items!r}"
                    )
                self._cond.wait(remaining)
            return list(self._items)

    def wait_count(self, n, what="events", timeout=EVENT_TIMEOUT):
        return self.wait_for(lambda items: len(items) >= n, f"{n} {what}", timeout)


def wait_event(event, what, timeout=EVENT_TIMEOUT):
    """Waits for a threading.Event and fails the test with `what` if it does not come."""
    if not event.wait(timeout):
        pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def wait_until(predicate, what, timeout=EVENT_TIMEOUT, interval=0.05):
    """Re-checks `predicate` until it holds or the deadline passes. Only for conditions that
    no callback announces (for example a lock's contender list)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting until {what}")
        time.sleep(interval)


class StateRecorder(Recorder):
    """A kazoo state listener that records KazooState transitions (LOST, SUSPENDED,
    CONNECTED) in order."""

    def wait_state(self, state, what=None, timeout=EVENT_TIMEOUT, after=0):
        return self.wait_for(
            lambda items: state in items[after:],
            what or f"state {state}",
            timeout,
        )


# Where clients go on an ensemble. kazoo would shuffle the connect string, so the members
# a test's clients land on would change from run to run; instead each client gets the
# connect string rotated to start at the next member (and kazoo keeps that order), from a
# member that depends only on the test's name: a test's first client and its second are
# on different members, and a failure happens again on the same members.
_placement = itertools.count()


def place_clients_for(test_id):
    """Called before each test: its clients start at member crc32(test id) mod size."""
    global _placement
    _placement = itertools.count(zlib.crc32(test_id.encode()))


def client_hosts():
    """(hosts, randomize_hosts) for the next client that names no hosts of its own."""
    if not ENSEMBLE:
        return SERVER, True
    first = next(_placement) % len(MEMBERS)
    order = MEMBERS[first:] + MEMBERS[:first]
    return ",".join(f"{h}:{p}" for h, p in order), False


def start_client(hosts=None, **kwargs):
    kwargs.setdefault("timeout", 10.0)
    if hosts is None:
        hosts, randomize = client_hosts()
        kwargs.setdefault("randomize_hosts", randomize)
    client = KazooClient(hosts=hosts, **kwargs)
    client.start(timeout=EVENT_TIMEOUT)
    return client


class Members:
    """One client per member of the server under test (one in all for a standalone
    server), for `settle`."""

    def __init__(self):
        self.clients = [start_client(hosts=f"{h}:{p}") for h, p in MEMBERS]

    def settle(self):
        """Returns once every member has applied every write acknowledged before the
        call. A write is acknowledged once the member that holds the writer's session
        has applied it; another member may apply it a moment later, so on an ensemble a
        client reading on another member may not see it yet: ZooKeeper promises order per
        session, and a view as recent as any other session's only after `sync`. A sync
        through each member is that barrier for the member (it answers once it has
        applied everything committed before the sync reached the leader), and so for
        every session on it. A test that reads, through one client, what another client
        wrote settles in between, as a ZooKeeper application would sync."""
        if len(self.clients) == 1:
            return
        for c in self.clients:
            c.sync("/")

    def stop(self):
        for c in self.clients:
            stop_client(c)


def stop_client(client):
    try:
        client.stop()
    finally:
        client.close()


def expire_session(client, hosts=None):
    """Expires `client`'s session on the server, as kazoo's own test harness did before
    kazoo 2.6 (its current harness only fakes the expiry inside the client): a second client
    attaches to the same session id and password, which makes the server drop the first
    client's connection, and then closes the session. The first client's reconnect is
    refused (timeOut 0) and it reports LOST, then connects with a new session.

    Returns the StateRecorder attached to `client` (LOST and the new CONNECTED are in it).
    """
    states = StateRecorder()
    client.add_listener(states)
    session_id, password = client.client_id
    if hosts is None:
        hosts, randomize = client_hosts()
    else:
        randomize = True
    twin = KazooClient(
        hosts=hosts, client_id=(session_id, password), timeout=10.0, randomize_hosts=randomize
    )
    twin.start(timeout=EVENT_TIMEOUT)
    assert twin.client_id[0] == session_id, "the twin must attach to the same session"
    twin.stop()
    twin.close()
    states.wait_state(KazooState.LOST, "the expired client to report LOST")
    return states


def delete_tree(client, path):
    """Deletes `path` and everything below it, tolerating nodes that vanish meanwhile
    (ephemerals of closing sessions, reaped containers). Best effort: a subtree that an
    ACL keeps us out of (when the server has no super user configured) is left behind
    rather than failing the test; every test works under its own unique path."""
    try:
        children = client.get_children(path)
    except NoNodeError:
        return
    except NoAuthError:
        children = []
    for child in children:
        delete_tree(client, f"{path}/{child}")
    try:
        client.delete(path)
    except (NoNodeError, NoAuthError):
        pass
    except NotEmptyError:
        delete_tree(client, path)


# Requests kazoo 2.11 has no method for. They are serialized with kazoo's own helpers and
# sent through kazoo's connection with KazooClient._call, the same path its public methods
# take; the server sees exactly what a client library would send.


def _write_acls(b, acls):
    b.extend(int_struct.pack(len(acls)))
    for acl in acls:
        b.extend(
            int_struct.pack(acl.perms) + write_string(acl.id.scheme) + write_string(acl.id.id)
        )


def _read_path_and_stat(buf, offset):
    path, offset = read_string(buf, offset)
    return path, ZnodeStat._make(stat_struct.unpack_from(buf, offset))


class CreateContainer(namedtuple("CreateContainer", "path data acl")):
    """createContainer (op 19), CreateRequest with flags 4; replies Create2Response."""

    type = 19

    def serialize(self):
        b = bytearray(write_string(self.path) + write_buffer(self.data))
        _write_acls(b, self.acl)
        b.extend(int_struct.pack(4))
        return b

    @classmethod
    def deserialize(cls, buf, offset):
        return _read_path_and_stat(buf, offset)


class CreateTTL(namedtuple("CreateTTL", "path data acl flags ttl")):
    """createTTL (op 21): CreateTTLRequest (flags 5 or 6, ttl in ms); replies Create2Response."""

    type = 21

    def serialize(self):
        b = bytearray(write_string(self.path) + write_buffer(self.data))
        _write_acls(b, self.acl)
        b.extend(int_struct.pack(self.flags))
        b.extend(long_struct.pack(self.ttl))
        return b

    @classmethod
    def deserialize(cls, buf, offset):
        return _read_path_and_stat(buf, offset)


class CreateWithFlags(namedtuple("CreateWithFlags", "path data acl flags")):
    """Plain create (op 1) with any flags value, to check how the server validates them."""

    type = 1

    def serialize(self):
        b = bytearray(write_string(self.path) + write_buffer(self.data))
        _write_acls(b, self.acl)
        b.extend(int_struct.pack(self.flags))
        return b

    @classmethod
    def deserialize(cls, buf, offset):
        return read_string(buf, offset)[0]


def _read_string_vector(buf, offset):
    (count,) = int_struct.unpack_from(buf, offset)
    offset += int_struct.size
    out = []
    for _ in range(max(count, 0)):
        s, offset = read_string(buf, offset)
        out.append(s)
    return out


class GetEphemerals(namedtuple("GetEphemerals", "prefix")):
    """getEphemerals (op 103): this session's ephemeral paths starting with `prefix`."""

    type = 103

    def serialize(self):
        return bytearray(write_string(self.prefix))

    @classmethod
    def deserialize(cls, buf, offset):
        return _read_string_vector(buf, offset)


class GetAllChildrenNumber(namedtuple("GetAllChildrenNumber", "path")):
    """getAllChildrenNumber (op 104): the number of descendants of `path`."""

    type = 104

    def serialize(self):
        return bytearray(write_string(self.path))

    @classmethod
    def deserialize(cls, buf, offset):
        return int_struct.unpack_from(buf, offset)[0]


class WhoAmI(namedtuple("WhoAmI", "")):
    """whoAmI (op 107): the connection's identities as (scheme, user) pairs."""

    type = 107

    def __bool__(self):
        # An empty tuple is falsy, and kazoo only decodes replies to truthy requests.
        return True

    def serialize(self):
        return bytearray()

    @classmethod
    def deserialize(cls, buf, offset):
        (count,) = int_struct.unpack_from(buf, offset)
        offset += int_struct.size
        out = []
        for _ in range(max(count, 0)):
            scheme, offset = read_string(buf, offset)
            user, offset = read_string(buf, offset)
            out.append((scheme, user))
        return out


def call(client, request, timeout=EVENT_TIMEOUT):
    """Sends one of the requests above through kazoo and returns its decoded reply."""
    result = client.handler.async_result()
    client._call(request, result)
    return result.get(timeout=timeout)
