//! `/docs`, the browsable API reference, in headless Chromium (Debian's
//! `chromium`, which `make test` installs): every operation of
//! `/v1/openapi.json` is listed, the page keeps its Content-Security-Policy
//! and asks nothing of another origin, and "try it out" sends the key to
//! this server. A screenshot is kept in `target/artifacts/docs.png`.
//!
//! Chromium is driven over the DevTools protocol on a pipe
//! (`--remote-debugging-pipe`: JSON messages, each ended by a NUL byte,
//! read from its descriptor 3 and written to its descriptor 4): no port,
//! no WebSocket, and the page is inspected once it has rendered rather
//! than after a guessed time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{Server, plugins_dir, private_tempdir, workspace};
use serde_json::{Value, json};

/// The page's policy, as the issue states it.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// How long one protocol command may take (starting a browser on a loaded
/// 2-core machine included).
const COMMAND_BOUND: Duration = Duration::from_secs(60);

/// How long the page may take to render, and "try it out" to answer.
const RENDER_BOUND: Duration = Duration::from_secs(120);

/// Chromium from the PATH or the system's directories; missing, the test
/// fails saying how to get it.
fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> =
        std::env::split_paths(&path).chain(["/usr/bin", "/usr/local/bin"].map(PathBuf::from)).collect();
    ["chromium", "chromium-browser"]
        .iter()
        .flat_map(|name| dirs.iter().map(move |dir| dir.join(name)))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!("chromium is missing: run `make chromium` (`make test` does), or `sudo apt-get install chromium`")
        })
}

/// A headless Chromium with one page, attached over the protocol pipe.
struct Browser {
    child: Child,
    commands: ChildStdin,
    messages: mpsc::Receiver<Value>,
    /// Every event seen so far, in order.
    events: Vec<Value>,
    last_id: u64,
    /// The page's session.
    session: String,
    profile: tempfile::TempDir,
}

