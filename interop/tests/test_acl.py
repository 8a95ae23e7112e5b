"""ACLs and authentication: the world, digest, ip and auth schemes, addauth, NoAuth,
InvalidACL, getACL masking, and the super user (docs/client-protocol.md, "ACLs and
authentication")."""

import pytest
from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    InvalidACLError,
    NoAuthError,
)
from kazoo.security import (
    ACL,
    CREATOR_ALL_ACL,
    Id,
    OPEN_ACL_UNSAFE,
    Permissions,
    READ_ACL_UNSAFE,
    make_acl,
    make_digest_acl,
    make_digest_acl_credential,
)

import helpers
from helpers import WhoAmI, call

ALICE = ("alice", "secret")
BOB = ("bob", "pw")


def acl_tuples(acls):
    return sorted((a.perms, a.id.scheme, a.id.id) for a in acls)


def authed(new_client, *users):
    client = new_client()
    for user, password in users:
        client.add_auth("digest", f"{user}:{password}")
    return client


def test_digest_identity_matches_kazoos_digest(zk, base):
    # The server computes user:base64(sha1("user:password")); the published example
    # alice:secret -> alice:aYXlLOpEooaV1cRAvUL1fp9Qt7E= (docs/client-protocol.md,
    # "Digest identities").
    assert make_digest_acl_credential(*ALICE) == "alice:aYXlLOpEooaV1cRAvUL1fp9Qt7E="
    zk.add_auth("digest", "alice:secret")
    zk.create(f"{base}/n", b"", acl=CREATOR_ALL_ACL)
    acls, _ = zk.get_acls(f"{base}/n")
    assert acl_tuples(acls) == [(31, "digest", "alice:aYXlLOpEooaV1cRAvUL1fp9Qt7E=")]


def test_world_read_only_node_refuses_writes(zk, zk2, base, members):
    zk.create(f"{base}/n", b"ro", acl=READ_ACL_UNSAFE)
    members.settle()
    assert zk2.get(f"{base}/n")[0] == b"ro"
    with pytest.raises(NoAuthError):
        zk2.set(f"{base}/n", b"x")
    with pytest.raises(NoAuthError):
        zk2.create(f"{base}/n/child", b"")
    with pytest.raises(NoAuthError):
        zk2.set_acls(f"{base}/n", OPEN_ACL_UNSAFE)


def test_digest_node_needs_the_right_identity(new_client, base, members):
    owner = authed(new_client, ALICE)
    owner.create(f"{base}/n", b"private", acl=[make_digest_acl(*ALICE, all=True)])
    members.settle()
    stranger = new_client()
    with pytest.raises(NoAuthError):
        stranger.get(f"{base}/n")
    with pytest.raises(NoAuthError):
        stranger.get_children(f"{base}/n")
    stranger.add_auth("digest", "alice:secret")
    assert stranger.get(f"{base}/n")[0] == b"private"


def test_wrong_password_is_accepted_but_grants_nothing(new_client, base, members):
    owner = authed(new_client, ALICE)
    owner.create(f"{base}/n", b"", acl=[make_digest_acl(*ALICE, read=True)])
    members.settle()
    # Digest auth never fails (docs/client-protocol.md, "Digest identities"); it just
    # yields an identity that matches nothing.
    impostor = authed(new_client, ("alice", "wrong"))
    with pytest.raises(NoAuthError):
        impostor.get(f"{base}/n")


def test_auth_identities_accumulate(new_client, base, members):
    owner = authed(new_client, ALICE, BOB)
    owner.create(f"{base}/n", b"", acl=CREATOR_ALL_ACL)
    acls, _ = owner.get_acls(f"{base}/n")
    # The auth scheme expands to every authenticated identity of the connection.
    assert acl_tuples(acls) == sorted(
        [
            (31, "digest", make_digest_acl_credential(*ALICE)),
            (31, "digest", make_digest_acl_credential(*BOB)),
        ]
    )
    only_bob = authed(new_client, BOB)
    members.settle()
    assert only_bob.get(f"{base}/n")[0] == b""


def test_auth_scheme_without_authentication_is_invalid_acl(zk, base):
    with pytest.raises(InvalidACLError):
        zk.create(f"{base}/n", b"", acl=CREATOR_ALL_ACL)
    assert zk.exists(f"{base}/n") is None


