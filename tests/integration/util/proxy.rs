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

/// A TCP proxy in front of MariaDB (plain TCP) that holds back everything the server
/// sends on a connection, for `stall`, once the client asked it for its binlog
/// (`COM_BINLOG_DUMP` / `COM_BINLOG_DUMP_GTID`): the server as a replica sees it while it
/// looks for the start position in a large binlog file, silent, not even heartbeats.
pub struct StallProxy {
    pub port: u16,
    /// Connections whose binlog requests were held.
    pub stalled: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    accept: tokio::task::JoinHandle<()>,
}

impl StallProxy {
    pub async fn start(target_port: u16, stall: Duration) -> Self {
        use std::sync::atomic::AtomicUsize;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let stalled: std::sync::Arc<AtomicUsize> = Default::default();
        let counted = stalled.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", target_port)).await
                else {
                    continue;
                };
                let (mut client_rx, mut client_tx) = client.into_split();
                let (mut server_rx, mut server_tx) = server.into_split();
                // When the dump was asked (the server's bytes after it wait until then + stall).
                let (asked_tx, asked_rx) = tokio::sync::watch::channel(None::<Instant>);
                let counted = counted.clone();
                tokio::spawn(async move {
                    // Client → server, packet by packet: 3 bytes of length, 1 of sequence,
                    // then the command byte.
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 16 * 1024];
                    while let Ok(n) = client_rx.read(&mut chunk).await {
                        if n == 0 || server_tx.write_all(&chunk[..n]).await.is_err() {
                            break;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        while buf.len() >= 5 {
                            let len = usize::from(buf[0])
                                | usize::from(buf[1]) << 8
                                | usize::from(buf[2]) << 16;
                            if buf.len() < 4 + len {
                                break;
                            }
                            if len > 0
                                && matches!(buf[4], 0x12 | 0x1e)
                                && asked_tx.borrow().is_none()
                            {
                                counted.fetch_add(1, Ordering::Relaxed);
                                let _ = asked_tx.send(Some(Instant::now()));
                            }
                            buf.drain(..4 + len);
                        }
                    }
                });
                tokio::spawn(async move {
                    let mut chunk = [0u8; 64 * 1024];
                    while let Ok(n) = server_rx.read(&mut chunk).await {
                        if n == 0 {
                            break;
                        }
                        let asked = *asked_rx.borrow();
                        if let Some(asked) = asked {
                            let until = asked + stall;
                            if Instant::now() < until {
                                tokio::time::sleep_until(until.into()).await;
                            }
                        }
                        if client_tx.write_all(&chunk[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Self {
            port,
            stalled,
            accept,
        }
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
