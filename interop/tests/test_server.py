"""Server-level behaviour a client can see: four-letter words (the runner whitelists all of
them with 4lw.commands.whitelist=*), getAllChildrenNumber, and how the server treats
requests it cannot accept (docs/client-protocol.md: "Four-letter words",
"getEphemerals, getAllChildrenNumber, whoAmI", "Opcodes")."""

import socket

import pytest
from kazoo.exceptions import NoNodeError
from kazoo.protocol.serialization import GetData

from helpers import ENSEMBLE, EXPECT_MODE, HOST, MEMBERS, PORT, GetAllChildrenNumber, call
from zkraw import RawSession


def four_letter_word(word, timeout=10.0, member=(HOST, PORT)):
    """Sends a four-letter word on a fresh connection to `member` (default: the first) and
    reads until the server closes."""
    with socket.create_connection(member, timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return b"".join(chunks).decode()
            chunks.append(chunk)


def test_ruok_answers_imok(zk):
    # kazoo's own helper for four-letter words.
    assert zk.command(b"ruok") == "imok"


def srvr_fields(text):
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def mntr_fields(text):
    return dict(line.split("\t", 1) for line in text.splitlines() if "\t" in line)


def first_member_client(new_client):
    """A client of the first member only, the one four_letter_word asks: its writes are
    applied there before their replies come back (an ensemble member answers a write once
    it has applied it)."""
    return new_client(hosts=f"{HOST}:{PORT}")


def test_srvr_reports_the_mode_and_zxid(new_client, base):
    zk = first_member_client(new_client)
    _, stat = zk.create(f"{base}/n", b"", include_data=True)
    lines = srvr_fields(four_letter_word("srvr"))
    # The last zxid in lowercase hex without padding; at least our create's.
    assert lines["Zxid"].startswith("0x")
    assert int(lines["Zxid"], 16) >= stat.czxid
    assert int(lines["Node count"]) >= 4  # /, /zookeeper, its two children, ...
    for key in ("Zookeeper version", "Latency min/avg/max", "Received", "Sent",
                "Connections", "Outstanding"):
        assert key in lines, f"srvr lacks {key!r}"
    # One leader and followers in an ensemble, else a standalone server.
    modes = sorted(srvr_fields(four_letter_word("srvr", member=m))["Mode"] for m in MEMBERS)
    if EXPECT_MODE:
        assert modes == [EXPECT_MODE] * len(MEMBERS)
    elif ENSEMBLE:
        assert modes == ["follower"] * (len(MEMBERS) - 1) + ["leader"]
    else:
        assert modes == ["standalone"]


def test_mntr_reports_tab_separated_metrics(new_client, base):
    zk = first_member_client(new_client)
    zk.create(f"{base}/e", b"", ephemeral=True)
    metrics = mntr_fields(four_letter_word("mntr"))
    assert int(metrics["zk_znode_count"]) >= 5
    assert int(metrics["zk_ephemerals_count"]) >= 1
    assert int(metrics["zk_num_alive_connections"]) >= 1
    for key in ("zk_version", "zk_avg_latency", "zk_packets_received", "zk_packets_sent",
                "zk_outstanding_requests", "zk_watch_count", "zk_approximate_data_size"):
        assert key in metrics, f"mntr lacks {key}"
    every = [mntr_fields(four_letter_word("mntr", member=m)) for m in MEMBERS]
    states = sorted(m["zk_server_state"] for m in every)
    if EXPECT_MODE:
        # An observer reports no learners of its own.
        assert states == [EXPECT_MODE] * len(MEMBERS)
        for m in every:
            assert "zk_synced_followers" not in m
        return
    if not ENSEMBLE:
        assert states == ["standalone"]
        return
    assert states == ["follower"] * (len(MEMBERS) - 1) + ["leader"]
    # Only the leader reports its followers, all of them in sync, and its pending syncs.
    (leader,) = [m for m in every if m["zk_server_state"] == "leader"]
    assert int(leader["zk_synced_followers"]) == len(MEMBERS) - 1
    assert int(leader["zk_pending_syncs"]) >= 0
    for follower in (m for m in every if m["zk_server_state"] == "follower"):
        assert "zk_synced_followers" not in follower


def test_conf_reports_the_client_port(zk):
    text = four_letter_word("conf")
    conf = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    assert conf["clientPort"] == str(PORT)
    assert int(conf["tickTime"]) > 0


def test_isro_answers_rw(zk):
    assert four_letter_word("isro") == "rw"


def test_get_all_children_number_counts_descendants(zk, base):
    for p in ("a", "a/b", "a/b/c", "d"):
        zk.create(f"{base}/{p}", b"")
    assert call(zk, GetAllChildrenNumber(base)) == 4
    assert call(zk, GetAllChildrenNumber(f"{base}/a")) == 2
    assert call(zk, GetAllChildrenNumber(f"{base}/d")) == 0
    with pytest.raises(NoNodeError):
        call(zk, GetAllChildrenNumber(f"{base}/missing"))


def test_unknown_four_letter_word_closes_the_connection(zk):
    # A frame whose length field spells a word the server does not know ("xxxx") is an
    # absurd length; the server closes the connection without a reply
    # (docs/client-protocol.md, "How a four-letter word is sent").
    with socket.create_connection((HOST, PORT), timeout=10) as s:
        s.sendall(b"xxxx")
        s.settimeout(10)
        try:
            assert s.recv(1) == b""
        except ConnectionResetError:
            pass
    assert zk.exists("/") is not None


def test_unknown_opcode_gets_unimplemented_and_a_closed_connection(zk):
    class Unknown(GetData):
        type = 999

    with RawSession(HOST, PORT) as raw:
        header, _ = raw.call(5, Unknown("/", False))
        assert header.xid == 5
        assert header.err == -6  # UNIMPLEMENTED
        assert raw.is_closed_by_server()
    assert zk.exists("/") is not None


def test_reply_zxid_tracks_the_last_write(zk, base):
    with RawSession(HOST, PORT) as raw:
        _, stat = zk.create(f"{base}/n", b"", include_data=True)
        header, _ = raw.call(1, GetData(f"{base}/n", False))
        # A read's reply carries the server's last processed zxid
        # (docs/client-protocol.md, "The zxid in replies").
        assert header.err == 0
        assert header.zxid >= stat.czxid
        header, _ = raw.call(2, GetData(f"{base}/missing", False))
        assert header.err == -101  # NONODE, with no body
        raw.close_session()
