//! TLS to MariaDB, SASL/PLAIN to Kafka, and secrets kept out of every output.

use std::time::Duration;

use crate::util::*;

/// Turns `require_secure_transport` off again even if the test fails.
struct SecureTransport;

impl SecureTransport {
    fn require() -> Self {
        root_sql("SET GLOBAL require_secure_transport = ON");
        SecureTransport
    }
}

impl Drop for SecureTransport {
    fn drop(&mut self) {
        root_sql("SET GLOBAL require_secure_transport = OFF");
    }
}

/// With require_secure_transport, a router verifying the server certificate streams;
/// one without TLS is refused with an error that names the server and hides the password.
#[tokio::test(flavor = "multi_thread")]
async fn tls_to_mariadb_under_require_secure_transport() {
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, mut setup) = fresh("tls").await;
    let db = setup.db.clone();
    let events: Vec<Ev> = (0..20)
        .map(|i| Ev::new(format!("tls-{i}"), "Order", "a", "{}"))
        .collect();
    insert_txn(&mut conn, &db, &events).await;
    drop(conn);

    let _tls = SecureTransport::require();
    let plain = setup.cli(&["validate"]);
    let text = String::from_utf8_lossy(&plain.stdout).to_string();
    assert_eq!(plain.status.code(), Some(1), "{text}");
    assert!(
        text.contains("FAIL  source connection") && text.contains("127.0.0.1"),
        "{text}"
    );
    assert!(!text.contains("cdc-secret"), "password leaked:\n{text}");

    setup.source_toml = format!(
        "tls_mode = \"verify_identity\"\ntls_ca_file = {:?}\n",
        mariadb_ca()
    );
    let mut router = setup.start_router();
    assert_eq!(
        wait_for_count(&[setup.topic("Order")], 20, Duration::from_secs(60)),
        20,
        "{}",
        router.log()
    );
    let log = router.log();
    assert!(router.stop(Duration::from_secs(30)).success(), "{log}");
    assert!(!log.contains("cdc-secret"), "password leaked:\n{log}");
}

