//! Drives the real `esr` binary: real components, a real sled directory in
//! a temporary folder, real HTTP on a free port.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod library;
pub mod postgres;
pub mod receiver;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::blocking::{Client, Response};
use serde_json::{Value, json};

/// The repository's root folder.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The built components: `$ESR_PLUGINS_DIR` (set by `make test`) or
/// `target/plugins`.
pub fn plugins_dir() -> PathBuf {
    built_dir("ESR_PLUGINS_DIR", "plugins", "make plugins")
}

/// The test components (`make test-plugins`).
pub fn test_plugins_dir() -> PathBuf {
    built_dir("ESR_TEST_PLUGINS_DIR", "test-plugins", "make test-plugins")
}

fn built_dir(variable: &str, default: &str, how: &str) -> PathBuf {
    let dir = std::env::var_os(variable).map(PathBuf::from).unwrap_or_else(|| workspace().join("target").join(default));
    let has_components = std::fs::read_dir(&dir)
        .map(|entries| entries.filter_map(Result::ok).any(|e| e.path().extension().is_some_and(|x| x == "wasm")))
        .unwrap_or(false);
    assert!(has_components, "no components in {}: run `{how}` (or `make test`, which builds them)", dir.display());
    dir
}

/// Polls `condition` until it holds, or panics naming `what` after `bound`.
/// Tests wait on what they need, not for a time they guess is enough.
pub fn wait_until(bound: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + bound;
    while !condition() {
        assert!(std::time::Instant::now() < deadline, "waited {bound:?} for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A response read in full, with how long it took.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub retry_after: Option<String>,
    pub body: String,
    pub took: Duration,
}

impl Answer {
    fn read(response: reqwest::Result<Response>, started: std::time::Instant) -> reqwest::Result<Answer> {
        let response = response?;
        let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
        let (status, content_type, retry_after) =
            (response.status().as_u16(), header("content-type").unwrap_or_default(), header("retry-after"));
        let body = response.text()?;
        Ok(Answer { status, content_type, retry_after, body, took: started.elapsed() })
    }

    /// Refused at once because every request permit was taken.
    pub fn is_shed(&self) -> bool {
        self.status == 503 && self.body.contains("at capacity")
    }
}

/// A running server with the demo data set.
pub struct Server {
    child: Child,
    pub base: String,
    /// The admin listener's base URL.
    pub admin_base: String,
    data_path: PathBuf,
    /// Removes the data directory when the last server using it is gone.
    _data_dir_owner: Option<tempfile::TempDir>,
    /// Acme Corp's key, then Globex's.
    pub keys: Vec<String>,
    pub organization_ids: Vec<String>,
    pub client: Client,
    /// Everything the server wrote to stderr (its log) so far.
    log: Arc<Mutex<String>>,
    /// Everything the server wrote to standard output so far.
    stdout: Arc<Mutex<String>>,
}

impl Server {
    /// Starts `esr serve --demo` on the given plugins directory.
    pub fn start(plugins_dir: &Path) -> Server {
        Server::start_with(plugins_dir, &[])
    }

    /// Starts `esr serve --demo` with extra flags.
    pub fn start_with(plugins_dir: &Path, extra: &[&str]) -> Server {
        Server::launch(plugins_dir, private_tempdir(), extra)
    }

    /// Starts another server on the data directory of a stopped one (which
    /// keeps owning the directory).
    pub fn start_on(plugins_dir: &Path, data_dir: &Path) -> Server {
        Server::start_on_with(plugins_dir, data_dir, &[])
    }

    /// The same, with extra flags.
    pub fn start_on_with(plugins_dir: &Path, data_dir: &Path, extra: &[&str]) -> Server {
        let mut server = Server::launch_in(plugins_dir, data_dir, None, extra);
        server.keys_from(data_dir);
        server
    }

    fn launch(plugins_dir: &Path, data_dir: tempfile::TempDir, extra: &[&str]) -> Server {
        let path = data_dir.path().to_path_buf();
        let mut server = Server::launch_in(plugins_dir, &path, Some(data_dir), extra);
        server.keys_from(&path);
        server
    }

    /// The server's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_path
    }

    /// Starts a server on a new data directory holding only an organization
    /// that `esr seed` generated with this many endpoints and findings per
    /// endpoint (its key from `seed-keys.json`).
    pub fn start_seeded(plugins_dir: &Path, endpoints: u32, findings_per_endpoint: u32) -> Server {
        Server::start_seeded_with(plugins_dir, endpoints, findings_per_endpoint, &[])
    }

    /// The same, serving with `extra` flags.
    pub fn start_seeded_with(plugins_dir: &Path, endpoints: u32, findings_per_endpoint: u32, extra: &[&str]) -> Server {
        let data_dir = private_tempdir();
        // A server of a database is seeded into that database.
        let database: Vec<&str> = extra
            .iter()
            .position(|item| *item == "--database")
            .and_then(|at| extra.get(at..at + 2))
            .map(<[&str]>::to_vec)
            .unwrap_or_default();
        let seeded = Command::new(env!("CARGO_BIN_EXE_esr"))
            .args(["seed", "--endpoints", &endpoints.to_string()])
            .args(["--findings-per-endpoint", &findings_per_endpoint.to_string()])
            .args(&database)
            .arg("--data-dir")
            .arg(data_dir.path())
            .output()
            .unwrap();
        assert!(seeded.status.success(), "esr seed: {}", String::from_utf8_lossy(&seeded.stderr));
        let path = data_dir.path().to_path_buf();
        let mut server = Server::launch_in(plugins_dir, &path, Some(data_dir), extra);
        server.read_keys(&path.join("seed-keys.json"));
        server
    }

    fn keys_from(&mut self, data_dir: &Path) {
        self.read_keys(&data_dir.join("demo-keys.json"));
    }

    /// The keys and organization ids of a `demo-keys.json`-format file.
    fn read_keys(&mut self, file: &Path) {
        let demo: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
        let organizations = demo["organizations"].as_array().unwrap();
        let field = |name: &str| organizations.iter().map(|o| o[name].as_str().unwrap().to_owned()).collect();
        self.keys = field("api_key");
        self.organization_ids = field("organization_id");
    }

    /// The exit status, if the server has exited.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }

    fn launch_in(plugins_dir: &Path, data_path: &Path, owner: Option<tempfile::TempDir>, extra: &[&str]) -> Server {
        let mut child = spawn(plugins_dir, data_path, extra);
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        // Drain the log so the server never blocks on a full pipe.
        let drain = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let stdout = Arc::new(Mutex::new(String::new()));
        let stdout_sink = stdout.clone();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines().inspect(move |line| {
            if let Ok(line) = line {
                let mut stdout = stdout_sink.lock().unwrap();
                stdout.push_str(line);
                stdout.push('\n');
            }
        });
        let Some((base, admin_base)) = esr::server::read_listening_addresses(&mut lines) else {
            let _ = child.wait();
            // The pipe is closed: the drain ends once it has copied everything.
            let _ = drain.join();
            panic!("esr exited before listening: {}", log.lock().unwrap());
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Server {
            child,
            base,
            admin_base,
            keys: Vec::new(),
            organization_ids: Vec::new(),
            data_path: data_path.to_path_buf(),
            _data_dir_owner: owner,
            client: Client::builder().timeout(Duration::from_secs(30)).build().unwrap(),
            log,
            stdout,
        }
    }

    /// Stops the server; its data directory stays until `self` is dropped.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The server's process id (to send it signals).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends the server a signal by name, e.g. `HUP`.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill").arg(format!("-{name}")).arg(self.pid().to_string()).status().unwrap();
        assert!(status.success(), "kill -{name}");
    }

    /// Waits until `condition` holds for the log, or panics after `seconds`.
    pub fn wait_for_log(&self, seconds: u64, condition: impl Fn(&str) -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(seconds);
        while !condition(&self.log()) {
            assert!(std::time::Instant::now() < deadline, "log never matched: {}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// On a server started with `--max-concurrent-requests=1`: sends `GET
    /// path` as Acme Corp from another thread (again if it is itself shed)
    /// and returns once that request holds the only permit, that is once a
    /// probe (`GET /v1/scopes`) is shed; with the shed probe's answer.
    pub fn hold_the_only_permit(&self, path: &str) -> (std::thread::JoinHandle<reqwest::Result<Answer>>, Answer) {
        let (url, key) = (self.url(path), self.keys[0].clone());
        let holder = std::thread::spawn(move || {
            let client = Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
            loop {
                let started = std::time::Instant::now();
                let answer = Answer::read(client.get(&url).bearer_auth(&key).send(), started)?;
                if !answer.is_shed() {
                    return Ok(answer);
                }
            }
        });
        let mut shed = None;
        wait_until(Duration::from_secs(30), "a request to hold the only permit", || {
            let started = std::time::Instant::now();
            let probe =
                Answer::read(self.client.get(self.url("/v1/scopes")).bearer_auth(&self.keys[0]).send(), started)
                    .unwrap();
            let held = probe.is_shed();
            shed = Some(probe);
            held
        });
        (holder, shed.unwrap())
    }

    /// The admin token the server generated in its data directory.
    pub fn admin_token(&self) -> String {
        std::fs::read_to_string(self.data_dir().join("admin-token")).unwrap()
    }

    /// Creates an organization and a key with these scopes through the
    /// admin listener; (organization id, key).
    pub fn organization_with_key(&self, name: &str, scopes: &[&str]) -> (String, String) {
        let created: serde_json::Value = self
            .admin(reqwest::Method::POST, "/admin/v1/organizations")
            .json(&serde_json::json!({"name": name}))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let organization = created["organization_id"].as_str().unwrap().to_owned();
        let key = self.create_key(&organization, name, scopes);
        (organization, key["api_key"].as_str().unwrap().to_owned())
    }

    /// Creates a key of `organization` with these scopes through the admin
    /// listener; its record, with the key (`api_key`) and its `id`.
    pub fn create_key(&self, organization: &str, name: &str, scopes: &[&str]) -> serde_json::Value {
        let response = self
            .admin(reqwest::Method::POST, "/admin/v1/keys")
            .json(&serde_json::json!({"organization_id": organization, "name": name, "scopes": scopes}))
            .send()
            .unwrap();
        assert_eq!(response.status(), 201);
        response.json().unwrap()
    }

    /// The same server, its demo organizations reading with access tokens
    /// (of an API client each, every read scope) instead of API keys.
    pub fn with_tokens(mut self) -> Server {
        for (index, organization) in self.organization_ids.clone().iter().enumerate() {
            let client: Value = self
                .admin(reqwest::Method::POST, "/admin/v1/clients")
                .json(&serde_json::json!({
                    "organization_id": organization, "name": "isolation",
                    "scopes": ["endpoints:read", "targets:read", "scopes:read", "findings:read", "agent:config:read"],
                }))
                .send()
                .unwrap()
                .json()
                .unwrap();
            self.keys[index] = access_token(&self, &client, None);
        }
        self
    }

    /// Imports `lines` as one NDJSON batch into the organization's
    /// collection through the admin listener.
    pub fn import_lines(&self, organization: &str, collection: &str, lines: &[Value]) -> Response {
        let body: String = lines.iter().map(|line| format!("{line}\n")).collect();
        self.admin(reqwest::Method::POST, &format!("/admin/v1/organizations/{organization}/import/{collection}"))
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
            .unwrap()
    }

    /// A request to the admin listener, with the admin token.
    pub fn admin(&self, method: reqwest::Method, path: &str) -> reqwest::blocking::RequestBuilder {
        self.client.request(method, format!("{}{path}", self.admin_base)).bearer_auth(self.admin_token())
    }

    /// Health with its details (`GET /admin/v1/health`: this host's name,
    /// components' versions and hashes, replicas, hosts), whatever its status.
    pub fn health_details(&self) -> Value {
        self.admin(reqwest::Method::GET, "/admin/v1/health").send().unwrap().json().unwrap()
    }

    /// The sum of the metric series whose line starts with `series` (a
    /// name, or a name and the start of its labels), as `/metrics` has them now.
    pub fn metric_sum(&self, series: &str) -> f64 {
        let metrics = self.admin(reqwest::Method::GET, "/metrics").send().unwrap().text().unwrap();
        metrics
            .lines()
            .filter(|line| line.starts_with(series))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// `esr <args>` against this server's admin listener and data directory.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_esr"))
            .args(args)
            .env("ESR_ADMIN_URL", &self.admin_base)
            .env("ESR_DATA_DIR", self.data_dir())
            .output()
            .unwrap()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// What the server wrote to standard output so far.
    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `GET` as Acme Corp.
    pub fn get(&self, path: &str) -> Response {
        self.get_as(0, path)
    }

    /// `GET` as the demo organization with this index.
    pub fn get_as(&self, organization: usize, path: &str) -> Response {
        self.client.get(self.url(path)).bearer_auth(&self.keys[organization]).send().unwrap()
    }

    /// `GET` as Acme Corp, expecting `200` and JSON.
    pub fn json(&self, path: &str) -> Value {
        self.json_as(0, path)
    }

    /// `GET` as the demo organization with this index, expecting `200` and JSON.
    pub fn json_as(&self, organization: usize, path: &str) -> Value {
        let response = self.get_as(organization, path);
        assert_eq!(response.status(), 200, "GET {path}");
        response.json().unwrap()
    }

    /// Every record of a collection, walking `limit`/`offset` pages.
    pub fn all(&self, organization: usize, collection: &str) -> Vec<Value> {
        let mut records = Vec::new();
        loop {
            let page: Value = self
                .get_as(organization, &format!("/v1/{collection}?limit=100&offset={}", records.len()))
                .json()
                .unwrap();
            let data = page["data"].as_array().unwrap();
            records.extend(data.iter().cloned());
            if data.is_empty() || records.len() as u64 >= page["total"].as_u64().unwrap() {
                return records;
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `ids` of an import's `200` answer, in line order.
pub fn imported_ids(response: Response) -> Vec<String> {
    assert_eq!(response.status(), 200);
    let summary: Value = response.json().unwrap();
    summary["ids"].as_array().unwrap().iter().map(|id| id.as_str().unwrap().to_owned()).collect()
}

/// A new temporary directory only its owner can enter, as the server
/// requires of its data directory.
pub fn private_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new().permissions(std::fs::Permissions::from_mode(0o700)).tempdir().unwrap()
}

/// The compiled components every test server shares: compiling them
/// anew for each of the suite's servers would cost most of its time.
pub fn component_cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("component-cache")
}

/// `esr check` on a stopped server's sled directory passes: every index
/// agrees with the records, and every finding with its remediation target.
pub fn assert_check_passes(data_dir: &Path) {
    assert_check_passes_on(None, data_dir);
}

/// `esr check` passes on a deployment: the database at `database` (its
/// data directory holding the rest), or sled in `data_dir`.
pub fn assert_check_passes_on(database: Option<&str>, data_dir: &Path) {
    let mut check = Command::new(env!("CARGO_BIN_EXE_esr"));
    check.arg("check").arg("--data-dir").arg(data_dir);
    if let Some(url) = database {
        check.args(["--database", url]);
    }
    let check = check.output().unwrap();
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success()
            && stdout.contains("every index agrees with the records, and every finding with its remediation target"),
        "esr check: {stdout}{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

/// Starts the binary; the caller reads its output.
pub fn spawn(plugins_dir: &Path, data_dir: &Path, extra: &[&str]) -> Child {
    // Tests send many requests quickly; only the rate-limit tests set limits.
    let generous_limits: &[&str] = if extra.iter().any(|flag| flag.contains("rate-limit")) {
        &[]
    } else {
        &[
            "--rate-limit-per-minute=6000000",
            "--rate-limit-burst=100000",
            "--agent-config-rate-limit-per-minute=6000000",
            "--agent-config-rate-limit-burst=100000",
            "--address-rate-limit-per-minute=6000000",
            "--address-rate-limit-burst=100000",
        ]
    };
    // `ESR_…=…` among the extras sets that environment variable instead of
    // being a flag (`ESR_LOG=…`: the log filter).
    let is_variable = |item: &&&str| item.starts_with("ESR_") && item.contains('=');
    let log_filter = extra
        .iter()
        .find_map(|item| item.strip_prefix("ESR_LOG="))
        .unwrap_or("warn,esr::server=info,esr_api::connections=info");
    let variables = extra.iter().filter(is_variable).filter_map(|item| item.split_once('='));
    let mut command = Command::new(env!("CARGO_BIN_EXE_esr"));
    if !extra.iter().any(|item| item.starts_with("--component-cache-dir")) {
        command.env("ESR_COMPONENT_CACHE_DIR", component_cache_dir());
    }
    command
        .args(["serve", "--demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--plugins-dir")
        .arg(plugins_dir)
        .args(generous_limits)
        .args(extra.iter().filter(|item| !is_variable(item)))
        .envs(variables)
        .env("ESR_LOG", log_filter)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs the binary to its exit and returns (success, stderr).
pub fn run_to_exit(plugins_dir: &Path) -> (bool, String) {
    let data_dir = private_tempdir();
    let output = spawn(plugins_dir, data_dir.path(), &[]).wait_with_output().unwrap();
    (output.status.success(), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// A plugins directory holding copies of the stock components, with the
/// given file names left out and extra files added.
pub fn plugins_dir_with(leave_out: &[&str], add: &[(&str, &Path)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(plugins_dir()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if path.extension().is_some_and(|x| x == "wasm") && !leave_out.contains(&name.as_str()) {
            std::fs::copy(&path, dir.path().join(&name)).unwrap();
        }
    }
    for (name, source) in add {
        std::fs::copy(source, dir.path().join(name)).unwrap();
    }
    dir
}

/// A figure of `/proc/<pid>/status` in bytes (`VmRSS`, `VmHWM`).
pub fn memory_figure(pid: u32, name: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|line| line.starts_with(&format!("{name}:"))).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// Restarts the peak resident size (`VmHWM`) of a process at its current size.
pub fn reset_peak_memory(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
}

/// The real reports; a missing folder fails the test, never skips it.
pub fn reports_dir() -> PathBuf {
    let dir = std::env::var_os("ESR_SCANNER_REPORTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/scanner-reports"));
    assert!(
        dir.join("trivy").is_dir(),
        "no scanner reports in {} (set ESR_SCANNER_REPORTS_DIR, as `make test` does)",
        dir.display()
    );
    dir
}

pub fn read_json(path: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// A real Trivy report with its vulnerabilities repeated, each copy on a
/// package of its own, to `entries` of them: as many findings.
pub fn trivy_report_of(entries: usize) -> Vec<u8> {
    let mut report = read_json(&reports_dir().join("trivy/defectdojo_issue-9333_debian-10.13.json"));
    let real = report["Results"][0]["Vulnerabilities"].as_array().unwrap().clone();
    let repeated: Vec<Value> = (0..entries)
        .map(|index| {
            let mut vulnerability = real[index % real.len()].clone();
            let package = format!("{}-{}", vulnerability["PkgName"].as_str().unwrap(), index / real.len());
            vulnerability["PkgName"] = json!(package);
            vulnerability
        })
        .collect();
    report["Results"][0]["Vulnerabilities"] = json!(repeated);
    serde_json::to_vec(&report).unwrap()
}

/// An open finding of the xz backdoor on `endpoint`, told apart by `label`
/// (its scanner finding id and title): what feed and several-host tests
/// import in numbers.
pub fn xz_finding(endpoint: &str, severity: &str, label: &str) -> Value {
    json!({
        "endpoint_id": endpoint, "finding_type": "vulnerability", "title": format!("finding {label}"),
        "severity": severity, "status": "open", "cve_id": "CVE-2024-3094", "kev": false,
        "subject": {"type": "software", "vendor": "Tukaani", "product": "xz-utils", "version": "5.6.0"},
        "source": {"scanner": "trivy", "scanner_finding_id": label},
        "first_seen_at": "2026-11-01T00:00:00Z", "last_seen_at": "2026-11-20T00:00:00Z",
    })
}

/// Every file under a data directory, read whole, however deep (a file
/// sled replaced meanwhile is read in its new form, or not at all).
pub fn data_dir_files(dir: &Path) -> Vec<Vec<u8>> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_file())
        .filter_map(|entry| std::fs::read(entry.path()).ok())
        .collect()
}

/// Whether any of `files` holds `needle`.
pub fn any_holds(files: &[Vec<u8>], needle: &[u8]) -> bool {
    files.iter().any(|bytes| bytes.windows(needle.len()).any(|window| window == needle))
}

/// `POST /oauth2/token` for an API client (its JSON as made, with its
/// secret), authenticated with HTTP Basic.
pub fn token_request(server: &Server, client: &Value, form: &[(&str, &str)]) -> Response {
    server
        .client
        .post(server.url("/oauth2/token"))
        .basic_auth(client["client_id"].as_str().unwrap(), client["client_secret"].as_str())
        .form(form)
        .send()
        .unwrap()
}

/// An access token for the client, with `scope` when given.
pub fn access_token(server: &Server, client: &Value, scope: Option<&str>) -> String {
    let mut form = vec![("grant_type", "client_credentials")];
    form.extend(scope.map(|scope| ("scope", scope)));
    let response = token_request(server, client, &form);
    assert_eq!(response.status(), 200);
    let body: Value = response.json().unwrap();
    body["access_token"].as_str().unwrap().to_owned()
}

/// The tests' Python files (`host/tests/python`).
pub fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("python")
}

/// A program of the test virtualenv (`$ESR_PYTHON_VENV`, set by `make
/// test`, or `target/venv`).
pub fn venv_program(name: &str) -> PathBuf {
    let venv = std::env::var_os("ESR_PYTHON_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target").join("venv"));
    let program = venv.join("bin").join(name);
    assert!(program.exists(), "{} is missing: run `make test`, which creates the virtualenv", program.display());
    program
}
