//! sslQuorum: the quorum port speaks mutual TLS. An ensemble whose members all
//! present certificates of the ensemble's CA elects, commits and serves reads
//! through every member; a member without TLS, or with a certificate of another
//! CA, is refused (one log line) and can neither join nor vote while the others
//! keep serving; a store that does not load stops the start with an error
//! naming it.
//!
//! Members run inside the test process on 127.0.0.1, ports from binding port 0.
//! Certificates are made here with rcgen.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rzk_server::config::ServerConfig;
use tokio::net::TcpListener;
use zookeeper_client as zk;

// ---- log capture -----------------------------------------------------------

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// The process's log (one global subscriber: members log from runtime threads).
fn log() -> &'static Log {
    static LOG: OnceLock<Log> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = Log::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber");
        log
    })
}

/// Waits for a log line holding every one of `parts`; returns it.
async fn wait_line(parts: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(line) = log()
            .text()
            .lines()
            .find(|l| parts.iter().all(|p| l.contains(p)))
        {
            return line.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no log line with {parts:?} within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---- certificates ----------------------------------------------------------

struct Ca {
    cert: rcgen::Certificate,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

fn ca(name: &str) -> Ca {
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

/// Writes `dir/<name>.pem` (key and certificate for 127.0.0.1, signed by `ca`)
/// and returns its path.
fn member_pem(dir: &Path, name: &str, ca: &Ca) -> PathBuf {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    let path = dir.join(format!("{name}.pem"));
    std::fs::write(&path, format!("{}{}", key.serialize_pem(), cert.pem())).unwrap();
    path
}

fn ca_pem(dir: &Path, name: &str, ca: &Ca) -> PathBuf {
    let path = dir.join(format!("{name}.pem"));
    std::fs::write(&path, ca.cert.pem()).unwrap();
    path
}

// ---- members ---------------------------------------------------------------

struct Member {
    client: SocketAddr,
    quorum: SocketAddr,
    /// The `server.N` line's election port: rzk does not listen on it, but
    /// it must stay this member's alone (a number another member's port got
    /// fails the config), so it is held for the test.
    _election: rzk_testkit::ports::Port,
    dir: PathBuf,
    running: Option<support::server::Running>,
}

struct Ensemble {
    members: Vec<Member>,
    server_lines: Vec<(String, String)>,
}

impl Ensemble {
    /// Binds every member's ports; starts none.
    async fn bind(root: &Path, n: usize) -> (Ensemble, Vec<(TcpListener, TcpListener)>) {
        let mut members = Vec::new();
        let mut listeners = Vec::new();
        let mut server_lines = Vec::new();
        for i in 0..n {
            let id = i + 1;
            let client = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let quorum = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let (c, q) = (client.local_addr().unwrap(), quorum.local_addr().unwrap());
            let election = rzk_testkit::ports::reserve();
            let dir = root.join(format!("m{id}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("myid"), format!("{id}\n")).unwrap();
            server_lines.push((
                format!("server.{id}"),
                format!(
                    "127.0.0.1:{}:{};127.0.0.1:{}",
                    q.port(),
                    election.get(),
                    c.port()
                ),
            ));
            members.push(Member {
                client: c,
                quorum: q,
                _election: election,
                dir,
                running: None,
            });
            listeners.push((client, quorum));
        }
        (
            Ensemble {
                members,
                server_lines,
            },
            listeners,
        )
    }

    fn config(&self, i: usize, extra: &[(String, String)]) -> ServerConfig {
        let m = &self.members[i];
        let mut settings: Vec<(String, String)> = vec![
            ("tickTime".into(), "200".into()),
            ("initLimit".into(), "10".into()),
            ("syncLimit".into(), "5".into()),
            ("dataDir".into(), m.dir.display().to_string()),
            ("clientPortAddress".into(), "127.0.0.1".into()),
            ("clientPort".into(), m.client.port().to_string()),
            ("4lw.commands.whitelist".into(), "*".into()),
            ("admin.enableServer".into(), "false".into()),
        ];
        settings.extend(self.server_lines.iter().cloned());
        settings.extend(extra.iter().cloned());
        ServerConfig::load(None, &settings).expect("valid test config")
    }

    fn spawn(
        &mut self,
        i: usize,
        (client, quorum): (TcpListener, TcpListener),
        extra: &[(String, String)],
    ) {
        let config = self.config(i, extra);
        self.members[i].running = Some(support::server::spawn_member(config, client, quorum));
    }

    async fn stop(&mut self, i: usize) {
        if let Some((stop, task)) = self.members[i].running.take() {
            let _ = stop.send(());
            task.await.unwrap().expect("a clean stop");
        }
    }

    async fn stop_all(&mut self) {
        for i in 0..self.members.len() {
            self.stop(i).await;
        }
    }

    async fn four_letter(&self, i: usize, word: &str) -> Option<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = self.members[i].client;
        let attempt = async {
            let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
            s.write_all(word.as_bytes()).await.ok()?;
            let mut out = String::new();
            s.read_to_string(&mut out).await.ok()?;
            Some(out)
        };
        tokio::time::timeout(Duration::from_secs(5), attempt)
            .await
            .ok()
            .flatten()
    }

    async fn mode(&self, i: usize) -> Option<String> {
        let out = self.four_letter(i, "srvr").await?;
        out.lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(str::to_owned)
    }

    /// Waits until among `members` exactly one leads and the rest follow;
    /// returns the leader.
    async fn wait_settled(&self, members: &[usize]) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut leaders = Vec::new();
            let mut all = true;
            for &i in members {
                match self.mode(i).await.as_deref() {
                    Some("leader") => leaders.push(i),
                    Some("follower") => {}
                    _ => all = false,
                }
            }
            if all && leaders.len() == 1 {
                return leaders[0];
            }
            assert!(
                Instant::now() < deadline,
                "no settled ensemble of {members:?} within 30 s (leaders {leaders:?})"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A `mntr` value of member `i`.
    async fn mntr(&self, i: usize, key: &str) -> Option<String> {
        let out = self.four_letter(i, "mntr").await?;
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}\t")).map(str::to_owned))
    }
}

fn tls_settings(key: &Path, trust: &Path) -> Vec<(String, String)> {
    vec![
        ("sslQuorum".into(), "true".into()),
        (
            "ssl.quorum.keyStore.location".into(),
            key.display().to_string(),
        ),
        (
            "ssl.quorum.trustStore.location".into(),
            trust.display().to_string(),
        ),
    ]
}

fn open() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

async fn session(addr: SocketAddr) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(4))
        .connect(&addr.to_string())
        .await
        .expect("connect")
}

/// A TLS handshake with `quorum` as a member presenting `key_pem` and
/// trusting `ca_pem`: Ok when the port accepts it.
async fn handshake(quorum: SocketAddr, key_pem: &Path, ca_pem: &Path) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let text = std::fs::read(key_pem).unwrap();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(&text).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca_pem).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .unwrap();
    let tcp = tokio::net::TcpStream::connect(quorum).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = rustls::pki_types::ServerName::IpAddress(quorum.ip().into());
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    // TLS 1.3 reports a refused client certificate only after the handshake:
    // read once to see the alert (or the server's HTTP/2 settings).
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 64];
    match tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => Ok(()),
        Ok(Ok(_)) => Err("closed".into()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer".into()),
    }
}

