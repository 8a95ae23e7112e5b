//! The secure client port through the `rzk` binary and a zoo.cfg: the Rust
//! `zookeeper-client` over TLS with a client certificate, the `x509` scheme
//! from that certificate, refusals (plaintext on the secure port, an untrusted
//! certificate, no certificate under `ssl.clientAuth=need`) each with a log
//! line while other sessions are served, and `client.certReload`. Certificates
//! are made here with rcgen; no key is checked in.
mod support;

use rzk_testkit::ports::{reserve, Port};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::eventually;
use zookeeper_client as zk;

/// A CA and what it signs.
struct Ca {
    cert: rcgen::Certificate,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        let issuer = rcgen::Issuer::new(params, key);
        Ca { cert, issuer }
    }

    /// (certificate PEM, key PEM) for a leaf with this subject and names.
    fn leaf(&self, cn: &str, org: &str, names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, org);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

struct Pki {
    ca: Ca,
    client: (String, String),
}

impl Pki {
    fn new(dir: &Path) -> Pki {
        let ca = Ca::new("rzk test CA");
        let (cert, key) = ca.leaf("rzk server", "rzk", &["127.0.0.1", "localhost"]);
        // ZooKeeper's PEM key store: the key and the chain in one file.
        std::fs::write(dir.join("server.pem"), format!("{key}{cert}")).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.cert.pem()).unwrap();
        let client = ca.leaf("client", "rzk", &["client"]);
        Pki { ca, client }
    }

    fn options(&self, identity: Option<&(String, String)>) -> zk::TlsOptions {
        let opts = zk::TlsOptions::new()
            .with_pem_ca(&self.ca.cert.pem())
            .unwrap();
        match identity {
            Some((cert, key)) => opts.with_pem_identity(cert, key).unwrap(),
            None => opts,
        }
    }
}

struct Rzk {
    child: Child,
    port: Port,
    secure: Port,
    log: PathBuf,
}

impl Rzk {
    fn spawn(dir: &Path, extra: &[&str]) -> Rzk {
        let (port, secure) = (reserve(), reserve());
        let cfg = dir.join("zoo.cfg");
        let mut text = format!(
            "tickTime=200\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
             secureClientPort={secure}\nssl.keyStore.location={}\nssl.trustStore.location={}\n\
             4lw.commands.whitelist=ruok\n",
            dir.join("data").display(),
            dir.join("server.pem").display(),
            dir.join("ca.pem").display(),
        );
        for line in extra {
            text.push_str(line);
            text.push('\n');
        }
        std::fs::write(&cfg, text).unwrap();
        let log = dir.join("rzk.log");
        let child = Command::new(env!("CARGO_BIN_EXE_rzk"))
            .arg(&cfg)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap();
        Rzk {
            child,
            port,
            secure,
            log,
        }
    }

    fn plain(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn secure(&self) -> String {
        format!("127.0.0.1:{}", self.secure)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn wait_ready(&mut self) {
        let addr = self.plain();
        for _ in 0..600 {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("rzk exited with {status}:\n{}", self.log_text());
            }
            if let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let _ = s.write_all(b"ruok").await;
                let mut out = String::new();
                let _ = s.read_to_string(&mut out).await;
                if out == "imok" {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("rzk did not start:\n{}", self.log_text());
    }

    async fn wait_log(&self, what: &str, count: usize) {
        let log = self.log.clone();
        eventually(Duration::from_secs(10), what, || {
            let n = std::fs::read_to_string(&log)
                .unwrap_or_default()
                .matches(what)
                .count();
            async move { n >= count }
        })
        .await;
    }
}

impl Drop for Rzk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn tls_client(server: &Rzk, options: zk::TlsOptions) -> Result<zk::Client, zk::Error> {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .with_tls(options)
        .with_connection_timeout(Duration::from_secs(3))
        .with_fail_eagerly()
        .secure_connect(&server.secure())
        .await
}

const REFUSED: &str = "refused a connection on the secure client port";

#[tokio::test]
async fn tls_client_with_a_certificate_gets_the_x509_identity() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let mut server = Rzk::spawn(dir.path(), &[]);
    server.wait_ready().await;
    let c = tls_client(&server, pki.options(Some(&pki.client)))
        .await
        .expect("TLS session");
    let users = c.list_auth_users().await.unwrap();
    assert!(
        users
            .iter()
            .any(|u| u.scheme() == "x509" && u.user() == "CN=client,O=rzk"),
        "{users:?}"
    );
    // An ACL for the certificate's subject: the TLS client may read, a
    // plaintext client (holding only ip) may not.
    let acl = [zk::Acl::new(
        zk::Permission::ALL,
        zk::AuthId::new("x509", "CN=client,O=rzk"),
    )];
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::from(&acl[..]));
    c.create("/mine", b"secret", &opts).await.unwrap();
    assert_eq!(c.get_data("/mine").await.unwrap().0, b"secret");
    let plain = zk::Client::connect(&server.plain()).await.unwrap();
    assert_eq!(
        plain.get_data("/mine").await.unwrap_err(),
        zk::Error::NoAuth
    );
    // `auth` expands to the x509 identity too.
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::creator_all());
    c.create("/creator", b"", &opts).await.unwrap();
    let (acl, _) = c.get_acl("/creator").await.unwrap();
    assert_eq!(acl[0].scheme(), "x509");
    assert_eq!(acl[0].id(), "CN=client,O=rzk");
}

