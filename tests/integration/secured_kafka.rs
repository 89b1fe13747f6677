//! The broker's secured listeners (`scripts/services`): SSL with the private CA, mutual
//! TLS, and SASL_SSL with PLAIN and SCRAM-SHA-512, each secret referenced from the
//! environment or a file; a wrong CA, a missing or foreign client certificate and a wrong
//! password are each named by `validate`, and no secret appears in any output.

use std::time::Duration;

use crate::util::*;

/// A secured listener's address: the plaintext port plus `offset` (see scripts/services).
fn secured_bootstrap(offset: u16) -> String {
    let port: u16 = std::env::var("OUTBOX_KAFKA_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(9092);
    format!("127.0.0.1:{}", port + offset)
}

pub(crate) fn ssl_bootstrap() -> String {
    secured_bootstrap(5)
}

fn mtls_bootstrap() -> String {
    secured_bootstrap(6)
}

pub(crate) fn sasl_ssl_bootstrap() -> String {
    secured_bootstrap(7)
}

/// A file of the private CA's directory (`.local/tls`).
pub(crate) fn tls_file(name: &str) -> String {
    let local = std::env::var("OUTBOX_LOCAL_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| repo_root().join(".local"));
    local.join("tls").join(name).display().to_string()
}

fn props(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `validate`'s whole output and whether it passed.
fn validate(setup: &RouterSetup, env: &[(&str, &str)]) -> (bool, String) {
    let out = setup.cli_env(&["validate"], env);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Writes `n` events, runs the router until the topic holds `total`; returns its log and
/// `/status`.
async fn deliver(
    conn: &mut mysql_async::Conn,
    setup: &RouterSetup,
    env: &[(&str, &str)],
    (prefix, n, total): (&str, usize, usize),
) -> (String, String) {
    let events: Vec<Ev> = (0..n)
        .map(|i| Ev::new(format!("{prefix}-{i}"), "Order", "a", "{}"))
        .collect();
    insert_txn(conn, &setup.db, &events).await;
    let mut router = setup.start_router_env(env);
    assert_eq!(
        wait_for_count(
            &[setup.topic("Order")],
            total as i64,
            Duration::from_secs(60)
        ),
        total as i64,
        "{}",
        router.log()
    );
    let status = try_http_get(setup.monitor_port, "/status")
        .await
        .map(|(_, body)| body)
        .unwrap_or_default();
    let log = router.log();
    assert!(router.stop(Duration::from_secs(30)).success(), "{log}");
    (log, status)
}

fn assert_hidden(secrets: &[&str], what: &str, text: &str) {
    for secret in secrets {
        assert!(
            !text.contains(secret),
            "{secret} appears in {what}:\n{text}"
        );
    }
}

/// SSL with the private CA streams; a CA that did not sign the broker's certificate is
/// named by `validate` (librdkafka's handshake failure, not "broker transport failure").
#[tokio::test(flavor = "multi_thread")]
async fn ssl_with_the_private_ca_and_a_wrong_one() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("kafka_ssl").await;
    setup.kafka_bootstrap = ssl_bootstrap();
    let other_ca = tls_file("other-ca.pem");
    setup.kafka_properties = props(&[("security.protocol", "SSL"), ("ssl.ca.location", &other_ca)]);
    let (ok, text) = validate(&setup, &[]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("FAIL  kafka") && text.contains("certificate verify failed"),
        "{text}"
    );
    assert!(
        text.contains("ok    kafka client: librdkafka") && text.contains("ssl"),
        "{text}"
    );

    let ca = tls_file("ca.pem");
    setup.kafka_properties = props(&[("security.protocol", "SSL"), ("ssl.ca.location", &ca)]);
    let (ok, text) = validate(&setup, &[]);
    assert!(ok, "{text}");
    deliver(&mut conn, &setup, &[], ("ssl", 20, 20)).await;
}

/// The mutual-TLS listener: no client certificate, or one of another CA, is refused and
/// named; the router's certificate and key, given as PEM text through `${file:…}`
/// (as a mounted secret would be), stream.
#[tokio::test(flavor = "multi_thread")]
async fn mutual_tls_with_a_client_certificate() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("kafka_mtls").await;
    setup.kafka_bootstrap = mtls_bootstrap();
    let ca = tls_file("ca.pem");
    setup.kafka_properties = props(&[("security.protocol", "SSL"), ("ssl.ca.location", &ca)]);
    let (ok, text) = validate(&setup, &[]);
    assert!(!ok, "no client certificate passed:\n{text}");
    assert!(text.contains("FAIL  kafka"), "{text}");

    let (rogue_cert, rogue_key) = (tls_file("rogue-cert.pem"), tls_file("rogue-key.pem"));
    setup.kafka_properties = props(&[
        ("security.protocol", "SSL"),
        ("ssl.ca.location", &ca),
        ("ssl.certificate.location", &rogue_cert),
        ("ssl.key.location", &rogue_key),
    ]);
    let (ok, text) = validate(&setup, &[]);
    assert!(!ok, "a certificate of another CA passed:\n{text}");
    assert!(text.contains("FAIL  kafka"), "{text}");

    let cert = format!("${{file:{}}}", tls_file("router-cert.pem"));
    let key = format!("${{file:{}}}", tls_file("router-key.pem"));
    setup.kafka_properties = props(&[
        ("security.protocol", "SSL"),
        ("ssl.ca.location", &ca),
        ("ssl.certificate.pem", &cert),
        ("ssl.key.pem", &key),
    ]);
    let (ok, text) = validate(&setup, &[]);
    assert!(ok, "{text}");
    assert!(!text.contains("warn  secrets"), "{text}");
    let key_text = std::fs::read_to_string(tls_file("router-key.pem")).unwrap();
    let key_line = key_text.lines().nth(1).unwrap();
    assert_hidden(&[key_line], "validate", &text);
    let (log, status) = deliver(&mut conn, &setup, &[], ("mtls", 20, 20)).await;
    assert_hidden(&[key_line], "the log", &log);
    assert_hidden(&[key_line], "/status", &status);
}

/// SASL_SSL with SCRAM-SHA-512 (credentials stored at format time) and PLAIN, the
/// password from the environment and from a file. A wrong password is named, never
/// printed; an inline password is warned about by name; no secret reaches the log,
/// `/status` or `validate`.
#[tokio::test(flavor = "multi_thread")]
async fn sasl_ssl_scram_and_plain_with_referenced_secrets() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("kafka_scram").await;
    setup.kafka_bootstrap = sasl_ssl_bootstrap();
    let ca = tls_file("ca.pem");
    let sasl = |mechanism: &str, password: &str| {
        props(&[
            ("security.protocol", "SASL_SSL"),
            ("ssl.ca.location", &ca),
            ("sasl.mechanism", mechanism),
            ("sasl.username", "alice"),
            ("sasl.password", password),
        ])
    };
    let secrets = [
        "alice-scram-secret",
        "alice-secret",
        "cdc-secret",
        "wrong-scram-pw",
    ];

    setup.kafka_properties = sasl("SCRAM-SHA-512", "${env:IT_SCRAM_PASSWORD}");
    let (ok, text) = validate(&setup, &[("IT_SCRAM_PASSWORD", "wrong-scram-pw")]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("FAIL  kafka") && text.contains("Authentication failed"),
        "{text}"
    );
    assert_hidden(&secrets, "validate", &text);
    let (ok, text) = validate(&setup, &[]);
    assert!(!ok, "{text}");
    assert!(
        text.contains(
            r#"kafka.properties."sasl.password": environment variable IT_SCRAM_PASSWORD"#
        ),
        "{text}"
    );

    let env = [("IT_SCRAM_PASSWORD", "alice-scram-secret")];
    let (ok, text) = validate(&setup, &env);
    assert!(ok, "{text}");
    assert!(text.contains("sasl_scram"), "{text}");
    assert_hidden(&secrets, "validate", &text);
    let (log, status) = deliver(&mut conn, &setup, &env, ("scram", 20, 20)).await;
    assert_hidden(&secrets, "the log", &log);
    assert_hidden(&secrets, "/status", &status);
    let status = String::from_utf8(setup.cli(&["status", "--json"]).stdout).unwrap();
    assert_hidden(&secrets, "status --json", &status);

    let file = setup.dir.path().join("kafka-password");
    std::fs::write(&file, "alice-secret\n").unwrap();
    setup.kafka_properties = sasl("PLAIN", &format!("${{file:{}}}", file.display()));
    let (log, _) = deliver(&mut conn, &setup, &[], ("plain", 20, 40)).await;
    assert_hidden(&secrets, "the log", &log);

    // Written inline: it works, and both validate and run say where it is, not what.
    setup.kafka_properties = sasl("PLAIN", "alice-secret");
    let (ok, text) = validate(&setup, &[]);
    assert!(ok, "{text}");
    assert!(
        text.contains(
            r#"warn  secrets: kafka.properties."sasl.password" is written into the config file"#
        ),
        "{text}"
    );
    assert_hidden(&secrets, "validate", &text);
    let (log, _) = deliver(&mut conn, &setup, &[], ("inline", 20, 60)).await;
    assert!(
        log.contains("a secret is written into the config file"),
        "{log}"
    );
    assert_hidden(&secrets, "the log", &log);
}

/// A property this build of librdkafka cannot honour (GSSAPI needs libsasl2, which it
/// is built without) stops `run --init` before it creates the checkpoint store.
#[tokio::test(flavor = "multi_thread")]
async fn an_unusable_kafka_property_stops_run_before_init() {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, mut setup) = fresh("kafka_badprop").await;
    setup.kafka_properties = props(&[
        ("security.protocol", "SASL_SSL"),
        ("sasl.mechanism", "GSSAPI"),
    ]);
    let mut router = setup.start_router_with(&[], &["--init"]);
    let log = router.expect_failure("a SASL mechanism this build lacks");
    assert!(
        log.contains("kafka.properties") && log.contains("GSSAPI"),
        "{log}"
    );
    assert!(
        !setup.dir.path().join("checkpoint").exists(),
        "run --init created the store before failing"
    );
}

