//! SQL text as the binlog logs it: which statement a query event holds (transaction
//! control, XA, a data change logged as text, anything else) and which tables a
//! statement-logged change names. A small lexer over bytes that skips comments, quoted
//! names and string literals; pure and total (fuzzed with the boundaries).

use std::fmt;

/// An XA transaction id in the binlog's own text form: `X'gtrid',X'bqual',formatID`,
/// hex in lower case.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Xid(String);

impl Xid {
    /// The id from its parts.
    pub fn new(format_id: i64, gtrid: &[u8], bqual: &[u8]) -> Self {
        Self(format!("X'{}',X'{}',{format_id}", hex(gtrid), hex(bqual)))
    }

    /// Parses the id as a query event writes it (`X'78',X'',1`); `None` when it is not
    /// in that form.
    fn parse(text: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(text).ok()?.trim();
        let mut parts = text.splitn(3, ',');
        let gtrid = hex_literal(parts.next()?)?;
        let bqual = hex_literal(parts.next().unwrap_or("X''"))?;
        let format_id = match parts.next() {
            Some(f) => f.trim().parse().ok()?,
            None => 1,
        };
        Some(Self::new(format_id, &gtrid, &bqual))
    }

    /// Decodes an XA_PREPARE_LOG_EVENT body: one_phase u8, formatID u32, gtrid length
    /// u32, bqual length u32, then the two ids. Returns the id and the one-phase flag.
    pub fn from_prepare_event(data: &[u8]) -> Option<(Self, bool)> {
        let one_phase = *data.first()? != 0;
        let u32_at = |at: usize| -> Option<u32> {
            Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?))
        };
        let format_id = u32_at(1)? as i32;
        let gtrid_len = u32_at(5)? as usize;
        let bqual_len = u32_at(9)? as usize;
        let ids = data.get(13..13usize.checked_add(gtrid_len)?.checked_add(bqual_len)?)?;
        let (gtrid, bqual) = ids.split_at(gtrid_len);
        Some((Self::new(i64::from(format_id), gtrid, bqual), one_phase))
    }
}

impl fmt::Display for Xid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `X'4a4b'` (or `'text'`) → bytes.
fn hex_literal(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if let Some(h) = s
        .strip_prefix("X'")
        .or_else(|| s.strip_prefix("x'"))
        .and_then(|h| h.strip_suffix('\''))
    {
        if h.len() % 2 != 0 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        return (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok())
            .collect();
    }
    let q = s.strip_prefix('\'')?.strip_suffix('\'')?;
    Some(q.as_bytes().to_vec())
}

/// What a query event's statement is, as far as boundaries care.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Statement {
    /// `BEGIN` / `START TRANSACTION`.
    Begin,
    /// `COMMIT`.
    Commit,
    /// `ROLLBACK` (of the whole transaction).
    Rollback,
    /// `ROLLBACK TO [SAVEPOINT] x`, `SAVEPOINT x`, `RELEASE SAVEPOINT x`: inside a group.
    Savepoint,
    /// `XA START xid` / `XA BEGIN xid`: opens an XA branch's group (MySQL).
    XaStart,
    /// `XA END xid`: inside the prepare group.
    XaEnd,
    /// `XA COMMIT xid` (not ONE PHASE: that one is logged as an ordinary group).
    XaCommit(Xid),
    /// `XA ROLLBACK xid`.
    XaRollback(Xid),
    /// `XA …` whose id is not in the binlog's form: an error, its rows could be lost.
    XaUnreadable,
    /// A data change logged as a statement: `INSERT` / `REPLACE` / `UPDATE` / `DELETE` /
    /// `LOAD DATA`, a `SELECT` / `DO` / `CALL` of a stored routine (logged only because
    /// it changed data), `WITH … UPDATE`, `CREATE TABLE … SELECT`.
    Dml,
    /// Anything else: DDL, `SET`, … (a transaction of its own outside a group).
    Other,
}

/// Skips leading white space and comments (`/* … */`, `-- …`, `# …`), byte-wise: a
/// comment may hold any text, in any encoding.
fn skip_blank(mut s: &[u8]) -> &[u8] {
    loop {
        let trimmed = s.trim_ascii_start();
        if let Some(rest) = trimmed.strip_prefix(b"/*") {
            // MariaDB/MySQL executable comments (`/*!50001 … */`) hold the statement.
            let executable = rest.strip_prefix(b"!").or_else(|| rest.strip_prefix(b"M!"));
            if let Some(body) = executable {
                let digits = body.iter().take_while(|b| b.is_ascii_digit()).count();
                return skip_blank(&body[digits..]);
            }
            s = match rest.windows(2).position(|w| w == b"*/") {
                Some(end) => &rest[end + 2..],
                None => &[],
            };
        } else if trimmed.starts_with(b"-- ") || trimmed.starts_with(b"#") {
            s = match trimmed.iter().position(|&b| b == b'\n') {
                Some(end) => &trimmed[end + 1..],
                None => &[],
            };
        } else {
            return trimmed;
        }
    }
}

