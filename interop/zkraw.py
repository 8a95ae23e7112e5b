"""A minimal raw ZooKeeper session over one TCP socket, built on kazoo's own record codecs.

kazoo hides a few things the suite needs to see: the negotiated session timeout, the exact
ConnectResponse of a refused session, and a session that stays silent so the server expires
it. This module sends the same frames kazoo would (kazoo.protocol.serialization builds them)
but lets the caller decide what happens next. The runner also uses it as its readiness
probe: a server is up when it answers a ConnectRequest with a live session.
"""

import socket
import struct

from kazoo.exceptions import EXCEPTIONS
from kazoo.protocol.serialization import Close, Connect, ReplyHeader

_INT = struct.Struct("!i")
NOTIFICATION_XID = -1
ZERO_PASSWORD = b"\x00" * 16


class RawSession:
    """One connection: sends a ConnectRequest on construction and reads the ConnectResponse.

    `response` is kazoo's Connect tuple (protocol_version, time_out, session_id, passwd,
    read_only); `time_out == 0` means the server refused the session.
    """

    def __init__(
        self,
        host,
        port,
        timeout_ms=10000,
        session_id=0,
        passwd=ZERO_PASSWORD,
        last_zxid=0,
        io_timeout=10.0,
    ):
        self.sock = socket.create_connection((host, port), timeout=io_timeout)
        self.notifications = []
        self._send(
            Connect(0, last_zxid, timeout_ms, session_id, passwd, False).serialize()
        )
        frame = self.read_frame()
        self.response, _ = Connect.deserialize(frame, 0)

    def _send(self, payload):
        self.sock.sendall(_INT.pack(len(payload)) + bytes(payload))

    def _read_exact(self, n):
        parts = []
        while n > 0:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("server closed the connection")
            parts.append(chunk)
            n -= len(chunk)
        return b"".join(parts)

    def read_frame(self):
        (length,) = _INT.unpack(self._read_exact(4))
        return self._read_exact(length)

    def call(self, xid, request):
        """Sends `request` (a kazoo request tuple) and returns (ReplyHeader, body bytes).

        Notifications that arrive first are kept in `self.notifications`.
        """
        payload = bytearray(_INT.pack(xid))
        if request.type is not None:
            payload += _INT.pack(request.type)
        payload += request.serialize()
        self._send(payload)
        while True:
            frame = self.read_frame()
            header, offset = ReplyHeader.deserialize(frame, 0)
            if header.xid == NOTIFICATION_XID:
                self.notifications.append(frame[offset:])
                continue
            return header, frame[offset:]

    def call_ok(self, xid, request):
        """Like call(), but raises kazoo's exception for a non-zero error code and decodes
        the body with the request's own deserializer."""
        header, body = self.call(xid, request)
        if header.err:
            raise EXCEPTIONS[header.err]()
        return request.deserialize(body, 0)

    def close_session(self, xid=1_000_000):
        """Sends closeSession (-11) and returns its reply header."""
        header, _ = self.call(xid, Close())
        return header

    def is_closed_by_server(self, timeout=10.0):
        """True when the server closes the connection (EOF) within `timeout` seconds."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def probe(host, port, io_timeout=2.0):
    """True if a ZooKeeper-protocol server at host:port grants a session (then closes it)."""
    try:
        with RawSession(host, port, io_timeout=io_timeout) as s:
            if s.response.time_out <= 0:
                return False
            s.close_session()
            return True
    except (OSError, struct.error, ConnectionError):
        return False
