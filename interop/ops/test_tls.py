"""Real TLS clients against the secure client port of Apache ZooKeeper 3.8 and of rzk:
kazoo with use_ssl=True, zkCli.sh with the Netty client socket and
-Dzookeeper.client.secure=true, the x509 scheme from the client certificate, and refusals
(plaintext on the secure port, an untrusted certificate) that leave other sessions served."""

import os
import subprocess
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id

import tlsenv

ZKCLI = os.environ.get("INTEROP_ZKCLI", "/usr/share/zookeeper/bin/zkCli.sh")


def kazoo(hosts, pki=None, cert="client", timeout=10.0):
    kw = {}
    if pki is not None:
        kw = dict(use_ssl=True, verify_certs=True, ca=f"{pki}/ca.pem",
                  certfile=f"{pki}/{cert}.crt", keyfile=f"{pki}/{cert}.key")
    c = KazooClient(hosts=hosts, timeout=10.0, connection_retry={"max_tries": 0}, **kw)
    c.start(timeout=timeout)
    return c


def stop(c):
    c.stop()
    c.close()


def test_kazoo_use_ssl_with_a_client_certificate(server):
    c = kazoo(server.secure, server.pki)
    try:
        p = f"/tls-{uuid.uuid4().hex[:8]}"
        c.create(p, b"over tls")
        assert c.get(p)[0] == b"over tls"
        c.set(p, b"again")
        assert c.get(p)[0] == b"again"
        c.delete(p)
    finally:
        stop(c)


def test_x509_acl_from_the_client_certificate(server):
    c = kazoo(server.secure, server.pki)
    plain = kazoo(server.plain)
    p = f"/x509-{uuid.uuid4().hex[:8]}"
    try:
        acl = [ACL(31, Id("x509", tlsenv.CLIENT_SUBJECT))]
        c.create(p, b"mine", acl=acl)
        assert c.get(p)[0] == b"mine"
        with pytest.raises(NoAuthError):
            plain.get(p)
        got, _ = c.get_acls(p)
        assert [(a.id.scheme, a.id.id) for a in got] == [("x509", tlsenv.CLIENT_SUBJECT)]
    finally:
        try:
            c.delete(p)
        finally:
            stop(c)
            stop(plain)


def test_zkcli_netty_secure_client(server):
    pki = server.pki
    env = dict(os.environ)
    env["CLIENT_JVMFLAGS"] = " ".join([
        # A later -cp wins: zkCli.sh's own class path plus the Netty jars.
        "-cp", f"/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:{tlsenv.netty_classpath()}",
        "-Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty",
        "-Dzookeeper.client.secure=true",
        f"-Dzookeeper.ssl.keyStore.location={pki}/client.pem",
        "-Dzookeeper.ssl.keyStore.type=PEM",
        f"-Dzookeeper.ssl.trustStore.location={pki}/ca.pem",
        "-Dzookeeper.ssl.trustStore.type=PEM",
    ])
    p = f"/zkcli-tls-{uuid.uuid4().hex[:8]}"
    script = f"create {p} hello-tls\nget {p}\nwhoami\ndelete {p}\nquit\n"
    proc = subprocess.run([ZKCLI, "-server", server.secure], input=script, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    out = proc.stdout
    assert f"Created {p}" in out, out
    assert "hello-tls" in out, out
    assert f"x509: {tlsenv.CLIENT_SUBJECT}" in out, out


def test_plaintext_and_untrusted_clients_are_refused_others_served(server):
    good = kazoo(server.secure, server.pki)
    try:
        p = f"/served-{uuid.uuid4().hex[:8]}"
        good.create(p, b"1")
        with pytest.raises(Exception):
            stop(kazoo(server.secure, timeout=3.0))
        with pytest.raises(Exception):
            stop(kazoo(server.secure, server.pki, cert="stranger", timeout=3.0))
        assert good.get(p)[0] == b"1"
        good.set(p, b"2")
        assert good.get(p)[0] == b"2"
        good.delete(p)
        if server.name == "rzk":
            log = server.log_text()
            assert "not a TLS handshake" in log, log
            assert log.count("refused a connection on the secure client port") >= 2, log
    finally:
        stop(good)