/// The next word (letters, digits, `_`) after blanks, and what follows it.
fn word(s: &[u8]) -> (&[u8], &[u8]) {
    let s = skip_blank(s);
    let n = s
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
        .count();
    (&s[..n], &s[n..])
}

fn is(w: &[u8], keyword: &str) -> bool {
    w.eq_ignore_ascii_case(keyword.as_bytes())
}

/// Classifies a query event's statement.
pub fn classify(sql: &[u8]) -> Statement {
    let (first, rest) = word(sql);
    match () {
        _ if is(first, "BEGIN") => Statement::Begin,
        _ if is(first, "START") && is(word(rest).0, "TRANSACTION") => Statement::Begin,
        _ if is(first, "COMMIT") => Statement::Commit,
        _ if is(first, "ROLLBACK") => {
            let (next, _) = word(rest);
            if is(next, "TO") {
                Statement::Savepoint
            } else {
                Statement::Rollback
            }
        }
        _ if is(first, "SAVEPOINT") || is(first, "RELEASE") => Statement::Savepoint,
        _ if is(first, "XA") => classify_xa(rest),
        _ if DATA_CHANGING.iter().any(|k| is(first, k)) => Statement::Dml,
        // `CREATE TABLE … SELECT` fills the table from a query; logged as rows, the
        // server writes only the generated `CREATE TABLE` text.
        _ if is(first, "CREATE") && creates_table_from_query(rest) => Statement::Dml,
        _ => Statement::Other,
    }
}

/// First words of statements that change rows when the binlog holds them as text. A
/// `SELECT` or `DO` appears in a binlog only when it calls a stored function that
/// changed data (statement logging writes a `SET @v = f()` as `SELECT f()` too); `WITH`
/// starts a CTE's `UPDATE` / `DELETE`; `CALL`, `VALUES`, `EXECUTE` and `HANDLER` are
/// listed because no replica could tell what they touched if a server logged them.
const DATA_CHANGING: [&str; 12] = [
    "INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD", "SELECT", "DO", "CALL", "WITH", "VALUES",
    "EXECUTE", "HANDLER",
];

/// `[OR REPLACE] [TEMPORARY] TABLE … SELECT` after `CREATE` (not a view or trigger,
/// whose bodies hold queries that run later).
fn creates_table_from_query(mut rest: &[u8]) -> bool {
    loop {
        let (w, after) = word(rest);
        if is(w, "OR") || is(w, "REPLACE") || is(w, "TEMPORARY") {
            rest = after;
        } else {
            return is(w, "TABLE") && has_bare_word(after, "SELECT");
        }
    }
}

/// True when `word` occurs outside quotes and comments (case-insensitive).
fn has_bare_word(sql: &[u8], word: &str) -> bool {
    let mut s = sql;
    loop {
        s = skip_blank(s);
        let Some(&first) = s.first() else {
            return false;
        };
        if matches!(first, b'\'' | b'"' | b'`') {
            s = skip_quoted(s);
            continue;
        }
        let (w, rest) = self::word(s);
        if w.is_empty() {
            s = &s[1..];
        } else if is(w, word) {
            return true;
        } else {
            s = rest;
        }
    }
}

fn classify_xa(rest: &[u8]) -> Statement {
    let (verb, ids) = word(rest);
    let xid = || {
        let ids = skip_blank(ids);
        // `XA COMMIT xid ONE PHASE` is an ordinary group; it never reaches here as a
        // separate resolution, but drop the suffix if it does.
        let text = std::str::from_utf8(ids).ok()?;
        let upper = text.to_ascii_uppercase();
        let text = match upper.rfind(" ONE PHASE") {
            Some(at) => &text[..at],
            None => text,
        };
        Xid::parse(text.as_bytes())
    };
    match () {
        _ if is(verb, "START") || is(verb, "BEGIN") => Statement::XaStart,
        _ if is(verb, "END") => Statement::XaEnd,
        _ if is(verb, "COMMIT") => xid().map_or(Statement::XaUnreadable, Statement::XaCommit),
        _ if is(verb, "ROLLBACK") => xid().map_or(Statement::XaUnreadable, Statement::XaRollback),
        _ => Statement::Other,
    }
}

