//! A TCP proxy that cuts or blocks connections on demand.

use super::*;

/// A TCP proxy (in front of MariaDB, or Kafka's proxied listener) whose connections the
/// test can cut, and which can refuse new ones.
pub struct CutProxy {
    pub port: u16,
    conns: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
    blocked: std::sync::Arc<std::sync::atomic::AtomicBool>,
    accept: tokio::task::JoinHandle<()>,
}

impl CutProxy {
    pub async fn start(target_port: u16) -> Self {
        Self::start_on(0, target_port).await
    }

    /// A proxy listening on `port` (0: any free port).
    pub async fn start_on(port: u16, target_port: u16) -> Self {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let conns: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>> =
            Default::default();
        let blocked: std::sync::Arc<std::sync::atomic::AtomicBool> = Default::default();
        let registry = conns.clone();
        let refuse = blocked.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if refuse.load(Ordering::Relaxed) {
                    drop(client);
                    continue;
                }
                let task = tokio::spawn(async move {
                    if let Ok(mut server) =
                        tokio::net::TcpStream::connect(("127.0.0.1", target_port)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                registry.lock().unwrap().push(task.abort_handle());
            }
        });
        Self {
            port,
            conns,
            blocked,
            accept,
        }
    }

    /// Cuts every connection and refuses new ones until `unblock`.
    pub fn block(&self) {
        self.blocked.store(true, Ordering::Relaxed);
        self.cut();
    }

    /// Accepts connections again.
    pub fn unblock(&self) {
        self.blocked.store(false, Ordering::Relaxed);
    }

    /// Waits until at least one proxied connection is open (the router reconnected).
    pub async fn wait_live(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.live() == 0 {
            assert!(
                Instant::now() < deadline,
                "no connection through the proxy within {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn live(&self) -> usize {
        let conns = self.conns.lock().unwrap();
        conns.iter().filter(|c| !c.is_finished()).count()
    }

    /// Drops every proxied connection; returns how many were cut.
    pub fn cut(&self) -> usize {
        let conns = std::mem::take(&mut *self.conns.lock().unwrap());
        let n = conns.iter().filter(|c| !c.is_finished()).count();
        conns.iter().for_each(|c| c.abort());
        n
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}
