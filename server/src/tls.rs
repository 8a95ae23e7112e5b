//! TLS on the secure client port, ZooKeeper's way (`secureClientPort`,
//! `ssl.keyStore.*`, `ssl.trustStore.*`, `ssl.clientAuth`, `ssl.protocol`,
//! `ssl.enabledProtocols`, `ssl.ciphersuites`, `client.certReload`), with rustls.
//!
//! - Key and trust stores are read as PEM (ZooKeeper's `PEM` type: one file
//!   with the private key and the certificate chain; a trust store of CA
//!   certificates). PKCS#12, JKS and BCFKS stores are recognised by type or
//!   extension and refused at start with a message saying so; so is an
//!   encrypted private key.
//! - A client certificate, when one is presented and trusted, gives the
//!   connection the identity `x509:<subject DN>` in RFC 2253 form, as
//!   ZooKeeper's `X509AuthenticationProvider` does (Java's
//!   `X500Principal.getName()`); `X509AuthenticationProvider.superUser` names a
//!   subject that is a super user.
//! - A handshake that fails (a plaintext client on the secure port, an
//!   untrusted certificate, no certificate under `ssl.clientAuth=need`) closes
//!   that connection with one warning line naming the peer and the reason; no
//!   other connection notices.
//! - With `client.certReload=true` the store files' modification times are
//!   checked at each new connection and the configuration is rebuilt when they
//!   changed; a change that does not load keeps the previous configuration
//!   (and says why in the log).
//!
//! ```no_run
//! # async fn f(stream: tokio::net::TcpStream) -> Result<(), rzk_server::tls::TlsError> {
//! let cfg = rzk_server::config::ServerConfig::parse(
//!     "secureClientPort=2281\nssl.keyStore.location=server.pem\nssl.trustStore.location=ca.pem\n",
//! ).unwrap();
//! let acceptor = rzk_server::tls::TlsAcceptor::new(&cfg.tls)?;
//! let (tls_stream, identity) = acceptor.accept(stream).await?;
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::config::{ClientAuth, StoreSettings, StoreType, TlsSettings};

/// The first byte of every TLS record that opens a handshake.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Why TLS could not be set up, or a connection's handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A store file could not be read or parsed.
    #[error("{what} {path}: {reason}")]
    Store {
        /// `ssl.keyStore.location` or `ssl.trustStore.location`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A setting rzk cannot honour.
    #[error("{0}")]
    Unsupported(String),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    /// The first bytes on the secure port were not a TLS handshake.
    #[error("not a TLS handshake (first byte 0x{0:02x}): a plaintext client on the secure port?")]
    NotTls(u8),
    /// The handshake failed (untrusted or missing certificate, no common
    /// version or cipher suite, I/O).
    #[error("TLS handshake failed: {0}")]
    Handshake(std::io::Error),
}

/// The identity a client certificate gives a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The subject in RFC 2253 form (`CN=client,O=rzk`): the `x509` id.
    pub subject: String,
    /// The subject is `X509AuthenticationProvider.superUser`.
    pub is_super: bool,
}

/// Accepts TLS connections with the current configuration (reloaded when the
/// store files change, if `client.certReload` is on).
pub struct TlsAcceptor {
    settings: TlsSettings,
    current: Mutex<Loaded>,
}

impl std::fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsAcceptor")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

struct Loaded {
    config: Arc<ServerConfig>,
    /// The stores' modification times when they were read.
    stamps: Vec<Option<SystemTime>>,
}

impl TlsAcceptor {
    /// Reads the stores and builds the configuration; every problem is an
    /// error naming the key or file.
    pub fn new(settings: &TlsSettings) -> Result<TlsAcceptor, TlsError> {
        let loaded = load(settings)?;
        Ok(TlsAcceptor {
            settings: settings.clone(),
            current: Mutex::new(loaded),
        })
    }

