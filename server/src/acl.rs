//! ACLs and authentication (docs/client-protocol.md, "ACLs and
//! authentication"): the identities a connection holds, ACL validation
//! ("fixup") on create and setACL, the permission check, digest computation and
//! the `ip` scheme's CIDR matching.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use base64::Engine;
use rzk_wire::{Acl, ByteString, ClientInfo, ErrorCode, Id, Perms};
use sha1::{Digest, Sha1};

/// The identities one connection holds. Identities belong to the connection,
/// not the session: a client replays its auth packets after every reconnect.
#[derive(Clone, Debug, Default)]
pub struct AuthInfo {
    /// The client's address: the `ip:<address>` identity every client
    /// connection starts with, first of all. Kept as the address and spelt out
    /// only where an identity is read as text (an `ip` ACL, whoAmI, a forwarded
    /// write): as two boxed strings in a `Vec` it cost every idle session three
    /// allocations, about 100 bytes of RSS.
    pub peer_ip: Option<IpAddr>,
    /// The `(scheme, id)` pairs added after the address, in the order they
    /// were added (and a forwarded write's identities, all of them).
    pub ids: Vec<(Box<str>, Box<str>)>,
    /// The connection authenticated as the configured super digest: every ACL
    /// check passes.
    pub is_super: bool,
}

/// Two connections hold the same identities when their lists read the same,
/// however the address is kept.
impl PartialEq for AuthInfo {
    fn eq(&self, other: &AuthInfo) -> bool {
        self.is_super == other.is_super && self.identities().eq(other.identities())
    }
}

impl Eq for AuthInfo {}

impl AuthInfo {
    /// A connection from `addr`: it holds `ip:<addr>`.
    pub fn for_peer(addr: IpAddr) -> AuthInfo {
        AuthInfo {
            peer_ip: Some(addr),
            ids: Vec::new(),
            is_super: false,
        }
    }

    /// A connection that holds nothing (server-internal requests).
    pub fn system() -> AuthInfo {
        AuthInfo {
            peer_ip: None,
            ids: Vec::new(),
            is_super: true,
        }
    }

    /// Every `(scheme, id)` the connection holds, in the order they were
    /// added (the address first).
    pub fn identities(&self) -> impl Iterator<Item = (&str, Cow<'_, str>)> {
        let ip = self.peer_ip.map(|a| ("ip", Cow::Owned(ip_text(a))));
        let added = self.ids.iter().map(|(s, i)| (&**s, Cow::Borrowed(&**i)));
        ip.into_iter().chain(added)
    }

    /// Adds an identity unless it is already there.
    pub fn add(&mut self, scheme: &str, id: &str) {
        if scheme == "ip" && self.peer_ip.is_some_and(|a| ip_text(a) == id) {
            return;
        }
        if !self.ids.iter().any(|(s, i)| &**s == scheme && &**i == id) {
            self.ids.push((scheme.into(), id.into()));
        }
    }

    /// whoAmI's answer: one entry per identity; for `digest` the user name only.
    pub fn client_infos(&self) -> Vec<ClientInfo> {
        let mut out: Vec<ClientInfo> = self
            .identities()
            .map(|(scheme, id)| {
                let user = if scheme == "digest" {
                    id.split(':').next().unwrap_or("")
                } else {
                    &id
                };
                ClientInfo {
                    auth_scheme: ByteString::from(scheme),
                    user: ByteString::from(user),
                }
            })
            .collect();
        if self.is_super {
            out.push(ClientInfo {
                auth_scheme: ByteString::from_static("super"),
                user: ByteString::new(),
            });
        }
        out
    }
}

/// How ZooKeeper prints an address in an `ip` identity.
fn ip_text(addr: IpAddr) -> String {
    match addr {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => v6.to_string(),
        },
        IpAddr::V4(v4) => v4.to_string(),
    }
}

/// The digest identity for an auth string: `<text before the first ':'>:
/// base64(sha1(whole string))` (docs/client-protocol.md, "Digest identities").
/// Never fails.
pub fn digest_identity(auth: &[u8]) -> String {
    let text = String::from_utf8_lossy(auth);
    let hash = Sha1::digest(text.as_bytes());
    let user = text.split(':').next().unwrap_or("");
    format!(
        "{user}:{}",
        base64::engine::general_purpose::STANDARD.encode(hash)
    )
}

