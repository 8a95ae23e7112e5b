"""Server-level behaviour a client can see: four-letter words (the runner whitelists all of
them with 4lw.commands.whitelist=*), getAllChildrenNumber, and how the server treats
requests it cannot accept (protocol §14, §7.10, §5)."""

import socket

import pytest
from kazoo.exceptions import NoNodeError
from kazoo.protocol.serialization import GetData

from helpers import HOST, PORT, GetAllChildrenNumber, call
from zkraw import RawSession


def four_letter_word(word, timeout=10.0):
    """Sends a four-letter word on a fresh connection and reads until the server closes."""
    with socket.create_connection((HOST, PORT), timeout=timeout) as s:
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


def test_srvr_reports_standalone_mode_and_zxid(zk, base):
    _, stat = zk.create(f"{base}/n", b"", include_data=True)
    text = four_letter_word("srvr")
    lines = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    assert lines["Mode"] == "standalone"
    # The last zxid in lowercase hex without padding; at least our create's.
    assert lines["Zxid"].startswith("0x")
    assert int(lines["Zxid"], 16) >= stat.czxid
    assert int(lines["Node count"]) >= 4  # /, /zookeeper, its two children, ...
    for key in ("Zookeeper version", "Latency min/avg/max", "Received", "Sent",
                "Connections", "Outstanding"):
        assert key in lines, f"srvr lacks {key!r}"


def test_mntr_reports_tab_separated_metrics(zk, base):
    zk.create(f"{base}/e", b"", ephemeral=True)
    text = four_letter_word("mntr")
    metrics = dict(line.split("\t", 1) for line in text.splitlines() if "\t" in line)
    assert metrics["zk_server_state"] == "standalone"
    assert int(metrics["zk_znode_count"]) >= 5
    assert int(metrics["zk_ephemerals_count"]) >= 1
    assert int(metrics["zk_num_alive_connections"]) >= 1
    for key in ("zk_version", "zk_avg_latency", "zk_packets_received", "zk_packets_sent",
                "zk_outstanding_requests", "zk_watch_count", "zk_approximate_data_size"):
        assert key in metrics, f"mntr lacks {key}"


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
    # absurd length; the server closes the connection without a reply (§14.1).
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
        # A read's reply carries the server's last processed zxid (§4.4).
        assert header.err == 0
        assert header.zxid >= stat.czxid
        header, _ = raw.call(2, GetData(f"{base}/missing", False))
        assert header.err == -101  # NONODE, with no body
        raw.close_session()
