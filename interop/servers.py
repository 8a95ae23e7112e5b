"""Starting and stopping the servers the interop suite runs against.

Both servers get the same zoo.cfg (`suite_settings`). Apache ZooKeeper takes a few of these
settings only as Java system properties (they are documented that way in the ZooKeeper admin
guide), so for it the same values are also passed as -D flags; zoo.cfg keys it does not know
become harmless `zookeeper.<key>` properties. rzk reads them all from the file.

The runner's servers (standalone, an ensemble of ENSEMBLE_SIZE, or ENSEMBLE_SIZE voters and
OBSERVERS observers) are started by the repository's ensemble launcher, rzk-ensemble
(testkit/README.md): it writes every member's zoo.cfg (the same `server.N=` lines) and
`myid` under the work dir, starts the members the way an operator does (rzk <zoo.cfg>, or
ZooKeeper's QuorumPeerMain, ZooKeeperServerMain when standalone, on every port reserved for
it), waits until they have settled, and stops them by PID; `Ensemble` here is a thin wrapper
that calls it. Each member is then checked with a real session handshake before the suite
runs.

`Server`, `write_zoo_cfg` and the ZooKeeper command line below are for the interop/ops tests,
which start single servers with extra jars and keys of their own.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import zkraw

HOST = "127.0.0.1"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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


def write_zoo_cfg(path, port, data_dir, extra=()):
    """Writes the zoo.cfg of a standalone server of the ops tests: the same keys the runner's
    servers get (`suite_settings`), then `extra` lines (a later key wins)."""
    lines = [
        "# Written by interop/servers.py: the same file for Apache ZooKeeper and rzk.",
        f"tickTime={TICK_TIME_MS}",
        f"dataDir={data_dir}/data",
        f"dataLogDir={data_dir}/datalog",
        f"clientPort={port}",
        f"clientPortAddress={HOST}",
        "4lw.commands.whitelist=*",
        *suite_settings()[1::2],
        *extra,
    ]
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


def _prepare(name, work_dir, extra=()):
    os.makedirs(work_dir, exist_ok=True)
    data_dir = tempfile.mkdtemp(prefix=f"rzk-interop-{name}-")
    port = free_port()
    cfg = os.path.join(work_dir, f"{name}-zoo.cfg")
    write_zoo_cfg(cfg, port, data_dir, extra)
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


def suite_settings():
    """The zoo.cfg keys every runner target gets, as `rzk-ensemble --set` words (tickTime,
    the limits and every four-letter word are given by their own options)."""
    keys = [
        f"minSessionTimeout={MIN_SESSION_TIMEOUT_MS}",
        f"maxSessionTimeout={MAX_SESSION_TIMEOUT_MS}",
        f"maxClientCnxns={MAX_CLIENT_CNXNS}",
        "snapCount=10000",
        "autopurge.snapRetainCount=3",
        "zookeeper.extendedTypesEnabled=true",
        f"jute.maxbuffer={JUTE_MAX_BUFFER}",
        f"superDigest={super_digest()}",
        f"znode.container.checkIntervalMs={CONTAINER_CHECK_INTERVAL_MS}",
    ]
    return [w for k in keys for w in ("--set", k)]


_CLI = []


def ensemble_cli():
    """The rzk-ensemble binary: $RZK_ENSEMBLE, else built from this repository (release,
    under $CARGO_TARGET_DIR when set)."""
    if _CLI:
        return _CLI[0]
    path = os.environ.get("RZK_ENSEMBLE")
    if not path:
        env = dict(os.environ)
        env.setdefault("CARGO_BUILD_JOBS", "2")
        code = subprocess.call(
            ["cargo", "build", "--release", "-p", "rzk-testkit", "--bin", "rzk-ensemble"],
            cwd=REPO, env=env)
        if code != 0:
            raise ServerError(f"cargo build of rzk-ensemble failed (exit code {code})")
        target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
        path = os.path.join(target, "release", "rzk-ensemble")
    if not os.access(path, os.X_OK):
        raise ServerError(f"{path} is not an executable (RZK_ENSEMBLE)")
    _CLI.append(path)
    return path


class Member:
    """One member as rzk-ensemble recorded it."""

    def __init__(self, record):
        self.id = record["id"]
        self.role = record["role"]
        self.pid = record["pid"]
        host, _, port = record["client"].rpartition(":")
        self.host, self.port = host, int(port)
        self.log_path = record["log"]
        self.dir = record["dir"]

    @property
    def hosts(self):
        return f"{self.host}:{self.port}"

    def log_tail(self, lines=40):
        return _tail(self.log_path, lines)


def _tail(path, lines):
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class Ensemble:
    """Servers started by rzk-ensemble in `<work_dir>/<name>`: a standalone server, or
    voters and observers configured as one ensemble (the same server.N lines in every
    zoo.cfg, myid in each dataDir). Offers what the runner uses: `hosts` (the connect
    string of the members the suite talks to), `members`, `pids`, `alive`, `stop`,
    `cleanup`, `log_tail`, `log_path`."""

    def __init__(self, name, work_dir, program, voters=1, observers=0, standalone=False,
                 observer_master=False, expect_mode=None):
        self.name = name
        self.dir = os.path.join(work_dir, name)
        self.program = program
        self.voters, self.observers, self.standalone = voters, observers, standalone
        self.observer_master = observer_master
        # Observer mode gives the suite the observers only, and tells it the mode they
        # must report.
        self.expect_mode = expect_mode
        self.servers = []
        # The server.N lines every member's zoo.cfg has (none: standalone).
        self.server_lines = []

    @property
    def clients(self):
        if self.expect_mode == "observer":
            return [m for m in self.servers if m.role == "observer"]
        return self.servers

    @property
    def hosts(self):
        return ",".join(self.members)

    @property
    def members(self):
        return [m.hosts for m in self.clients]

    @property
    def pids(self):
        return ",".join(str(m.pid) for m in self.servers)

    @property
    def log_path(self):
        return ", ".join(m.log_path for m in self.servers)

    def _cli(self, *args, **kwargs):
        return subprocess.run([ensemble_cli(), *args], text=True, **kwargs)

    def start(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        shape = (["--standalone"] if self.standalone else
                 ["--voters", str(self.voters), "--observers", str(self.observers),
                  "--init-limit", str(INIT_LIMIT_TICKS), "--sync-limit", str(SYNC_LIMIT_TICKS)])
        if self.observer_master:
            shape += ["--observer-master", "per-voter"]
        # Its own session, as the members it starts: a signal to the runner's process group
        # does not reach them (the runner stops them by PID in its `finally`).
        done = self._cli(
            "start", "--dir", self.dir, *self.program, *shape, "--tick-ms", str(TICK_TIME_MS),
            "--data-log-dir", *suite_settings(), "--timeout", str(int(READY_TIMEOUT_S)),
            "--json", stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        if done.returncode != 0:
            self.stop()
            raise ServerError(f"{self.name} did not start (rzk-ensemble exited with "
                              f"{done.returncode}):\n{done.stderr[-6000:]}")
        record = json.loads(done.stdout)
        self.servers = [Member(m) for m in record["members"]]
        with open(os.path.join(self.servers[0].dir, "zoo.cfg")) as f:
            self.server_lines = [line.strip() for line in f if line.startswith("server.")]
        # Readiness is a real handshake: each member the suite talks to grants a session.
        deadline = time.monotonic() + READY_TIMEOUT_S
        for m in self.clients:
            while not zkraw.probe(m.host, m.port):
                if time.monotonic() > deadline or not self.alive():
                    self.stop()
                    raise ServerError(f"{self.name}: {m.hosts} did not accept a session within "
                                      f"{READY_TIMEOUT_S:.0f} s; log: {m.log_path}\n{m.log_tail()}")
                time.sleep(0.2)
        return self

    def alive(self):
        return self._cli("status", "--dir", self.dir, "--require-running",
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0

    def stop(self):
        """Stops every member by its PID: SIGTERM, then SIGKILL after a grace period."""
        if os.path.exists(os.path.join(self.dir, "ensemble.json")):
            self._cli("stop", "--dir", self.dir, "--grace", str(int(STOP_TIMEOUT_S)),
                      stderr=subprocess.DEVNULL)

    def cleanup(self):
        """Removes the members' data; their zoo.cfg and logs stay in the work dir."""
        for m in self.servers:
            for d in ("data", "datalog"):
                shutil.rmtree(os.path.join(m.dir, d), ignore_errors=True)

    def log_tail(self, lines=40):
        if len(self.servers) == 1:
            return self.servers[0].log_tail(lines)
        return "\n".join(f"--- {self.name}-{m.id}\n{m.log_tail(lines)}" for m in self.servers)


