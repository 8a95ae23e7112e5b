"""A TCP proxy between a client and the server under test, to cut or freeze connections
the way a network would, without touching either process.

- `drop()` closes every connection through the proxy at once (the client sees a reset and
  reconnects; the server sees the connection close).
- `freeze()` stops forwarding in both directions and holds new connections unanswered,
  like a partition: the client stops hearing pings, the server stops hearing from the
  client. `thaw()` ends it by closing everything that existed meanwhile and forwarding new
  connections again.
"""

import select
import socket
import threading


class Proxy:
    def __init__(self, target_host, target_port):
        self.target = (target_host, target_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        self._conns = []  # (client socket, server socket or None)
        self._frozen = threading.Event()
        self._closed = threading.Event()
        self.accepted = 0
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    @property
    def hosts(self):
        return f"127.0.0.1:{self.port}"

    def _accept_loop(self):
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                if self._frozen.is_set():
                    # Partitioned: hold the connection open and silent.
                    self._conns.append((client, None))
                    continue
            try:
                server = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns.append((client, server))
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, client, server):
        peers = {client: server, server: client}
        try:
            while not self._closed.is_set():
                if self._frozen.is_set():
                    # Leave bytes in the kernel buffers; nothing crosses while frozen.
                    ready, _, _ = select.select([], [], [], 0.05)
                    continue
                ready, _, _ = select.select([client, server], [], [], 0.05)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)
        except OSError:
            return
        finally:
            self._close_pair(client, server)

    def _close_pair(self, client, server):
        for sock in (client, server):
            if sock is None:
                continue
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def drop(self):
        """Closes every connection that goes through the proxy now."""
        with self._lock:
            conns, self._conns = self._conns, []
        for client, server in conns:
            self._close_pair(client, server)

    def freeze(self):
        self._frozen.set()

    def thaw(self):
        with self._lock:
            self._frozen.clear()
            conns, self._conns = self._conns, []
        for client, server in conns:
            self._close_pair(client, server)

    def close(self):
        self._closed.set()
        self.listener.close()
        self.drop()
