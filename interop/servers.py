"""Starting and stopping the servers the interop suite runs against.

Both servers get the same zoo.cfg (see `write_zoo_cfg`). Apache ZooKeeper takes a few of
these settings only as Java system properties (they are documented that way in the
ZooKeeper admin guide), so for it the same values are also passed as -D flags; zoo.cfg keys
it does not know become harmless `zookeeper.<key>` properties. rzk reads them all from the
file.

Every server runs in the foreground as a child of the runner, on a port found by binding
port 0, with its data in a fresh temporary directory, and is stopped by its PID.

An ensemble (`start_zookeeper_ensemble`, `start_rzk_ensemble`) is ENSEMBLE_SIZE such
processes whose zoo.cfg files add initLimit, syncLimit and the same `server.N=` lines (every
port bound to port 0 first), with `myid` in each dataDir: started the way an operator starts
one, from files only. Apache ZooKeeper's members run QuorumPeerMain, with the same JVM
flags as the standalone server (-Xmx, no -Xms).
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import zkraw

HOST = "127.0.0.1"

# The settings every target gets. The suite's expectations (session timeout bounds, TTL on,
# the super user, the container reaper interval) come from here and reach the tests through
# the environment (see `suite_env`).
TICK_TIME_MS = 1000
MIN_SESSION_TIMEOUT_MS = 2000
MAX_SESSION_TIMEOUT_MS = 20000
MAX_CLIENT_CNXNS = 100
JUTE_MAX_BUFFER = 0xFFFFF
CONTAINER_CHECK_INTERVAL_MS = 1000
SUPER_USER = "super"
SUPER_PASSWORD = "interop-super-secret"

ZOOKEEPER_JARS = "/usr/share/java"
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
ZOOKEEPER_QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

# Ensemble mode: members per ensemble, and the ensemble settings (in ticks of
# TICK_TIME_MS) every member's zoo.cfg adds to the common ones.
ENSEMBLE_SIZE = 3
INIT_LIMIT_TICKS = 10
SYNC_LIMIT_TICKS = 5

READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0

LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
"""


class ServerError(Exception):
    """A server could not be started; the message says why and where its log is."""


def super_digest():
    """`super:<base64(sha1("super:<password>"))>`, the value both servers are configured with."""
    from kazoo.security import make_digest_acl_credential

    return make_digest_acl_credential(SUPER_USER, SUPER_PASSWORD)


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def write_zoo_cfg(path, port, data_dir, members=None, extra=()):
    """Writes the zoo.cfg both servers get. `members` (ensemble mode) is the list of
    `server.N=...` lines every member shares; without it the server is standalone.
    `extra` lines are this member's own (`peerType=observer`)."""
    lines = [
        "# Written by interop/servers.py: the same file for Apache ZooKeeper and rzk.",
        f"tickTime={TICK_TIME_MS}",
        f"dataDir={data_dir}/data",
        f"dataLogDir={data_dir}/datalog",
        f"clientPort={port}",
        f"clientPortAddress={HOST}",
        f"minSessionTimeout={MIN_SESSION_TIMEOUT_MS}",
        f"maxSessionTimeout={MAX_SESSION_TIMEOUT_MS}",
        f"maxClientCnxns={MAX_CLIENT_CNXNS}",
        "snapCount=10000",
        "autopurge.snapRetainCount=3",
        "4lw.commands.whitelist=*",
        "zookeeper.extendedTypesEnabled=true",
        f"jute.maxbuffer={JUTE_MAX_BUFFER}",
        f"superDigest={super_digest()}",
        f"znode.container.checkIntervalMs={CONTAINER_CHECK_INTERVAL_MS}",
    ]
    if members:
        lines += [f"initLimit={INIT_LIMIT_TICKS}", f"syncLimit={SYNC_LIMIT_TICKS}", *members]
    lines += list(extra)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def suite_env(server):
    """The environment variables that point the pytest suite at a server (or ensemble)
    started here."""
    env = {
        "INTEROP_ZK_SERVER": server.hosts,
        "INTEROP_TTL": "1",
        "INTEROP_SUPER_AUTH": f"{SUPER_USER}:{SUPER_PASSWORD}",
        "INTEROP_MIN_SESSION_TIMEOUT_MS": str(MIN_SESSION_TIMEOUT_MS),
        "INTEROP_MAX_SESSION_TIMEOUT_MS": str(MAX_SESSION_TIMEOUT_MS),
        "INTEROP_CONTAINER_REAPER": "1",
    }
    if server.server_lines:
        env["INTEROP_SERVER_LINES"] = "\n".join(server.server_lines)
    if getattr(server, "expect_mode", None):
        env["INTEROP_EXPECT_MODE"] = server.expect_mode
    return env