impl Browser {
    fn launch() -> Browser {
        let profile = private_tempdir();
        let log = std::fs::File::create(profile.path().join("chromium.log")).unwrap();
        let mut child = Command::new("sh")
            .arg("-c")
            // The protocol's descriptors 3 and 4 are this shell's standard input and output.
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null"#)
            .arg(chromium())
            .args([
                "--headless",
                // As root (a container), Chromium runs only without its sandbox.
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-pipe",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-extensions",
                "--disable-sync",
                "--hide-scrollbars",
                "--mute-audio",
                "--window-size=1280,4000",
            ])
            .arg(format!("--user-data-dir={}", profile.path().join("profile").display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let commands = child.stdin.take().unwrap();
        let mut output = BufReader::new(child.stdout.take().unwrap());
        let (sender, messages) = mpsc::channel();
        std::thread::spawn(move || {
            loop {
                let mut message = Vec::new();
                match output.read_until(0, &mut message) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        message.pop_if(|byte| *byte == 0);
                        let Ok(value) = serde_json::from_slice::<Value>(&message) else { continue };
                        if sender.send(value).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let mut browser =
            Browser { child, commands, messages, events: Vec::new(), last_id: 0, session: String::new(), profile };
        let target = browser.send(None, "Target.createTarget", json!({"url": "about:blank"}));
        let attached =
            browser.send(None, "Target.attachToTarget", json!({"targetId": target["targetId"], "flatten": true}));
        browser.session = attached["sessionId"].as_str().unwrap().to_owned();
        for domain in ["Network", "Page", "Runtime", "Log"] {
            browser.call(&format!("{domain}.enable"), json!({}));
        }
        browser.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": 1280, "height": 4000, "deviceScaleFactor": 1, "mobile": false}),
        );
        browser
    }

    /// Chromium's own log, for a failure's message.
    fn log(&self) -> String {
        std::fs::read_to_string(self.profile.path().join("chromium.log")).unwrap_or_default()
    }

    /// A command to the page.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send(Some(&session), method, params)
    }

    /// A command (to the page's session, or to the browser), answered within
    /// [`COMMAND_BOUND`]; the events meanwhile are kept.
    fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.last_id += 1;
        let id = self.last_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        if let Err(error) = self.commands.write_all(&bytes).and_then(|()| self.commands.flush()) {
            panic!("chromium is not reading its commands ({error})\n{}", self.log());
        }
        let deadline = Instant::now() + COMMAND_BOUND;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(answer) = self.messages.recv_timeout(left) else {
                panic!("chromium did not answer {method} within {COMMAND_BOUND:?}\n{}", self.log());
            };
            if answer["id"] == id {
                assert!(answer.get("error").is_none(), "{method}: {}", answer["error"]);
                return answer["result"].clone();
            }
            self.events.push(answer);
        }
    }

    /// The value of a JavaScript expression in the page (a promise's, once
    /// it settles).
    fn evaluate(&mut self, expression: &str) -> Value {
        let result = self
            .call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true, "awaitPromise": true}));
        assert!(result.get("exceptionDetails").is_none(), "{expression}: {}", result["exceptionDetails"]);
        result["result"]["value"].clone()
    }

    /// The expression's value once it is neither null, false nor empty;
    /// fails naming `what` after `bound`.
    fn wait_for(&mut self, bound: Duration, what: &str, expression: &str) -> Value {
        let deadline = Instant::now() + bound;
        loop {
            let value = self.evaluate(expression);
            if !(value.is_null() || value == false || value == "") {
                return value;
            }
            assert!(Instant::now() < deadline, "waited {bound:?} for {what}\n{}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Keeps the events that arrived since the last command.
    fn collect_events(&mut self) {
        while let Ok(message) = self.messages.try_recv() {
            self.events.push(message);
        }
    }

    fn events_named<'a>(&'a self, method: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.events.iter().filter(move |event| event["method"] == method).map(|event| &event["params"])
    }
}

impl Drop for Browser {
    /// Closes the browser (its renderers with it), killing it if it lingers.
    fn drop(&mut self) {
        self.last_id += 1;
        let close = format!("{{\"id\":{},\"method\":\"Browser.close\"}}\0", self.last_id);
        let _ = self.commands.write_all(close.as_bytes()).and_then(|()| self.commands.flush());
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every operation of the document: (method, path, operationId).
fn operations(document: &Value) -> BTreeSet<(String, String, String)> {
    let methods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];
    let mut operations = BTreeSet::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for method in methods {
            if let Some(operation) = item.get(method) {
                let operation_id = operation["operationId"].as_str().unwrap_or_default().to_owned();
                operations.insert((method.to_ascii_uppercase(), path.clone(), operation_id));
            }
        }
    }
    operations
}

/// The operations Swagger UI rendered (`.opblock`: its method, its path,
/// its operation id), once there are at least `expected`.
fn rendered_operations(browser: &mut Browser, expected: usize) -> BTreeSet<(String, String, String)> {
    let expression = format!(
        "(() => {{
            const text = (block, selector) => ((block.querySelector(selector) || {{}}).textContent || '').trim();
            const blocks = [...document.querySelectorAll('.opblock')].map(block => [
                text(block, '.opblock-summary-method'),
                (block.querySelector('.opblock-summary-path') || {{dataset: {{}}}}).dataset.path || '',
                text(block, '.opblock-summary-operation-id'),
            ]);
            return blocks.length >= {expected} ? blocks : null;
        }})()"
    );
    let rendered = browser.wait_for(RENDER_BOUND, "Swagger UI to render every operation", &expression);
    rendered
        .as_array()
        .unwrap()
        .iter()
        .map(|block| {
            let field = |index: usize| block[index].as_str().unwrap_or_default().to_owned();
            (field(0), field(1), field(2))
        })
        .collect()
}

/// `path` of `url` when it is on `origin`.
fn on_origin<'u>(url: &'u str, origin: &str) -> Option<&'u str> {
    url.strip_prefix(origin).filter(|rest| rest.is_empty() || rest.starts_with('/'))
}

