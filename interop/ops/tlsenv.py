"""Certificates and TLS-enabled servers for the TLS interop tests.

Certificates are made at test time with the `openssl` command (RSA 2048 keys in PKCS#8,
which ZooKeeper's PEM key store reads); no private key is checked in. Both servers get
the same zoo.cfg TLS lines: a secure client port next to the plain one, PEM key and trust
stores, `ssl.clientAuth` need (the default), the Netty connection factory (ZooKeeper's TLS
needs it; rzk accepts and ignores the key) and the x509 auth provider.
"""

import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import servers  # noqa: E402

CLIENT_SUBJECT = "CN=client,O=rzk"

# Debian's zookeeper.jar manifest does not name Netty's codec and handler jars, which the
# Netty connection factory and client socket need (TLS needs Netty on both sides).
NETTY_JARS = [
    os.path.join(servers.ZOOKEEPER_JARS, f"netty-{name}.jar")
    for name in ("buffer", "codec", "common", "handler", "resolver", "transport",
                 "transport-native-unix-common", "transport-native-epoll")
]


def netty_classpath():
    missing = [j for j in NETTY_JARS if not os.path.exists(j)]
    if missing:
        raise servers.ServerError(f"missing Netty jars {missing}: apt-get install -y libnetty-java")
    return ":".join(NETTY_JARS)


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d, name):
    openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
            "-out", f"{name}.key", cwd=d)
    openssl("req", "-x509", "-new", "-key", f"{name}.key", "-days", "2",
            "-subj", f"/CN={name}", "-out", f"{name}.pem", cwd=d)


def make_leaf(d, ca, name, subject, san):
    openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
            "-out", f"{name}.key", cwd=d)
    openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=d)
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext",
            "-out", f"{name}.crt", cwd=d)
    # ZooKeeper's PEM key store: key and certificate in one file.
    with open(os.path.join(d, f"{name}.pem"), "w") as out:
        for part in (f"{name}.key", f"{name}.crt"):
            with open(os.path.join(d, part)) as f:
                out.write(f.read())


def make_pki(d):
    """ca.pem (trusted), server.pem, client.{key,crt,pem} signed by it, and
    stranger.{key,crt} signed by another CA."""
    os.makedirs(d, exist_ok=True)
    make_ca(d, "ca")
    make_leaf(d, "ca", "server", "/O=rzk/CN=server", "IP:127.0.0.1,DNS:localhost")
    make_leaf(d, "ca", "client", "/O=rzk/CN=client", "DNS:client")
    make_ca(d, "other")
    make_leaf(d, "other", "stranger", "/O=rzk/CN=client", "DNS:client")
    return d


def tls_lines(secure_port, pki):
    return [
        f"secureClientPort={secure_port}",
        f"secureClientPortAddress={servers.HOST}",
        f"ssl.keyStore.location={pki}/server.pem",
        "ssl.keyStore.type=PEM",
        f"ssl.trustStore.location={pki}/ca.pem",
        "ssl.trustStore.type=PEM",
        "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
        "authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider",
    ]


class TlsServer:
    def __init__(self, server, secure_port, pki):
        self.server = server
        self.secure = f"{servers.HOST}:{secure_port}"
        self.plain = server.hosts
        self.pki = pki
        self.name = server.name

    def log_text(self):
        with open(self.server.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self):
        self.server.stop()
        self.server.cleanup()


def _prepare(name, work_dir, pki):
    data_dir, port, cfg, log_path = servers._prepare(f"{name}-tls", work_dir)
    secure_port = servers.free_port()
    with open(cfg, "a") as f:
        f.write("\n".join(tls_lines(secure_port, pki)) + "\n")
    return data_dir, port, cfg, log_path, secure_port


def start_zookeeper(work_dir, pki):
    java = shutil.which("java")
    data_dir, port, cfg, log_path, secure_port = _prepare("zookeeper", work_dir, pki)
    conf_dir = os.path.join(work_dir, "zookeeper-tls-conf")
    os.makedirs(conf_dir, exist_ok=True)
    with open(os.path.join(conf_dir, "log4j.properties"), "w") as f:
        f.write(servers.LOG4J_PROPERTIES)
    argv = [
        java, "-Xmx512m",
        "-Dzookeeper.admin.enableServer=false",
        "-Dzookeeper.extendedTypesEnabled=true",
        f"-Dzookeeper.DigestAuthenticationProvider.superDigest={servers.super_digest()}",
        f"-Dlog4j.configuration=file:{conf_dir}/log4j.properties",
        "-cp", servers.zookeeper_classpath(conf_dir) + ":" + netty_classpath(),
        servers.ZOOKEEPER_MAIN, cfg,
    ]
    s = servers.Server("zookeeper", argv, conf_dir, data_dir, port, log_path, work_dir).start()
    return TlsServer(s, secure_port, pki)


def start_rzk(binary, work_dir, pki):
    data_dir, port, cfg, log_path, secure_port = _prepare("rzk", work_dir, pki)
    s = servers.Server("rzk", [binary, cfg], None, data_dir, port, log_path, work_dir).start()
    return TlsServer(s, secure_port, pki)
