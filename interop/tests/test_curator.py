"""Apache Curator 5.4 (Debian's libcurator-*-java jars) against the server under test:
LeaderLatch and InterProcessMutex with three clients, each on its own member of an
ensemble (all on the one server when it is standalone). The Java side is
tests/curator/CuratorSmoke.java, compiled with javac into a temporary directory."""

import os
import shutil
import subprocess
import tempfile

import pytest

from helpers import MEMBERS

HERE = os.path.dirname(os.path.abspath(__file__))
JARS = "/usr/share/java"
# As interop/curator/run.sh: Debian's jars name their own dependencies in their manifests.
CLASSPATH = [
    f"{JARS}/{j}.jar"
    for j in ("curator-recipes", "curator-framework", "curator-client", "zookeeper")
]


@pytest.fixture(scope="module")
def curator_classes():
    """The compiled smoke program, and the classpath to run it."""
    javac = shutil.which("javac")
    assert javac, "javac is not on PATH (Debian: apt-get install -y default-jdk-headless)"
    jars = CLASSPATH
    for jar in jars:
        assert os.path.exists(jar), f"{jar} is missing (Debian: libcurator-*-java, zookeeper)"
    out = tempfile.mkdtemp(prefix="rzk-interop-curator-")
    cp = ":".join(jars)
    subprocess.run(
        [javac, "-d", out, "-cp", cp, os.path.join(HERE, "curator", "CuratorSmoke.java")],
        check=True, capture_output=True, timeout=300,
    )
    yield f"{out}:{cp}"
    shutil.rmtree(out, ignore_errors=True)


def test_curator_latch_and_mutex_hand_over_across_members(curator_classes, base):
    hosts = [f"{h}:{p}" for h, p in MEMBERS]
    run = subprocess.run(
        ["java", "-cp", curator_classes, "CuratorSmoke", base, *hosts],
        capture_output=True, text=True, timeout=120,
    )
    lines = run.stdout.splitlines()
    assert run.returncode == 0, "\n".join(lines + run.stderr.splitlines()[-20:])
    assert lines[-1] == "OK"
    assert "latch: leadership handed over after close" in lines
    assert "mutex: exclusive, handed over on release" in lines
