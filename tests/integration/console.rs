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
/// outcome that says `outcome` (a leader's answer begins with its name), and returns how long it took.
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
                    .is_some_and(|t| t.contains(outcome))
            },
        )
        .await
}

/// Opens the audit page on `port` and waits (at most 20 s) until its rows satisfy `rows`.
async fn wait_audit(
    browser: &Browser,
    port: u16,
    what: &str,
    rows: impl Fn(&[Vec<String>]) -> bool,
) {
    browser
        .open(&format!("http://127.0.0.1:{port}/console/audit"))
        .await;
    browser
        .wait_for(what, Duration::from_secs(20), || async {
            rows(&browser.rows("#audit").await)
        })
        .await;
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
    // What each side said last, for the message when they never agree.
    let last = std::sync::Mutex::new(String::new());
    let took = browser
        .wait_for(
            "every source under the leader its metrics name",
            Duration::from_secs(90),
            || async {
                let led = leaders(&instances).await;
                let rows = fleet_rows(&browser).await;
                let now = format!("metrics {led:?} / page {rows:?}");
                let mut last = last.lock().unwrap();
                if *last != now {
                    // Shown when the test fails: what each side said, as it changed.
                    eprintln!("{now}");
                    *last = now;
                }
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
    println!("console: {}", last.lock().unwrap());
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
    post(port, path, token, serde_json::json!({ "reason": reason })).await
}

/// POSTs `body` as `token` (none: no credential); (status, body).
async fn post(
    port: u16,
    path: &str,
    token: Option<&str>,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let mut r = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}{path}"))
        .json(&body);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let resp = r.send().await.expect("the monitor answers");
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap_or_default())
}