@pytest.mark.parametrize(
    "bad",
    [
        [ACL(Permissions.ALL, Id("world", "somebody"))],
        [ACL(Permissions.ALL, Id("nosuchscheme", "x"))],
        [ACL(Permissions.ALL, Id("digest", "no-colon-here"))],
        [ACL(Permissions.ALL, Id("ip", "not.an.ip.address"))],
    ],
    ids=["world-not-anyone", "unknown-scheme", "digest-without-colon", "bad-ip"],
)
def test_malformed_acl_is_invalid_acl(zk, base, bad):
    with pytest.raises(InvalidACLError):
        zk.create(f"{base}/n", b"", acl=bad)
    assert zk.exists(f"{base}/n") is None


def test_set_acls_with_empty_list_is_invalid_acl(zk, base):
    zk.create(f"{base}/n", b"")
    with pytest.raises(InvalidACLError):
        zk.set_acls(f"{base}/n", [])


def test_ip_acl_matches_the_client_address(zk, zk2, base, members):
    zk.create(f"{base}/mine", b"ok", acl=[make_acl("ip", "127.0.0.1", all=True)])
    zk.create(f"{base}/net", b"ok", acl=[make_acl("ip", "127.0.0.0/8", read=True)])
    zk.create(f"{base}/other", b"no", acl=[make_acl("ip", "10.1.2.3", all=True)])
    members.settle()
    assert zk2.get(f"{base}/mine")[0] == b"ok"
    assert zk2.get(f"{base}/net")[0] == b"ok"
    with pytest.raises(NoAuthError):
        zk2.get(f"{base}/other")


def test_create_needs_create_permission_on_parent(new_client, base):
    owner = authed(new_client, ALICE)
    owner.create(
        f"{base}/p",
        b"",
        acl=[
            make_digest_acl(*ALICE, all=True),
            ACL(Permissions.READ | Permissions.DELETE, Id("world", "anyone")),
        ],
    )
    stranger = new_client()
    with pytest.raises(NoAuthError):
        stranger.create(f"{base}/p/c", b"")
    owner.create(f"{base}/p/c", b"")
    # DELETE is granted to anyone, so the stranger may delete the child.
    stranger.delete(f"{base}/p/c")


def test_delete_needs_delete_permission_on_parent(new_client, base):
    owner = authed(new_client, ALICE)
    owner.create(
        f"{base}/p",
        b"",
        acl=[
            make_digest_acl(*ALICE, all=True),
            ACL(Permissions.READ | Permissions.CREATE, Id("world", "anyone")),
        ],
    )
    stranger = new_client()
    # The child itself is open to everyone; it is the parent's ACL that decides.
    stranger.create(f"{base}/p/c", b"", acl=OPEN_ACL_UNSAFE)
    with pytest.raises(NoAuthError):
        stranger.delete(f"{base}/p/c")
    owner.delete(f"{base}/p/c")


def test_set_acl_needs_admin_and_checks_aversion(new_client, base):
    owner = authed(new_client, ALICE)
    owner.create(f"{base}/n", b"", acl=[make_digest_acl(*ALICE, all=True)])
    stranger = new_client()
    with pytest.raises(NoAuthError):
        stranger.set_acls(f"{base}/n", OPEN_ACL_UNSAFE)
    with pytest.raises(BadVersionError):
        owner.set_acls(f"{base}/n", OPEN_ACL_UNSAFE, version=5)
    stat = owner.set_acls(f"{base}/n", OPEN_ACL_UNSAFE, version=0)
    assert stat.aversion == 1
    # The setACL was acknowledged before the stranger writes, so the write must be
    # authorised by the new ACL. Apache ZooKeeper 3.8's leader preps each write against
    # its outstanding change records, and a setACL's record keeps the node's old ACL
    # (PrepRequestProcessor duplicates the record with the new aversion only) until the
    # leader applies the setACL itself. A member that answered the setACL first (an
    # observer or a follower: the leader sends COMMIT before it applies) leaves a window
    # in which the write is refused with NoAuth; seen once in CI through an observer.
    # Retried on NoAuth only, until the deadline: the write must go through. rzk's prep
    # keeps the new ACL in the outstanding change (server/src/prep.rs), which its unit
    # test `a_write_prepped_behind_an_outstanding_set_acl_is_checked_against_the_new_acl`
    # asserts on the first attempt.
    def stranger_writes():
        try:
            stranger.set(f"{base}/n", b"now open")
            return True
        except NoAuthError:
            return False

    helpers.wait_until(stranger_writes, "the stranger's write is authorised by the open ACL")


