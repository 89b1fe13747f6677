//! The console as a person uses it: a real headless Chromium (WebDriver) on the
//! monitor's pages, against a real pool of routers on MariaDB and Kafka. Screenshots of
//! each view go under `target/console-screenshots/`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::pool::{finish, streaming_sources, wait_balanced, wait_led, Pool};
use crate::standby::Writer;
use crate::util::*;

/// Tokens of the console's credentials in these tests (from the environment, as a
/// deployment gives them).
const ALICE: &str = "alice-admin-token-7f3e9a1c";
const ROB: &str = "rob-read-token-5d2b8e40";

/// The `[monitor]` section's credentials, as tables under `at` (`monitor.` in a whole
/// file, nothing inside the section).
fn credentials(at: &str) -> String {
    format!(
        "[{at}credentials.alice]\naccess = \"admin\"\ntoken = \"${{env:IT_CONSOLE_ALICE}}\"\n\
         [{at}credentials.rob]\naccess = \"read\"\ntoken = \"${{env:IT_CONSOLE_ROB}}\"\n"
    )
}

const TOKENS: [(&str, &str); 3] = [
    ("IT_CONSOLE_ALICE", ALICE),
    ("IT_CONSOLE_ROB", ROB),
    ("IT_CDC_PASSWORD", "cdc-secret"),
];

/// Which instance streams each source, by each instance's `/metrics`.
async fn leaders(instances: &[(&str, u16)]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (name, port) in instances {
        for source in streaming_sources(*port).await.unwrap_or_default() {
            out.insert(source, name.to_string());
        }
    }
    out
}

/// The fleet table as the page shows it: source → (leader, state).
async fn fleet_rows(browser: &Browser) -> BTreeMap<String, (String, String)> {
    browser
        .rows("#fleet")
        .await
        .into_iter()
        .filter(|cells| cells.len() > 2)
        .map(|cells| (cells[0].clone(), (cells[1].clone(), cells[2].clone())))
        .collect()
}

/// Signs in on the page with `token`; waits until the page names its holder (`who`).
async fn sign_in(browser: &Browser, token: &str, who: &str) {
    browser.fill_and_submit("#token", token).await;
    let named = format!("reading as {who}");
    browser
        .wait_for(
            &format!("{who} signed in"),
            Duration::from_secs(10),
            || async { browser.text("#who").await.as_deref() == Some(named.as_str()) },
        )
        .await;
}

/// Submits the action form `form` with `reason`; waits (at most `within_secs`) for an
/// outcome starting with `outcome`, and returns how long it took.
async fn act_on_page(
    browser: &Browser,
    form: &str,
    reason: &str,
    outcome: &str,
    within_secs: u64,
) -> Duration {
    browser
        .fill_and_submit(&format!("{form} input[name=reason]"), reason)
        .await;
    browser
        .wait_for(
            &format!("{form}'s outcome"),
            Duration::from_secs(within_secs),
            || async {
                browser
                    .text("#outcome")
                    .await
                    .is_some_and(|t| t.starts_with(outcome))
            },
        )
        .await
}

/// Nothing secret in what the browser was given.
fn no_secret(html: &str, what: &str) {
    for secret in ["cdc-secret", ALICE, ROB] {
        assert!(!html.contains(secret), "{what} holds a secret ({secret})");
    }
}