/// A pool's source paused from the page by an admin: its leader drains and stops, the
/// page shows it paused, nothing reaches its topics while the writers go on and its
/// checkpoint stays where it stopped, while the pool's other source goes on; the leader
/// killed -9, the other instance takes the lock and stays paused (a pause is the
/// fleet's, on the control topic); resumed
/// from the page, every event arrives once (exactly-once: 0 lost, 0 duplicates). A
/// reader's or no credential is refused, and a pause without a reason; the audit page
/// lists the pause and the resume with who and why.
#[tokio::test(flavor = "multi_thread")]
async fn a_pause_from_the_page_holds_across_a_takeover_until_resumed() {
    let _settings = SERVER_SETTINGS.read().await;
    // Two sources: the one paused, and one that goes on (one control-topic consumer
    // per process serves both).
    let mut pool = Pool::new("pause", 2).await;
    pool.monitor_toml = credentials("monitor.");
    let ports = [monitor_port(), monitor_port()];
    let names = ["a", "b"];
    let start = |i: usize, args: &[&str]| {
        pool.start_file(names[i], &pool.file(names[i], ports[i]), args, &TOKENS)
    };
    let a = start(0, &["--init"]);
    wait_led(&ports[..1], &pool.names, &[&a]).await;
    let writers = vec![pool.writer(0), pool.writer(1)];
    let b = start(1, &[]);
    wait_http_ok(ports[1], "/health", Duration::from_secs(30)).await;
    wait_balanced(&ports, 2, Duration::from_secs(90), &[&a, &b]).await;
    let mut instances = [a, b];
    let source = pool.names[0].clone();
    let led = leaders(&[("a", ports[0]), ("b", ports[1])]).await;
    let leader = if led[&source] == "a" { 0 } else { 1 };
    let other = 1 - leader;
    let path = format!("/api/v1/sources/{source}/pause");

    // Refusals first: no credential, a reader's, no reason.
    let (code, body) = act(ports[other], &path, None, "x").await;
    assert_eq!(code, 401, "{body}");
    let (code, body) = act(ports[other], &path, Some(ROB), "x").await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("may only read"),
        "{body}"
    );
    let (code, body) = act(ports[other], &path, Some(ALICE), "  ").await;
    assert_eq!(code, 400, "{body}");

    // Paused from the page of the instance that does not lead it: the action reaches
    // the leader through the fleet.
    let browser = Browser::start("pause").await;
    let page = format!("http://127.0.0.1:{}/console/sources/{source}", ports[other]);
    browser.open(&page).await;
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
        &format!("paused: {} stopped streaming at", names[leader]),
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

    // Nothing moves while paused, across a takeover; the other source goes on.
    let (topics, others) = (pool.topics(0), pool.topics(1));
    let still = |what: &'static str| {
        let (topics, others) = (topics.clone(), others.clone());
        async move {
            let (before, other_before) = (count(&topics), count(&others));
            tokio::time::sleep(Duration::from_secs(5)).await;
            let (after, other_after) = (count(&topics), count(&others));
            assert_eq!(
                before, after,
                "records reached the topics while paused ({what})"
            );
            assert!(
                other_after > other_before,
                "the source not paused stopped too ({what}): {other_before} → {other_after}"
            );
            after
        }
    };
    let held = still("the first leader").await;
    instances[leader].kill9();
    let survivor = names[other];
    browser
        .wait_for(
            "the survivor leading the paused source",
            Duration::from_secs(40),
            || async {
                let (_, body) = http_get(ports[other], &format!("/api/v1/sources/{source}")).await;
                let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                v["source"]["leader"] == survivor && v["source"]["state"] == "paused"
            },
        )
        .await;
    wait_led(
        &ports[other..=other],
        &pool.names[1..],
        &[&instances[other]],
    )
    .await;
    assert_eq!(still("after the takeover").await, held);
    assert!(
        instances[other].log().contains("paused by an operator"),
        "{}",
        instances[other].log()
    );
    browser.screenshot("paused-after-takeover").await;

    // Resumed from the page: the survivor streams from where the first leader stopped.
    browser.open(&page).await;
    browser
        .wait_for("the resume form", Duration::from_secs(20), || async {
            browser.text("#resume button").await.as_deref() == Some("resume")
        })
        .await;
    act_on_page(
        &browser,
        "#resume",
        "fix deployed",
        &format!("resumed: {survivor} streams from"),
        40,
    )
    .await;
    browser
        .open(&format!("http://127.0.0.1:{}/console/audit", ports[other]))
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
    let [a, b] = &mut instances;
    let survivor = if other == 0 { a } else { b };
    finish(&pool, writers, &mut [survivor]).await;
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
    wait_audit(
        &browser,
        setup.monitor_port,
        "the replay in the audit",
        |rows| {
            rows.iter().any(|r| {
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

    // A window from the source's page: counted first (a dry run), then replayed.
    browser
        .open(&format!(
            "http://127.0.0.1:{}/console/sources/{source}",
            setup.monitor_port
        ))
        .await;
    let k7: Vec<String> = (0..3_000)
        .filter(|s| s % 40 == 7)
        .map(|s| format!("s-{s}"))
        .collect();
    let window = |dry: bool| {
        let browser = &browser;
        async move {
            browser.fill("#replay-window input[name=since]", "1h").await;
            browser
                .fill("#replay-window input[name=aggregate_id]", "k-7")
                .await;
            if !dry {
                browser.click("#replay-window input[name=dry_run]").await;
            }
        }
    };
    window(true).await;
    act_on_page(
        &browser,
        "#replay-window",
        "how many for k-7",
        &format!("dry run: {} record(s) would be replayed", k7.len()),
        60,
    )
    .await;
    assert_eq!(read_all(&topics).len(), 3_001, "a dry run sends nothing");
    window(false).await;
    act_on_page(
        &browser,
        "#replay-window",
        "k-7's consumer rebuilt",
        &format!("replayed {} record(s) (completed", k7.len()),
        60,
    )
    .await;
    let all = read_all(&topics);
    for id in &k7 {
        let copies: Vec<&Msg> = all.iter().filter(|m| &m.id() == id).collect();
        assert_eq!(copies.len(), 2, "{id} once more");
    }
    assert_eq!(all.len(), 3_001 + k7.len(), "the window and nothing else");
    browser.screenshot("replayed-window").await;
    wait_audit(
        &browser,
        setup.monitor_port,
        "the window in the audit",
        |rows| {
            rows.iter().any(|r| {
                r.len() > 6
                    && r[4] == "k-7's consumer rebuilt"
                    && r[6].starts_with("since 1h, aggregate k-7")
            })
        },
    )
    .await;
    println!(
        "console: a window of {} events (k-7, last hour) replayed from the page",
        k7.len()
    );
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

    // The commands that ask a running router, over https: health, status, and fleet
    // through the API with a credential from the environment.
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let out = setup.cli_env(&["health", "--ready"], &TOKENS);
    assert!(out.status.success(), "{}", text(&out));
    // `status` asks the router's own /status over https (its first observation may
    // take a moment: "starting" until then).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = setup.cli_env(&["status", "--json"], &TOKENS);
        if text(&out).contains("\"router\": \"running\"") {
            break;
        }
        assert!(Instant::now() < deadline, "{}", text(&out));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let url = format!("https://127.0.0.1:{port}");
    let ca = tls.join("ca.pem");
    let fleet = |token: Option<&str>, trust: bool| {
        let mut env = TOKENS.to_vec();
        env.extend(token.map(|t| ("OUTBOX_ROUTER_TOKEN", t)));
        let mut args = vec!["fleet", "--url", url.as_str()];
        if trust {
            args.extend(["--ca-file", ca.to_str().unwrap()]);
        }
        setup.cli_env(&args, &env)
    };
    let out = fleet(None, true);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("401"), "{}", text(&out));
    let out = fleet(Some(ROB), false);
    assert_eq!(
        out.status.code(),
        Some(3),
        "an untrusted certificate: {}",
        text(&out)
    );
    // Running, once the router's report says so (its first says starting).
    let deadline = Instant::now() + Duration::from_secs(30);
    let out = loop {
        let out = fleet(Some(ROB), true);
        if out.status.code() == Some(0) || Instant::now() > deadline {
            break out;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let shown = text(&out);
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("router ") && l.contains(" running ")),
        "{shown}"
    );
    no_secret(&shown, "fleet's output");
    println!("console: `outbox-router fleet` over https:\n{shown}");
    assert!(router.stop(Duration::from_secs(30)).success());
    no_secret(&router.log(), "the log");
}

/// Ordered parking on the page of a standby pair. The leader parks 10 bad aggregates;
/// the standby's page lists them (the API pages them); a release without a credential,
/// with a reader's, without a reason or of an aggregate that is not parked is refused;
/// after the rows are fixed, alice releases four from the standby's page and the leader
/// carries it out (the page then lists six), the other six through the API. Every event
/// reaches its topic once, each aggregate in order; the audit page names who and why.
#[tokio::test(flavor = "multi_thread")]
async fn parked_aggregates_are_listed_and_released_from_the_page() {
    use crate::parking::*;
    let _settings = SERVER_SETTINGS.read().await;
    // Four events per aggregate: the bad ones parked from their third.
    let total = 4 * AGGREGATES;
    let mut p = crate::standby::pair("console_park").await;
    let mut conn = app_conn().await;
    allow_untyped(&mut conn, &p.a.db).await;
    let parked = parking(&mut p.a);
    assert_eq!(parking(&mut p.b), parked);
    p.a.monitor_toml = credentials("");
    p.b.monitor_toml = credentials("");
    let destination = p.a.topic("Order");
    let topics = [destination.clone(), parked.clone()];
    let kafka = Kafka::local();
    let mut a = p.a.start_router_env(&TOKENS);
    crate::standby::wait_streaming(p.a.monitor_port, Duration::from_secs(60), &a).await;
    let mut b = p.b.start_router_env(&TOKENS);
    crate::standby::wait_standby_ready(p.b.monitor_port, &b).await;
    write_events(&p.a.db, 0, total, total).await;
    wait_all(&kafka, &topics, total, &a);
    fix_bad_rows(&p.a.db, total).await;

    let port = p.b.monitor_port;
    let (_, fleet) = http_get(port, "/api/v1/fleet").await;
    let fleet: serde_json::Value = serde_json::from_str(&fleet).unwrap();
    let source = fleet["items"][0]["source"].as_str().unwrap().to_string();
    // Paged: 10 parked, 4 a page.
    let (code, body) = http_get(
        port,
        &format!("/api/v1/sources/{source}/parked?per_page=4&page=3"),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["total"].as_u64(), v["pages"].as_u64()),
        (Some(10), Some(3)),
        "{v}"
    );
    assert_eq!(v["items"].as_array().unwrap().len(), 2, "{v}");

    // Refusals, each saying why; nothing released.
    let path = format!("/api/v1/sources/{source}/parked/release");
    let ask =
        |ids: &str, reason: &str| serde_json::json!({ "aggregate_ids": ids, "reason": reason });
    let (code, body) = post(port, &path, None, ask("k-3", "x")).await;
    assert_eq!(code, 401, "{body}");
    let (code, body) = post(port, &path, Some(ROB), ask("k-3", "x")).await;
    assert_eq!(code, 403, "{body}");
    let (code, body) = post(port, &path, Some(ALICE), ask("k-3", " ")).await;
    assert_eq!(code, 400, "{body}");
    let (code, body) = post(port, &path, Some(ALICE), ask("k-4", "x")).await;
    assert_eq!(code, 409, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("\"k-4\" is not parked"),
        "{body}"
    );

    let browser = Browser::start("parked").await;
    browser
        .open(&format!("http://127.0.0.1:{port}/console/sources/{source}"))
        .await;
    browser
        .wait_for("the parked link", Duration::from_secs(20), || async {
            browser.text("#parked-link").await.is_some()
        })
        .await;
    browser
        .open(&format!(
            "http://127.0.0.1:{port}/console/sources/{source}/parked"
        ))
        .await;
    let listed = |rows: Vec<Vec<String>>| -> Vec<(String, String)> {
        rows.into_iter()
            .filter(|r| r.len() > 3)
            .map(|r| (r[2].clone(), r[3].clone()))
            .collect()
    };
    let mut shown = listed(browser.rows("#parked").await);
    shown.sort();
    let mut expected: Vec<(String, String)> = bad_ids()
        .into_iter()
        .map(|id| (id, "2".to_string()))
        .collect();
    expected.sort();
    assert_eq!(shown, expected, "the parked page");
    browser.screenshot("parked").await;
    no_secret(&browser.html().await, "the parked page");

    sign_in(&browser, ALICE, "alice (admin)").await;
    let first: Vec<String> = bad_ids().into_iter().take(4).collect();
    browser
        .fill("#release input[name=aggregate_ids]", &first.join(" "))
        .await;
    let took = act_on_page(
        &browser,
        "#release",
        "event_type fixed",
        "released 4 of 4",
        90,
    )
    .await;
    println!(
        "console: 4 aggregates released from the standby's page by the leader after {} ms: {:?}",
        took.as_millis(),
        browser.text("#outcome").await
    );
    browser
        .wait_for("six left on the page", Duration::from_secs(20), || async {
            browser.text("#parked-total").await.as_deref() == Some("6")
        })
        .await;
    let left: Vec<String> = listed(browser.rows("#parked").await)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert!(left.iter().all(|id| !first.contains(id)), "{left:?}");
    browser.screenshot("released").await;

    let rest: Vec<String> = bad_ids().into_iter().skip(4).collect();
    let (code, body) = post(port, &path, Some(ALICE), ask(&rest.join(","), "the rest")).await;
    assert_eq!(code, 200, "{body}");
    assert!(
        body["outcome"]
            .as_str()
            .unwrap()
            .starts_with("released 6 of 6"),
        "{body}"
    );
    let duplicates = check_released(&kafka, &destination, total);
    assert_eq!(duplicates, 0, "no crash, no duplicate");
    // The leader carried it out, not the instance whose page it was sent from.
    assert_eq!(
        a.log().matches("aggregate un-parked").count(),
        10,
        "{}",
        a.log()
    );
    assert!(!b.log().contains("aggregate un-parked"), "{}", b.log());

    browser
        .open(&format!("http://127.0.0.1:{port}/console/audit"))
        .await;
    browser
        .wait_for(
            "the releases in the audit",
            Duration::from_secs(20),
            || async {
                let rows = browser.rows("#audit").await;
                let has = |reason: &str| {
                    rows.iter().any(|r| {
                        r.len() > 4
                            && r[1] == "alice"
                            && r[2] == "parked release"
                            && r[3] == source
                            && r[4] == reason
                    })
                };
                has("event_type fixed") && has("the rest")
            },
        )
        .await;
    browser.screenshot("audit-release").await;
    browser.close().await;
    println!("console: parked release from the page: events={total} lost=0 duplicates=0");
    b.stop(Duration::from_secs(30));
    a.stop(Duration::from_secs(30));
}

/// Dead letters on the page: 10 rows that cannot be CloudEvents (no type) among 4,000,
/// under `on_invalid = "dead-letter"`. The API pages them; the page lists each with its
/// table, position and reason, newest first; the lookup of one finds its outbox row and
/// the dead letter's partition and offset, as a consumer reads them.
#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_are_listed_and_found_by_id() {
    use crate::parking::*;
    let _settings = SERVER_SETTINGS.read().await;
    let total = 4 * AGGREGATES;
    let (mut conn, mut setup) = fresh("console_dlq").await;
    allow_untyped(&mut conn, &setup.db).await;
    let dlq = format!("{}.dead", setup.topic_prefix);
    setup.outbox_toml = format!("on_invalid = \"dead-letter\"\ndead_letter_topic = \"{dlq}\"\n");
    setup.extra_toml +=
        "[value]\nformat = \"cloudevents\"\n[value.cloudevents]\nmode = \"binary\"\n";
    setup.monitor_toml = credentials("");
    let destination = setup.topic("Order");
    let mut router = setup.start_router_env(&TOKENS);
    wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(60)).await;
    write_events(&setup.db, 0, total, total).await;
    let kafka = Kafka::local();
    wait_all(&kafka, &[destination, dlq.clone()], total, &router);
    let letters = kafka.read_all(std::slice::from_ref(&dlq));
    assert_eq!(letters.len(), BAD.len());

    let port = setup.monitor_port;
    let (code, body) = http_get(
        port,
        "/api/v1/sources/router/dead-letters?per_page=4&page=3",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["total"].as_u64(), v["pages"].as_u64()),
        (Some(10), Some(3)),
        "{v}"
    );
    assert_eq!(v["items"].as_array().unwrap().len(), 2, "{v}");

    let browser = Browser::start("dead-letters").await;
    browser
        .open(&format!("http://127.0.0.1:{port}/console/sources/router"))
        .await;
    browser
        .wait_for("the dead letters link", Duration::from_secs(20), || async {
            browser.text("#dead-letters-link").await.is_some()
        })
        .await;
    browser
        .open(&format!(
            "http://127.0.0.1:{port}/console/sources/router/dead-letters"
        ))
        .await;
    let rows: Vec<Vec<String>> = browser
        .rows("#dead-letters")
        .await
        .into_iter()
        .filter(|r| r.len() > 5)
        .collect();
    let mut shown: Vec<String> = rows.iter().map(|r| r[1].clone()).collect();
    shown.sort();
    let mut expected: Vec<String> = letters.iter().map(Msg::id).collect();
    expected.sort();
    assert_eq!(shown, expected, "the dead-letter page");
    for r in &rows {
        assert!(r[4].contains("CloudEvent needs a type"), "{r:?}");
        assert!(r[2].ends_with(".outbox") && !r[3].is_empty(), "{r:?}");
    }
    browser.screenshot("dead-letters").await;

    // One found by id: its outbox row, and the dead letter where a consumer reads it.
    let letter = &letters[letters.len() / 2];
    browser
        .open(&format!(
            "http://127.0.0.1:{port}/console/sources/router/events?id={}",
            letter.id()
        ))
        .await;
    assert_eq!(
        browser.text("#record-topic").await.as_deref(),
        Some(dlq.as_str())
    );
    assert_eq!(
        (
            browser.text("#record-partition").await,
            browser.text("#record-offset").await
        ),
        (
            Some(letter.partition.to_string()),
            Some(letter.offset.to_string())
        ),
        "{:?}",
        browser.text("main").await
    );
    assert!(
        browser
            .text("#dead-lettered")
            .await
            .is_some_and(|why| why.contains("CloudEvent needs a type")),
        "{:?}",
        browser.text("main").await
    );
    browser.screenshot("dead-letter-found").await;
    no_secret(&browser.html().await, "the dead-letter page");
    browser.close().await;
    println!(
        "console: {} dead letters listed; {} found at {}/{}",
        letters.len(),
        letter.id(),
        letter.partition,
        letter.offset
    );
    assert!(router.stop(Duration::from_secs(30)).success());
}