#[test]
fn the_reference_lists_every_operation_and_tries_them_only_on_this_server() {
    let server = Server::start(&plugins_dir());
    let origin = server.base.trim_end_matches('/').to_owned();

    // The page needs no key, and carries its policy.
    let page = server.client.get(server.url("/docs")).send().unwrap();
    assert_eq!(page.status(), 200);
    let header = |response: &reqwest::blocking::Response, name: &str| {
        response.headers().get(name).map(|value| value.to_str().unwrap().to_owned()).unwrap_or_default()
    };
    assert_eq!(header(&page, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(&page, "content-security-policy"), CONTENT_SECURITY_POLICY);
    assert_eq!(header(&page, "x-content-type-options"), "nosniff");
    let html = page.text().unwrap();
    assert!(!html.contains("http:") && !html.contains("https:") && !html.contains("//"), "{html}");
    assert!(!html.contains("<script>") && !html.contains("<style") && !html.contains("style="), "{html}");
    // Each file it links: served here with its type, for a year.
    let linked: Vec<&str> = html.split('"').filter(|part| part.starts_with("/docs/")).collect();
    assert_eq!(linked.len(), 3, "{html}");
    for link in linked {
        let asset = server.client.get(server.url(link)).send().unwrap();
        assert_eq!(asset.status(), 200, "{link}");
        let expected_type =
            if link.contains(".css") { "text/css; charset=utf-8" } else { "text/javascript; charset=utf-8" };
        assert_eq!(header(&asset, "content-type"), expected_type, "{link}");
        assert_eq!(header(&asset, "cache-control"), "public, max-age=31536000, immutable", "{link}");
        assert_eq!(header(&asset, "x-content-type-options"), "nosniff", "{link}");
        let etag = header(&asset, "etag");
        let again = server.client.get(server.url(link)).header("if-none-match", &etag).send().unwrap();
        assert_eq!(again.status(), 304, "{link}");
    }
    let missing = server.client.get(server.url("/docs/swagger-ui.js.map")).send().unwrap();
    assert_eq!(missing.status(), 404);
    let refused = server.client.post(server.url("/docs")).send().unwrap();
    assert_eq!(refused.status(), 405);

    let document: Value = server.client.get(server.url("/v1/openapi.json")).send().unwrap().json().unwrap();
    let expected = operations(&document);
    assert!(expected.len() >= 17, "{expected:?}");
    // The page is not an operation of the API.
    assert!(document["paths"].get("/docs").is_none());

    let mut browser = Browser::launch();
    browser.call("Page.navigate", json!({"url": server.url("/docs")}));
    let rendered = rendered_operations(&mut browser, expected.len());
    assert_eq!(rendered, expected, "the operations listed at /docs, and those of /v1/openapi.json");

    let screenshot = browser.call("Page.captureScreenshot", json!({"format": "png"}));
    let png = base64::engine::general_purpose::STANDARD.decode(screenshot["data"].as_str().unwrap()).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let artifacts = workspace().join("target").join("artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    std::fs::write(artifacts.join("docs.png"), &png).unwrap();

    // "Try it out" with the key, on the endpoints' list.
    let key = &server.keys[0];
    let block = "[...document.querySelectorAll('.opblock')].find(block => \
                 ((block.querySelector('.opblock-summary-operation-id') || {}).textContent || '').trim() === 'listEndpoints')";
    let authorized = browser.evaluate(&format!("window.ui.preauthorizeApiKey('bearerAuth', {}) !== null", json!(key)));
    assert_eq!(authorized, true, "the page's Swagger UI takes the key");
    browser.evaluate(&format!("{block}.querySelector('.opblock-summary-control').click()"));
    for (button, what) in [(".try-out__btn", "the \"Try it out\" button"), (".execute", "the \"Execute\" button")] {
        browser.wait_for(RENDER_BOUND, what, &format!("!!{block}.querySelector('{button}')"));
        browser.evaluate(&format!("{block}.querySelector('{button}').click()"));
    }
    let status = browser.wait_for(
        RENDER_BOUND,
        "the answer to \"try it out\"",
        &format!("(({block}.querySelector('.live-responses-table tr.response .response-col_status') || {{}}).textContent || '').trim()"),
    );
    assert_eq!(status, "200", "the status \"try it out\" shows");

    // Everything the page asked for was on this server (or `data:`), nothing
    // was refused by the policy, nothing failed, and the key went only to
    // the request it was given for.
    browser.collect_events();
    let mut tried = Vec::new();
    for request in browser.events_named("Network.requestWillBeSent").map(|params| &params["request"]) {
        let url = request["url"].as_str().unwrap_or_default();
        if url.starts_with("data:") {
            continue;
        }
        let path = on_origin(url, &origin).unwrap_or_else(|| panic!("the page asked another origin for {url}"));
        let authorization = request["headers"]["Authorization"].as_str();
        if path.starts_with("/v1/endpoints?") || path == "/v1/endpoints" {
            tried.push(authorization.map(str::to_owned));
        } else {
            assert_eq!(authorization, None, "{url} carried the key");
        }
    }
    assert_eq!(tried, [Some(format!("Bearer {key}"))], "\"try it out\" sends one request, with the key");
    let failed: Vec<&Value> = browser.events_named("Network.loadingFailed").collect();
    assert!(failed.is_empty(), "requests failed: {failed:#?}");
    let errors: Vec<String> = browser
        .events_named("Log.entryAdded")
        .filter(|params| params["entry"]["level"] == "error")
        .map(|params| params["entry"]["text"].to_string())
        .chain(browser.events_named("Runtime.exceptionThrown").map(|params| params["exceptionDetails"].to_string()))
        .collect();
    assert!(errors.is_empty(), "the page logged errors (a policy violation among them?): {errors:#?}");

    // And the browser holds the page to its policy: a request to another
    // origin (this server's admin listener) is refused before it is sent.
    let violated = browser.evaluate(&format!(
        "new Promise(resolve => {{
            document.addEventListener('securitypolicyviolation', event => resolve(event.effectiveDirective), {{once: true}});
            fetch({}).then(() => resolve('sent'), () => {{}});
            setTimeout(() => resolve('no violation within 20 s'), 20000);
        }})",
        json!(format!("{}/admin/v1/health", server.admin_base.trim_end_matches('/')))
    ));
    assert_eq!(violated, "connect-src");
}