    /// The configuration for a new connection.
    fn config(&self) -> Arc<ServerConfig> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if self.settings.cert_reload && stamps(&self.settings) != current.stamps {
            match load(&self.settings) {
                Ok(fresh) => {
                    tracing::info!("TLS key or trust store changed: reloaded");
                    *current = fresh;
                }
                Err(e) => {
                    // Keep serving with the old certificates; try again at the
                    // next connection only if the files change again.
                    tracing::warn!(error = %e, "TLS key or trust store changed but does not load: keeping the previous one");
                    current.stamps = stamps(&self.settings);
                }
            }
        }
        current.config.clone()
    }

    /// Runs the server side of the handshake on `stream`. A stream whose first
    /// byte is not a TLS handshake record is refused at once.
    pub async fn accept(
        &self,
        stream: TcpStream,
    ) -> Result<(TlsStream<TcpStream>, Option<ClientIdentity>), TlsError> {
        let mut first = [0u8; 1];
        let n = stream.peek(&mut first).await.map_err(TlsError::Handshake)?;
        if n == 0 {
            return Err(TlsError::Handshake(
                std::io::ErrorKind::UnexpectedEof.into(),
            ));
        }
        if first[0] != TLS_HANDSHAKE_RECORD {
            return Err(TlsError::NotTls(first[0]));
        }
        let acceptor = tokio_rustls::TlsAcceptor::from(self.config());
        let tls = acceptor.accept(stream).await.map_err(TlsError::Handshake)?;
        let identity = match tls.get_ref().1.peer_certificates() {
            Some([leaf, ..]) => {
                let subject = subject_rfc2253(leaf.as_ref())?;
                let is_super = self.settings.x509_super_user.as_deref() == Some(&subject);
                Some(ClientIdentity { subject, is_super })
            }
            _ => None,
        };
        Ok((tls, identity))
    }
}

/// The keys a store problem is reported under.
struct Keys {
    key_store: &'static str,
    trust_store: &'static str,
    no_key_store: &'static str,
    no_trust_store: &'static str,
}

const CLIENT_PORT_KEYS: Keys = Keys {
    key_store: "ssl.keyStore.location",
    trust_store: "ssl.trustStore.location",
    no_key_store: "secureClientPort needs ssl.keyStore.location (the server's certificate and key)",
    no_trust_store:
        "ssl.clientAuth is want or need (need is the default) but ssl.trustStore.location \
         is not set: give the CA certificates client certificates must chain to, or set \
         ssl.clientAuth=none",
};

const QUORUM_KEYS: Keys = Keys {
    key_store: "ssl.quorum.keyStore.location",
    trust_store: "ssl.quorum.trustStore.location",
    no_key_store: "sslQuorum=true needs ssl.quorum.keyStore.location (this member's certificate \
         and key)",
    no_trust_store: "sslQuorum=true needs ssl.quorum.trustStore.location (the CA certificates \
         every member's certificate must chain to)",
};