/// A standby pair (`[ha]`, exactly-once) with the console's credentials, started in
/// one order: `first` leads, `second` is a ready standby. `b_first` starts `b` first.
struct ConsolePair {
    p: crate::standby::Pair,
    first: RouterProcess,
    second: RouterProcess,
    leader: &'static str,
    standby: &'static str,
}

async fn console_pair(name: &str, b_first: bool) -> ConsolePair {
    let mut p = crate::standby::pair(name).await;
    if b_first {
        std::mem::swap(&mut p.a, &mut p.b);
    }
    p.a.monitor_toml = credentials("");
    p.b.monitor_toml = credentials("");
    let (leader, standby) = match b_first {
        false => ("a", "b"),
        true => ("b", "a"),
    };
    let first = p.a.start_router_env(&TOKENS);
    crate::standby::wait_streaming(p.a.monitor_port, Duration::from_secs(60), &first).await;
    let second = p.b.start_router_env(&TOKENS);
    crate::standby::wait_standby_ready(p.b.monitor_port, &second).await;
    ConsolePair {
        p,
        first,
        second,
        leader,
        standby,
    }
}

/// A pause on a standby pair (`[ha]`, exactly-once), sent to the standby and carried out
/// by the leader; the leader killed -9, the standby — which never led — takes the lock
/// and stays paused; resumed, it streams from where the leader stopped: 0 lost, 0
/// duplicates.
#[tokio::test(flavor = "multi_thread")]
async fn a_pause_holds_across_a_standby_takeover() {
    pause_on_a_pair("console_pause_ha", false).await;
}