def test_acl_is_checked_before_version(new_client, base):
    # A request that is both unauthorised and stale gets NoAuth
    # (docs/client-protocol.md, "The permission check").
    owner = authed(new_client, ALICE)
    owner.create(f"{base}/n", b"", acl=[make_digest_acl(*ALICE, all=True)])
    stranger = new_client()
    with pytest.raises(NoAuthError):
        stranger.set(f"{base}/n", b"x", version=42)
    with pytest.raises(NoAuthError):
        stranger.set_acls(f"{base}/n", OPEN_ACL_UNSAFE, version=42)


def test_exists_needs_no_permission(new_client, base):
    owner = authed(new_client, ALICE)
    owner.create(f"{base}/n", b"abc", acl=[make_digest_acl(*ALICE, all=True)])
    stranger = new_client()
    stat = stranger.exists(f"{base}/n")
    assert stat is not None and stat.dataLength == 3


def test_get_acls_masks_digests_without_admin(new_client, base):
    owner = authed(new_client, ALICE)
    owner.create(
        f"{base}/n",
        b"",
        acl=[make_digest_acl(*ALICE, all=True), make_digest_acl(*BOB, read=True)],
    )
    bob = authed(new_client, BOB)
    acls, _ = bob.get_acls(f"{base}/n")
    # READ without ADMIN: everything after the first ':' becomes 'x'
    # (docs/client-protocol.md, "getACL").
    assert acl_tuples(acls) == [(1, "digest", "bob:x"), (31, "digest", "alice:x")]
    acls, _ = owner.get_acls(f"{base}/n")
    assert acl_tuples(acls) == sorted(
        [
            (1, "digest", make_digest_acl_credential(*BOB)),
            (31, "digest", make_digest_acl_credential(*ALICE)),
        ]
    )


def test_get_acls_needs_read_or_admin(new_client, base):
    owner = authed(new_client, ALICE)
    owner.create(
        f"{base}/n",
        b"",
        acl=[make_digest_acl(*ALICE, all=True), make_acl("world", "anyone", write=True)],
    )
    stranger = new_client()
    with pytest.raises(NoAuthError):
        stranger.get_acls(f"{base}/n")


def test_unknown_auth_scheme_fails_authentication(new_client):
    client = new_client()
    with pytest.raises(AuthFailedError):
        client.add_auth("nosuchscheme", "whatever")


def test_whoami_lists_the_connections_identities(new_client):
    client = new_client()
    assert call(client, WhoAmI()) == [("ip", "127.0.0.1")]
    client.add_auth("digest", "alice:secret")
    assert sorted(call(client, WhoAmI())) == [("digest", "alice"), ("ip", "127.0.0.1")]


def test_auth_is_per_connection_not_per_node(new_client, base):
    owner = authed(new_client, ALICE)
    owner.create(f"{base}/n", b"s", acl=[make_digest_acl(*ALICE, all=True)])
    other = new_client()
    with pytest.raises(NoAuthError):
        other.get(f"{base}/n")
    assert owner.get(f"{base}/n")[0] == b"s"


@pytest.mark.skipif(not helpers.SUPER_AUTH, reason="INTEROP_SUPER_AUTH not set")
def test_super_user_bypasses_every_acl(new_client, base):
    owner = authed(new_client, ALICE)
    owner.create(f"{base}/n", b"locked", acl=[make_digest_acl(*ALICE, read=True)])
    root = new_client()
    root.add_auth("digest", helpers.SUPER_AUTH)
    assert root.get(f"{base}/n")[0] == b"locked"
    root.set(f"{base}/n", b"overridden")
    root.set_acls(f"{base}/n", OPEN_ACL_UNSAFE)
    root.delete(f"{base}/n")
    assert root.exists(f"{base}/n") is None