#[tokio::test]
async fn plaintext_and_untrusted_clients_are_refused_while_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let mut server = Rzk::spawn(dir.path(), &[]);
    server.wait_ready().await;
    let good = tls_client(&server, pki.options(Some(&pki.client)))
        .await
        .expect("TLS session");
    good.create(
        "/a",
        b"1",
        &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
    )
    .await
    .unwrap();

    // A plaintext client on the secure port.
    let err = zk::Client::connector()
        .with_connection_timeout(Duration::from_secs(2))
        .with_fail_eagerly()
        .connect(&server.secure())
        .await;
    assert!(err.is_err(), "a plaintext session on the secure port");
    server.wait_log(REFUSED, 1).await;
    assert!(
        server.log_text().contains("not a TLS handshake"),
        "{}",
        server.log_text()
    );

    // A certificate from a CA the server does not trust.
    let other = Ca::new("someone else");
    let stranger = other.leaf("client", "rzk", &["client"]);
    let err = tls_client(&server, pki.options(Some(&stranger))).await;
    assert!(err.is_err(), "an untrusted certificate got a session");
    server.wait_log(REFUSED, 2).await;

    // No certificate at all under ssl.clientAuth=need (the default).
    let err = tls_client(&server, pki.options(None)).await;
    assert!(err.is_err(), "no certificate got a session under need");
    server.wait_log(REFUSED, 3).await;

    // The session that was there all along is still served.
    assert_eq!(good.get_data("/a").await.unwrap().0, b"1");
    good.set_data("/a", b"2", None).await.unwrap();
    let plain = zk::Client::connect(&server.plain()).await.unwrap();
    assert_eq!(plain.get_data("/a").await.unwrap().0, b"2");
    let log = server.log_text();
    assert!(
        log.contains("UnknownIssuer") || log.contains("unknown issuer"),
        "{log}"
    );
}

#[tokio::test]
async fn client_auth_want_serves_clients_without_a_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let mut server = Rzk::spawn(dir.path(), &["ssl.clientAuth=want"]);
    server.wait_ready().await;
    let anonymous = tls_client(&server, pki.options(None))
        .await
        .expect("session");
    let users = anonymous.list_auth_users().await.unwrap();
    assert!(users.iter().all(|u| u.scheme() != "x509"), "{users:?}");
    // An untrusted certificate is still refused under want.
    let other = Ca::new("someone else");
    let stranger = other.leaf("client", "rzk", &["client"]);
    assert!(tls_client(&server, pki.options(Some(&stranger)))
        .await
        .is_err());
    server.wait_log(REFUSED, 1).await;
    anonymous.get_children("/").await.unwrap();
}

#[tokio::test]
async fn cert_reload_picks_up_a_new_server_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let mut server = Rzk::spawn(
        dir.path(),
        &["client.certReload=true", "ssl.clientAuth=none"],
    );
    server.wait_ready().await;
    tls_client(&server, pki.options(None))
        .await
        .expect("session");

    // A new server certificate from a new CA replaces the file.
    let next = Ca::new("next CA");
    let (cert, key) = next.leaf("rzk server", "rzk", &["127.0.0.1"]);
    let trusts_next = zk::TlsOptions::new().with_pem_ca(&next.cert.pem()).unwrap();
    assert!(tls_client(&server, trusts_next.clone()).await.is_err());
    // Written aside and renamed, so the server never reads half a file; the
    // modification time must differ from the old file's.
    let tmp = dir.path().join("server.pem.new");
    std::fs::write(&tmp, format!("{key}{cert}")).unwrap();
    let old = std::fs::metadata(dir.path().join("server.pem"))
        .unwrap()
        .modified()
        .unwrap();
    let f = std::fs::File::options().write(true).open(&tmp).unwrap();
    f.set_modified(old + Duration::from_secs(5)).unwrap();
    drop(f);
    std::fs::rename(&tmp, dir.path().join("server.pem")).unwrap();
    tls_client(&server, trusts_next)
        .await
        .expect("session after reload");
    assert!(
        server.log_text().contains("reloaded"),
        "{}",
        server.log_text()
    );
    assert!(tls_client(&server, pki.options(None)).await.is_err());
}

#[tokio::test]
async fn a_bad_key_store_stops_the_server_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    Pki::new(dir.path());
    std::fs::write(dir.path().join("server.pem"), "not a pem file\n").unwrap();
    let mut server = Rzk::spawn(dir.path(), &[]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "rzk kept running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(!status.success());
    let log = server.log_text();
    assert!(
        log.contains("server.pem") && log.contains("no certificate"),
        "{log}"
    );
}
