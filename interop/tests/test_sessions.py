"""Sessions: ephemerals living and dying with their session, expiry (forced the way kazoo's
harness did it, by timeout while partitioned, and by silence), reconnecting to the same
session, timeout negotiation, the session password, sync, and the packet size limit
(docs/client-protocol.md: "Sessions", "Frame size limit", "The sync barrier").

Connections are cut with a TCP proxy (tests/proxy.py) and a few checks speak the protocol
directly (zkraw.py, built on kazoo's record codecs) where kazoo hides what the server said.
"""

import threading
import time

import pytest
from kazoo.exceptions import ConnectionLoss, NoNodeError
from kazoo.protocol.serialization import Create, Ping
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE

import helpers
from helpers import (
    HOST,
    PORT,
    Recorder,
    StateRecorder,
    expire_session,
    wait_event,
)
from proxy import Proxy
from zkraw import RawSession

MIN_TIMEOUT_MS = helpers.MIN_SESSION_TIMEOUT_MS
MAX_TIMEOUT_MS = helpers.MAX_SESSION_TIMEOUT_MS


def fast_retry():
    """Reconnect promptly (kazoo's default backs off up to a minute)."""
    return KazooRetry(max_tries=-1, delay=0.05, backoff=1, max_jitter=0.1, max_delay=0.2)


@pytest.fixture
def proxy():
    p = Proxy(HOST, PORT)
    yield p
    p.close()


def deleted_event(client, path):
    """Arms an exists watch on `path` and returns an Event set when it is deleted."""
    gone = threading.Event()
    assert client.exists(path, watch=lambda ev: ev.type == "DELETED" and gone.set())
    return gone


def test_closing_the_session_deletes_its_ephemerals(new_client, base, members):
    owner = new_client()
    observer = new_client()
    owner.create(f"{base}/e", b"", ephemeral=True)
    members.settle()  # the observer's member has the node its watch is set on
    gone = deleted_event(observer, f"{base}/e")
    owner.stop()
    wait_event(gone, "NodeDeleted for the closed session's ephemeral")
    assert observer.exists(f"{base}/e") is None


def test_ephemerals_of_other_sessions_are_untouched(new_client, base, members):
    a = new_client()
    b = new_client()
    a.create(f"{base}/a", b"", ephemeral=True)
    b.create(f"{base}/b", b"", ephemeral=True)
    members.settle()  # b's member has a's node before b watches it
    gone = deleted_event(b, f"{base}/a")
    a.stop()
    wait_event(gone, "a's ephemeral to go")
    assert b.get_children(base) == ["b"]


def test_expired_session_loses_ephemerals_and_reports_lost(new_client, base, members):
    victim = new_client()
    observer = new_client()
    old_session = victim.client_id[0]
    victim.create(f"{base}/e1", b"", ephemeral=True)
    victim.create(f"{base}/e2-", b"", ephemeral=True, sequence=True)
    members.settle()  # the observer's member has the nodes before it watches
    gone = deleted_event(observer, f"{base}/e1")
    states = expire_session(victim)
    wait_event(gone, "NodeDeleted for the expired session's ephemeral")
    assert observer.get_children(base) == []
    # kazoo then connects again with a brand-new session.
    states.wait_state(
        KazooState.CONNECTED,
        "a new session after LOST",
        after=states.items.index(KazooState.LOST),
    )
    assert victim.client_id[0] != old_session
    victim.create(f"{base}/after", b"", ephemeral=True)
    assert victim.exists(f"{base}/after").ephemeralOwner == victim.client_id[0]


def test_expired_session_cannot_be_resumed(new_client):
    client = new_client()
    session_id, password = client.client_id
    expire_session(client)
    with RawSession(HOST, PORT, session_id=session_id, passwd=password) as raw:
        # An invalid session gets timeOut 0, sessionId 0 and a zero password
        # (docs/client-protocol.md, "Resuming a session").
        assert raw.response.time_out == 0
        assert raw.response.session_id == 0
        assert raw.response.passwd == b"\x00" * 16
        assert raw.is_closed_by_server(), "the server must close the connection"