class Server:
    """A server process started by the runner. Use as a context manager."""

    def __init__(self, name, argv, cfg_dir, data_dir, port, log_path, cwd):
        self.name = name
        self.argv = argv
        self.cfg_dir = cfg_dir
        self.data_dir = data_dir
        self.port = port
        self.log_path = log_path
        self.cwd = cwd
        self.proc = None
        # The server.N lines of its zoo.cfg (none: standalone).
        self.server_lines = []

    @property
    def hosts(self):
        return f"{HOST}:{self.port}"

    @property
    def members(self):
        return [self.hosts]

    def start(self):
        """Launches the process and waits until it grants a session."""
        self.launch()
        return self.wait_ready(time.monotonic() + READY_TIMEOUT_S)

    def launch(self):
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            log.close()
        return self

    def wait_ready(self, deadline):
        # Readiness is a real handshake: the server grants a session and closes it. Polling
        # with a deadline is the only way to wait for a port another process opens.
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.cleanup()
                raise ServerError(
                    f"{self.name} exited with code {self.proc.returncode} before it was "
                    f"ready; log: {self.log_path}\n{self.log_tail()}"
                )
            if zkraw.probe(HOST, self.port):
                return self
            time.sleep(0.2)
        self.stop()
        self.cleanup()
        raise ServerError(
            f"{self.name} did not accept a session on {self.hosts} within "
            f"{READY_TIMEOUT_S:.0f} s; log: {self.log_path}\n{self.log_tail()}"
        )

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """Stops the process by its PID: SIGTERM, then SIGKILL after a grace period."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT_S)

    def cleanup(self):
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def log_tail(self, lines=40):
        try:
            with open(self.log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _prepare(name, work_dir, port=None, members=None, extra=()):
    os.makedirs(work_dir, exist_ok=True)
    data_dir = tempfile.mkdtemp(prefix=f"rzk-interop-{name}-")
    port = port or free_port()
    cfg = os.path.join(work_dir, f"{name}-zoo.cfg")
    write_zoo_cfg(cfg, port, data_dir, members, extra)
    log_path = os.path.join(work_dir, f"{name}-server.log")
    if os.path.exists(log_path):
        os.remove(log_path)
    return data_dir, port, cfg, log_path


def zookeeper_classpath(conf_dir):
    jars = [os.path.join(ZOOKEEPER_JARS, "zookeeper.jar")]
    if not os.path.exists(jars[0]):
        raise ServerError(
            f"{jars[0]} is missing: install Debian's zookeeper package "
            "(apt-get install -y zookeeper)"
        )
    # The zookeeper jar's manifest pulls in its dependencies but no slf4j binding; these two
    # (dependencies of libzookeeper-java) give the server a log.
    for extra in ("slf4j-log4j12.jar", "log4j-1.2.jar"):
        path = os.path.join(ZOOKEEPER_JARS, extra)
        if os.path.exists(path):
            jars.append(path)
    return ":".join([conf_dir] + jars)


def _zookeeper_argv(work_dir, cfg, main):
    java = shutil.which("java")
    if java is None:
        raise ServerError("java is not on PATH (Debian: apt-get install -y default-jre-headless)")
    conf_dir = os.path.join(work_dir, "zookeeper-conf")
    os.makedirs(conf_dir, exist_ok=True)
    with open(os.path.join(conf_dir, "log4j.properties"), "w") as f:
        f.write(LOG4J_PROPERTIES)
    argv = [
        java,
        # A ceiling, not a reservation (no -Xms): the heap grows as it is used.
        "-Xmx512m",
        # No admin HTTP server: it would bind port 8080, which other servers on this
        # machine may hold.
        "-Dzookeeper.admin.enableServer=false",
        # Settings ZooKeeper reads only as system properties; zoo.cfg carries the same values.
        "-Dzookeeper.extendedTypesEnabled=true",
        f"-Djute.maxbuffer={JUTE_MAX_BUFFER}",
        f"-Dzookeeper.DigestAuthenticationProvider.superDigest={super_digest()}",
        f"-Dznode.container.checkIntervalMs={CONTAINER_CHECK_INTERVAL_MS}",
        f"-Dlog4j.configuration=file:{conf_dir}/log4j.properties",
        "-cp",
        zookeeper_classpath(conf_dir),
        main,
        cfg,
    ]
    return argv, conf_dir


def start_zookeeper(work_dir):
    """Starts Apache ZooKeeper (the Debian package's jars) in the foreground."""
    data_dir, port, cfg, log_path = _prepare("zookeeper", work_dir)
    argv, conf_dir = _zookeeper_argv(work_dir, cfg, ZOOKEEPER_MAIN)
    return Server("zookeeper", argv, conf_dir, data_dir, port, log_path, work_dir).start()


def start_rzk(binary, work_dir):
    """Starts `rzk <zoo.cfg>` in the foreground."""
    data_dir, port, cfg, log_path = _prepare("rzk", work_dir)
    return Server("rzk", [binary, cfg], None, data_dir, port, log_path, work_dir).start()


class Ensemble:
    """ENSEMBLE_SIZE server processes configured as one ensemble (the same server.N lines
    in every zoo.cfg, myid in each dataDir). Offers what the runner uses of a `Server`:
    `hosts` (the connect string of every member), `members`, `alive`, `stop`, `cleanup`,
    `log_tail`, `log_path`, `proc`."""

    def __init__(self, name, members, server_lines, clients=None, expect_mode=None):
        self.name = name
        self.servers = members
        # The server.N lines every member's zoo.cfg has.
        self.server_lines = server_lines
        # The members the suite connects to (default: all); observer mode gives it the
        # observer only, and tells it the mode that member must report.
        self.clients = clients if clients is not None else members
        self.expect_mode = expect_mode

    @property
    def hosts(self):
        return ",".join(self.members)

    @property
    def members(self):
        return [m.hosts for m in self.clients]

    @property
    def log_path(self):
        return ", ".join(m.log_path for m in self.servers)

    @property
    def proc(self):
        """The first member that exited (for its return code), else the first member's."""
        dead = [m.proc for m in self.servers if not m.alive()]
        return (dead or [self.servers[0].proc])[0]

    def start(self):
        for m in self.servers:
            m.launch()
        # Members elect a leader among themselves; each serves once it has synced with it.
        deadline = time.monotonic() + READY_TIMEOUT_S
        try:
            for m in self.servers:
                m.wait_ready(deadline)
        except ServerError:
            self.stop()
            self.cleanup()
            raise
        return self

    def alive(self):
        return all(m.alive() for m in self.servers)

    def stop(self):
        for m in self.servers:
            m.stop()

    def cleanup(self):
        for m in self.servers:
            m.cleanup()

    def log_tail(self, lines=40):
        return "\n".join(f"--- {m.name}\n{m.log_tail(lines)}" for m in self.servers)


def _ensemble_configs(name, work_dir, observers=0, observer_master=False):
    """The shared server lines, and per member (member name, data dir, client port,
    zoo.cfg, log), with the server lines written into every zoo.cfg and each member's
    myid into its dataDir. `observers` members follow the ENSEMBLE_SIZE voters, as in
    ZooKeeper: `:observer` on their line everywhere, `peerType=observer` in their own
    zoo.cfg. `observer_master` (rzk only) gives every voter its own observer-master
    port, `observerMasterPort.N=P` in every zoo.cfg (rzk's per-member form: on one host
    the ports must differ; ZooKeeper would need a loopback address per member), so the
    observers follow a follower's relay."""
    ids = range(1, ENSEMBLE_SIZE + observers + 1)
    ports = {i: (free_port(), free_port(), free_port()) for i in ids}  # client, quorum, election
    master_lines = [
        f"observerMasterPort.{i}={free_port()}" for i in range(1, ENSEMBLE_SIZE + 1)
    ] if observer_master else []

    def observes(i):
        return i > ENSEMBLE_SIZE

    members = [
        f"server.{i}={HOST}:{quorum}:{election}{':observer' if observes(i) else ''};"
        f"{HOST}:{client}"
        for i, (client, quorum, election) in ports.items()
    ]
    out = []
    for i in ids:
        member = f"{name}-{i}"
        extra = (["peerType=observer"] if observes(i) else []) + master_lines
        data_dir, port, cfg, log_path = _prepare(member, work_dir, ports[i][0], members, extra)
        os.makedirs(os.path.join(data_dir, "data"), exist_ok=True)
        with open(os.path.join(data_dir, "data", "myid"), "w") as f:
            f.write(f"{i}\n")
        out.append((member, data_dir, port, cfg, log_path))
    return members, out


def start_zookeeper_ensemble(work_dir):
    """Starts an Apache ZooKeeper ensemble (QuorumPeerMain, one JVM per member)."""
    lines, configs = _ensemble_configs("zookeeper-ensemble", work_dir)
    servers = []
    for member, data_dir, port, cfg, log_path in configs:
        argv, conf_dir = _zookeeper_argv(work_dir, cfg, ZOOKEEPER_QUORUM_MAIN)
        servers.append(Server(member, argv, conf_dir, data_dir, port, log_path, work_dir))
    return Ensemble("zookeeper-ensemble", servers, lines).start()


def start_rzk_ensemble(binary, work_dir):
    """Starts an rzk ensemble: `rzk <zoo.cfg>` per member."""
    lines, configs = _ensemble_configs("rzk-ensemble", work_dir)
    servers = [
        Server(member, [binary, cfg], None, data_dir, port, log_path, work_dir)
        for member, data_dir, port, cfg, log_path in configs
    ]
    return Ensemble("rzk-ensemble", servers, lines).start()


# Observer mode: a 3+1 ensemble (ENSEMBLE_SIZE voters and this many observers); the suite
# connects to the observer only.
OBSERVERS = 1


def start_zookeeper_observer(work_dir):
    """An Apache ZooKeeper ensemble of ENSEMBLE_SIZE voters and OBSERVERS observers; the
    suite is pointed at the observer."""
    lines, configs = _ensemble_configs("zookeeper-observer", work_dir, OBSERVERS)
    servers = []
    for member, data_dir, port, cfg, log_path in configs:
        argv, conf_dir = _zookeeper_argv(work_dir, cfg, ZOOKEEPER_QUORUM_MAIN)
        servers.append(Server(member, argv, conf_dir, data_dir, port, log_path, work_dir))
    return Ensemble("zookeeper-observer", servers, lines, servers[ENSEMBLE_SIZE:],
                    "observer").start()


def start_rzk_observer(binary, work_dir):
    """The same topology of rzk processes, with observer-master ports on the voters: the
    observer follows a follower's relay (checked before the suite runs); the suite is
    pointed at the observer."""
    lines, configs = _ensemble_configs("rzk-observer", work_dir, OBSERVERS, observer_master=True)
    servers = [
        Server(member, [binary, cfg], None, data_dir, port, log_path, work_dir)
        for member, data_dir, port, cfg, log_path in configs
    ]
    ensemble = Ensemble("rzk-observer", servers, lines, servers[ENSEMBLE_SIZE:],
                        "observer").start()
    try:
        _wait_relayed(ensemble)
    except ServerError:
        ensemble.stop()
        ensemble.cleanup()
        raise
    return ensemble


def four_letter(port, word):
    """A four-letter word's answer from HOST:port ("" when it does not answer)."""
    try:
        with socket.create_connection((HOST, port), timeout=5) as s:
            s.sendall(word.encode())
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""


def _wait_relayed(ensemble):
    """Waits (READY_TIMEOUT_S at most) until every observer's `mntr`
    `zk_observer_master_id` names a member whose `srvr` says `Mode: follower`, and
    prints what each follows."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    for i, obs in enumerate(ensemble.clients, start=ENSEMBLE_SIZE + 1):
        while True:
            mntr = four_letter(obs.port, "mntr")
            master = next((line.split("\t", 1)[1].strip() for line in mntr.splitlines()
                           if line.startswith("zk_observer_master_id\t")), None)
            modes = {j + 1: next((line.split(":", 1)[1].strip()
                                  for line in four_letter(m.port, "srvr").splitlines()
                                  if line.startswith("Mode:")), None)
                     for j, m in enumerate(ensemble.servers[:ENSEMBLE_SIZE])}
            if master and master.isdigit() and modes.get(int(master)) == "follower":
                leader = [j for j, mode in modes.items() if mode == "leader"]
                print(f"[interop] rzk observer {i}: mntr zk_observer_master_id {master} "
                      f"(a follower; the leader is {leader})", flush=True)
                break
            if time.monotonic() > deadline:
                raise ServerError(
                    f"rzk observer {i} does not follow a follower within "
                    f"{READY_TIMEOUT_S:.0f} s (zk_observer_master_id {master}, voters {modes}); "
                    f"log: {obs.log_path}\n{obs.log_tail()}")
            time.sleep(0.2)


def start_with_retry(start, *args, attempts=3):
    """Starts a server; a port taken between bind(0) and the server's own bind is retried."""
    for attempt in range(1, attempts + 1):
        try:
            return start(*args)
        except ServerError as e:
            if attempt == attempts or "Address already in use" not in str(e):
                raise
