//! The local MariaDB: connections, the outbox schema, rows to insert, root SQL.

use super::*;

/// A connection as the `app` user, who may write and change global settings.
pub async fn app_conn() -> Conn {
    app_conn_at(mariadb_port()).await
}

/// An `app` connection to the server on `port` (the primary, or its replica).
pub async fn app_conn_at(port: u16) -> Conn {
    conn_as(port, "app", "app-secret").await
}

/// A connection to the server on `port` as `user` (`app` writes, `cdc` replicates).
pub async fn conn_as(port: u16, user: &str, password: &str) -> Conn {
    let opts = OptsBuilder::default()
        .ip_or_hostname("127.0.0.1")
        .tcp_port(port)
        .user(Some(user))
        .pass(Some(password))
        .prefer_socket(false);
    Conn::new(opts).await.unwrap_or_else(|e| {
        panic!("connect to the local MariaDB on {port} as {user} (is scripts/services up?): {e}")
    })
}

/// The server's current binlog position, `FILE:OFFSET`.
pub async fn binlog_position(conn: &mut Conn) -> (String, u64) {
    let r: mysql_async::Row = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .unwrap()
        .expect("log_bin is on");
    (r.get(0).unwrap(), r.get(1).unwrap())
}

/// A fresh database with an outbox table in the seeds' shape.
pub async fn outbox_db(conn: &mut Conn, db: &str) {
    conn.query_drop(format!("DROP DATABASE IF EXISTS {db}"))
        .await
        .unwrap();
    conn.query_drop(format!("CREATE DATABASE {db}"))
        .await
        .unwrap();
    conn.query_drop(format!(
        "CREATE TABLE {db}.outbox (
            event_id VARCHAR(64) PRIMARY KEY,
            aggregate_type VARCHAR(64) NULL,
            aggregate_id VARCHAR(64) NULL,
            event_type VARCHAR(64) NOT NULL,
            payload LONGTEXT NOT NULL,
            created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
        )"
    ))
    .await
    .unwrap();
}

/// One outbox row to insert.
#[derive(Clone, Debug)]
pub struct Ev {
    pub id: String,
    pub agg_type: String,
    pub agg_id: String,
    pub payload: String,
}

impl Ev {
    pub fn new(
        id: impl Into<String>,
        agg_type: &str,
        agg_id: &str,
        payload: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            agg_type: agg_type.into(),
            agg_id: agg_id.into(),
            payload: payload.into(),
        }
    }
}

/// Inserts events in one transaction, as one multi-row INSERT.
pub async fn insert_txn(conn: &mut Conn, db: &str, events: &[Ev]) {
    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    insert_in(&mut tx, db, events).await;
    tx.commit().await.unwrap();
}

/// Inserts events as one multi-row INSERT into an open transaction.
pub async fn insert_in(tx: &mut mysql_async::Transaction<'_>, db: &str, events: &[Ev]) {
    let placeholders = vec!["(?,?,?,?,?)"; events.len()].join(",");
    let params: Vec<mysql_async::Value> = events
        .iter()
        .flat_map(|e| {
            [
                e.id.clone().into(),
                e.agg_type.clone().into(),
                e.agg_id.clone().into(),
                format!("{}Happened", e.agg_type).into(),
                e.payload.clone().into(),
            ]
        })
        .collect();
    tx.exec_drop(
        format!("INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES {placeholders}"),
        params,
    )
    .await
    .unwrap();
}

/// Runs SQL as root over the local socket (works even with require_secure_transport).
pub fn root_sql(sql: &str) {
    root_sql_on("mariadb", sql)
}

/// `root_sql` on the local server in `.local/INSTANCE` (`mariadb-rds`, …).
pub fn root_sql_on(instance: &str, sql: &str) {
    let local = std::env::var("OUTBOX_LOCAL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join(".local"));
    let status = Command::new("mariadb")
        .arg(format!(
            "--defaults-file={}",
            local.join(instance).join("my.cnf").display()
        ))
        .args(["-uroot", "-e", sql])
        .status()
        .unwrap();
    assert!(status.success(), "root SQL failed: {sql}");
}

/// The local CA certificate that signed MariaDB's server certificate.
pub fn mariadb_ca() -> PathBuf {
    let local = std::env::var("OUTBOX_LOCAL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join(".local"));
    local.join("mariadb/tls/ca.pem")
}

/// Purges every binlog file before `current` (a stopped router's dump thread may hold
/// its file for a heartbeat or two, and the server then skips it: purge until it is
/// really gone).
pub async fn purge_to(conn: &mut Conn, current: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        conn.query_drop(format!("PURGE BINARY LOGS TO '{current}'"))
            .await
            .unwrap();
        let logs: Vec<(String, u64)> = conn.query("SHOW BINARY LOGS").await.unwrap();
        if logs[0].0 == current {
            return;
        }
        assert!(Instant::now() < deadline, "binlogs not purged: {logs:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Restores a global variable (value as an SQL literal) when dropped, even if the test fails.
pub struct RestoreGlobal(pub &'static str, pub String);

impl Drop for RestoreGlobal {
    fn drop(&mut self) {
        let (name, value) = (self.0, self.1.clone());
        std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                let mut conn = app_conn().await;
                conn.query_drop(format!("SET GLOBAL {name} = {value}"))
                    .await
                    .unwrap();
            })
        })
        .join()
        .unwrap();
    }
}
