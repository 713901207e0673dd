//! `esr serve --config FILE`: the file's settings apply where neither a flag
//! nor the environment gives one, each through its flag's own checks, and
//! a bad file stops the server naming the file and the key.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{component_cache_dir, plugins_dir, private_tempdir, read_json, wait_until};
use reqwest::blocking::Client;
use serde_json::Value;

/// Variables of the settings these tests give, so that the machine's own
/// environment cannot decide them.
const SETTINGS_VARIABLES: &[&str] = &[
    "ESR_CONFIG",
    "ESR_LISTEN",
    "ESR_LOG_FORMAT",
    "ESR_RATE_LIMIT_BURST",
    "ESR_RATE_LIMIT_PER_MINUTE",
    "ESR_PLUGIN_DEADLINE_MS",
    "ESR_DEMO",
    "ESR_DATA_DIR",
    "ESR_DATABASE_URL",
    "ESR_DATABASE_REPLICA_URLS",
];

/// `esr serve` with only the given arguments and variables (and the shared
/// compile cache).
fn esr_serve(args: &[&str], variables: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_esr"));
    for variable in SETTINGS_VARIABLES {
        command.env_remove(variable);
    }
    command
        .arg("serve")
        .args(args)
        .env("ESR_COMPONENT_CACHE_DIR", component_cache_dir())
        .env("ESR_LOG", "warn,esr=info")
        .envs(variables.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Writes `esr.toml` into `dir` with `mode`.
fn config_file(dir: &Path, text: &str, mode: u32) -> PathBuf {
    let path = dir.join("esr.toml");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// The settings of a demo server on `data_dir`, and `more`.
fn settings(data_dir: &Path, more: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\ndata-dir = '{}'\nplugins-dir = '{}'\ndemo = true\n{more}",
        data_dir.display(),
        plugins_dir().display()
    )
}

/// A server that has started, and its log so far.
struct Running {
    child: Child,
    base: String,
    log: Arc<Mutex<String>>,
    client: Client,
    key: String,
}

impl Running {
    fn start(mut command: Command, data_dir: &Path) -> Running {
        let mut child = command.spawn().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (stderr, sink) = (child.stderr.take().unwrap(), log.clone());
        let drain = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let Some((base, _admin)) = esr::server::read_listening_addresses(&mut lines) else {
            let _ = child.wait();
            let _ = drain.join();
            panic!("esr exited before listening: {}", log.lock().unwrap());
        };
        std::thread::spawn(move || lines.for_each(drop));
        let demo = read_json(&data_dir.join("demo-keys.json"));
        let key = demo["organizations"][0]["api_key"].as_str().unwrap().to_owned();
        let client = Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
        Running { child, base, log, client, key }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits for the `listening` log line, the last of the start.
    fn wait_for_start_log(&self) {
        wait_until(Duration::from_secs(30), "the listening log line", || self.log().contains("listening"));
    }

    /// A key's request's rate-limit fields: `RateLimit-Policy` and `RateLimit`.
    fn rate_limit_fields(&self) -> (String, String) {
        let response = self.client.get(format!("{}/v1/scopes", self.base)).bearer_auth(&self.key).send().unwrap();
        assert_eq!(response.status(), 200);
        let header = |name: &str| response.headers().get(name).unwrap().to_str().unwrap().to_owned();
        (header("ratelimit-policy"), header("ratelimit"))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `command`, which must fail before serving, and returns its stderr.
fn refused(mut command: Command) -> String {
    let mut child = command.stdin(Stdio::null()).spawn().unwrap();
    let mut status = None;
    wait_until(Duration::from_secs(60), "esr to exit", || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    stderr
}

#[test]
fn a_config_file_sets_the_servers_flags() {
    let data_dir = private_tempdir();
    let config_dir = tempfile::tempdir().unwrap();
    // Readable by others and naming a URL setting (if empty): the server warns.
    let text = settings(
        data_dir.path(),
        "rate-limit-per-minute = 60\nrate_limit_burst = 3\nplugin-deadline-ms = 5000\nlog-format = \"json\"\n\
         database-replica-url = []\n",
    );
    let config = config_file(config_dir.path(), &text, 0o644);
    let server = Running::start(esr_serve(&["--config", config.to_str().unwrap()], &[]), data_dir.path());

    // A burst of 3: the first request leaves 2.
    let (policy, state) = server.rate_limit_fields();
    assert_eq!(policy, "\"per-key\";q=60;w=60");
    assert!(state.starts_with("\"per-key\";r=2;"), "{state}");

    server.wait_for_start_log();
    let log = server.log();
    let lines: Vec<Value> = log.lines().map(|line| serde_json::from_str(line).expect(line)).collect();
    let warning = lines
        .iter()
        .find(|line| {
            line["level"] == "WARN" && line["fields"]["message"].as_str().is_some_and(|m| m.contains("chmod 600"))
        })
        .unwrap_or_else(|| panic!("no warning of a file others can read: {log}"));
    let message = warning["fields"]["message"].as_str().unwrap();
    assert!(message.contains(&config.display().to_string()) && message.contains("database-replica-url"), "{message}");
}

#[test]
fn flags_win_over_the_environment_and_the_environment_over_the_file() {
    let data_dir = private_tempdir();
    let config_dir = tempfile::tempdir().unwrap();
    let text = settings(data_dir.path(), "rate-limit-per-minute = 60\nrate-limit-burst = 3\nlog-format = \"json\"\n");
    // Only its owner can read it: no warning.
    let config = config_file(config_dir.path(), &text, 0o600);
    let variables =
        [("ESR_CONFIG", config.to_str().unwrap()), ("ESR_RATE_LIMIT_BURST", "5"), ("ESR_LOG_FORMAT", "json")];
    let server = Running::start(esr_serve(&["--log-format", "text"], &variables), data_dir.path());

    // The environment's burst of 5 (the first request leaves 4), the file's rate.
    let (policy, state) = server.rate_limit_fields();
    assert_eq!(policy, "\"per-key\";q=60;w=60");
    assert!(state.starts_with("\"per-key\";r=4;"), "{state}");

    // The flag's text log, although the environment and the file say json.
    server.wait_for_start_log();
    let log = server.log();
    assert!(log.lines().all(|line| serde_json::from_str::<Value>(line).is_err()), "{log}");
    assert!(log.contains("INFO") && log.contains("listening"), "{log}");
    assert!(!log.contains("chmod 600"), "{log}");
}

#[test]
fn an_unknown_key_is_refused_naming_it_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), "listen = \"127.0.0.1:0\"\nrate-limit-bust = 5\n", 0o600);
    let stderr = refused(esr_serve(&["--config", config.to_str().unwrap()], &[]));
    assert!(stderr.contains(&format!("config file {}", config.display())), "{stderr}");
    assert!(stderr.contains("unknown key `rate-limit-bust` (did you mean `rate-limit-burst`?)"), "{stderr}");
    assert!(!stderr.contains("listening"), "{stderr}");
}

#[test]
fn a_value_out_of_range_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), "listen = \"127.0.0.1:0\"\nplugin-deadline-ms = 1\n", 0o600);
    let stderr = refused(esr_serve(&["--config", config.to_str().unwrap()], &[]));
    assert!(stderr.contains(&format!("config file {}: key `plugin-deadline-ms`", config.display())), "{stderr}");
    assert!(stderr.contains("10..=60000"), "the flag's own range: {stderr}");

    // The same value as a flag wins over the file's, so the server is not refused for it.
    let config = config_file(dir.path(), "plugin-deadline-ms = \"soon\"\nlisten = true\n", 0o600);
    let stderr = refused(esr_serve(&["--config", config.to_str().unwrap(), "--plugin-deadline-ms", "100"], &[]));
    assert!(stderr.contains("key `listen`"), "{stderr}");
    assert!(!stderr.contains("plugin-deadline-ms"), "{stderr}");
}

#[test]
fn a_missing_file_and_a_syntax_error_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.toml");
    let stderr = refused(esr_serve(&[], &[("ESR_CONFIG", missing.to_str().unwrap())]));
    assert!(stderr.contains(&format!("config file {}: cannot read it", missing.display())), "{stderr}");

    let config = config_file(
        dir.path(),
        "listen = \"127.0.0.1:0\"\n# the store\ndatabase = postgres://esr:hunter2@db/esr\n",
        0o600,
    );
    let stderr = refused(esr_serve(&["--config", config.to_str().unwrap()], &[]));
    assert!(stderr.contains(&format!("config file {}: not valid TOML: line 3", config.display())), "{stderr}");
    assert!(!stderr.contains("hunter2"), "the line is not shown: it may hold a password: {stderr}");
}