/// Names of tables in a DML statement, as `database.table` (the default database for
/// unqualified names), in the order written, so the first is the one an `INSERT`,
/// `REPLACE`, `UPDATE` or `DELETE FROM` writes. Read outside comments and string
/// literals, SQL keywords and numbers left out; a column name may be among them. Used
/// only to name the outbox table in the stop a statement-logged change causes (the
/// stop happens whatever this finds).
pub fn statement_tables(sql: &[u8], default_db: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut s = sql;
    loop {
        s = skip_blank(s);
        let Some(&first) = s.first() else {
            return names;
        };
        if matches!(first, b'\'' | b'"') {
            s = skip_quoted(s);
            continue;
        }
        let (parts, rest) = qualified_name(s);
        if parts.is_empty() {
            s = &s[1..];
            continue;
        }
        s = rest;
        match parts.as_slice() {
            [one] if is_keyword_or_number(one) => {}
            [one] if !default_db.is_empty() => names.push(format!("{default_db}.{one}")),
            [db, table] => names.push(format!("{db}.{table}")),
            // `db.table.column`: the table is the first two.
            [db, table, ..] => names.push(format!("{db}.{table}")),
            _ => {}
        }
    }
}

/// Skips a quoted literal or name from its opening quote to its closing one (doubled
/// quotes and backslash escapes stay inside).
fn skip_quoted(s: &[u8]) -> &[u8] {
    let quote = s[0];
    let mut i = 1;
    while i < s.len() {
        match s[i] {
            b'\\' if quote != b'`' => i += 2,
            q if q == quote && s.get(i + 1) == Some(&quote) => i += 2,
            q if q == quote => break,
            _ => i += 1,
        }
    }
    s.get(i + 1..).unwrap_or_default()
}

/// `a`, `` `a b`.c ``, `a.b.c`: the parts of a dotted name at the start of `s`, and
/// what follows it; no parts when `s` does not start with a name.
fn qualified_name(mut s: &[u8]) -> (Vec<String>, &[u8]) {
    let mut parts = Vec::new();
    loop {
        let part = if s.first() == Some(&b'`') {
            let rest = skip_quoted(s);
            let inner = &s[1..s.len() - rest.len()]
                .strip_suffix(b"`")
                .unwrap_or_default();
            let name = String::from_utf8_lossy(inner).replace("``", "`");
            s = rest;
            name
        } else {
            let n = s
                .iter()
                .take_while(|b| {
                    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$') || **b >= 0x80
                })
                .count();
            if n == 0 {
                return (parts, s);
            }
            let name = String::from_utf8_lossy(&s[..n]).into_owned();
            s = &s[n..];
            name
        };
        parts.push(part);
        match s.strip_prefix(b".") {
            Some(rest)
                if rest
                    .first()
                    .is_some_and(|b| *b == b'`' || b.is_ascii_alphanumeric() || *b == b'_') =>
            {
                s = rest
            }
            _ => return (parts, s),
        }
    }
}

/// Words of DML statements that are never table names there.
const DML_WORDS: [&str; 58] = [
    "INSERT",
    "REPLACE",
    "UPDATE",
    "DELETE",
    "LOAD",
    "DATA",
    "XML",
    "INFILE",
    "LOCAL",
    "CONCURRENT",
    "INTO",
    "TABLE",
    "FROM",
    "VALUES",
    "VALUE",
    "SET",
    "WHERE",
    "AND",
    "OR",
    "NOT",
    "NULL",
    "IS",
    "IN",
    "LIKE",
    "BETWEEN",
    "SELECT",
    "DO",
    "CALL",
    "WITH",
    "AS",
    "ON",
    "DUPLICATE",
    "KEY",
    "IGNORE",
    "LOW_PRIORITY",
    "HIGH_PRIORITY",
    "DELAYED",
    "QUICK",
    "JOIN",
    "INNER",
    "LEFT",
    "RIGHT",
    "OUTER",
    "CROSS",
    "STRAIGHT_JOIN",
    "USING",
    "ORDER",
    "BY",
    "LIMIT",
    "RETURNING",
    "DEFAULT",
    "TRUE",
    "FALSE",
    "CREATE",
    "TEMPORARY",
    "IF",
    "EXISTS",
    "PARTITION",
];