def test_wrong_password_is_refused_and_the_owner_keeps_its_session(new_client, base):
    # The owner talks to the server the bad attempt goes to: a server cuts the connection
    # of the session it is asked to reopen only when that connection is its own.
    owner = new_client(hosts=f"{HOST}:{PORT}", connection_retry=fast_retry())
    owner.create(f"{base}/e", b"", ephemeral=True)
    session_id, password = owner.client_id
    states = StateRecorder()
    owner.add_listener(states)
    bad = bytes(b ^ 0xFF for b in password)
    with RawSession(HOST, PORT, session_id=session_id, passwd=bad) as raw:
        assert raw.response.time_out == 0
        assert raw.response.session_id == 0
    # The attempt closed the owner's connection (docs/client-protocol.md, "Resuming a
    # session", step 1); the owner reconnects to
    # the same session, which is still alive.
    states.wait_state(KazooState.SUSPENDED, "the owner's connection to be cut")
    states.wait_state(
        KazooState.CONNECTED,
        "the owner to reconnect",
        after=states.items.index(KazooState.SUSPENDED),
    )
    assert owner.client_id[0] == session_id
    assert owner.exists(f"{base}/e").ephemeralOwner == session_id


def test_reconnect_after_dropped_connection_keeps_the_session(new_client, base, proxy):
    client = new_client(hosts=proxy.hosts, connection_retry=fast_retry())
    client.create(f"{base}/e", b"", ephemeral=True)
    session_id = client.client_id[0]
    states = StateRecorder()
    client.add_listener(states)
    proxy.drop()
    states.wait_state(KazooState.SUSPENDED)
    states.wait_state(KazooState.CONNECTED, after=states.items.index(KazooState.SUSPENDED))
    assert KazooState.LOST not in states.items
    assert client.client_id[0] == session_id
    assert client.exists(f"{base}/e").ephemeralOwner == session_id
    client.create(f"{base}/after", b"")


def test_data_watch_catches_up_after_reconnect(new_client, base, proxy, members):
    client = new_client(hosts=proxy.hosts, connection_retry=fast_retry())
    writer = new_client()
    writer.create(f"{base}/n", b"before")
    members.settle()  # the client's member has the node before the first read
    session_id = client.client_id[0]
    seen = Recorder()
    client.DataWatch(f"{base}/n", lambda data, stat: seen(data))
    seen.wait_for(lambda s: s == [b"before"], "the initial DataWatch call")
    states = StateRecorder()
    client.add_listener(states)
    proxy.freeze()
    proxy.drop()
    states.wait_state(KazooState.SUSPENDED)
    writer.set(f"{base}/n", b"while away")
    proxy.thaw()
    # kazoo does not send setWatches; its DataWatch re-reads when the connection is back.
    seen.wait_for(lambda s: s[-1:] == [b"while away"], "the change made while disconnected")
    assert client.client_id[0] == session_id
    assert KazooState.LOST not in states.items


def test_partitioned_session_expires_and_client_sees_lost(new_client, base, proxy, members):
    client = new_client(
        hosts=proxy.hosts, timeout=MIN_TIMEOUT_MS / 1000.0, connection_retry=fast_retry()
    )
    observer = new_client()
    client.create(f"{base}/e", b"", ephemeral=True)
    members.settle()
    old_session = client.client_id[0]
    gone = deleted_event(observer, f"{base}/e")
    states = StateRecorder()
    client.add_listener(states)
    proxy.freeze()
    proxy.drop()
    states.wait_state(KazooState.SUSPENDED)
    # The server expires the session once it has heard nothing for the session timeout.
    wait_event(gone, "the server to expire the partitioned session")
    assert KazooState.LOST not in states.items, "the client cannot know before it reconnects"
    proxy.thaw()
    lost_at = states.wait_state(KazooState.LOST, "LOST after the partition heals")
    states.wait_state(KazooState.CONNECTED, after=lost_at.index(KazooState.LOST))
    assert client.client_id[0] != old_session
    assert observer.exists(f"{base}/e") is None


def test_silent_session_expires_after_its_timeout_not_before(new_client, base):
    observer = new_client()
    raw = RawSession(HOST, PORT, timeout_ms=MIN_TIMEOUT_MS)
    try:
        timeout_ms = raw.response.time_out
        assert timeout_ms == MIN_TIMEOUT_MS
        raw.call_ok(1, Create(f"{base}/e", b"", OPEN_ACL_UNSAFE, 1))
        gone = deleted_event(observer, f"{base}/e")
        # The last packet the server gets from this session:
        raw.call(2, Ping())
        last_packet = time.monotonic()
        wait_event(gone, "the silent session to expire")
        waited_ms = (time.monotonic() - last_packet) * 1000
        # Never early; ZooKeeper acts between T and T + tickTime
        # (docs/client-protocol.md, "Session expiry").
        assert waited_ms >= timeout_ms * 0.9, f"expired after {waited_ms:.0f} ms"
        assert raw.is_closed_by_server(), "the expired session's connection must be closed"
    finally:
        raw.close()