/// The same with the pair's other instance (`b`) started first and leading.
#[tokio::test(flavor = "multi_thread")]
async fn a_pause_holds_across_a_standby_takeover_other_order() {
    pause_on_a_pair("console_pause_hb", true).await;
}

async fn pause_on_a_pair(name: &str, b_first: bool) {
    let _settings = SERVER_SETTINGS.read().await;
    let ConsolePair {
        p,
        mut first,
        mut second,
        leader,
        standby,
    } = console_pair(name, b_first).await;
    let writer = Writer::start(&p.a.db);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let port = p.b.monitor_port;
    let (_, fleet) = http_get(port, "/api/v1/fleet").await;
    let fleet: serde_json::Value = serde_json::from_str(&fleet).unwrap();
    let source = fleet["items"][0]["source"].as_str().unwrap().to_string();

    let (code, body) = act(
        port,
        &format!("/api/v1/sources/{source}/pause"),
        Some(ALICE),
        "schema migration",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let said = body["outcome"].as_str().unwrap();
    assert!(
        said.starts_with(&format!("paused: {leader} stopped streaming at")),
        "{body}"
    );
    let still = |what: &'static str| {
        let topics = p.topics.clone();
        async move {
            let before = count(&topics);
            tokio::time::sleep(Duration::from_secs(4)).await;
            assert_eq!(before, count(&topics), "records while paused ({what})");
            before
        }
    };
    let held = still("the leader").await;
    first.kill9();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body) = http_get(port, &format!("/api/v1/sources/{source}")).await;
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        if v["source"]["leader"] == standby && v["source"]["state"] == "paused" {
            break;
        }
        assert!(Instant::now() < deadline, "{body}\n{}", second.log());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(still("the standby that took over").await, held);
    let (code, body) = act(
        port,
        &format!("/api/v1/sources/{source}/resume"),
        Some(ALICE),
        "migration done",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert!(
        body["outcome"]
            .as_str()
            .unwrap()
            .starts_with(&format!("resumed: {standby} streams from")),
        "{body}"
    );
    crate::standby::finish(
        &p,
        &mut second,
        writer,
        &format!("paused across a takeover ({name})"),
    )
    .await;
}

