//! The monitor port over TLS (`[monitor.tls]`): a certificate and key from PEM files,
//! rustls on ring (the process's one provider), HTTP/1.1. Needed before credentials
//! may cross the network: off loopback, a credential over plain HTTP is refused.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// `[monitor.tls]`: the server's certificate (chain) and private key, PEM.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonitorTls {
    /// The certificate, then any intermediates.
    pub cert_file: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

/// How long a client may take over its handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

impl MonitorTls {
    /// The acceptor, or what is wrong with the files (named, never their contents).
    pub fn acceptor(&self) -> Result<TlsAcceptor, String> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.cert_file)
            .and_then(|certs| certs.collect::<Result<_, _>>())
            .map_err(|e| format!("monitor.tls.cert_file {}: {e}", self.cert_file.display()))?;
        if certs.is_empty() {
            return Err(format!(
                "monitor.tls.cert_file {} holds no certificate",
                self.cert_file.display()
            ));
        }
        let key = PrivateKeyDer::from_pem_file(&self.key_file)
            .map_err(|e| format!("monitor.tls.key_file {}: {e}", self.key_file.display()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| format!("monitor.tls: the key does not fit the certificate, or is not one rustls reads: {e}"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

/// Serves `router` over TLS on `listener` until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    acceptor: TlsAcceptor,
    router: Router,
    shutdown: CancellationToken,
) {
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    tracing::warn!(error = %e, "monitor: accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => return,
        };
        let (acceptor, router, shutdown) = (acceptor.clone(), router.clone(), shutdown.clone());
        tokio::spawn(async move {
            // A client that never finishes its handshake holds nothing for long.
            let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await else {
                return;
            };
            let service = hyper_util::service::TowerToHyperService::new(router);
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service);
            tokio::select! {
                _ = connection => {}
                _ = shutdown.cancelled() => {}
            }
        });
    }
}