def test_idle_session_is_kept_alive_by_pings(new_client, base):
    client = new_client(timeout=MIN_TIMEOUT_MS / 1000.0)
    client.create(f"{base}/e", b"", ephemeral=True)
    session_id = client.client_id[0]
    trouble = threading.Event()
    client.add_listener(lambda state: state != KazooState.CONNECTED and trouble.set())
    # Watch for three session timeouts: kazoo pings every third of it, and a server that
    # ignored pings would expire the session (or miss a ping reply and be dropped).
    assert not trouble.wait(3 * MIN_TIMEOUT_MS / 1000.0), "the idle session was disturbed"
    assert client.client_id[0] == session_id
    assert client.exists(f"{base}/e").ephemeralOwner == session_id


@pytest.mark.parametrize(
    "requested, expected",
    [
        (1, MIN_TIMEOUT_MS),
        (MAX_TIMEOUT_MS * 10, MAX_TIMEOUT_MS),
        ((MIN_TIMEOUT_MS + MAX_TIMEOUT_MS) // 2, (MIN_TIMEOUT_MS + MAX_TIMEOUT_MS) // 2),
    ],
    ids=["below-min", "above-max", "in-range"],
)
def test_negotiated_session_timeout_is_clamped(requested, expected):
    with RawSession(HOST, PORT, timeout_ms=requested) as raw:
        assert raw.response.protocol_version == 0
        assert raw.response.time_out == expected
        assert raw.response.session_id > 0
        assert len(raw.response.passwd) == 16
        raw.close_session()


def test_close_session_is_answered_then_the_connection_closed(base, zk):
    raw = RawSession(HOST, PORT)
    try:
        raw.call_ok(1, Create(f"{base}/e", b"", OPEN_ACL_UNSAFE, 1))
        header = raw.close_session(xid=7)
        assert header.xid == 7
        assert header.err == 0
        assert header.zxid > 0
        assert raw.is_closed_by_server()
    finally:
        raw.close()
    assert zk.exists(f"{base}/e") is None


def test_sync_returns_the_path_and_orders_reads(zk, zk2, base):
    zk.create(f"{base}/n", b"0")
    zk2.set(f"{base}/n", b"1")
    assert zk.sync(f"{base}/n") == f"{base}/n"
    assert zk.get(f"{base}/n")[0] == b"1"
    # sync does not care whether the path exists (docs/client-protocol.md, "sync").
    assert zk.sync(f"{base}/does-not-exist") == f"{base}/does-not-exist"


def test_oversized_request_drops_the_connection_not_the_session(new_client, base):
    client = new_client(connection_retry=fast_retry())
    client.create(f"{base}/e", b"", ephemeral=True)
    session_id = client.client_id[0]
    states = StateRecorder()
    client.add_listener(states)
    # A frame longer than jute.maxbuffer (1,048,575 bytes) makes the server close the
    # connection without a reply (docs/client-protocol.md, "Frame size limit").
    with pytest.raises(ConnectionLoss):
        client.create(f"{base}/huge", b"x" * 1_048_576)
    states.wait_state(KazooState.SUSPENDED, "the server to drop the connection")
    states.wait_state(
        KazooState.CONNECTED,
        "the client to reconnect",
        after=states.items.index(KazooState.SUSPENDED),
    )
    assert client.client_id[0] == session_id
    with pytest.raises(NoNodeError):
        client.get(f"{base}/huge")
    assert client.exists(f"{base}/e").ephemeralOwner == session_id


def test_many_sessions_at_once(new_client, base, members):
    clients = [new_client() for _ in range(20)]
    for i, c in enumerate(clients):
        c.create(f"{base}/e{i}", b"", ephemeral=True)
    ids = {c.client_id[0] for c in clients}
    assert len(ids) == 20
    members.settle()
    assert len(clients[0].get_children(base)) == 20