/// The mutual TLS of the quorum port (`sslQuorum=true`, `ssl.quorum.*`), or
/// `None` when `sslQuorum` is off. The stores are read as the secure client
/// port's are (PEM; other types refused with the reason). Every member must
/// present a certificate that chains to the trust store, on both ends of each
/// connection. With `ssl.quorum.hostnameVerification` (the default) a dialed
/// member's certificate must also name the host (or IP address) its
/// `server.N` line gives; `peers` are the members' ids and hosts.
pub fn quorum_tls<'a>(
    config: &crate::config::ServerConfig,
    peers: impl IntoIterator<Item = (u64, &'a str)>,
) -> Result<Option<rzk_quorum::tls::QuorumTls>, TlsError> {
    if !config.ssl_quorum {
        return Ok(None);
    }
    let quorum_key = |e: TlsError| match e {
        TlsError::Unsupported(m) => TlsError::Unsupported(
            m.replace("ssl.ciphersuites", "ssl.quorum.ciphersuites")
                .replace("ssl.protocol", "ssl.quorum.protocol")
                .replace("ssl.enabledProtocols", "ssl.quorum.enabledProtocols"),
        ),
        other => other,
    };
    let settings = &config.quorum_tls;
    let (certs, key) = key_store(&settings.key_store, &QUORUM_KEYS)?;
    let roots = Arc::new(trust_store(&settings.trust_store, &QUORUM_KEYS)?);
    let mut provider = (*provider()).clone();
    if let Some(names) = &settings.ciphersuites {
        provider.cipher_suites = cipher_suites(&provider, names).map_err(quorum_key)?;
    }
    let provider = Arc::new(provider);
    let versions = versions(settings).map_err(quorum_key)?;
    let client_verifier =
        WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| TlsError::Unsupported(format!("ssl.quorum.trustStore: {e}")))?;
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)?
        .with_client_cert_verifier(client_verifier)
        .with_single_cert(certs.clone(), key.clone_key())?;
    let server_verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| TlsError::Unsupported(format!("ssl.quorum.trustStore: {e}")))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)?
        .dangerous();
    let builder = if config.quorum_hostname_verification {
        builder.with_custom_certificate_verifier(server_verifier)
    } else {
        builder.with_custom_certificate_verifier(Arc::new(ChainOnly(server_verifier)))
    };
    let client = builder.with_client_auth_cert(certs, key)?;
    let mut tls = rzk_quorum::tls::QuorumTls::new(Arc::new(server), Arc::new(client));
    for (id, host) in peers {
        let name = rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|e| {
            TlsError::Unsupported(format!(
                "server.{id}: {host:?} is not a host name TLS can verify: {e}"
            ))
        })?;
        tls.names.insert(rzk_quorum::PeerId(id), name);
    }
    Ok(Some(tls))
}

/// `ssl.quorum.hostnameVerification=false`: the member's certificate must
/// still chain to the trust store (webpki checks the chain before the name,
/// so a name error means the chain was good); only the name is not checked.
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl rustls::client::danger::ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        use rustls::CertificateError::{NotValidForName, NotValidForNameContext};
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                NotValidForName | NotValidForNameContext { .. },
            )) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn stamps(settings: &TlsSettings) -> Vec<Option<SystemTime>> {
    [&settings.key_store, &settings.trust_store]
        .iter()
        .map(|s| {
            s.location
                .as_deref()
                .and_then(|p| std::fs::metadata(p).ok())
                .and_then(|m| m.modified().ok())
        })
        .collect()
}