/// A pool of three instances, one source each: any instance's page lists every source
/// with the instance that leads it (as the instances' own metrics say); an instance
/// killed -9, its source shows under its new leader within the takeover time; the
/// source's page shows its members (the dead one stale), its history charts and
/// figures; a wrong credential is refused on the page and a read credential names its
/// holder. No secret in any page. Events flow throughout: 0 lost, 0 duplicates.
#[tokio::test(flavor = "multi_thread")]
async fn the_fleet_page_shows_a_pools_leaders_and_follows_a_takeover() {
    let _settings = SERVER_SETTINGS.read().await;
    let mut pool = Pool::new("con", 3).await;
    pool.monitor_toml = credentials("monitor.");
    let ports = [monitor_port(), monitor_port(), monitor_port()];
    let names = ["a", "b", "c"];
    let start = |i: usize, args: &[&str]| {
        pool.start_file(names[i], &pool.file(names[i], ports[i]), args, &TOKENS)
    };
    let mut a = start(0, &["--init"]);
    wait_led(&ports[..1], &pool.names, &[&a]).await;
    let writers: Vec<Writer> = (0..3).map(|i| pool.writer(i)).collect();
    let mut b = start(1, &[]);
    let mut c = start(2, &[]);
    wait_balanced(&ports, 3, Duration::from_secs(90), &[&a, &b, &c]).await;
    let instances: Vec<(&str, u16)> = names.iter().copied().zip(ports).collect();

    // The page against the instances' own metrics, both read again until they agree:
    // the group may still move a source after the balance was first reached.
    let browser = Browser::start("pool").await;
    browser
        .open(&format!("http://127.0.0.1:{}/console", ports[0]))
        .await;
    let took = browser
        .wait_for(
            "every source under the leader its metrics name",
            Duration::from_secs(60),
            || async {
                let led = leaders(&instances).await;
                let rows = fleet_rows(&browser).await;
                // One each: b (killed below) leads a source.
                let each = ["a", "b", "c"].iter().all(|i| led.values().any(|l| l == i));
                led.len() == 3
                    && each
                    && rows.len() == 3
                    && led.iter().all(|(s, l)| {
                        rows.get(s)
                            .is_some_and(|(leader, state)| leader == l && state == "running")
                    })
            },
        )
        .await;
    let led = leaders(&instances).await;
    println!(
        "console: the fleet page showed all 3 sources under their leaders ({led:?}) after {} ms",
        took.as_millis()
    );
    browser.screenshot("fleet").await;
    no_secret(&browser.html().await, "the fleet page");

    // The instance leading b's source dies; the page (served by a) moves it.
    let victim_source = led
        .iter()
        .find(|(_, l)| *l == "b")
        .map(|(s, _)| s.clone())
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    b.kill9();
    let took = browser
        .wait_for(
            "the dead instance's source under a new leader",
            Duration::from_secs(45),
            || async {
                fleet_rows(&browser)
                    .await
                    .get(&victim_source)
                    .is_some_and(|(leader, state)| {
                        (leader == "a" || leader == "c") && state == "running"
                    })
            },
        )
        .await;
    let moved = leaders(&[("a", ports[0]), ("c", ports[2])]).await;
    println!(
        "console: kill -9 of b; its source {victim_source} shown under {} on the page {} ms later (session timeout 6000 ms)",
        moved[&victim_source],
        took.as_millis(),
    );
    assert!(
        took < Duration::from_secs(30),
        "the page took {took:?} to show the takeover"
    );
    let rows = fleet_rows(&browser).await;
    assert_eq!(
        rows[&victim_source].0, moved[&victim_source],
        "page {rows:?} vs metrics {moved:?}"
    );
    browser.screenshot("fleet-after-takeover").await;

    // The source's own page: its leader, every member (b stale), charts of its last day.
    browser
        .open(&format!(
            "http://127.0.0.1:{}/console/sources/{victim_source}",
            ports[2]
        ))
        .await;
    browser
        .wait_for(
            "the source's page with its members",
            Duration::from_secs(20),
            || async {
                let members = browser.rows("#members").await;
                browser.text("#leader").await.as_deref() == Some(moved[&victim_source].as_str())
                    && members.iter().any(|m| m.first().is_some_and(|i| i == "b"))
            },
        )
        .await;
    let charts = browser
        .client
        .find_all(fantoccini::Locator::Css("figure.chart svg polyline"))
        .await
        .unwrap();
    assert!(!charts.is_empty(), "no chart drew a line");
    browser.screenshot("source").await;
    no_secret(&browser.html().await, "the source page");

    // A wrong credential is refused on the page; a read credential names its holder.
    browser
        .fill_and_submit("#token", "not-a-token-of-anyone")
        .await;
    browser
        .wait_for(
            "the refusal of a wrong credential",
            Duration::from_secs(10),
            || async {
                browser
                    .text("#who")
                    .await
                    .is_some_and(|t| t.contains("not one of monitor.credentials"))
            },
        )
        .await;
    browser.screenshot("wrong-credential").await;
    sign_in(&browser, ROB, "rob (read)").await;
    browser.screenshot("signed-in-as-reader").await;

    // The history behind the charts, as the API gives it.
    let (code, body) = http_get(
        ports[0],
        &format!("/api/v1/sources/{victim_source}/history?hours=1"),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let history: serde_json::Value = serde_json::from_str(&body).unwrap();
    let samples = history["at"].as_array().unwrap().len();
    assert!(samples >= 3, "history {history}");
    println!("console: {samples} history samples of {victim_source} after the takeover, read on a");
    // Read without JavaScript (loopback: no credential needed): the rows are in the HTML.
    let (code, html) = http_get(ports[0], "/console").await;
    assert_eq!(code, 200);
    for s in &pool.names {
        assert!(
            html.contains(&format!("data-source=\"{s}\"")),
            "{s} missing from the page without script"
        );
    }
    browser.close().await;
    finish(&pool, writers, &mut [&mut a, &mut c]).await;
}

/// This machine's first address that is not loopback (the console off loopback).
fn outside_address() -> Option<String> {
    let out = std::process::Command::new("hostname")
        .arg("-I")
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .find(|a| {
            a.parse::<std::net::Ipv4Addr>()
                .is_ok_and(|ip| !ip.is_loopback())
        })
        .map(str::to_string)
}

/// A router whose monitor listens off loopback: probes and scrapes stay open
/// (`/metrics`, `/health`, `/ready`), the console and its API refuse a reader without a
/// credential, refuse credentials over plain HTTP (they would cross the network in the
/// clear), and rate-limit wrong ones; the page served without a credential holds no
/// figures and no secret.
#[tokio::test(flavor = "multi_thread")]
async fn off_loopback_the_console_refuses_what_it_must() {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, mut setup) = fresh("console_off_lo").await;
    let address = outside_address().unwrap_or_else(|| "0.0.0.0".into());
    let port = setup.monitor_port;
    setup.monitor_toml = format!("listen = \"{address}:{port}\"\n{}", credentials(""));
    let mut router = setup.start_router_env(&TOKENS);
    let base = format!(
        "http://{}:{port}",
        if address == "0.0.0.0" {
            "127.0.0.1"
        } else {
            &address
        }
    );
    let http = reqwest::Client::new();
    let get = |path: &str, token: Option<&str>| {
        let mut r = http.get(format!("{base}{path}"));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        async move {
            let resp = r.send().await.expect("the monitor answers");
            (resp.status().as_u16(), resp.text().await.unwrap())
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = http.get(format!("{base}/ready")).send().await;
        if ready.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(Instant::now() < deadline, "not ready:\n{}", router.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Probes and scrapers need no credential (`/status` is 503 before its first
    // observation, never a refusal).
    for open in ["/metrics", "/health", "/ready", "/status"] {
        let (code, body) = get(open, None).await;
        assert!(
            code == 200 || (open == "/status" && code == 503),
            "{open}: {code} {body}"
        );
    }
    let (code, body) = get("/api/v1/fleet", None).await;
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("needs a credential"), "{body}");
    let (code, body) = get("/api/v1/fleet", Some(ROB)).await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("plain HTTP"), "{body}");
    let (code, page) = get("/console", None).await;
    assert_eq!(code, 200);
    assert!(
        page.contains("needs a credential") && !page.contains("data-source"),
        "{page}"
    );
    no_secret(&page, "the page without a credential");
    for path in ["/api/v1/fleet", "/console?fragment=1", "/api/v1/whoami"] {
        let (code, body) = get(path, None).await;
        assert_eq!(code, 401, "{path}: {body}");
        no_secret(&body, path);
    }
    router.stop(Duration::from_secs(30));
    no_secret(&router.log(), "the log");
}

/// Wrong credentials are refused and, past ten a minute, rate-limited even for a right
/// one (on loopback, where reading needs none but a credential sent is checked).
#[tokio::test(flavor = "multi_thread")]
async fn wrong_credentials_are_refused_and_rate_limited() {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, mut setup) = fresh("console_creds").await;
    setup.monitor_toml = credentials("");
    let mut router = setup.start_router_env(&TOKENS);
    let port = setup.monitor_port;
    wait_http_ok(port, "/api/v1/fleet", Duration::from_secs(60)).await;
    let http = reqwest::Client::new();
    let whoami = |token: &str| {
        let r = http
            .get(format!("http://127.0.0.1:{port}/api/v1/whoami"))
            .bearer_auth(token);
        async move {
            let resp = r.send().await.unwrap();
            (resp.status().as_u16(), resp.text().await.unwrap())
        }
    };
    let (code, body) = whoami(ALICE).await;
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("\"alice\"") && body.contains("admin"),
        "{body}"
    );
    for i in 0..10 {
        let (code, body) = whoami(&format!("{ALICE}x{i}")).await;
        assert_eq!(code, 401, "{body}");
        assert!(!body.contains(ALICE), "a refusal repeats the token: {body}");
    }
    let (code, body) = whoami(ALICE).await;
    assert_eq!(code, 429, "{body}");
    router.stop(Duration::from_secs(30));
}

