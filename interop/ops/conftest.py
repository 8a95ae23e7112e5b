"""Fixtures for the TLS interop tests: the same tests against Apache ZooKeeper 3.8 (the
reference) and rzk, each started here with a secure client port. RZK_BIN names the rzk
binary (45-ops.sh builds it)."""

import os
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tlsenv  # noqa: E402


@pytest.fixture(scope="session")
def pki():
    return tlsenv.make_pki(tempfile.mkdtemp(prefix="rzk-tls-pki-"))


@pytest.fixture(scope="module", params=["zookeeper", "rzk"])
def server(request, pki):
    work = tempfile.mkdtemp(prefix=f"rzk-tls-{request.param}-")
    if request.param == "zookeeper":
        s = tlsenv.start_zookeeper(work, pki)
    else:
        binary = os.environ.get("RZK_BIN")
        if not binary or not os.access(binary, os.X_OK):
            pytest.fail("RZK_BIN must name the rzk binary (45-ops.sh builds it)")
        s = tlsenv.start_rzk(binary, work, pki)
    yield s
    s.stop()