/// A replay asked on the standby's console is carried out by the leader: the same ids
/// once more, each copy naming the replay; the leader's log says it carried it out, the
/// standby's does not. An ask that waited past its freshness for a leader is answered
/// "not carried out", never run late. An ask sent while the leader is gone (kill -9)
/// waits: the standby that takes over carries it out and the caller gets its answer —
/// and the asks answered before are not carried out again. Exactly-once pair: every
/// event once, plus the five replayed copies.
#[tokio::test(flavor = "multi_thread")]
async fn a_replay_sent_to_the_standby_is_carried_out_by_the_leader() {
    replay_on_a_pair("console_replay_ha", false).await;
}

/// The same with the pair's other instance (`b`) started first and leading.
#[tokio::test(flavor = "multi_thread")]
async fn a_replay_sent_to_the_standby_is_carried_out_by_the_leader_other_order() {
    replay_on_a_pair("console_replay_hb", true).await;
}

async fn replay_on_a_pair(name: &str, b_first: bool) {
    let _settings = SERVER_SETTINGS.read().await;
    let ConsolePair {
        p,
        mut first,
        mut second,
        leader,
        standby,
    } = console_pair(name, b_first).await;
    const EVENTS: usize = 1_000;
    crate::crash::write_mixed(&p.a.db, 0, EVENTS, 20).await;
    assert_eq!(
        wait_for_ids(&p.topics, EVENTS, Duration::from_secs(120)),
        EVENTS
    );
    let port = p.b.monitor_port;
    let (_, fleet) = http_get(port, "/api/v1/fleet").await;
    let fleet: serde_json::Value = serde_json::from_str(&fleet).unwrap();
    let source = fleet["items"][0]["source"].as_str().unwrap().to_string();
    let path = format!("/api/v1/sources/{source}/replay");
    let ask = |ids: &'static str, why: &'static str| {
        let path = path.clone();
        async move {
            post(
                port,
                &path,
                Some(ALICE),
                serde_json::json!({ "reason": why, "event_ids": ids }),
            )
            .await
        }
    };
    // Each id twice: the first delivery and one copy naming `replay`.
    let copied = |ids: &[&str], replay: &str| {
        let all = read_all(&p.topics);
        for id in ids {
            let copies: Vec<&Msg> = all.iter().filter(|m| m.id() == *id).collect();
            assert_eq!(copies.len(), 2, "{id}: {copies:?}");
            let named: Vec<String> = copies
                .iter()
                .filter_map(|m| m.headers.get("replay"))
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .collect();
            assert_eq!(named, vec![replay.to_string()], "{id}");
        }
    };

    let (code, body) = ask("s-5 s-6 s-7", "consumer lost them").await;
    assert_eq!(code, 200, "{body}");
    let said = body["outcome"].as_str().unwrap();
    assert!(
        said.starts_with(&format!("{leader} replayed 3 record(s) (completed")),
        "{body}"
    );
    copied(&["s-5", "s-6", "s-7"], body["id"].as_str().unwrap());
    let carried = |log: &str| log.matches("replay carried out").count();
    assert_eq!(carried(&first.log()), 1, "{}", first.log());
    assert_eq!(carried(&second.log()), 0, "{}", second.log());
    println!("console: asked on {standby}, {said}");

    // An ask no leader took up for longer than its freshness: answered, not run.
    let stale = serde_json::json!({
        "action": "replay asked", "source": source, "by": "alice",
        "reason": "asked long ago", "id": format!("ask-stale-{name}"),
        "at": humantime::format_rfc3339_millis(
            std::time::SystemTime::now() - Duration::from_secs(11 * 60)
        ).to_string(),
        "event_ids": ["s-1"],
    });
    produce_control(
        &format!("{}.control", p.a.topic_prefix),
        &format!("replay-ask/{source}"),
        &stale,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, audit) = http_get(port, "/api/v1/audit").await;
        let audit: serde_json::Value = serde_json::from_str(&audit).unwrap_or_default();
        let answered = audit["items"].as_array().and_then(|items| {
            items
                .iter()
                .find(|a| a["ask"] == stale["id"] && a["action"] == "replay")
                .cloned()
        });
        if let Some(a) = answered {
            assert!(
                a["outcome"]
                    .as_str()
                    .unwrap()
                    .starts_with("not carried out"),
                "{a}"
            );
            assert_eq!(a["count"], 0, "{a}");
            break;
        }
        assert!(Instant::now() < deadline, "{audit}\n{}", first.log());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        read_all(&p.topics)
            .iter()
            .filter(|m| m.id() == "s-1")
            .count(),
        1,
        "a stale ask sends nothing"
    );

    // Asked while no leader is there: the standby that takes over answers it.
    first.kill9();
    let asked = Instant::now();
    let (code, body) = ask("s-8 s-9", "asked while the leader was gone").await;
    assert_eq!(code, 200, "{body}\n{}", second.log());
    let said = body["outcome"].as_str().unwrap();
    assert!(
        said.starts_with(&format!("{standby} replayed 2 record(s) (completed")),
        "{body}"
    );
    copied(&["s-8", "s-9"], body["id"].as_str().unwrap());
    assert_eq!(carried(&second.log()), 1, "{}", second.log());
    println!(
        "console: asked on {standby} while {leader} was killed, answered after {} ms: {said}",
        asked.elapsed().as_millis()
    );

    let status = second.stop(Duration::from_secs(30));
    assert!(status.success(), "{}", second.log());
    let duplicates = check_stream(&p.topics, EVENTS);
    assert_eq!(duplicates, 5, "the five replayed copies and nothing else");
}

/// Writes `value` under `key` to partition 0 of `topic` on the local broker.
fn produce_control(topic: &str, key: &str, value: &serde_json::Value) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .expect("a producer");
    let value = value.to_string();
    producer
        .send(BaseRecord::to(topic).partition(0).key(key).payload(&value))
        .map_err(|(e, _)| e)
        .expect("queued");
    producer
        .flush(Duration::from_secs(10))
        .expect("the control record written");
}