/// POSTs an action as `token` (none: no credential); (status, body).
async fn act(port: u16, path: &str, token: Option<&str>, reason: &str) -> (u16, serde_json::Value) {
    let mut r = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}{path}"))
        .json(&serde_json::json!({ "reason": reason }));
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let resp = r.send().await.expect("the monitor answers");
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap_or_default())
}

/// A pool's source paused from the page by an admin: its leader drains and stops, the
/// page shows it paused, nothing reaches its topics while the writers go on and its
/// checkpoint stays where it stopped; the leader killed -9, the other instance takes
/// the lock and stays paused (a pause is the fleet's, on the control topic); resumed
/// from the page, every event arrives once (exactly-once: 0 lost, 0 duplicates). A
/// reader's or no credential is refused, and a pause without a reason; the audit page
/// lists the pause and the resume with who and why.
#[tokio::test(flavor = "multi_thread")]
async fn a_pause_from_the_page_holds_across_a_takeover_until_resumed() {
    let _settings = SERVER_SETTINGS.read().await;
    let mut pool = Pool::new("pause", 1).await;
    pool.monitor_toml = credentials("monitor.");
    let ports = [monitor_port(), monitor_port()];
    let names = ["a", "b"];
    let start = |i: usize, args: &[&str]| {
        pool.start_file(names[i], &pool.file(names[i], ports[i]), args, &TOKENS)
    };
    let mut a = start(0, &["--init"]);
    wait_led(&ports[..1], &pool.names, &[&a]).await;
    let writers = vec![pool.writer(0)];
    let mut b = start(1, &[]);
    wait_http_ok(ports[1], "/health", Duration::from_secs(30)).await;
    let source = pool.names[0].clone();
    let path = format!("/api/v1/sources/{source}/pause");

    // Refusals first: no credential, a reader's, no reason.
    let (code, body) = act(ports[1], &path, None, "x").await;
    assert_eq!(code, 401, "{body}");
    let (code, body) = act(ports[1], &path, Some(ROB), "x").await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("may only read"),
        "{body}"
    );
    let (code, body) = act(ports[1], &path, Some(ALICE), "  ").await;
    assert_eq!(code, 400, "{body}");

    // Paused from b's page (a leads): the action reaches the leader through the fleet.
    let browser = Browser::start("pause").await;
    browser
        .open(&format!(
            "http://127.0.0.1:{}/console/sources/{source}",
            ports[1]
        ))
        .await;
    sign_in(&browser, ALICE, "alice (admin)").await;
    browser
        .wait_for("the pause form", Duration::from_secs(20), || async {
            browser.text("#pause button").await.as_deref() == Some("pause")
        })
        .await;
    let took = act_on_page(
        &browser,
        "#pause",
        "consumer team deploys a fix",
        "paused: a stopped streaming at",
        40,
    )
    .await;
    println!(
        "console: pause from the page confirmed by the leader after {} ms: {:?}",
        took.as_millis(),
        browser.text("#outcome").await
    );
    browser
        .wait_for(
            "the source shown paused",
            Duration::from_secs(10),
            || async { browser.text("#state").await.as_deref() == Some("paused") },
        )
        .await;
    browser.screenshot("paused").await;

    // Nothing moves while paused, across a takeover.
    let topics = pool.topics(0);
    let still = |what: &'static str| {
        let topics = topics.clone();
        async move {
            let before = count(&topics);
            tokio::time::sleep(Duration::from_secs(5)).await;
            let after = count(&topics);
            assert_eq!(
                before, after,
                "records reached the topics while paused ({what})"
            );
            after
        }
    };
    let held = still("leader a").await;
    a.kill9();
    let (code, body) = http_get(ports[1], &format!("/api/v1/sources/{source}")).await;
    assert_eq!(code, 200, "{body}");
    browser
        .wait_for(
            "b leading the paused source",
            Duration::from_secs(40),
            || async {
                let (_, body) = http_get(ports[1], &format!("/api/v1/sources/{source}")).await;
                let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                v["source"]["leader"] == "b" && v["source"]["state"] == "paused"
            },
        )
        .await;
    assert_eq!(still("after the takeover, b").await, held);
    assert!(b.log().contains("paused by an operator"), "{}", b.log());
    browser.screenshot("paused-after-takeover").await;

    // Resumed from the page: b streams from where a stopped.
    browser
        .open(&format!(
            "http://127.0.0.1:{}/console/sources/{source}",
            ports[1]
        ))
        .await;
    browser
        .wait_for("the resume form", Duration::from_secs(20), || async {
            browser.text("#resume button").await.as_deref() == Some("resume")
        })
        .await;
    act_on_page(
        &browser,
        "#resume",
        "fix deployed",
        "resumed: b streams from",
        40,
    )
    .await;
    browser
        .open(&format!("http://127.0.0.1:{}/console/audit", ports[1]))
        .await;
    browser
        .wait_for(
            "the pause and resume in the audit",
            Duration::from_secs(10),
            || async {
                let rows = browser.rows("#audit").await;
                let has = |action: &str, reason: &str| {
                    rows.iter().any(|r| {
                        r.len() > 4
                            && r[1] == "alice"
                            && r[2] == action
                            && r[3] == source
                            && r[4] == reason
                    })
                };
                has("pause", "consumer team deploys a fix") && has("resume", "fix deployed")
            },
        )
        .await;
    browser.screenshot("audit").await;
    no_secret(&browser.html().await, "the audit page");
    browser.close().await;
    finish(&pool, writers, &mut [&mut b]).await;
}

