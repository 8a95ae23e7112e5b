//! Connect strings, chroot paths and client settings.

use std::time::Duration;

use bytes::Bytes;

use crate::error::{Error, Result};

/// Settings of a [`Client`](crate::Client). Build with [`ClientConfig::new`] from a
/// connect string, then adjust.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `host:port` pairs, tried in a shuffled order, moving to the next on failure.
    pub hosts: Vec<String>,
    /// Every path is relative to this node (`/app` in `h1:2181,h2:2181/app`).
    pub chroot: Option<String>,
    /// The requested session timeout; the server negotiates the real one.
    pub session_timeout: Duration,
    /// How long one TCP connect plus handshake may take before the next host is tried.
    pub connect_timeout: Duration,
    /// How long [`Client::connect`](crate::Client::connect) waits for the first session
    /// (Curator's connection timeout, 15 s by default).
    pub first_connect_timeout: Duration,
    /// The client-side session deadline while disconnected, in percent of the session
    /// timeout (Curator's `simulatedSessionExpirationPercent`, 1..=100).
    pub deadline_percent: u32,
    /// Requests in flight at once; further requests wait (backpressure).
    pub outstanding_max: usize,
    /// Auth packets (scheme, credentials) sent after every connect.
    pub auth: Vec<(String, Bytes)>,
    /// Accept a read-only server.
    pub read_only_allowed: bool,
    /// Shuffle the host list (off only for tests that need a fixed order).
    pub shuffle_hosts: bool,
    /// Attach to this existing session (id, password) instead of creating one — how a
    /// test ends another client's session on the server (attach, then close), and how
    /// a process hands its session over.
    pub resume: Option<(crate::types::SessionId, Bytes)>,
}

impl ClientConfig {
    /// Parse `host:port[,host:port...][/chroot]`.
    pub fn new(connect_string: &str) -> Result<ClientConfig> {
        let (hosts, chroot) = parse_connect_string(connect_string)?;
        Ok(ClientConfig {
            hosts,
            chroot,
            session_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            first_connect_timeout: Duration::from_secs(15),
            deadline_percent: 100,
            outstanding_max: 1024,
            auth: Vec::new(),
            read_only_allowed: false,
            shuffle_hosts: true,
            resume: None,
        })
    }

    /// Set the requested session timeout.
    pub fn session_timeout(mut self, timeout: Duration) -> ClientConfig {
        self.session_timeout = timeout;
        self
    }

    /// Add an auth packet sent after every connect (`digest`, `user:password`).
    pub fn auth(mut self, scheme: &str, credentials: impl Into<Bytes>) -> ClientConfig {
        self.auth.push((scheme.to_owned(), credentials.into()));
        self
    }
}

/// Split a connect string into hosts and an optional chroot.
pub fn parse_connect_string(s: &str) -> Result<(Vec<String>, Option<String>)> {
    let (hosts, chroot) = match s.find('/') {
        Some(i) => (&s[..i], Some(&s[i..])),
        None => (s, None),
    };
    let hosts: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| {
            if h.contains(':') {
                h.to_owned()
            } else {
                format!("{h}:2181")
            }
        })
        .collect();
    if hosts.is_empty() {
        return Err(Error::Config(format!("no host in connect string {s:?}")));
    }
    for h in &hosts {
        let port = h.rsplit(':').next().unwrap_or_default();
        if port.parse::<u16>().is_err() {
            return Err(Error::Config(format!("bad port in {h:?}")));
        }
    }
    let chroot = match chroot {
        None | Some("/") => None,
        Some(c) => {
            validate_path(c).map_err(|e| Error::Config(e.to_string()))?;
            Some(c.to_owned())
        }
    };
    Ok((hosts, chroot))
}

/// Check a path the way ZooKeeper clients do before sending it.
pub fn validate_path(path: &str) -> Result<()> {
    let bad = |reason: &'static str| {
        Err(Error::InvalidPath {
            path: path.to_owned(),
            reason,
        })
    };
    if !path.starts_with('/') {
        return bad("must start with /");
    }
    if path.len() > 1 && path.ends_with('/') {
        return bad("must not end with /");
    }
    for part in path.split('/').skip(1) {
        if path.len() > 1 && part.is_empty() {
            return bad("empty component");
        }
        if part == "." || part == ".." {
            return bad("relative component");
        }
    }
    if path.chars().any(|c| {
        c == '\0' || ('\u{1}'..='\u{1f}').contains(&c) || ('\u{7f}'..='\u{9f}').contains(&c)
    }) {
        return bad("control character");
    }
    Ok(())
}

/// Maps user paths to server paths and back under an optional chroot.
#[derive(Debug, Clone, Default)]
pub struct Chroot(Option<String>);

impl Chroot {
    /// A mapping under `chroot` (`None`: identity).
    pub fn new(chroot: Option<String>) -> Chroot {
        Chroot(chroot)
    }

    /// The server path of a user path.
    pub fn to_server(&self, path: &str) -> String {
        match &self.0 {
            None => path.to_owned(),
            Some(root) if path == "/" => root.clone(),
            Some(root) => format!("{root}{path}"),
        }
    }

    /// The user path of a server path; `None` if it lies outside the chroot.
    pub fn to_user(&self, path: &str) -> Option<String> {
        match &self.0 {
            None => Some(path.to_owned()),
            Some(root) if path == root => Some("/".to_owned()),
            Some(root) => path
                .strip_prefix(root.as_str())
                .filter(|rest| rest.starts_with('/'))
                .map(str::to_owned),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_string_with_hosts_and_chroot() {
        let (hosts, chroot) = parse_connect_string("a:1, b:2,c/app/x").expect("valid");
        assert_eq!(hosts, vec!["a:1", "b:2", "c:2181"]);
        assert_eq!(chroot.as_deref(), Some("/app/x"));
        assert_eq!(parse_connect_string("a:1/").expect("valid").1, None);
    }

    #[test]
    fn bad_connect_strings_are_clear_errors() {
        assert!(matches!(parse_connect_string(""), Err(Error::Config(_))));
        assert!(matches!(
            parse_connect_string("a:notaport"),
            Err(Error::Config(_))
        ));
        assert!(matches!(
            parse_connect_string("a:1/x/"),
            Err(Error::Config(_))
        ));
        assert!(matches!(
            parse_connect_string("a:1/x/../y"),
            Err(Error::Config(_))
        ));
    }

    #[test]
    fn chroot_maps_both_ways() {
        let c = Chroot::new(Some("/app".into()));
        assert_eq!(c.to_server("/"), "/app");
        assert_eq!(c.to_server("/x/y"), "/app/x/y");
        assert_eq!(c.to_user("/app"), Some("/".into()));
        assert_eq!(c.to_user("/app/x"), Some("/x".into()));
        assert_eq!(c.to_user("/apple"), None);
        assert_eq!(c.to_user("/other"), None);
        let none = Chroot::new(None);
        assert_eq!(none.to_server("/x"), "/x");
        assert_eq!(none.to_user("/x"), Some("/x".into()));
    }

    #[test]
    fn paths_are_validated() {
        assert!(validate_path("/").is_ok());
        assert!(validate_path("/a/b").is_ok());
        for bad in ["", "a", "/a/", "//a", "/a/./b", "/a\u{0}b"] {
            assert!(validate_path(bad).is_err(), "{bad:?}");
        }
    }
}