/// The result of an auth packet.
#[derive(Debug, PartialEq, Eq)]
pub enum AuthOutcome {
    /// Identities were added.
    Added,
    /// Unknown scheme: reply AUTHFAILED and close the connection.
    Failed,
}

/// Handles an auth packet: `digest` adds `digest:<identity>` (and `super` when
/// it equals `super_digest`), `ip` re-adds the remote address, anything else
/// fails.
pub fn authenticate(
    info: &mut AuthInfo,
    scheme: &str,
    auth: &[u8],
    peer: IpAddr,
    super_digest: Option<&str>,
) -> AuthOutcome {
    match scheme {
        "digest" => {
            let id = digest_identity(auth);
            if super_digest == Some(id.as_str()) {
                info.is_super = true;
            }
            info.add("digest", &id);
            AuthOutcome::Added
        }
        "ip" => {
            info.add("ip", &ip_text(peer));
            AuthOutcome::Added
        }
        _ => AuthOutcome::Failed,
    }
}

/// Validates and rewrites an ACL list for create and setACL
/// (docs/client-protocol.md, "ACL fixup"): duplicates removed, `auth` expanded
/// to the connection's authenticated ids, every other entry checked by its
/// scheme.
pub fn fixup(acl: &[Acl], info: &AuthInfo) -> Result<Vec<Acl>, ErrorCode> {
    let mut unique: Vec<&Acl> = Vec::with_capacity(acl.len());
    for a in acl {
        if !unique.contains(&a) {
            unique.push(a);
        }
    }
    if unique.is_empty() {
        return Err(ErrorCode::InvalidAcl);
    }
    let mut out = Vec::with_capacity(unique.len());
    for a in unique {
        match &*a.id.scheme {
            "world" if &*a.id.id == "anyone" => out.push(a.clone()),
            "auth" => {
                let mut any = false;
                // Only authenticated schemes expand `auth`: digest and x509
                // (ip is not an authenticated identity in ZooKeeper).
                for (scheme, id) in &info.ids {
                    if &**scheme == "digest" || &**scheme == "x509" {
                        any = true;
                        out.push(Acl {
                            perms: a.perms,
                            id: Id {
                                scheme: ByteString::from(&**scheme),
                                id: ByteString::from(&**id),
                            },
                        });
                    }
                }
                if !any {
                    return Err(ErrorCode::InvalidAcl);
                }
            }
            "digest" if valid_digest_id(&a.id.id) => out.push(a.clone()),
            "ip" if parse_ip_acl(&a.id.id).is_some() => out.push(a.clone()),
            // A TLS client certificate's subject (RFC 2253), matched exactly.
            "x509" if !a.id.id.is_empty() => out.push(a.clone()),
            _ => return Err(ErrorCode::InvalidAcl),
        }
    }
    Ok(out)
}

/// ZooKeeper's digest check: `id.split(":")` (Java, trailing empties dropped)
/// has exactly two parts.
fn valid_digest_id(id: &str) -> bool {
    let mut parts: Vec<&str> = id.split(':').collect();
    while parts.last() == Some(&"") {
        parts.pop();
    }
    parts.len() == 2
}

/// An `ip` ACL id: IPv4 `a.b.c.d` or `a.b.c.d/bits` (3.8's provider only knows
/// IPv4). Returns the address and the prefix length.
fn parse_ip_acl(id: &str) -> Option<(Ipv4Addr, u32)> {
    let (addr, bits) = match id.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (id, None),
    };
    let addr = parse_v4(addr)?;
    let bits = match bits {
        Some(b) => {
            let n: i64 = b.parse().ok()?;
            if !(0..=32).contains(&n) {
                return None;
            }
            n as u32
        }
        None => 32,
    };
    Some((addr, bits))
}

/// Java's `addr2Bytes` for IPv4: four dot-separated numbers 0–255.
fn parse_v4(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    let mut octets = [0u8; 4];
    for (o, p) in octets.iter_mut().zip(parts) {
        let n: i64 = p.parse().ok()?;
        *o = u8::try_from(n).ok()?;
    }
    Some(Ipv4Addr::from(octets))
}

