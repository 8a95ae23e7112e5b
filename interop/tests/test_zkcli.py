"""A scripted zkCli.sh session (the Java client and CLI from Debian's zookeeper package),
with every command's output checked for the values it must show.

zkCli.sh reads commands from stdin when it has no terminal and does not echo them, so the
script puts `version` (answered by the CLI itself, without the server) after each step;
its output line splits the transcript into one segment per step. Watch notifications are
printed by another thread, so they are collected from the whole transcript in order.

The Java client exercises opcodes kazoo never sends: createContainer (19) for `create -c`,
createTTL (21) for `create -t`, addWatch (106), removeWatches (18), whoAmI (107),
getEphemerals (103), getAllChildrenNumber (104), and multi deletes for `deleteall`;
`config` reads /zookeeper/config.
"""

import os
import re
import subprocess
import uuid

import pytest
from kazoo.security import make_digest_acl_credential

import helpers
from helpers import SERVER, ZKCLI, delete_tree

MARK = "ZooKeeper CLI version:"
EVENT = re.compile(r"WatchedEvent state:(\w+) type:(\w+) path:(\S+)")
ALICE_ID = make_digest_acl_credential("alice", "secret")

P = f"/zkcli-{uuid.uuid4().hex[:8]}"

# (name, command lines). `version` follows each step; `close` must share a step with the
# `connect` after it, because a closed CLI answers `version` with "Not connected".
STEPS = [
    ("create", f'create {P} "hello"'),
    ("create-existing", f"create {P} again"),
    ("create-sequential", f"create -s {P}/s- seqdata"),
    ("create-ephemeral", f"create -e {P}/e ephem"),
    ("create-container", f"create -c {P}/c"),
    ("create-ttl", f"create -t 60000 {P}/t ttl"),
    ("create-child", f"create {P}/c/child x"),
    ("ls", f"ls {P}"),
    ("ls-recursive", f"ls -R {P}"),
    ("get-stat", f"get -s {P}"),
    ("stat-ephemeral", f"stat {P}/e"),
    ("set", f"set {P} world"),
    ("set-stat", f"set -s {P} world2"),
    ("set-bad-version", f"set -v 7 {P} bad"),
    ("get", f"get {P}"),
    ("stat", f"stat {P}"),
    ("stat-missing", f"stat {P}/missing"),
    ("get-ephemerals", f"getEphemerals {P}"),
    ("get-all-children-number", f"getAllChildrenNumber {P}"),
    ("whoami", "whoami"),
    ("addauth", "addauth digest alice:secret"),
    ("whoami-after-addauth", "whoami"),
    ("create-acl-node", f"create {P}/acl secret"),
    ("set-acl", f"setAcl {P}/acl digest:{ALICE_ID}:cdrwa,world:anyone:r"),
    ("get-acl", f"getAcl {P}/acl"),
    ("get-acl-stat", f"getAcl -s {P}/acl"),
    ("add-watch-recursive", f"addWatch {P}/w"),
    ("create-w", f"create {P}/w x"),
    ("create-w-c", f"create {P}/w/c y"),
    ("set-w-c", f"set {P}/w/c z"),
    ("add-watch-persistent", f"addWatch -m PERSISTENT {P}/p"),
    ("create-p", f"create {P}/p x"),
    ("create-p-c", f"create {P}/p/c y"),
    ("remove-watches", f"removewatches {P}/p -a"),
    ("set-p-after-remove", f"set {P}/p z"),
    ("config", "config"),
    ("sync", f"sync {P}"),
    ("delete-not-empty", f"delete {P}"),
    ("delete-bad-version", f"delete -v 5 {P}/s-0000000000"),
    ("delete", f"delete {P}/s-0000000000"),
    ("deleteall-w", f"deleteall {P}/w"),
    ("ls-after-deletes", f"ls {P}"),
    ("close-and-connect", f"close\nconnect {SERVER}"),
    ("ls-new-session", f"ls {P}"),
    ("get-ephemerals-new-session", f"getEphemerals {P}"),
    ("get-acl-masked", f"getAcl {P}/acl"),
    ("get-readable", f"get {P}/acl"),
    ("set-denied", f"set {P}/acl x"),
    ("addauth-again", "addauth digest alice:secret"),
    ("set-allowed", f"set {P}/acl changed"),
    ("get-changed", f"get {P}/acl"),
    ("deleteall", f"deleteall {P}"),
    ("ls-deleted", f"ls {P}"),
]

NOISE = (
    "SLF4J:",
    "Connecting to ",
    "Welcome to ZooKeeper!",
    "JLine support is ",
    "WATCHER::",
)