/// The producer authenticates with SASL/PLAIN on the broker's second listener through
/// passed-through librdkafka properties; a wrong password is reported, never printed.
#[tokio::test(flavor = "multi_thread")]
async fn kafka_sasl_plain_through_passed_properties() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("sasl").await;
    let db = setup.db.clone();
    setup.kafka_bootstrap = kafka_sasl_bootstrap();
    let sasl = |password: &str| {
        vec![
            (
                "security.protocol".to_string(),
                "SASL_PLAINTEXT".to_string(),
            ),
            ("sasl.mechanism".to_string(), "PLAIN".to_string()),
            ("sasl.username".to_string(), "alice".to_string()),
            ("sasl.password".to_string(), password.to_string()),
        ]
    };

    setup.kafka_properties = sasl("wrong-secret");
    let out = setup.cli(&["validate"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("FAIL  kafka"), "{text}");
    assert!(!text.contains("wrong-secret"), "password leaked:\n{text}");

    setup.kafka_properties = sasl("alice-secret");
    let out = setup.cli(&["validate"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    insert_txn(
        &mut conn,
        &db,
        &[
            Ev::new("sasl-1", "Order", "a", "{}"),
            Ev::new("sasl-2", "Order", "b", "{}"),
        ],
    )
    .await;
    let mut router = setup.start_router();
    assert_eq!(
        wait_for_count(&[setup.topic("Order")], 2, Duration::from_secs(60)),
        2,
        "{}",
        router.log()
    );
    let log = router.log();
    assert!(router.stop(Duration::from_secs(30)).success(), "{log}");
    for secret in ["alice-secret", "cdc-secret"] {
        assert!(!log.contains(secret), "{secret} leaked:\n{log}");
    }
    let status = String::from_utf8(setup.cli(&["status", "--json"]).stdout).unwrap();
    assert!(
        !status.contains("alice-secret") && !status.contains("cdc-secret"),
        "{status}"
    );
}

/// A misspelt, a Java-only and a malformed Kafka property, each holding a secret from
/// `${env:}`: every command refuses the config naming the property, and no output
/// carries the value (librdkafka's own error text does: `… "sasl.pasword" sasl.pasword
/// VALUE`).
#[tokio::test(flavor = "multi_thread")]
async fn kafka_property_errors_never_print_the_value() {
    let (_conn, mut setup) = fresh("prop_secret").await;
    let canary = format!("canary-{}-kpw", std::process::id());
    let env = [("KPW", canary.as_str())];
    for (key, why) in [
        ("sasl.pasword", "No such configuration property"),
        (
            "sasl.jaas.config",
            "Java JAAS configuration is not supported",
        ),
        ("linger.ms", "Invalid value"),
    ] {
        setup.kafka_properties = vec![(key.to_string(), "${env:KPW}".to_string())];
        for args in [
            &["validate"][..],
            &["run"],
            &["run", "--init"],
            &["checkpoint", "init"],
            &["status"],
            &["status", "--json"],
            &["checkpoint", "show"],
        ] {
            let out = setup.cli_env(args, &env);
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(!out.status.success(), "{key}, {args:?}: {text}");
            assert!(
                !text.contains(&canary),
                "{key}, {args:?} printed the value:\n{text}"
            );
            assert!(
                text.contains(key) && text.contains(why),
                "{key}, {args:?}: {text}"
            );
        }
    }
}

/// Every output a secret could reach, searched for canary values: the database password
/// (`password_env`), Kafka's SASL password (`${env:}`), a key password (`${file:}`) and
/// a secret-named property written inline. The router runs at trace level with
/// librdkafka's debug on; `validate`, `status`, `status --json`, `/status`, `/metrics`,
/// `/ready`, `audit`, `checkpoint show` are asked while it runs and after, with `replay`,
/// `recover`, `reconcile`, `prune`, `checkpoint init`, `health` and `import-debezium`
/// (their runs, dry runs and refusals) once it stopped; then refused
/// authentication (a wrong Kafka password, a wrong database password), an unreachable
/// broker and a panic, each through `validate`, `run` and `status --json`.
#[tokio::test(flavor = "multi_thread")]
async fn canary_secrets_reach_no_output() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("canary").await;
    let db = setup.db.clone();
    let pid = std::process::id();
    let file_canary = format!("canary-file-{pid}");
    let inline_canary = format!("canary-inline-{pid}");
    let wrong_kafka = format!("canary-wrong-kafka-{pid}");
    let wrong_db = format!("canary-wrong-db-{pid}");
    let key_file = setup.dir.path().join("key-password");
    std::fs::write(&key_file, format!("{file_canary}\n")).unwrap();
    let secrets = [
        "cdc-secret",
        "alice-secret",
        file_canary.as_str(),
        inline_canary.as_str(),
        wrong_kafka.as_str(),
        wrong_db.as_str(),
    ];
    let hidden = |what: &str, text: &str| {
        for secret in secrets {
            assert!(!text.contains(secret), "{what} printed {secret}:\n{text}");
        }
    };
    let output = |out: std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    setup.kafka_bootstrap = kafka_sasl_bootstrap();
    setup.kafka_properties = [
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "PLAIN"),
        ("sasl.username", "alice"),
        ("sasl.password", "${env:KPW}"),
        (
            "ssl.key.password",
            &format!("${{file:{}}}", key_file.display()),
        ),
        ("sasl.oauthbearer.client.secret", &inline_canary),
        ("debug", "all"),
        ("log_level", "7"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let trace = ("OUTBOX_ROUTER_LOG", "trace");
    let commands: [&[&str]; 6] = [
        &["validate"],
        &["status"],
        &["status", "--json"],
        &["audit"],
        &["audit", "--json"],
        &["checkpoint", "show", "--json"],
    ];

    // Working: the right passwords.
    let good = [("KPW", "alice-secret"), trace];
    let mut router = setup.start_router_with(&good, &["--init"]);
    insert_txn(
        &mut conn,
        &db,
        &[
            Ev::new("canary-1", "Order", "a", "{}"),
            Ev::new("canary-2", "Order", "b", "{}"),
        ],
    )
    .await;
    assert_eq!(
        wait_for_count(&[setup.topic("Order")], 2, Duration::from_secs(60)),
        2,
        "{}",
        router.log()
    );
    wait_http_ok(setup.monitor_port, "/status", Duration::from_secs(30)).await;
    for path in ["/status", "/metrics", "/ready", "/health"] {
        let (_, body) = http_get(setup.monitor_port, path).await;
        hidden(path, &body);
    }
    for args in commands {
        hidden(
            &format!("{args:?} while running"),
            &output(setup.cli_env(args, &good)),
        );
    }
    let log = router.log();
    assert!(router.stop(Duration::from_secs(30)).success(), "{log}");
    let log = router.log();
    assert!(log.contains("TRACE") && log.contains("librdkafka"), "{log}");
    hidden("run at trace level", &log);
    // Every other command, stopped: the operator commands (a replay for real, so the
    // audit trail holds an entry), their dry runs and their refusals.
    let operator: [&[&str]; 10] = [
        &[
            "replay",
            "--event-id",
            "canary-1",
            "--reason",
            "canary",
            "--by",
            "it",
        ],
        &[
            "replay",
            "--event-id",
            "canary-2",
            "--reason",
            "canary",
            "--dry-run",
        ],
        &["recover", "--since", "1h", "--dry-run"],
        &["reconcile", "--since", "1h"],
        &["reconcile", "--since", "1h", "--json"],
        &["prune", "--older-than", "7d", "--dry-run"],
        &["checkpoint", "init"],
        &["checkpoint", "show"],
        &["health"],
        &["import-debezium", "no-such-connector.json"],
    ];
    for args in commands.iter().chain(operator.iter()) {
        hidden(
            &format!("{args:?} stopped"),
            &output(setup.cli_env(args, &good)),
        );
    }
    let audit = output(setup.cli_env(&["audit", "--json"], &good));
    assert!(
        audit.contains("canary-1"),
        "the replay was audited: {audit}"
    );

    // Refused authentication, an unreachable broker, a wrong database password, a panic.
    let sasl = setup.kafka_bootstrap.clone();
    // Each case with what its `run` must have said (so the path was really taken).
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str, &'a str);
    let failing: [Case; 4] = [
        (
            "refused Kafka authentication",
            vec![("KPW", &wrong_kafka), trace],
            &sasl,
            "Authentication failed",
        ),
        (
            "unreachable broker",
            vec![("KPW", "alice-secret"), trace],
            "127.0.0.1:1",
            "Connection refused",
        ),
        (
            "refused database authentication",
            vec![
                ("KPW", "alice-secret"),
                ("IT_CDC_PASSWORD", &wrong_db),
                trace,
            ],
            &sasl,
            "Access denied",
        ),
        (
            "a panic",
            vec![
                ("KPW", "alice-secret"),
                ("FAILPOINTS", "pipeline.before_first_observation=panic"),
                ("RUST_BACKTRACE", "1"),
                trace,
            ],
            &sasl,
            "panicked",
        ),
    ];
    for (case, env, bootstrap, said) in failing {
        setup.kafka_bootstrap = bootstrap.to_string();
        for args in commands {
            hidden(
                &format!("{case}: {args:?}"),
                &output(setup.cli_env(args, &env)),
            );
        }
        let mut router = setup.start_router_with(&env, &[]);
        if router.wait(Duration::from_secs(8)).is_none() {
            router.stop(Duration::from_secs(30));
        }
        let log = router.log();
        assert!(
            log.contains(said),
            "{case}: run did not say {said:?}:\n{log}"
        );
        hidden(&format!("{case}: run"), &log);
    }
}