ZOOKEEPER_CLI = ["--zookeeper", "--zookeeper-jars", ZOOKEEPER_JARS, "--jvm-arg=-Xmx512m"]


def _zookeeper_program():
    jar = os.path.join(ZOOKEEPER_JARS, "zookeeper.jar")
    if not os.path.exists(jar):
        raise ServerError(f"{jar} is missing: install Debian's zookeeper package "
                          "(apt-get install -y zookeeper)")
    if shutil.which("java") is None:
        raise ServerError("java is not on PATH (Debian: apt-get install -y default-jre-headless)")
    # A ceiling, not a reservation (no -Xms): the heap grows as it is used.
    return ZOOKEEPER_CLI


def start_zookeeper(work_dir):
    """Apache ZooKeeper (the Debian package's jars), standalone."""
    return Ensemble("zookeeper", work_dir, _zookeeper_program(), standalone=True).start()


def start_rzk(binary, work_dir):
    """rzk, standalone."""
    return Ensemble("rzk", work_dir, ["--rzk", binary], standalone=True).start()


def start_zookeeper_ensemble(work_dir):
    """An Apache ZooKeeper ensemble (QuorumPeerMain, one JVM per member)."""
    return Ensemble("zookeeper-ensemble", work_dir, _zookeeper_program(),
                    voters=ENSEMBLE_SIZE).start()


