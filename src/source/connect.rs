//! Opening connections to the source server.

use std::time::Duration;

use mysql_async::{Conn, OptsBuilder, SslOpts};

use super::SourceError;
use crate::source::{SourceConfig, TlsMode};

/// Opens a plain connection to the source server with the configured credentials.
pub async fn connect(cfg: &SourceConfig) -> Result<Conn, SourceError> {
    connect_as(cfg, &cfg.user, cfg.password()?).await
}

/// Opens a plain connection to the source server (host, port, TLS, timeout as
/// configured) as another user: the operator commands that write (`prune`) have their own.
pub async fn connect_as(
    cfg: &SourceConfig,
    user: &str,
    password: Option<crate::secret::Secret>,
) -> Result<Conn, SourceError> {
    let opts = OptsBuilder::default()
        .ip_or_hostname(cfg.host.clone())
        .tcp_port(cfg.port)
        .user(Some(user.to_string()))
        .pass(password.as_ref().map(|p| p.expose().to_string()))
        .prefer_socket(false)
        // One time zone for every read: DATETIME columns are taken as UTC by the
        // stream, and the table reads' FROM_UNIXTIME / UNIX_TIMESTAMP must agree.
        .init(vec!["SET time_zone = '+00:00'"])
        .ssl_opts(ssl_opts(cfg));
    let secs = cfg.connect_timeout_secs.max(1);
    match tokio::time::timeout(Duration::from_secs(secs), Conn::new(opts)).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(source)) => Err(SourceError::Connect {
            host: cfg.host.clone(),
            port: cfg.port,
            user: user.to_string(),
            source,
        }),
        Err(_) => Err(SourceError::ConnectTimeout {
            host: cfg.host.clone(),
            port: cfg.port,
            secs,
        }),
    }
}

/// TLS options for the configured mode.
fn ssl_opts(cfg: &SourceConfig) -> Option<SslOpts> {
    let with_ca = || {
        let roots = cfg.tls_ca_file.iter().map(|p| p.clone().into()).collect();
        SslOpts::default().with_root_certs(roots)
    };
    match cfg.tls_mode {
        TlsMode::Disabled => None,
        TlsMode::Required => Some(SslOpts::default().with_danger_accept_invalid_certs(true)),
        TlsMode::VerifyCa => Some(with_ca().with_danger_skip_domain_validation(true)),
        TlsMode::VerifyIdentity => Some(with_ca()),
    }
}