class Transcript:
    def __init__(self, output, returncode):
        self.output = output
        self.returncode = returncode
        self.events = EVENT.findall(output)
        segments = [[]]
        for line in output.splitlines():
            if line.startswith(MARK):
                segments.append([])
                continue
            if not line.strip() or line.startswith(NOISE) or EVENT.search(line):
                continue
            segments[-1].append(line)
        # segments[i] is the output of STEPS[i]; the last one is what follows the final
        # marker (quit prints nothing).
        self.segments = segments

    def __getitem__(self, name):
        index = [n for n, _ in STEPS].index(name)
        if index >= len(self.segments) - 1:
            pytest.fail(f"zkCli output ended before step {name!r}:\n{self.output}")
        return self.segments[index]


@pytest.fixture(scope="module")
def cli(admin):
    if not os.path.exists(ZKCLI):
        pytest.fail(f"{ZKCLI} not found (Debian: apt-get install -y zookeeper)")
    script = "".join(f"{cmd}\nversion\n" for _, cmd in STEPS) + "quit\n"
    try:
        proc = subprocess.run(
            [ZKCLI, "-server", SERVER],
            input=script,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=180,
        )
        yield Transcript(proc.stdout, proc.returncode)
    finally:
        delete_tree(admin, P)


def stat_fields(lines):
    return dict(line.split(" = ", 1) for line in lines if " = " in line)


def children(line):
    assert line.startswith("[") and line.endswith("]"), line
    inner = line[1:-1]
    return sorted(x.strip() for x in inner.split(",")) if inner else []


def test_zkcli_ran_every_step(cli):
    assert cli.returncode == 0, cli.output
    assert len(cli.segments) == len(STEPS) + 1, cli.output


def test_zkcli_create_modes(cli):
    assert cli["create"] == [f"Created {P}"]
    assert cli["create-existing"] == [f"Node already exists: {P}"]
    assert cli["create-sequential"] == [f"Created {P}/s-0000000000"]
    assert cli["create-ephemeral"] == [f"Created {P}/e"]
    assert cli["create-container"] == [f"Created {P}/c"]
    assert cli["create-child"] == [f"Created {P}/c/child"]
    if helpers.TTL_ENABLED:
        assert cli["create-ttl"] == [f"Created {P}/t"]
    else:
        assert cli["create-ttl"] == [f"KeeperErrorCode = Unimplemented for {P}/t"]


def test_zkcli_ls_and_ls_recursive(cli):
    ttl = ["t"] if helpers.TTL_ENABLED else []
    assert len(cli["ls"]) == 1
    assert children(cli["ls"][0]) == sorted(["c", "e", "s-0000000000"] + ttl)
    expected = [P, f"{P}/c", f"{P}/c/child", f"{P}/e", f"{P}/s-0000000000"]
    expected += [f"{P}/t"] if helpers.TTL_ENABLED else []
    assert sorted(cli["ls-recursive"]) == sorted(expected)


def test_zkcli_get_with_stat(cli):
    lines = cli["get-stat"]
    assert lines[0] == "hello"
    stat = stat_fields(lines[1:])
    n = 4 if helpers.TTL_ENABLED else 3
    assert stat["dataVersion"] == "0"
    assert stat["aclVersion"] == "0"
    assert stat["cversion"] == str(n)
    assert stat["numChildren"] == str(n)
    assert stat["dataLength"] == "5"
    assert stat["ephemeralOwner"] == "0x0"
    assert stat["cZxid"] == stat["mZxid"]
    assert int(stat["pZxid"], 16) > int(stat["cZxid"], 16)
    assert stat["ctime"] == stat["mtime"]


def test_zkcli_stat_shows_ephemeral_owner(cli):
    stat = stat_fields(cli["stat-ephemeral"])
    assert stat["ephemeralOwner"] != "0x0"
    assert int(stat["ephemeralOwner"], 16) > 0
    assert stat["dataLength"] == "5"


def test_zkcli_set_and_versions(cli):
    assert cli["set"] == []
    stat = stat_fields(cli["set-stat"])
    assert stat["dataVersion"] == "2"
    assert stat["dataLength"] == "6"
    assert cli["set-bad-version"] == [f"version No is not valid : {P}"]
    assert cli["get"] == ["world2"]
    stat = stat_fields(cli["stat"])
    assert stat["dataVersion"] == "2"
    assert int(stat["mZxid"], 16) > int(stat["cZxid"], 16)
    assert cli["stat-missing"] == [f"Node does not exist: {P}/missing"]


