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
            Arc::new(ChainOnly(webpki))
        }
    } else {
        Arc::new(Unverified(provider))
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

/// `verify-ca` (and `require` with `sslrootcert`): the chain must lead to a trusted root; the
/// name in the certificate is not checked, as libpq does not check it in these modes.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require` without roots: encryption without a certificate check, as libpq does
/// in these modes. The handshake's signatures are still verified against the certificate
/// presented.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