fn ip_matches(conn_addr: &str, acl_id: &str) -> bool {
    let (Some(conn), Some((net, bits))) = (parse_v4(conn_addr), parse_ip_acl(acl_id)) else {
        return false;
    };
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    u32::from(conn) & mask == u32::from(net) & mask
}

/// Whether `info` may do something needing any of `perm` on a node with `acl`
/// (docs/client-protocol.md, "The permission check").
pub fn allowed(acl: &[Acl], info: &AuthInfo, perm: Perms) -> bool {
    if acl.is_empty() || info.is_super {
        return true;
    }
    acl.iter().any(|a| {
        if !a.perms.intersects(perm) {
            return false;
        }
        match &*a.id.scheme {
            "world" => &*a.id.id == "anyone",
            "digest" => info
                .ids
                .iter()
                .any(|(s, i)| &**s == "digest" && **i == *a.id.id),
            "ip" => info
                .identities()
                .any(|(s, i)| s == "ip" && ip_matches(&i, &a.id.id)),
            "x509" => info
                .ids
                .iter()
                .any(|(s, i)| &**s == "x509" && **i == *a.id.id),
            _ => false,
        }
    })
}

/// The `Ok` of a permission check, or NOAUTH.
pub fn check(acl: &[Acl], info: &AuthInfo, perm: Perms) -> Result<(), ErrorCode> {
    if allowed(acl, info, perm) {
        Ok(())
    } else {
        Err(ErrorCode::NoAuth)
    }
}

/// getACL's masking for a caller without ADMIN: every digest id becomes
/// `user:x` (docs/client-protocol.md, "getACL").
pub fn masked(acl: &[Acl]) -> Vec<Acl> {
    acl.iter()
        .map(|a| {
            if &*a.id.scheme != "digest" {
                return a.clone();
            }
            let user = a.id.id.split(':').next().unwrap_or("");
            Acl {
                perms: a.perms,
                id: Id {
                    scheme: a.id.scheme.clone(),
                    id: ByteString::from(format!("{user}:x")),
                },
            }
        })
        .collect()
}

/// An interned ACL list as nodes hold it: a thin pointer (8 bytes in every
/// node, where `Arc<[Acl]>` takes 16: every znode pays it).
pub type AclRef = Arc<AclList>;

/// An ACL list behind an [`AclRef`]; it derefs to its entries.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct AclList(Box<[Acl]>);

impl AclList {
    /// A list of its own (not interned): for views outside the tree.
    pub fn new_ref(acl: &[Acl]) -> AclRef {
        Arc::new(AclList(acl.into()))
    }
}

impl std::ops::Deref for AclList {
    type Target = [Acl];

    fn deref(&self) -> &[Acl] {
        &self.0
    }
}

/// Interns ACL lists so that the many nodes sharing one list share one
/// allocation (ZooKeeper's reference-counted ACL cache does the same).
#[derive(Debug, Default)]
#[cfg_attr(test, derive(Clone))]
pub struct AclInterner {
    /// The lists, hashed by their entries.
    lists: hashbrown::HashTable<AclRef>,
    hasher: foldhash::fast::RandomState,
}

impl AclInterner {
    /// The shared copy of `acl`.
    pub fn intern(&mut self, acl: &[Acl]) -> AclRef {
        use std::hash::BuildHasher;
        let hash = self.hasher.hash_one(acl);
        if let Some(found) = self.lists.find(hash, |l| l[..] == *acl) {
            return found.clone();
        }
        let list = AclList::new_ref(acl);
        let hasher = &self.hasher;
        self.lists
            .insert_unique(hash, list.clone(), |l| hasher.hash_one(&l[..]));
        list
    }

    /// Drops lists no node uses any more.
    pub fn collect_garbage(&mut self) {
        self.lists.retain(|l| Arc::strong_count(l) > 1);
    }

    /// Lists interned now.
    pub fn len(&self) -> usize {
        self.lists.len()
    }

    /// Whether nothing is interned.
    pub fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(perms: i32, scheme: &str, id: &str) -> Acl {
        Acl {
            perms: Perms(perms),
            id: Id {
                scheme: scheme.into(),
                id: id.into(),
            },
        }
    }

