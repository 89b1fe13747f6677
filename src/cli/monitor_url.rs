//! Where the commands that ask a running router reach its monitor: the address
//! `monitor.listen` names (a wildcard one asked on loopback), over https when the
//! monitor port serves TLS.

use anyhow::{bail, Context, Result};

use crate::config::Config;

/// The monitor's base URL (`https://127.0.0.1:9612`), or why there is none.
pub(super) fn of(config: &Config) -> Result<String> {
    let Some(listen) = config.monitor.listen_addr() else {
        bail!("monitor.listen is off: there is no endpoint to ask");
    };
    let addr: std::net::SocketAddr = listen
        .parse()
        .with_context(|| format!("monitor.listen {listen:?}"))?;
    let host = match addr.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_string(),
        ip if ip.is_unspecified() => "[::1]".to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    let scheme = match config.monitor.tls {
        Some(_) => "https",
        None => "http",
    };
    Ok(format!("{scheme}://{host}:{}", addr.port()))
}

/// A client for this router's own monitor. Over TLS on loopback the certificate is
/// not checked: a probe sends no credential and the address is this machine's, while
/// the certificate names the address clients outside use.
pub(super) fn client(config: &Config, timeout: std::time::Duration) -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .timeout(timeout)
        .danger_accept_invalid_certs(config.monitor.tls.is_some())
        .build()?)
}