/// A private broker of this test's own, to freeze (others: 9292, 9392, 9592).
const FROZEN_KAFKA_PORT: u16 = 9692;

/// Seconds in a duration as the page writes it ("0.4 s", "12 s", "3 min", "1.5 h").
fn secs_of(text: &str) -> Option<f64> {
    let (n, unit) = text.trim().split_once(' ')?;
    let n: f64 = n.parse().ok()?;
    Some(match unit {
        "s" => n,
        "min" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86_400.0,
        _ => return None,
    })
}

/// The fleet page's lag of the only source (seconds), if it shows one.
async fn lag_on_page(browser: &Browser) -> Option<f64> {
    let rows = browser.rows("#fleet").await;
    rows.first().and_then(|r| r.get(3)).and_then(|t| secs_of(t))
}

/// Kafka frozen (SIGSTOP: a long GC pause, a stalled VM) while events keep coming: the
/// fleet page, refreshed by its script, shows the lag rising; Kafka back, it falls
/// again. Every event arrives (0 lost).
#[tokio::test(flavor = "multi_thread")]
async fn lag_rises_on_the_page_while_kafka_is_frozen_and_falls_after() {
    let _settings = SERVER_SETTINGS.read().await;
    let broker = PrivateBroker::new(FROZEN_KAFKA_PORT);
    broker.wipe();
    broker.services("up");
    let (_conn, mut setup) = fresh("console_frozen").await;
    setup.kafka_bootstrap = broker.bootstrap();
    let kafka = Kafka::at(&broker.bootstrap());
    let mut router = setup.start_router();
    wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(60)).await;
    let writer = Writer::start(&setup.db);
    let browser = Browser::start("frozen").await;
    browser
        .open(&format!("http://127.0.0.1:{}/console", setup.monitor_port))
        .await;
    browser
        .wait_for(
            "a lag under 3 s while Kafka answers",
            Duration::from_secs(60),
            || async { lag_on_page(&browser).await.is_some_and(|l| l < 3.0) },
        )
        .await;
    browser.screenshot("lag-before").await;

    broker.signal("-STOP");
    let rose = browser
        .wait_for(
            "the lag rising past 8 s while Kafka is frozen",
            Duration::from_secs(40),
            || async { lag_on_page(&browser).await.is_some_and(|l| l >= 8.0) },
        )
        .await;
    let peak = lag_on_page(&browser).await;
    browser.screenshot("lag-while-frozen").await;
    broker.signal("-CONT");
    let fell = browser
        .wait_for(
            "the lag falling under 3 s once Kafka answers",
            Duration::from_secs(90),
            || async { lag_on_page(&browser).await.is_some_and(|l| l < 3.0) },
        )
        .await;
    browser.screenshot("lag-after").await;
    println!(
        "console: Kafka frozen: the page showed the lag past 8 s after {} ms (then {peak:?} s); Kafka back, under 3 s after {} ms",
        rose.as_millis(),
        fell.as_millis()
    );
    browser.close().await;
    let total = writer.stop().await;
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    kafka.wait_for_count(&topics, total as i64, Duration::from_secs(120));
    assert!(router.stop(Duration::from_secs(30)).success());
    let ids: std::collections::BTreeSet<String> =
        kafka.read_all(&topics).iter().map(|m| m.id()).collect();
    assert_eq!(ids.len(), total, "lost events:\n{}", router.log());
    println!("console: Kafka frozen: {total} events, 0 lost");
}

