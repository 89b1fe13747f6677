//! A real headless Chromium driven through WebDriver (Debian's `chromium` and
//! `chromium-driver`, installed by `scripts/services up browser`), for the console's
//! tests: a page is read as a person sees it, after its script ran.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};

/// A browser session and the chromedriver serving it.
pub struct Browser {
    pub client: Client,
    driver: Child,
    shots: PathBuf,
}

impl Browser {
    /// A fresh headless Chromium; screenshots go under `target/console-screenshots/TEST`.
    pub async fn start(test: &str) -> Self {
        super::services("up", "browser");
        let port = super::monitor_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (scripts/services up browser)");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1500,1000"],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(c) => break c,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("no WebDriver session from chromedriver on {port}: {e}"),
            }
        };
        let shots = super::repo_root()
            .join("target/console-screenshots")
            .join(test);
        std::fs::create_dir_all(&shots).unwrap();
        Self {
            client,
            driver,
            shots,
        }
    }

    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    /// The text of the first element `css` selects, if there is one.
    pub async fn text(&self, css: &str) -> Option<String> {
        let e = self.client.find(Locator::Css(css)).await.ok()?;
        e.text().await.ok()
    }

    /// Waits until `check` holds for the page (re-read every 250 ms), returning how
    /// long it took; fails naming `what` after `within`.
    pub async fn wait_for<F, Fut>(&self, what: &str, within: Duration, check: F) -> Duration
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let start = Instant::now();
        loop {
            if check().await {
                return start.elapsed();
            }
            if start.elapsed() > within {
                let shot = self
                    .screenshot(&format!("failed-{}", what.replace(' ', "-")))
                    .await;
                panic!(
                    "the page did not show {what} within {within:?} (screenshot {}); its main part:\n{}",
                    shot.display(),
                    self.text("main").await.unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The page's HTML as the browser holds it now (after its script ran).
    pub async fn html(&self) -> String {
        self.client.source().await.unwrap()
    }

    /// Saves a screenshot of the page as `name.png`; returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let path = self.shots.join(format!("{name}.png"));
        if let Ok(png) = self.client.screenshot().await {
            std::fs::write(&path, png).unwrap();
        }
        path
    }

    /// Rows of the table `css` selects, each as its cells' texts.
    pub async fn rows(&self, css: &str) -> Vec<Vec<String>> {
        // One script reads the whole table at once: the page's live refresh replaces its
        // rows, and a row-by-row read through WebDriver raced it (stale cells read as
        // empty, whole rows missing, under load every time).
        let script = "return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr'))\
            .map(r => Array.from(r.querySelectorAll('td')).map(td => td.innerText.trim()));";
        let Ok(rows) = self
            .client
            .execute(script, vec![serde_json::Value::from(css)])
            .await
        else {
            return Vec::new();
        };
        serde_json::from_value(rows).unwrap_or_default()
    }

    /// Clicks what `css` selects (a checkbox, a link).
    pub async fn click(&self, css: &str) {
        let found = self.client.find(Locator::Css(css)).await;
        found
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    /// Types `text` into the field `css` selects and submits its form.
    pub async fn fill_and_submit(&self, css: &str, text: &str) {
        for _ in 0..20 {
            let field = self.fill(css, text).await;
            if field.send_keys("\u{E007}").await.is_ok() {
                return;
            }
        }
        panic!("could not submit {css}: the page kept replacing it");
    }

    /// Types `text` into the field `css` selects. The page's script may replace the main
    /// part between finding the field and focusing it (it leaves it alone once a field
    /// in it has the focus): found again until the focused field is the one on the page.
    pub async fn fill(&self, css: &str, text: &str) -> fantoccini::elements::Element {
        for _ in 0..20 {
            // Any step may meet a field the script just replaced (stale): again.
            let Ok(field) = self.client.find(Locator::Css(css)).await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            if field.click().await.is_err() {
                continue;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let Ok(again) = self.client.find(Locator::Css(css)).await else {
                continue;
            };
            if again.element_id() != field.element_id()
                || field.clear().await.is_err()
                || field.send_keys(text).await.is_err()
            {
                continue;
            }
            if field.prop("value").await.ok().flatten().as_deref() == Some(text) {
                return field;
            }
        }
        panic!("could not type into {css}: the page kept replacing it");
    }

    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
    }
}