// ---- tests -----------------------------------------------------------------

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Three members with sslQuorum elect, commit a write, and read it through
/// each member; the quorum port speaks mutual TLS (a member's certificate is
/// accepted, a handshake from another CA is refused).
#[test]
fn ssl_quorum_ensemble_elects_commits_and_reads_through_every_member() {
    log();
    runtime().block_on(async {
        let root = tempfile::tempdir().unwrap();
        let ca1 = ca("rzk quorum CA");
        let trust = ca_pem(root.path(), "ca", &ca1);
        let (mut e, listeners) = Ensemble::bind(root.path(), 3).await;
        let mut keys = Vec::new();
        for (i, l) in listeners.into_iter().enumerate() {
            let key = member_pem(root.path(), &format!("member{}", i + 1), &ca1);
            e.spawn(i, l, &tls_settings(&key, &trust));
            keys.push(key);
        }
        let leader = e.wait_settled(&[0, 1, 2]).await;
        let writer = session(e.members[(leader + 1) % 3].client).await;
        writer
            .create("/tls-quorum", b"over mutual TLS", &open())
            .await
            .unwrap();
        for i in 0..3 {
            let c = session(e.members[i].client).await;
            c.sync("/").await.unwrap();
            let (data, _) = c.get_data("/tls-quorum").await.unwrap();
            assert_eq!(data, b"over mutual TLS", "read through member {}", i + 1);
        }
        // The quorum port is TLS that asks for a member certificate: one of
        // this CA is served, one of another CA is not.
        handshake(e.members[0].quorum, &keys[1], &trust)
            .await
            .expect("a member certificate is accepted");
        let ca2 = ca("another CA");
        let stranger = member_pem(root.path(), "stranger", &ca2);
        let refused = handshake(e.members[0].quorum, &stranger, &trust).await;
        assert!(refused.is_err(), "a certificate of another CA was accepted");
        e.stop_all().await;
    });
}