/// An event found by id from the source's page (its form works without script too):
/// the page shows its outbox row and its record's partition and offset, as a consumer
/// reads them — found through the key's partition from the row's time, not by reading
/// the topic whole (6 partitions, 3,000 events). An id no row has is said to be absent
/// (never written, or pruned). Replayed from its page by an admin: the same event id
/// is published once more, with the replay's id in its replay header, and the audit
/// page names who and why.
#[tokio::test(flavor = "multi_thread")]
async fn an_event_is_found_by_id_and_replayed_from_its_page() {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, mut setup) = fresh("console_lookup").await;
    let prefix = setup.topic_prefix.clone();
    setup.extra_toml = format!("[[kafka.topics.rule]]\npattern = \"{prefix}.*\"\npartitions = 6\n");
    setup.columns_toml = "timestamp = \"created_at\"".into();
    setup.monitor_toml = credentials("");
    let mut router = setup.start_router_env(&TOKENS);
    wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(60)).await;
    crate::crash::write_mixed(&setup.db, 0, 3_000, 40).await;
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    assert_eq!(
        wait_for_ids(&topics, 3_000, Duration::from_secs(120)),
        3_000
    );
    let all = read_all(&topics);
    let source = "router";
    let browser = Browser::start("lookup").await;
    for pick in [7, 1_501, 2_999] {
        let id = format!("s-{pick}");
        let msg = all.iter().find(|m| m.id() == id).expect("written");
        browser
            .open(&format!(
                "http://127.0.0.1:{}/console/sources/{source}",
                setup.monitor_port
            ))
            .await;
        browser.fill_and_submit("#lookup input[name=id]", &id).await;
        browser
            .wait_for("the event's record", Duration::from_secs(30), || async {
                browser.text("#record-offset").await.is_some()
                    || browser.text("#not-found").await.is_some()
                    || browser.text("#lookup-error").await.is_some()
            })
            .await;
        let (partition, offset) = (
            browser.text("#record-partition").await,
            browser.text("#record-offset").await,
        );
        assert_eq!(
            (partition.as_deref(), offset.as_deref()),
            (
                Some(msg.partition.to_string().as_str()),
                Some(msg.offset.to_string().as_str())
            ),
            "{id}: the page shows {:?}",
            browser.text("main").await
        );
        assert_eq!(
            browser.text("#record-topic").await.as_deref(),
            Some(msg.topic.as_str())
        );
        println!(
            "console: {id} found on the page at {}/{}/{}",
            msg.topic, msg.partition, msg.offset
        );
    }
    browser.screenshot("event").await;
    no_secret(&browser.html().await, "the event page");

    // Replayed from its page, as alice.
    sign_in(&browser, ALICE, "alice (admin)").await;
    act_on_page(
        &browser,
        "#replay",
        "consumer lost it",
        "replayed 1 record(s) (completed",
        60,
    )
    .await;
    let said = browser.text("#outcome").await.unwrap();
    let replay_id = said
        .rsplit("replay id ")
        .next()
        .unwrap()
        .trim_end_matches(')')
        .to_string();
    browser.screenshot("replayed").await;
    let copies: Vec<Msg> = read_all(&topics)
        .into_iter()
        .filter(|m| m.id() == "s-2999")
        .collect();
    assert_eq!(copies.len(), 2, "s-2999 published once more: {copies:?}");
    assert_eq!(
        copies
            .iter()
            .filter_map(|m| m.headers.get("replay"))
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect::<Vec<_>>(),
        vec![replay_id.clone()],
        "the replayed copy names the replay"
    );
    browser
        .open(&format!(
            "http://127.0.0.1:{}/console/audit",
            setup.monitor_port
        ))
        .await;
    browser
        .wait_for(
            "the replay in the audit",
            Duration::from_secs(20),
            || async {
                browser.rows("#audit").await.iter().any(|r| {
                    r.len() > 5
                        && r[1] == "alice"
                        && r[2] == "replay"
                        && r[4] == "consumer lost it"
                        && r[5] == replay_id
                })
            },
        )
        .await;
    browser.screenshot("audit-replay").await;
    println!("console: s-2999 replayed from its page as alice: {said}");
    // No row of that id: said so, without a search of the topics.
    let (code, body) = http_get(
        setup.monitor_port,
        &format!("/api/v1/sources/{source}/events/never-written"),
    )
    .await;
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("never written, or pruned"), "{body}");
    browser.close().await;
    assert!(router.stop(Duration::from_secs(30)).success());
}