fn is_keyword_or_number(word: &str) -> bool {
    word.bytes().all(|b| b.is_ascii_digit())
        || DML_WORDS.iter().any(|k| word.eq_ignore_ascii_case(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_in_any_encoding_never_panic() {
        assert_eq!(
            classify("/* 数据 */ CREATE TABLE shop.t (id INT)".as_bytes()),
            Statement::Other
        );
        assert_eq!(
            classify("/* 数据 */ ROLLBACK".as_bytes()),
            Statement::Rollback
        );
        assert_eq!(classify(b"\xff\xfe\x00 COMMIT"), Statement::Other);
        assert_eq!(classify(b"/* unterminated"), Statement::Other);
        assert_eq!(classify("-- 注释\nCOMMIT".as_bytes()), Statement::Commit);
        assert_eq!(
            classify(b"/*!40000 ALTER TABLE t DISABLE KEYS */"),
            Statement::Other
        );
        assert_eq!(
            classify(b"/*M!100101 INSERT INTO t VALUES (1) */"),
            Statement::Dml
        );
        assert_eq!(classify(b"ROLLBACK TO SAVEPOINT a"), Statement::Savepoint);
        assert_eq!(classify(b"rollback /* x */ to a"), Statement::Savepoint);
        assert_eq!(classify(b"START TRANSACTION"), Statement::Begin);
        assert_eq!(classify(b"COMMITTED"), Statement::Other);
    }

    #[test]
    fn every_data_change_logged_as_text_is_dml() {
        for sql in [
            "INSERT INTO orders_t VALUES (1)",
            "LOAD DATA LOCAL INFILE '/tmp/x' INTO TABLE `outbox`",
            "SELECT `shop`.`add_event`(1)",
            "DO shop.f()",
            "WITH x AS (SELECT 1) UPDATE t JOIN x SET t.a = 1",
            "UPDATE a, b SET a.x = 1, b.y = 2",
            "DELETE a FROM a JOIN b USING (id)",
            "CREATE TABLE t2 AS SELECT * FROM t",
            "create or replace temporary table t2 select 1",
            "/*!40000 REPLACE INTO t VALUES (1) */",
        ] {
            assert_eq!(classify(sql.as_bytes()), Statement::Dml, "{sql}");
        }
        for sql in [
            // CREATE TABLE … SELECT logged as rows: the server writes the generated DDL.
            "CREATE TABLE `ctas` (\n  `id` int(11) NOT NULL\n)",
            "CREATE TABLE t (a VARCHAR(10) DEFAULT 'select', `select` INT)",
            "CREATE TABLE t (a INT) COMMENT \"it's a select\"",
            "CREATE VIEW v AS SELECT * FROM outbox",
            "CREATE DEFINER=`root`@`%` TRIGGER tr AFTER INSERT ON t FOR EACH ROW INSERT INTO outbox SELECT 1",
            "ALTER TABLE t ADD COLUMN c INT",
            "SET PASSWORD FOR 'a'@'%' = 'x'",
            "TRUNCATE TABLE t",
        ] {
            assert_eq!(classify(sql.as_bytes()), Statement::Other, "{sql}");
        }
    }

    #[test]
    fn tables_of_a_statement() {
        let t = statement_tables(b"INSERT INTO `shop`.`outbox` (a) VALUES ('x.y')", "app");
        assert_eq!(t, ["shop.outbox", "app.a"]);
        let t = statement_tables(b"insert into outbox values (1)", "shop");
        assert_eq!(t, ["shop.outbox"]);
        // The statement's first word is no table (with a `test.*` pattern it was named).
        let t = statement_tables(
            b"/* app */ INSERT IGNORE INTO outbox (event_id, payload) VALUES ('e.1', \"x y\")",
            "test",
        );
        assert_eq!(t, ["test.outbox", "test.event_id", "test.payload"]);
        let t = statement_tables(
            b"UPDATE LOW_PRIORITY t1 JOIN s.t2 ON t1.id = t2.id SET t1.a = 1",
            "d",
        );
        assert_eq!(t[..2], ["d.t1", "s.t2"]);
        let t = statement_tables(b"DELETE QUICK FROM `my db`.`out``box` WHERE id = 3", "d");
        assert_eq!(t, ["my db.out`box", "d.id"]);
        let t = statement_tables(
            b"LOAD DATA LOCAL INFILE '/tmp/x.csv' INTO TABLE s.outbox",
            "",
        );
        assert_eq!(t, ["s.outbox"]);
        let t = statement_tables(b"/*!40000 INSERT INTO outbox VALUES (1) */", "d");
        assert_eq!(t, ["d.outbox"]);
    }
}