    /// A connection's `ip` identity costs no allocation of its own, and reads
    /// as ZooKeeper spells it, first, in every place an identity is read:
    /// whoAmI, an `ip` ACL, a repeated `ip` auth packet. Checked by hand: with
    /// the identity back in `ids` (as `for_peer` made it before) the first
    /// assertion fails.
    #[test]
    fn the_address_identity_is_kept_as_the_address() {
        let mut info = AuthInfo::for_peer("::ffff:10.1.2.3".parse().unwrap());
        assert_eq!(info.ids.capacity(), 0, "no allocation for the address");
        let ids: Vec<(String, String)> = info
            .identities()
            .map(|(s, i)| (s.to_owned(), i.into_owned()))
            .collect();
        assert_eq!(ids, [("ip".to_owned(), "10.1.2.3".to_owned())]);
        let ip = authenticate(&mut info, "ip", b"", "10.1.2.3".parse().unwrap(), None);
        assert_eq!(ip, AuthOutcome::Added);
        assert_eq!(info.identities().count(), 1, "the address is there once");
        info.add("digest", "bob:x");
        let who = info.client_infos();
        assert_eq!(&*who[0].auth_scheme, "ip");
        assert_eq!(&*who[0].user, "10.1.2.3");
        assert_eq!(&*who[1].user, "bob");
        assert!(allowed(&[acl(1, "ip", "10.1.0.0/16")], &info, Perms(1)));
        assert!(!allowed(&[acl(1, "ip", "10.2.0.0/16")], &info, Perms(1)));
        // The same identities written out (a forwarded write) are equal.
        let spelt = AuthInfo {
            peer_ip: None,
            ids: vec![
                ("ip".into(), "10.1.2.3".into()),
                ("digest".into(), "bob:x".into()),
            ],
            is_super: false,
        };
        assert_eq!(info, spelt);
    }

    #[test]
    fn digests_match_the_documented_examples() {
        assert_eq!(
            digest_identity(b"alice:secret"),
            "alice:aYXlLOpEooaV1cRAvUL1fp9Qt7E="
        );
        assert_eq!(digest_identity(b"u:p"), "u:Jq7wMyA/w2Vd5WIDAKdu4OIIFEQ=");
        assert_eq!(
            digest_identity(b"super:admin"),
            "super:xQJmxLMiHGwaqBvst5y6rkB6HQs="
        );
        assert!(digest_identity(b"nocolon").starts_with("nocolon:"));
    }

    #[test]
    fn fixup_follows_zookeeper() {
        let ip = AuthInfo::for_peer("127.0.0.1".parse().unwrap());
        assert_eq!(fixup(&[], &ip), Err(ErrorCode::InvalidAcl));
        assert_eq!(
            fixup(&[acl(31, "world", "someone")], &ip),
            Err(ErrorCode::InvalidAcl)
        );
        assert_eq!(
            fixup(&[acl(31, "auth", "")], &ip),
            Err(ErrorCode::InvalidAcl),
            "ip is not an authenticated identity"
        );
        assert_eq!(
            fixup(&[acl(31, "nope", "x")], &ip),
            Err(ErrorCode::InvalidAcl)
        );
        assert_eq!(
            fixup(&[acl(31, "digest", "a:")], &ip),
            Err(ErrorCode::InvalidAcl)
        );
        assert_eq!(
            fixup(&[acl(31, "ip", "::1")], &ip),
            Err(ErrorCode::InvalidAcl)
        );
        assert_eq!(
            fixup(&[acl(31, "ip", "10.0.0.0/33")], &ip),
            Err(ErrorCode::InvalidAcl)
        );
        let dup = [acl(31, "world", "anyone"), acl(31, "world", "anyone")];
        assert_eq!(fixup(&dup, &ip).unwrap().len(), 1);
        let mut two = ip.clone();
        authenticate(
            &mut two,
            "digest",
            b"a:1",
            "127.0.0.1".parse().unwrap(),
            None,
        );
        authenticate(
            &mut two,
            "digest",
            b"b:2",
            "127.0.0.1".parse().unwrap(),
            None,
        );
        let fixed = fixup(&[acl(5, "auth", "")], &two).unwrap();
        assert_eq!(fixed.len(), 2);
        assert!(fixed.iter().all(|a| &*a.id.scheme == "digest"));
    }