/// The monitor off loopback (all addresses) over TLS with a certificate of the local
/// private CA: no credential is still refused, a reader's credential reads and an
/// admin's is named, the probes answer over https, and plain HTTP gets no answer.
#[tokio::test(flavor = "multi_thread")]
async fn off_loopback_over_tls_a_credential_reads_and_acts() {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, mut setup) = fresh("console_tls").await;
    let tls = repo_root().join(".local/tls");
    let port = setup.monitor_port;
    setup.monitor_toml = format!(
        "listen = \"0.0.0.0:{port}\"\n{}[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        credentials(""),
        tls.join("server-cert.pem").display(),
        tls.join("server-key.pem").display(),
    );
    let mut router = setup.start_router_env(&TOKENS);
    let ca = reqwest::Certificate::from_pem(&std::fs::read(tls.join("ca.pem")).unwrap()).unwrap();
    let https = reqwest::Client::builder()
        .add_root_certificate(ca)
        .build()
        .unwrap();
    let get = |path: &str, token: Option<&str>| {
        let mut r = https.get(format!("https://127.0.0.1:{port}{path}"));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        async move {
            match r.send().await {
                Ok(resp) => Some((
                    resp.status().as_u16(),
                    resp.text().await.unwrap_or_default(),
                )),
                Err(_) => None,
            }
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while get("/ready", None).await.map(|(c, _)| c) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "not ready over https:\n{}",
            router.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(get("/metrics", None).await.unwrap().0, 200);
    let (code, body) = get("/api/v1/fleet", None).await.unwrap();
    assert_eq!(code, 401, "{body}");
    let (code, body) = get("/api/v1/fleet", Some(ROB)).await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"router\""), "{body}");
    let (code, body) = get("/api/v1/whoami", Some(ALICE)).await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("\"alice\"") && body.contains("admin"),
        "{body}"
    );
    // Plain HTTP on the TLS port: no answer a client could take for the console's.
    let plain = reqwest::get(format!("http://127.0.0.1:{port}/api/v1/fleet")).await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
    assert!(router.stop(Duration::from_secs(30)).success());
    no_secret(&router.log(), "the log");
}