def start_rzk_ensemble(binary, work_dir):
    """An rzk ensemble: `rzk <zoo.cfg>` per member."""
    return Ensemble("rzk-ensemble", work_dir, ["--rzk", binary], voters=ENSEMBLE_SIZE).start()


# Observer mode: a 3+1 ensemble (ENSEMBLE_SIZE voters and this many observers); the suite
# connects to the observer only.
OBSERVERS = 1


def start_zookeeper_observer(work_dir):
    """An Apache ZooKeeper ensemble of ENSEMBLE_SIZE voters and OBSERVERS observers (on the
    leader); the suite is pointed at the observer."""
    return Ensemble("zookeeper-observer", work_dir, _zookeeper_program(), voters=ENSEMBLE_SIZE,
                    observers=OBSERVERS, expect_mode="observer").start()


def start_rzk_observer(binary, work_dir):
    """The same topology of rzk processes, with an observer-master port on every voter
    (`observerMasterPort.N=P` in every zoo.cfg, rzk's per-member form: on one host the
    ports must differ; ZooKeeper would need a loopback address per member): the observer
    follows a follower's relay (checked before the suite runs); the suite is pointed at
    the observer."""
    ensemble = Ensemble("rzk-observer", work_dir, ["--rzk", binary], voters=ENSEMBLE_SIZE,
                        observers=OBSERVERS, observer_master=True,
                        expect_mode="observer").start()
    try:
        _wait_relayed(ensemble)
    except ServerError:
        ensemble.stop()
        ensemble.cleanup()
        raise
    return ensemble


def four_letter(port, word, host=HOST):
    """A four-letter word's answer from host:port ("" when it does not answer)."""
    try:
        with socket.create_connection((host, port), timeout=5) as s:
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
    voters = [m for m in ensemble.servers if m.role == "voter"]
    for obs in ensemble.clients:
        while True:
            mntr = four_letter(obs.port, "mntr", obs.host)
            master = next((line.split("\t", 1)[1].strip() for line in mntr.splitlines()
                           if line.startswith("zk_observer_master_id\t")), None)
            modes = {m.id: next((line.split(":", 1)[1].strip()
                                 for line in four_letter(m.port, "srvr", m.host).splitlines()
                                 if line.startswith("Mode:")), None)
                     for m in voters}
            if master and master.isdigit() and modes.get(int(master)) == "follower":
                leader = [j for j, mode in modes.items() if mode == "leader"]
                print(f"[interop] rzk observer {obs.id}: mntr zk_observer_master_id {master} "
                      f"(a follower; the leader is {leader})", flush=True)
                break
            if time.monotonic() > deadline:
                raise ServerError(
                    f"rzk observer {obs.id} does not follow a follower within "
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
