//! TLS for the PostgreSQL store: libpq's `sslmode` meanings on rustls.
//!
//! rustls (with the `ring` provider) rather than OpenSSL: a wheel that links no system TLS
//! library installs the same everywhere, and its certificate checks are the webpki ones.
//!
//! | sslmode | TLS | certificate check |
//! | --- | --- | --- |
//! | `disable` | never | - |
//! | `prefer` (default) | when the server offers it, else plaintext | none |
//! | `require` | always | none, or the chain against `sslrootcert` when one is given |
//! | `verify-ca` | always | the chain against `sslrootcert` (default `~/.postgresql/root.crt`) |
//! | `verify-full` | always | as `verify-ca`, and the certificate names the host |
//!
//! Once the server has agreed to TLS, a failed handshake or check ends the connection: there is
//! no fallback to plaintext in any mode.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::{Error, Result};
use crate::url::{PgTls, SslMode};

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_error(what: impl std::fmt::Display) -> Error {
    Error::Store(format!(
        "cannot set up TLS for the PostgreSQL store: {what}"
    ))
}

/// The roots a verifying mode trusts: `sslrootcert`, else libpq's `~/.postgresql/root.crt`.
fn roots(tls: &PgTls) -> Result<RootCertStore> {
    let path: PathBuf = match &tls.root_cert {
        Some(p) if p.as_os_str() == "system" => {
            return Err(tls_error(
                "sslrootcert=system is not supported; give the path of the server's root \
                 certificate (PEM), as the database provider publishes it",
            ))
        }
        Some(p) => p.clone(),
        None => match std::env::var_os("HOME") {
            Some(home) => Path::new(&home).join(".postgresql/root.crt"),
            None => PathBuf::from("~/.postgresql/root.crt"),
        },
    };
    let mut store = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(&path).map_err(|e| {
        tls_error(format!(
            "cannot read the root certificate file {} ({e}); a verifying sslmode needs the \
             server's root certificate: give sslrootcert=<PEM file>",
            path.display()
        ))
    })?;
    for cert in certs {
        let cert = cert.map_err(|e| tls_error(format!("{}: {e}", path.display())))?;
        store
            .add(cert)
            .map_err(|e| tls_error(format!("{}: {e}", path.display())))?;
    }
    if store.is_empty() {
        return Err(tls_error(format!(
            "{} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(store)
}

/// The connector for a store's URL. With `sslmode=disable` it is never used.
pub(crate) fn connector(tls: &PgTls) -> Result<MakeRustlsConnect> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?;
    let verify_chain = match tls.mode {
        SslMode::VerifyCa | SslMode::VerifyFull => true,
        SslMode::Require => tls.root_cert.is_some(),
        SslMode::Disable | SslMode::Prefer => false,
    };
    let verifier: Arc<dyn ServerCertVerifier> = if verify_chain {
        let webpki =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots(tls)?), provider.clone())
                .build()
                .map_err(tls_error)?;
        if tls.mode == SslMode::VerifyFull {
            webpki
        } else {
            Arc::new(Lenient {
                chain: Some(webpki),
                provider,
            })
        }
    } else {
        Arc::new(Lenient {
            chain: None,
            provider,
        })
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
                .map_err(|e| tls_error(format!("sslcert {}: {e}", cert.display())))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| tls_error(format!("sslkey {}: {e}", key.display())))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| tls_error(format!("sslcert/sslkey: {e}")))?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(MakeRustlsConnect::new(config))
}

/// A certificate, a handshake signature, and whether the signature holds.
type Cert<'a> = CertificateDer<'a>;
type Dss = DigitallySignedStruct;
type Signed = std::result::Result<HandshakeSignatureValid, rustls::Error>;

/// The modes that do not check the name in the certificate, as libpq does not check it in
/// them. With `chain` (`verify-ca`, and `require` with `sslrootcert`) the chain must lead to a
/// trusted root; without (`prefer`, and `require` without roots) there is encryption without a
/// certificate check. Either way the handshake's signatures are verified against the
/// certificate presented, with the provider's algorithms (the ones the chain's verifier uses).
#[derive(Debug)]
struct Lenient {
    chain: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(&self, m: &[u8], c: &Cert<'_>, d: &Dss) -> Signed {
        verify_tls12_signature(m, c, d, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(&self, m: &[u8], c: &Cert<'_>, d: &Dss) -> Signed {
        verify_tls13_signature(m, c, d, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