/// A member started without TLS, and then one with a certificate from
/// another CA, is refused with a log line and neither joins nor votes, while
/// the two TLS members keep committing.
#[test]
fn ssl_quorum_refuses_a_member_without_tls_or_from_another_ca() {
    log();
    runtime().block_on(async {
        let root = tempfile::tempdir().unwrap();
        let ca1 = ca("rzk quorum CA");
        let trust = ca_pem(root.path(), "ca", &ca1);
        let (mut e, mut listeners) = Ensemble::bind(root.path(), 3).await;
        let third = listeners.pop().unwrap();
        for (i, l) in listeners.into_iter().enumerate() {
            let key = member_pem(root.path(), &format!("member{}", i + 1), &ca1);
            e.spawn(i, l, &tls_settings(&key, &trust));
        }
        let leader = e.wait_settled(&[0, 1]).await;

        // Member 3 without TLS dials members 1 and 2 (smaller ids) in plaintext.
        e.spawn(2, third, &[]);
        let line = wait_line(&["refused a quorum connection", "TLS handshake failed"]).await;
        assert!(line.contains("WARN"), "{line}");
        let c = session(e.members[leader].client).await;
        c.create("/after-plaintext", b"1", &open()).await.unwrap();
        assert_eq!(e.mode(2).await, None, "the plaintext member serves");
        assert_eq!(
            e.mntr(leader, "zk_synced_followers").await.as_deref(),
            Some("1"),
            "the plaintext member joined"
        );
        let q3 = e.members[2].quorum;
        let c3 = e.members[2].client;
        e.stop(2).await;

        // Member 3 with TLS but a certificate of another CA (it trusts ours).
        let ca2 = ca("another CA");
        let rogue = member_pem(root.path(), "rogue", &ca2);
        let both = root.path().join("both.pem");
        std::fs::write(&both, format!("{}{}", ca1.cert.pem(), ca2.cert.pem())).unwrap();
        let before = log().text().matches("refused a quorum connection").count();
        let l3 = (
            TcpListener::bind(c3).await.unwrap(),
            TcpListener::bind(q3).await.unwrap(),
        );
        e.spawn(2, l3, &tls_settings(&rogue, &both));
        let deadline = Instant::now() + Duration::from_secs(30);
        while log().text().matches("refused a quorum connection").count() <= before {
            assert!(
                Instant::now() < deadline,
                "the rogue member was not refused"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        c.create("/after-rogue", b"2", &open()).await.unwrap();
        let other = session(e.members[1 - leader].client).await;
        other.sync("/").await.unwrap();
        assert!(other.get_data("/after-rogue").await.is_ok());
        assert_eq!(e.mode(2).await, None, "the rogue member serves");
        assert_eq!(
            e.mntr(leader, "zk_synced_followers").await.as_deref(),
            Some("1"),
            "the rogue member joined"
        );
        e.stop_all().await;
    });
}

/// The dialing side checks the member it dials: a member of another CA with
/// the smallest id (so the others dial it) is refused by them, with a log
/// line, and cannot lead or vote, while the two others elect and commit.
#[test]
fn ssl_quorum_dialer_refuses_a_member_from_another_ca() {
    log();
    runtime().block_on(async {
        let root = tempfile::tempdir().unwrap();
        let ca1 = ca("rzk quorum CA");
        let ca2 = ca("another CA");
        let trust = ca_pem(root.path(), "ca", &ca1);
        let both = root.path().join("both.pem");
        std::fs::write(&both, format!("{}{}", ca1.cert.pem(), ca2.cert.pem())).unwrap();
        let (mut e, listeners) = Ensemble::bind(root.path(), 3).await;
        for (i, l) in listeners.into_iter().enumerate() {
            if i == 0 {
                // Member 1 trusts everyone; nobody trusts its certificate.
                let rogue = member_pem(root.path(), "rogue-first", &ca2);
                e.spawn(0, l, &tls_settings(&rogue, &both));
            } else {
                let key = member_pem(root.path(), &format!("good{}", i + 1), &ca1);
                e.spawn(i, l, &tls_settings(&key, &trust));
            }
        }
        let addr = format!("addr={}", e.members[0].quorum);
        let line = wait_line(&["TLS handshake with the member failed", &addr]).await;
        assert!(line.contains("WARN"), "{line}");
        let leader = e.wait_settled(&[1, 2]).await;
        let c = session(e.members[leader].client).await;
        c.create("/without-member-1", b"1", &open()).await.unwrap();
        assert_eq!(e.mode(0).await, None, "the member of another CA serves");
        assert_eq!(
            e.mntr(leader, "zk_synced_followers").await.as_deref(),
            Some("1"),
            "the member of another CA joined"
        );
        e.stop_all().await;
    });
}

/// A key store that is missing, encrypted, or not PEM stops the member at
/// start with an error naming the ssl.quorum key and the file.
#[test]
fn ssl_quorum_bad_key_store_fails_at_start_with_its_name() {
    runtime().block_on(async {
        let root = tempfile::tempdir().unwrap();
        let ca1 = ca("rzk quorum CA");
        let trust = ca_pem(root.path(), "ca", &ca1);
        let missing = root.path().join("missing.pem");
        let encrypted = root.path().join("encrypted.pem");
        std::fs::write(
            &encrypted,
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
        )
        .unwrap();
        let p12 = root.path().join("member.p12");
        std::fs::write(&p12, b"\x30\x82binary").unwrap();
        let cases: Vec<(PathBuf, &str)> = vec![
            (missing.clone(), "No such file"),
            (encrypted.clone(), "encrypted"),
            (p12.clone(), "Pkcs12"),
        ];
        for (key, why) in cases {
            let (mut e, mut listeners) = Ensemble::bind(root.path(), 2).await;
            let mut extra = tls_settings(&key, &trust);
            extra.push(("ssl.quorum.keyStore.password".into(), "secret".into()));
            e.spawn(0, listeners.remove(0), &extra);
            let (_stop, task) = e.members[0].running.take().unwrap();
            let err = tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("the member stops at once")
                .unwrap()
                .expect_err("the member started with a bad key store")
                .to_string();
            assert!(
                err.contains("ssl.quorum.keyStore.location")
                    && err.contains(&key.display().to_string())
                    && err.contains(why),
                "{err}"
            );
        }
        // No trust store at all is refused too, naming the key.
        let (mut e, mut listeners) = Ensemble::bind(root.path(), 2).await;
        let key = member_pem(root.path(), "member", &ca1);
        let extra = vec![
            ("sslQuorum".into(), "true".into()),
            (
                "ssl.quorum.keyStore.location".into(),
                key.display().to_string(),
            ),
        ];
        e.spawn(0, listeners.remove(0), &extra);
        let (_stop, task) = e.members[0].running.take().unwrap();
        let err = task.await.unwrap().expect_err("started").to_string();
        assert!(err.contains("ssl.quorum.trustStore.location"), "{err}");
    });
}