/// SASL_SSL with OAUTHBEARER through OIDC client credentials: librdkafka fetches a JWT
/// from the local token endpoint (`scripts/kafka/oidc.py`), the broker validates its
/// signature against the endpoint's JWKS. A wrong client secret is named as the token
/// endpoint's refusal; the secret itself, from the environment, appears nowhere.
#[tokio::test(flavor = "multi_thread")]
async fn sasl_ssl_oauthbearer_with_oidc_client_credentials() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("kafka_oidc").await;
    setup.kafka_bootstrap = sasl_ssl_bootstrap();
    let ca = tls_file("ca.pem");
    let token_url = format!("http://{}/token", secured_bootstrap(8));
    setup.kafka_properties = props(&[
        ("security.protocol", "SASL_SSL"),
        ("ssl.ca.location", &ca),
        ("sasl.mechanism", "OAUTHBEARER"),
        ("sasl.oauthbearer.method", "oidc"),
        ("sasl.oauthbearer.client.id", "router"),
        ("sasl.oauthbearer.client.secret", "${env:IT_OIDC_SECRET}"),
        ("sasl.oauthbearer.token.endpoint.url", &token_url),
    ]);
    let secrets = ["router-oidc-secret", "wrong-oidc-secret", "cdc-secret"];
    let (ok, text) = validate(&setup, &[("IT_OIDC_SECRET", "wrong-oidc-secret")]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("FAIL  kafka")
            && text.contains("OAUTHBEARER token")
            && text.contains("invalid_client"),
        "{text}"
    );
    assert_hidden(&secrets, "validate", &text);

    let env = [("IT_OIDC_SECRET", "router-oidc-secret")];
    let (ok, text) = validate(&setup, &env);
    assert!(ok, "{text}");
    assert!(text.contains("oidc"), "{text}");
    let (log, status) = deliver(&mut conn, &setup, &env, ("oidc", 20, 20)).await;
    assert_hidden(&secrets, "the log", &log);
    assert_hidden(&secrets, "/status", &status);
}