def test_zkcli_get_ephemerals_and_children_number(cli):
    assert cli["get-ephemerals"] == [f"[{P}/e]"]
    n = 5 if helpers.TTL_ENABLED else 4  # c, c/child, e, s-0000000000, t
    assert cli["get-all-children-number"] == [str(n)]


def test_zkcli_whoami_and_addauth(cli):
    assert cli["whoami"] == ["Auth scheme: User", "ip: 127.0.0.1"]
    assert cli["addauth"] == []
    assert sorted(cli["whoami-after-addauth"][1:]) == ["digest: alice", "ip: 127.0.0.1"]
    assert cli["whoami-after-addauth"][0] == "Auth scheme: User"


def test_zkcli_set_acl_and_get_acl(cli):
    assert cli["create-acl-node"] == [f"Created {P}/acl"]
    assert cli["set-acl"] == []
    assert cli["get-acl"] == [f"'digest,'{ALICE_ID}", ": cdrwa", "'world,'anyone", ": r"]
    lines = cli["get-acl-stat"]
    assert lines[:4] == [f"'digest,'{ALICE_ID}", ": cdrwa", "'world,'anyone", ": r"]
    assert stat_fields(lines[4:])["aclVersion"] == "1"


def test_zkcli_persistent_recursive_watch(cli):
    assert cli["add-watch-recursive"] == []
    assert cli["create-w"] == [f"Created {P}/w"]
    assert cli["create-w-c"] == [f"Created {P}/w/c"]
    events = [(t, p) for _, t, p in cli.events if p.startswith(f"{P}/w")]
    # A recursive watch reports creates and changes below it, never NodeChildrenChanged.
    assert events == [
        ("NodeCreated", f"{P}/w"),
        ("NodeCreated", f"{P}/w/c"),
        ("NodeDataChanged", f"{P}/w/c"),
        ("NodeDeleted", f"{P}/w/c"),
        ("NodeDeleted", f"{P}/w"),
    ]


def test_zkcli_persistent_watch_and_removewatches(cli):
    events = [(t, p) for _, t, p in cli.events if p == f"{P}/p" or p.startswith(f"{P}/p/")]
    # A persistent watch sees its own node's events, including NodeChildrenChanged, until
    # removewatches; PersistentWatchRemoved is the Java client's own notice.
    assert events == [
        ("NodeCreated", f"{P}/p"),
        ("NodeChildrenChanged", f"{P}/p"),
        ("PersistentWatchRemoved", f"{P}/p"),
    ]
    assert cli["remove-watches"] == []
    assert cli["set-p-after-remove"] == []


def test_zkcli_config_and_sync(cli):
    # /zookeeper/config: empty on a standalone server, the membership on an ensemble.
    assert cli["config"] == helpers.expected_config_znode().decode().splitlines()
    assert cli["sync"] == ["Sync is OK"]


def test_zkcli_delete_and_deleteall(cli):
    assert cli["delete-not-empty"] == [f"Node not empty: {P}"]
    assert cli["delete-bad-version"] == [f"version No is not valid : {P}/s-0000000000"]
    assert cli["delete"] == []
    assert cli["deleteall-w"] == []
    ttl = ["t"] if helpers.TTL_ENABLED else []
    assert children(cli["ls-after-deletes"][0]) == sorted(["acl", "c", "e", "p"] + ttl)


def test_zkcli_close_ends_session_and_its_ephemerals(cli):
    states = [s for s, t, _ in cli.events if t == "None"]
    assert states == ["SyncConnected", "Closed", "SyncConnected", "Closed"]
    ttl = ["t"] if helpers.TTL_ENABLED else []
    assert children(cli["ls-new-session"][0]) == sorted(["acl", "c", "p"] + ttl)
    assert cli["get-ephemerals-new-session"] == ["[]"]


def test_zkcli_acl_enforced_in_new_session(cli):
    # A new session has no digest identity: the hash is masked and writes are refused.
    assert cli["get-acl-masked"] == ["'digest,'alice:x", ": cdrwa", "'world,'anyone", ": r"]
    assert cli["get-readable"] == ["secret"]
    assert cli["set-denied"] == [f"Insufficient permission : {P}/acl"]
    assert cli["addauth-again"] == []
    assert cli["set-allowed"] == []
    assert cli["get-changed"] == ["changed"]


def test_zkcli_deleteall_removes_everything(cli):
    assert cli["deleteall"] == []
    assert cli["ls-deleted"] == [f"Node does not exist: {P}"]