    #[test]
    fn permission_check_by_scheme() {
        let peer: IpAddr = "10.1.2.3".parse().unwrap();
        let mut info = AuthInfo::for_peer(peer);
        assert!(allowed(&[acl(1, "ip", "10.0.0.0/8")], &info, Perms::READ));
        assert!(!allowed(&[acl(1, "ip", "10.0.0.0/16")], &info, Perms::READ));
        assert!(!allowed(&[acl(2, "ip", "10.0.0.0/8")], &info, Perms::READ));
        let id = digest_identity(b"bob:pw");
        let only_bob = [acl(31, "digest", &id)];
        assert!(!allowed(&only_bob, &info, Perms::WRITE));
        authenticate(&mut info, "digest", b"bob:pw", peer, None);
        assert!(allowed(&only_bob, &info, Perms::WRITE));
        let mut sup = AuthInfo::for_peer(peer);
        let sd = digest_identity(b"super:admin");
        authenticate(&mut sup, "digest", b"super:admin", peer, Some(&sd));
        assert!(allowed(&[acl(1, "digest", "x:y")], &sup, Perms::ADMIN));
        assert_eq!(
            authenticate(&mut sup, "kerberos", b"", peer, None),
            AuthOutcome::Failed
        );
    }

    #[test]
    fn x509_acls_match_the_certificate_subject_exactly() {
        let peer: IpAddr = "10.1.2.3".parse().unwrap();
        let mut info = AuthInfo::for_peer(peer);
        let only_client = [acl(31, "x509", "CN=client,O=rzk")];
        assert!(!allowed(&only_client, &info, Perms::READ));
        info.add("x509", "CN=client,O=rzk");
        assert!(allowed(&only_client, &info, Perms::READ));
        assert!(!allowed(
            &[acl(31, "x509", "CN=client")],
            &info,
            Perms::READ
        ));
        // `auth` expands to the certificate's subject, as ZooKeeper's x509
        // provider is an authenticated one.
        let fixed = fixup(&[acl(31, "auth", "")], &info).unwrap();
        assert_eq!(fixed, only_client.to_vec());
        assert_eq!(
            fixup(&[acl(31, "x509", "")], &info),
            Err(ErrorCode::InvalidAcl)
        );
    }

    #[test]
    fn masking_hides_digest_hashes() {
        let m = masked(&[acl(31, "digest", "carol:abc="), acl(1, "world", "anyone")]);
        assert_eq!(&*m[0].id.id, "carol:x");
        assert_eq!(&*m[1].id.id, "anyone");
    }

    /// Nodes hold their ACL list through an 8-byte pointer, equal lists share
    /// one allocation, and a list no node holds is collected; many lists stay
    /// findable as the table grows (its rehash and its lookup hash the same
    /// way).
    #[test]
    fn interned_acl_lists_are_thin_shared_and_collected() {
        assert_eq!(std::mem::size_of::<AclRef>(), 8);
        let mut interner = AclInterner::default();
        let a = interner.intern(&[acl(31, "world", "anyone")]);
        let b = interner.intern(&[acl(31, "world", "anyone")]);
        let c = interner.intern(&[acl(1, "world", "anyone")]);
        let empty = interner.intern(&[]);
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(a.to_vec(), vec![acl(31, "world", "anyone")]);
        assert_eq!(c.to_vec(), vec![acl(1, "world", "anyone")]);
        assert!(empty.is_empty());
        assert_eq!(interner.len(), 3);
        drop((b, c));
        interner.collect_garbage();
        assert_eq!(
            interner.len(),
            2,
            "the list only the interner held is dropped"
        );
        drop((a, empty));
        interner.collect_garbage();
        assert!(interner.is_empty());

        let list = |k: i32| [acl(k % 32, "digest", &format!("user{k}:hash"))];
        let held: Vec<AclRef> = (0..1000).map(|k| interner.intern(&list(k))).collect();
        assert_eq!(interner.len(), 1000);
        for (k, l) in held.iter().enumerate() {
            assert!(
                Arc::ptr_eq(l, &interner.intern(&list(k as i32))),
                "list {k}"
            );
        }
        assert_eq!(interner.len(), 1000);
    }
}
