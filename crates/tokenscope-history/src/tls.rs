//! TLS to a shared PostgreSQL history, as libpq's URL parameters ask for
//! it: `sslmode` (`disable`, `prefer`, `require`, `verify-ca`,
//! `verify-full`) and `sslrootcert` (a PEM file of the CAs to trust).
//!
//! The PostgreSQL client reads only `disable`, `prefer` and `require`, and
//! verifies nothing itself: the two parameters are taken out of the URL
//! here, and the connection's certificate check is rustls', set up as
//! libpq's modes mean it — `verify-full` the chain and the host name,
//! `verify-ca` the chain alone, `require` and `prefer` nothing (unless a
//! root certificate is given: then, as libpq does, the chain). Without
//! `sslmode` the connection is plain, as before.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, Error as TlsError, SignatureScheme};
use std::sync::Arc;

/// What the URL asks of the connection's encryption.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl std::str::FromStr for SslMode {
    type Err = String;

    fn from_str(s: &str) -> Result<SslMode, String> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" | "allow" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode={other}: disable, prefer, require, verify-ca or verify-full"
                ))
            }
        })
    }
}

/// The URL without `sslmode` and `sslrootcert`, and what they said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub url: String,
    pub mode: Option<SslMode>,
    pub root_cert: Option<String>,
}

/// Takes `sslmode` and `sslrootcert` out of `url`'s query.
pub fn take_params(url: &str) -> Result<Wanted, String> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok(Wanted {
            url: url.to_string(),
            mode: None,
            root_cert: None,
        });
    };
    let (mut mode, mut root_cert, mut kept) = (None, None, Vec::new());
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sslmode", v)) => mode = Some(v.parse()?),
            Some(("sslrootcert", v)) => root_cert = Some(unescape(v)),
            _ => kept.push(pair),
        }
    }
    let url = match kept.is_empty() {
        true => base.to_string(),
        false => format!("{base}?{}", kept.join("&")),
    };
    Ok(Wanted {
        url,
        mode,
        root_cert,
    })
}

/// `%2F` and the like decoded (a path in a URL's query).
fn unescape(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The rustls client for `mode`, trusting `root_cert`'s CAs (else the
/// web's roots, as the HTTP client does).
pub fn client_config(
    mode: SslMode,
    root_cert: Option<&str>,
) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = roots(root_cert)?;
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let full = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .map_err(|e| format!("the CA certificates: {e}"))?;
    let check = match (mode, root_cert) {
        (SslMode::VerifyFull, _) => Check::Full,
        (SslMode::VerifyCa, _) | (_, Some(_)) => Check::ChainOnly,
        _ => Check::Nothing,
    };
    let verifier = Arc::new(Verifier {
        full,
        check,
        schemes: provider.signature_verification_algorithms,
    });
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

/// The CAs of `path`'s PEM, else the web's roots.
fn roots(path: Option<&str>) -> Result<rustls::RootCertStore, String> {
    use rustls::pki_types::pem::PemObject;
    let Some(path) = path else {
        return Ok(rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        });
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in
        CertificateDer::pem_file_iter(path).map_err(|e| format!("sslrootcert={path}: {e}"))?
    {
        let cert = cert.map_err(|e| format!("sslrootcert={path}: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("sslrootcert={path}: a certificate rustls cannot use: {e}"))?;
    }
    match roots.is_empty() {
        true => Err(format!("sslrootcert={path}: no PEM certificate in it")),
        false => Ok(roots),
    }
}

/// What of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Its chain to a trusted CA and the host name (`verify-full`).
    Full,
    /// Its chain alone (`verify-ca`, or a root certificate given).
    ChainOnly,
    /// Nothing: encrypted, not authenticated (`require`, `prefer`).
    Nothing,
}

/// libpq's modes over rustls' verifier. The handshake's signatures are
/// always checked: the connection is encrypted to whoever holds the key of
/// the certificate it showed.
#[derive(Debug)]
struct Verifier {
    full: Arc<rustls::client::WebPkiServerVerifier>,
    check: Check,
    schemes: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        let verdict =
            self.full
                .verify_server_cert(end_entity, intermediates, server_name, ocsp, now);
        match (self.check, verdict) {
            (Check::Nothing, _) => Ok(ServerCertVerified::assertion()),
            (
                Check::ChainOnly,
                Err(TlsError::InvalidCertificate(rustls::CertificateError::NotValidForName)),
            ) => Ok(ServerCertVerified::assertion()),
            (_, verdict) => verdict,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.schemes)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.schemes)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_parameters_are_taken_out_of_the_url() {
        let w = take_params(
            "postgres://u:p@h/db?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(w.url, "postgres://u:p@h/db?connect_timeout=3");
        assert_eq!(w.mode, Some(SslMode::VerifyFull));
        assert_eq!(w.root_cert.as_deref(), Some("/tmp/ca.pem"));
        let plain = take_params("postgres://h/db").unwrap();
        assert_eq!((plain.mode, plain.url.as_str()), (None, "postgres://h/db"));
        let only = take_params("postgres://h/db?sslmode=require").unwrap();
        assert_eq!(only.url, "postgres://h/db");
        let bad = take_params("postgres://h/db?sslmode=verify").unwrap_err();
        assert!(bad.contains("verify-full"), "{bad}");
    }

    #[test]
    fn a_missing_or_empty_root_certificate_is_a_clear_error() {
        let missing = client_config(SslMode::VerifyFull, Some("/nonexistent/ca.pem")).unwrap_err();
        assert!(
            missing.contains("sslrootcert=/nonexistent/ca.pem"),
            "{missing}"
        );
        assert!(client_config(SslMode::Require, None).is_ok());
    }
}