fn load(settings: &TlsSettings) -> Result<Loaded, TlsError> {
    let stamps = stamps(settings);
    let (certs, key) = key_store(&settings.key_store, &CLIENT_PORT_KEYS)?;
    let mut provider = (*provider()).clone();
    if let Some(names) = &settings.ciphersuites {
        provider.cipher_suites = cipher_suites(&provider, names)?;
    }
    let provider = Arc::new(provider);
    let versions = versions(settings)?;
    let builder =
        ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(&versions)?;
    let builder = match settings.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        auth => {
            let roots = trust_store(&settings.trust_store, &CLIENT_PORT_KEYS)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if auth == ClientAuth::Want {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Unsupported(format!("ssl.trustStore: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(certs, key)?;
    Ok(Loaded {
        config: Arc::new(config),
        stamps,
    })
}

fn versions(
    settings: &TlsSettings,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, TlsError> {
    // ZooKeeper enables `ssl.enabledProtocols`, else `ssl.protocol` alone.
    let names: Vec<String> = match (&settings.enabled_protocols, &settings.protocol) {
        (Some(list), _) => list.clone(),
        (None, Some(p)) => vec![p.clone()],
        (None, None) => vec!["TLS".into()],
    };
    let mut out = Vec::new();
    for name in &names {
        let add: &[&'static rustls::SupportedProtocolVersion] = match name.as_str() {
            "TLSv1.2" => &[&rustls::version::TLS12],
            "TLSv1.3" => &[&rustls::version::TLS13],
            "TLS" => &[&rustls::version::TLS13, &rustls::version::TLS12],
            other => {
                return Err(TlsError::Unsupported(format!(
                    "ssl.protocol {other:?}: rzk speaks TLSv1.2 and TLSv1.3"
                )))
            }
        };
        for v in add {
            if !out
                .iter()
                .any(|o: &&rustls::SupportedProtocolVersion| o.version == v.version)
            {
                out.push(*v);
            }
        }
    }
    if out.is_empty() {
        return Err(TlsError::Unsupported(
            "ssl.enabledProtocols is empty".into(),
        ));
    }
    Ok(out)
}

fn cipher_suites(
    provider: &CryptoProvider,
    names: &[String],
) -> Result<Vec<rustls::SupportedCipherSuite>, TlsError> {
    let mut out = Vec::new();
    for name in names {
        // rustls's suite names are the IANA names, which Java uses too.
        let Some(suite) = provider
            .cipher_suites
            .iter()
            .find(|s| format!("{:?}", s.suite()) == *name)
        else {
            let known: Vec<String> = provider
                .cipher_suites
                .iter()
                .map(|s| format!("{:?}", s.suite()))
                .collect();
            return Err(TlsError::Unsupported(format!(
                "ssl.ciphersuites: {name:?} is not one rzk offers ({})",
                known.join(", ")
            )));
        };
        out.push(*suite);
    }
    if out.is_empty() {
        return Err(TlsError::Unsupported("ssl.ciphersuites is empty".into()));
    }
    Ok(out)
}

fn require_pem(what: &'static str, store: &StoreSettings, path: &Path) -> Result<(), TlsError> {
    let kind = store.effective_type();
    if kind == StoreType::Pem {
        return Ok(());
    }
    Err(TlsError::Store {
        what,
        path: path.to_owned(),
        reason: format!(
            "{kind:?} stores are not read by rzk: convert it to PEM (openssl pkcs12 -in \
             store.p12 -nodes -out store.pem; keytool -importkeystore converts JKS to PKCS12)"
        ),
    })
}

fn key_store(
    store: &StoreSettings,
    keys: &Keys,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let what = keys.key_store;
    let Some(path) = store.location.as_deref() else {
        return Err(TlsError::Unsupported(keys.no_key_store.into()));
    };
    require_pem(what, store, path)?;
    let text = std::fs::read(path).map_err(|e| TlsError::Store {
        what,
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    let err = |reason: String| TlsError::Store {
        what,
        path: path.to_owned(),
        reason,
    };
    if text
        .windows(b"ENCRYPTED PRIVATE KEY".len())
        .any(|w| w == b"ENCRYPTED PRIVATE KEY")
    {
        return Err(err(
            "the private key is encrypted, which rzk does not read: decrypt it \
             (openssl pkcs8 -in key.pem -out plain.pem) and protect the file instead"
                .into(),
        ));
    }
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(format!("bad certificate: {e}")))?;
    if certs.is_empty() {
        return Err(err("no certificate in the file".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(&text)
        .map_err(|e| err(format!("no usable private key: {e}")))?;
    Ok((certs, key))
}

fn trust_store(store: &StoreSettings, keys: &Keys) -> Result<RootCertStore, TlsError> {
    let what = keys.trust_store;
    let Some(path) = store.location.as_deref() else {
        return Err(TlsError::Unsupported(keys.no_trust_store.into()));
    };
    require_pem(what, store, path)?;
    let text = std::fs::read(path).map_err(|e| TlsError::Store {
        what,
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    let err = |reason: String| TlsError::Store {
        what,
        path: path.to_owned(),
        reason,
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&text) {
        let cert = cert.map_err(|e| err(format!("bad certificate: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| err(format!("not a usable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(err("no certificate in the file".into()));
    }
    Ok(roots)
}

/// The subject of a DER certificate as Java's `X500Principal.getName()`
/// prints it (RFC 2253): the last RDN first, `,` between RDNs, `+` inside a
/// multi-valued one, the RFC's keywords (CN, C, L, ST, O, OU, STREET, DC, UID)
/// and dotted OIDs with the value's DER in hex for the rest.
pub fn subject_rfc2253(der: &[u8]) -> Result<String, TlsError> {
    use x509_parser::asn1_rs::ToDer;
    use x509_parser::prelude::*;
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| {
        TlsError::Handshake(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("client certificate does not parse: {e}"),
        ))
    })?;
    let rdns: Vec<String> = cert
        .subject()
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(|atv| {
                    let oid = atv.attr_type().to_id_string();
                    let keyword = match oid.as_str() {
                        "2.5.4.3" => Some("CN"),
                        "2.5.4.6" => Some("C"),
                        "2.5.4.7" => Some("L"),
                        "2.5.4.8" => Some("ST"),
                        "2.5.4.10" => Some("O"),
                        "2.5.4.11" => Some("OU"),
                        "2.5.4.9" => Some("STREET"),
                        "0.9.2342.19200300.100.1.25" => Some("DC"),
                        "0.9.2342.19200300.100.1.1" => Some("UID"),
                        _ => None,
                    };
                    match (keyword, atv.as_str()) {
                        (Some(k), Ok(v)) => format!("{k}={}", escape_rfc2253(v)),
                        _ => {
                            let raw = atv.attr_value().to_der_vec().unwrap_or_default();
                            let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
                            format!("{oid}=#{hex}")
                        }
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    Ok(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

fn escape_rfc2253(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_with(dn: rcgen::DistinguishedName) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
        params.distinguished_name = dn;
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn subject_prints_like_java_rfc2253() {
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CountryName, "DE");
        dn.push(rcgen::DnType::OrganizationName, "Acme, Inc.");
        dn.push(rcgen::DnType::CommonName, "client one");
        let der = cert_with(dn);
        assert_eq!(
            subject_rfc2253(&der).unwrap(),
            "CN=client one,O=Acme\\, Inc.,C=DE"
        );
    }

    #[test]
    fn escaping_follows_rfc2253() {
        assert_eq!(escape_rfc2253("#a b "), "\\#a b\\ ");
        assert_eq!(escape_rfc2253("a+b;c"), "a\\+b\\;c");
        assert_eq!(escape_rfc2253("plain"), "plain");
    }

    #[test]
    fn stores_that_rzk_cannot_read_are_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let p12 = dir.path().join("server.p12");
        std::fs::write(&p12, b"binary").unwrap();
        let mut settings = TlsSettings::default();
        settings.key_store.location = Some(p12);
        let err = TlsAcceptor::new(&settings).unwrap_err().to_string();
        assert!(err.contains("Pkcs12") && err.contains("PEM"), "{err}");

        let enc = dir.path().join("enc.pem");
        std::fs::write(
            &enc,
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
        )
        .unwrap();
        settings.key_store.location = Some(enc);
        let err = TlsAcceptor::new(&settings).unwrap_err().to_string();
        assert!(err.contains("encrypted"), "{err}");

        let missing = dir.path().join("missing.pem");
        settings.key_store.location = Some(missing.clone());
        let err = TlsAcceptor::new(&settings).unwrap_err().to_string();
        assert!(err.contains(&missing.display().to_string()), "{err}");
    }

    #[test]
    fn need_without_a_trust_store_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let pem = dir.path().join("server.pem");
        std::fs::write(&pem, format!("{}{}", key.serialize_pem(), cert.pem())).unwrap();
        let mut settings = TlsSettings::default();
        settings.key_store.location = Some(pem.clone());
        let err = TlsAcceptor::new(&settings).unwrap_err().to_string();
        assert!(err.contains("ssl.trustStore.location"), "{err}");
        settings.client_auth = ClientAuth::None;
        TlsAcceptor::new(&settings).unwrap();
        settings.ciphersuites = Some(vec!["TLS_RSA_WITH_NULL_MD5".into()]);
        let err = TlsAcceptor::new(&settings).unwrap_err().to_string();
        assert!(err.contains("TLS_RSA_WITH_NULL_MD5"), "{err}");
    }
}
