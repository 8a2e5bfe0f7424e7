//! A headless Chromium driven through chromedriver (WebDriver), for the
//! console's end-to-end tests: one chromedriver per test on a free port,
//! killed when the browser is dropped, and screenshots under the target dir.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{json, Map};
use tokio::process::{Child, Command};

/// The variable naming the chromedriver binary.
pub const CHROMEDRIVER: &str = "DELAYQ_TEST_CHROMEDRIVER";
/// The variable naming the Chromium binary (default `/usr/bin/chromium`).
pub const CHROMIUM: &str = "DELAYQ_TEST_CHROMIUM";

/// Browsers run one at a time: each is heavy, and the machines are small.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub struct Browser {
    pub client: Client,
    driver: Child,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium at 1280x800, or returns
    /// `None` (the test is skipped) when `DELAYQ_TEST_CHROMEDRIVER` is unset.
    pub async fn start() -> Option<Browser> {
        let chromedriver = delayq_testkit::service(CHROMEDRIVER)?;
        let turn = ONE_AT_A_TIME.lock().await;
        let port = delayq_testkit::free_port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| panic!("start {chromedriver}: {error}"));
        let chromium = std::env::var(CHROMIUM).unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
        let mut capabilities = Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            json!({
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1280,800", "--hide-scrollbars"],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let mut last_error = String::new();
        for _ in 0..80 {
            // chromedriver speaks plain HTTP on loopback: no TLS on this leg.
            let mut builder = ClientBuilder::new(HttpConnector::new());
            builder.capabilities(capabilities.clone());
            match builder.connect(&url).await {
                Ok(client) => {
                    let browser = Browser { client, driver, _turn: turn };
                    browser.fit_viewport(1280, 800).await;
                    return Some(browser);
                }
                Err(error) => last_error = error.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("chromedriver at {url} did not start a session: {last_error}");
    }

    /// Sizes the window so that the page itself (not the window) is `width` by `height`.
    async fn fit_viewport(&self, width: u32, height: u32) {
        self.client.set_window_size(width, height).await.expect("window size");
        let inner = self.client.execute("return [window.innerWidth, window.innerHeight];", vec![]).await;
        let inner = inner.expect("viewport size");
        let (inner_width, inner_height) =
            (inner[0].as_u64().unwrap_or(0) as u32, inner[1].as_u64().unwrap_or(0) as u32);
        let outer_width = width + width.saturating_sub(inner_width);
        let outer_height = height + height.saturating_sub(inner_height);
        self.client.set_window_size(outer_width, outer_height).await.expect("window size");
    }

    /// Opens `url` and answers every confirmation dialog of the page with yes.
    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.unwrap_or_else(|error| panic!("open {url}: {error}"));
        self.accept_confirmations().await;
    }

    /// Makes `window.confirm` say yes (the pages ask before destructive actions).
    pub async fn accept_confirmations(&self) {
        self.client.execute("window.confirm = function () { return true; };", vec![]).await.expect("script");
    }

    /// Returns the text of the first element matching `css`.
    pub async fn text(&self, css: &str) -> String {
        let element =
            self.client.find(Locator::Css(css)).await.unwrap_or_else(|error| panic!("no element {css}: {error}"));
        element.text().await.expect("element text")
    }

    /// Returns how many elements match `css`.
    pub async fn count(&self, css: &str) -> usize {
        self.client.find_all(Locator::Css(css)).await.expect("find_all").len()
    }

    /// Clicks the first element matching `css` (a button that submits a
    /// form), waits until the page it leads to has replaced this one, then
    /// accepts confirmations on it.
    pub async fn click(&self, css: &str) {
        let element = self
            .client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|error| panic!("no element {css} to click: {error}"));
        let page = self.client.find(Locator::Css("html")).await.expect("the page");
        element.click().await.unwrap_or_else(|error| panic!("click {css}: {error}"));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        // The old page's root goes stale once the next page is loaded.
        while page.tag_name().await.is_ok() {
            assert!(tokio::time::Instant::now() < deadline, "clicking {css} led to no new page");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.wait_until_loaded().await;
        self.accept_confirmations().await;
    }

    /// Waits until the document has loaded.
    async fn wait_until_loaded(&self) {
        for _ in 0..300 {
            let state = self.client.execute("return document.readyState;", vec![]).await;
            if state.ok().is_some_and(|state| state == "complete") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the page did not finish loading");
    }

    /// Types `text` into the first element matching `css`, replacing what it held.
    pub async fn type_into(&self, css: &str, text: &str) {
        let element =
            self.client.find(Locator::Css(css)).await.unwrap_or_else(|error| panic!("no input {css}: {error}"));
        element.clear().await.expect("clear input");
        element.send_keys(text).await.expect("type");
    }

    /// Returns the path of the page shown now.
    pub async fn path(&self) -> String {
        self.client.current_url().await.expect("current url").path().to_owned()
    }

    /// Returns the page's HTML.
    pub async fn source(&self) -> String {
        self.client.source().await.expect("page source")
    }

    /// Saves a screenshot of the page as `<name>.png`; returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        println!("screenshot: {}", path.display());
        path
    }

    /// Ends the session; chromedriver is killed when the browser is dropped.
    pub async fn close(self) {
        let Browser { client, mut driver, _turn } = self;
        let _ = client.close().await;
        let _ = driver.kill().await;
    }
}

/// Where screenshots go: `DELAYQ_TEST_SCREENSHOTS`, else under the target dir.
pub fn screenshot_dir() -> PathBuf {
    match std::env::var("DELAYQ_TEST_SCREENSHOTS") {
        Ok(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots"),
    }
}
