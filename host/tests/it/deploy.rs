//! The deployment files in `deploy/`: the systemd unit passes `systemd-analyze`
//! and its hardening holds, and esr serves with its environment; the
//! Containerfile passes hadolint and ships what the Makefile builds; the
//! nginx example terminates TLS in front of a real server, passes the public
//! API and nothing else. A missing tool fails with what to install.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{Server, plugins_dir, private_tempdir, wait_until, workspace};

fn read_workspace_file(path: &str) -> String {
    std::fs::read_to_string(workspace().join(path)).unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// A program from the PATH or the system's directories (Debian puts
/// nginx in /usr/sbin, outside a user's PATH); a failure says how to get it.
fn require(program: &str, install: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let system = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from);
    std::env::split_paths(&path)
        .chain(system)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| panic!("{program} is missing: {install}"))
}

/// A program of the test virtualenv (`$ESR_PYTHON_VENV`, set by `make test`).
fn venv_program(name: &str) -> PathBuf {
    let venv =
        std::env::var_os("ESR_PYTHON_VENV").map(PathBuf::from).unwrap_or_else(|| workspace().join("target/venv"));
    let program = venv.join("bin").join(name);
    assert!(program.exists(), "{} is missing: run `make venv` (`make test` does)", program.display());
    program
}

/// The environment variables `esr serve` reads, as its help names them.
fn serve_variables() -> BTreeSet<String> {
    let output = Command::new(env!("CARGO_BIN_EXE_esr")).args(["serve", "--help"]).output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    let names: BTreeSet<String> =
        help.split("[env: ").skip(1).filter_map(|rest| rest.split_once('=')).map(|(name, _)| name.to_owned()).collect();
    assert!(names.contains("ESR_LISTEN"), "no variables in `esr serve --help`: {help}");
    names
}

fn assert_real_variables<'a>(file: &str, names: impl IntoIterator<Item = &'a String>) {
    let known = serve_variables();
    for name in names {
        assert!(known.contains(name), "{file} sets {name}, which `esr serve` does not read");
    }
}

fn is_loopback(address: &str) -> bool {
    address.parse::<SocketAddr>().unwrap_or_else(|_| panic!("not an address: {address}")).ip().is_loopback()
}

/// A free port on loopback; the program given it binds it soon after.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A child process killed when the test ends, however it ends.
struct Running {
    child: Child,
    what: &'static str,
    /// Where its standard error goes (read when it fails).
    log: PathBuf,
}

impl Running {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Panics with the log if the process has exited.
    fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("{} exited ({status}): {}", self.what, self.log());
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------- systemd

/// A unit file's `key=value` lines by section, in file order.
struct Unit {
    entries: Vec<(String, String, String)>,
}

impl Unit {
    fn parse(text: &str) -> Unit {
        let mut section = String::new();
        let mut entries = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            assert!(!line.ends_with('\\'), "keep unit lines whole: {line}");
            if let Some(name) = line.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
                section = name.to_owned();
                continue;
            }
            let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("not key=value: {line}"));
            entries.push((section.clone(), key.trim().to_owned(), value.trim().to_owned()));
        }
        Unit { entries }
    }

    fn values(&self, section: &str, key: &str) -> Vec<&str> {
        self.entries.iter().filter(|(s, k, _)| s == section && k == key).map(|(_, _, v)| v.as_str()).collect()
    }

    /// The value in force: the last one given.
    fn value(&self, key: &str) -> &str {
        self.values("Service", key).last().copied().unwrap_or_else(|| panic!("the unit sets no {key}="))
    }

    fn environment(&self) -> BTreeMap<String, String> {
        self.values("Service", "Environment")
            .into_iter()
            .map(|assignment| {
                assert!(
                    !assignment.contains(' ') && !assignment.contains('"'),
                    "one plain assignment a line: {assignment}"
                );
                let (name, value) = assignment.split_once('=').unwrap();
                (name.to_owned(), value.to_owned())
            })
            .collect()
    }
}

const UNIT: &str = "deploy/esr.service";

#[test]
fn systemd_unit_passes_systemd_analyze_and_is_hardened() {
    let analyze = require("systemd-analyze", "apt-get install systemd");
    let text = read_workspace_file(UNIT);
    let unit = Unit::parse(&text);

    // verify refuses a unit whose program does not exist: the same unit,
    // starting the built binary.
    let exec_start = unit.value("ExecStart");
    let (program, arguments) = exec_start.split_once(' ').unwrap_or((exec_start, ""));
    assert_eq!(text.matches(&format!("ExecStart={program}")).count(), 1);
    let dir = private_tempdir();
    let copy = dir.path().join("esr.service");
    let built = env!("CARGO_BIN_EXE_esr");
    std::fs::write(&copy, text.replace(&format!("ExecStart={program}"), &format!("ExecStart={built}"))).unwrap();
    let verified = Command::new(&analyze).arg("verify").arg(&copy).output().unwrap();
    let stderr = String::from_utf8_lossy(&verified.stderr);
    assert!(verified.status.success(), "systemd-analyze verify: {stderr}");
    // verify exits 0 on unknown keys and bad values: its warnings name the file.
    let about_unit: Vec<&str> = stderr.lines().filter(|line| line.contains("esr.service")).collect();
    assert!(about_unit.is_empty(), "systemd-analyze verify warns about the unit:\n{}", about_unit.join("\n"));

    // systemd's own review of the sandbox: 2.0 at most (it calls that OK).
    let security = Command::new(&analyze)
        .args(["security", "--offline=true", "--threshold=20", "--no-pager"])
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        security.status.success(),
        "systemd-analyze security: exposure over 2.0:\n{}{}",
        String::from_utf8_lossy(&security.stdout),
        String::from_utf8_lossy(&security.stderr)
    );

    for (key, expected) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("StateDirectory", "esr"),
        ("StateDirectoryMode", "0700"),
        ("CapabilityBoundingSet", ""),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
        ("ExecReload", "/bin/kill -HUP $MAINPID"),
        ("Restart", "on-failure"),
    ] {
        assert_eq!(unit.value(key), expected, "{key}=");
    }
    assert!(unit.values("Service", "SystemCallFilter").contains(&"@system-service"));
    let user = unit.value("User");
    assert!(!["root", "0", ""].contains(&user), "the unit runs as {user:?}");
    // wasmtime maps the code it compiles executable.
    assert!(unit.values("Service", "MemoryDenyWriteExecute").iter().all(|v| *v == "no"));
    // Writable paths beyond the state directory are none.
    assert!(unit.values("Service", "ReadWritePaths").is_empty());

    // The open-file limit leaves room for esr's full default connection cap
    // (after the 512 descriptors it keeps for files).
    let files: u64 = unit.value("LimitNOFILE").parse().expect("LimitNOFILE= is a number");
    let ceiling = esr_api::connections::default_max_connections(u64::MAX);
    assert_eq!(
        esr_api::connections::default_max_connections(files.saturating_sub(512)),
        ceiling,
        "LimitNOFILE={files}"
    );

    let environment = unit.environment();
    assert_real_variables(UNIT, environment.keys());
    assert_eq!(environment["ESR_DATA_DIR"], format!("/var/lib/{}", unit.value("StateDirectory")));
    assert!(is_loopback(&environment["ESR_ADMIN_LISTEN"]), "the admin listener leaves loopback");
    // Only the proxy reaches the public listener.
    assert!(is_loopback(&environment["ESR_LISTEN"]));
    assert!(environment["ESR_PUBLIC_URL"].starts_with("https://"));

    // esr serves with the unit's command line and environment; only the
    // machine's paths and ports are this test's.
    let data = private_tempdir();
    let mut variables = environment.clone();
    variables.insert("ESR_DATA_DIR".into(), data.path().display().to_string());
    variables.insert("ESR_PLUGINS_DIR".into(), plugins_dir().display().to_string());
    variables.insert("ESR_LISTEN".into(), "127.0.0.1:0".into());
    variables.insert("ESR_ADMIN_LISTEN".into(), "127.0.0.1:0".into());
    variables.insert("ESR_COMPONENT_CACHE_DIR".into(), common::component_cache_dir().display().to_string());
    let mut command = Command::new(built);
    command.args(arguments.split_whitespace());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ESR_") {
            command.env_remove(name);
        }
    }
    let log = data.path().join("esr.log");
    let child =
        command.envs(&variables).stdout(Stdio::piped()).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
    let mut esr = Running { child, what: "esr with the unit's environment", log };
    let stdout = esr.child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let Some((public, admin)) = esr::server::read_listening_addresses(&mut lines) else {
        let _ = esr.child.wait();
        panic!("esr with the unit's environment did not start: {}", esr.log());
    };
    std::thread::spawn(move || lines.for_each(drop));
    let health = reqwest::blocking::get(format!("{public}/v1/health")).unwrap();
    assert_eq!(health.status(), 200, "{}", esr.log());
    assert!(admin.starts_with("http://127.0.0.1:"));
    esr.assert_running();
    // The unit's log format is what esr writes.
    wait_until(Duration::from_secs(10), "esr's log", || !esr.log().trim().is_empty());
    for line in esr.log().lines().filter(|line| !line.trim().is_empty()) {
        assert!(serde_json::from_str::<serde_json::Value>(line).is_ok(), "not a JSON log line: {line}");
    }
}

// ------------------------------------------------------------ Containerfile

const CONTAINERFILE: &str = "deploy/Containerfile";

/// Every Dockerfile instruction.
const INSTRUCTIONS: [&str; 18] = [
    "FROM",
    "RUN",
    "CMD",
    "LABEL",
    "MAINTAINER",
    "EXPOSE",
    "ENV",
    "ADD",
    "COPY",
    "ENTRYPOINT",
    "VOLUME",
    "USER",
    "WORKDIR",
    "ARG",
    "ONBUILD",
    "STOPSIGNAL",
    "HEALTHCHECK",
    "SHELL",
];

/// One instruction, its continuation lines joined.
#[derive(Debug)]
struct Instruction {
    keyword: String,
    arguments: String,
}

/// A strict reading: every instruction a known one, in capitals.
fn parse_containerfile(text: &str) -> Vec<Vec<Instruction>> {
    let mut logical = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && pending.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                pending.push_str(part);
                pending.push(' ');
            }
            None => {
                pending.push_str(trimmed);
                logical.push(std::mem::take(&mut pending));
            }
        }
    }
    assert!(pending.is_empty(), "the last instruction ends in a continuation");
    let mut stages: Vec<Vec<Instruction>> = Vec::new();
    for line in logical {
        let (keyword, arguments) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
        assert!(INSTRUCTIONS.contains(&keyword), "not a Dockerfile instruction (in capitals): {line}");
        let instruction = Instruction { keyword: keyword.to_owned(), arguments: arguments.trim().to_owned() };
        if keyword == "FROM" {
            stages.push(Vec::new());
        }
        stages.last_mut().expect("the file starts with FROM").push(instruction);
    }
    stages
}

fn all<'a>(stage: &'a [Instruction], keyword: &str) -> Vec<&'a str> {
    stage.iter().filter(|i| i.keyword == keyword).map(|i| i.arguments.as_str()).collect()
}

fn one<'a>(stage: &'a [Instruction], keyword: &str) -> &'a str {
    let found = all(stage, keyword);
    assert_eq!(found.len(), 1, "the stage has one {keyword}: {found:?}");
    found[0]
}

/// A JSON-array (exec form) argument, e.g. of CMD or VOLUME.
fn exec_form(arguments: &str) -> Vec<String> {
    serde_json::from_str(arguments).unwrap_or_else(|_| panic!("not in exec form: {arguments}"))
}

/// A `NAME ?= value` or `NAME := value` of the Makefile.
fn makefile_variable(name: &str) -> String {
    let makefile = read_workspace_file("Makefile");
    makefile
        .lines()
        .find_map(|line| {
            let (left, value) = line.split_once('=')?;
            let left = left.trim_end_matches(['?', ':']).trim();
            (left == name).then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("the Makefile sets no {name}"))
}

#[test]
fn containerfile_passes_hadolint_and_ships_what_the_makefile_builds() {
    let path = workspace().join(CONTAINERFILE);
    // hadolint with every rule, failing on the least of them; images from
    // Docker Hub only, named in full.
    let dir = private_tempdir();
    let config = dir.path().join("hadolint.yaml");
    std::fs::write(&config, "failure-threshold: style\ntrustedRegistries:\n  - docker.io\n").unwrap();
    let linted = Command::new(venv_program("hadolint"))
        .arg("--config")
        .arg(&config)
        .arg("--no-color")
        .arg(&path)
        .output()
        .unwrap();
    let report = format!("{}{}", String::from_utf8_lossy(&linted.stdout), String::from_utf8_lossy(&linted.stderr));
    assert!(linted.status.success() && report.trim().is_empty(), "hadolint {CONTAINERFILE}:\n{report}");

    let stages = parse_containerfile(&read_workspace_file(CONTAINERFILE));
    assert!(stages.len() >= 2, "a build stage and a runtime stage");
    let (build, runtime) = (&stages[0], &stages[stages.len() - 1]);

    // The builder: the workspace's Rust, the components, then the host.
    let from = one(build, "FROM");
    let (image, name) = from.split_once(" AS ").unwrap_or_else(|| panic!("the build stage is named: {from}"));
    let rust_version = read_workspace_file("Cargo.toml")
        .lines()
        .find_map(|line| line.strip_prefix("rust-version = ").map(|v| v.trim_matches('"').to_owned()))
        .unwrap();
    assert!(image.contains(&format!("/rust:{rust_version}-")), "the builder is not Rust {rust_version}: {image}");
    let runs = all(build, "RUN").join("\n");
    assert!(runs.contains("rustup target add wasm32-wasip2"), "{runs}");
    assert!(runs.contains("make plugins"), "{runs}");
    assert!(runs.contains("cargo build --release") && runs.contains("-p esr"), "{runs}");
    // What the build reads: every workspace member's folder, the WIT
    // package; files the context lacks fail the build.
    let copied: Vec<String> = all(build, "COPY")
        .iter()
        .flat_map(|arguments| {
            let words: Vec<&str> = arguments.split_whitespace().collect();
            assert!(!words[0].starts_with("--"), "the build stage copies from the context: {arguments}");
            words[..words.len() - 1].iter().map(|source| (*source).to_owned()).collect::<Vec<_>>()
        })
        .collect();
    for source in &copied {
        assert!(workspace().join(source).exists(), "COPY {source}: not in the repository");
    }
    let manifest = read_workspace_file("Cargo.toml");
    let members = manifest.lines().find_map(|line| line.strip_prefix("members = ")).unwrap();
    for member in exec_form(members) {
        let folder = member.split('/').next().unwrap().to_owned();
        assert!(copied.contains(&folder), "the workspace member {member} is not copied");
    }
    for needed in ["Cargo.lock", "Makefile"] {
        assert!(copied.iter().any(|source| source == needed), "{needed} is not copied");
    }
    // The WIT travels inside the guest SDK, so copying plugins/ copies it.
    assert!(workspace().join("plugins/sdk/wit/plugin.wit").exists() && copied.iter().any(|source| source == "plugins"));

    // The runtime: slim Debian, a user that is not root, the components.
    assert!(one(runtime, "FROM").contains("debian:bookworm-slim"));
    let user = one(runtime, "USER");
    let account = user.split(':').next().unwrap();
    assert!(!account.is_empty() && account != "root" && account != "0", "USER {user}");
    let environment: BTreeMap<String, String> = all(runtime, "ENV")
        .iter()
        .flat_map(|arguments| arguments.split_whitespace())
        .map(|assignment| {
            let (name, value) =
                assignment.split_once('=').unwrap_or_else(|| panic!("ENV {assignment}: not NAME=value"));
            (name.to_owned(), value.to_owned())
        })
        .collect();
    assert_real_variables(CONTAINERFILE, environment.keys());
    let listen: SocketAddr = environment["ESR_LISTEN"].parse().unwrap();
    assert_eq!(listen.ip(), IpAddr::V4(Ipv4Addr::UNSPECIFIED), "reachable from outside the container");
    assert_eq!(one(runtime, "EXPOSE"), listen.port().to_string());
    if let Some(admin) = environment.get("ESR_ADMIN_LISTEN") {
        assert!(is_loopback(admin), "the admin listener leaves loopback");
    }
    let copies: Vec<Vec<&str>> = all(runtime, "COPY").iter().map(|a| a.split_whitespace().collect()).collect();
    let from_build = format!("--from={name}");
    let plugins_dir = environment["ESR_PLUGINS_DIR"].trim_end_matches('/');
    let built_components = format!("{}/*.wasm", makefile_variable("PLUGINS_DIR"));
    assert!(
        copies.iter().any(|words| words.len() == 3
            && words[0] == from_build
            && words[1].ends_with(&format!("/{built_components}"))
            && words[2].trim_end_matches('/') == plugins_dir),
        "no `COPY {from_build} …/{built_components} {plugins_dir}/`: {copies:?}"
    );
    let entrypoint = exec_form(one(runtime, "ENTRYPOINT"));
    assert!(
        copies.iter().any(|words| words.len() == 3 && words[0] == from_build && words[2] == entrypoint[0]),
        "the entry point {} is not copied from the build",
        entrypoint[0]
    );
    assert_eq!(exec_form(one(runtime, "CMD")), ["serve"]);
    // The data directory: a volume, made for the user with mode 0700.
    let data_dir = &environment["ESR_DATA_DIR"];
    assert!(exec_form(one(runtime, "VOLUME")).contains(data_dir));
    assert!(
        all(runtime, "RUN").iter().any(|run| run.contains("-m 0700") && run.contains(data_dir.as_str())),
        "{data_dir} is not made with mode 0700"
    );
    let healthcheck = one(runtime, "HEALTHCHECK");
    assert!(
        healthcheck.contains(&format!("http://127.0.0.1:{}/v1/health", listen.port())),
        "HEALTHCHECK {healthcheck}"
    );
    let probe = exec_form(healthcheck.split_once("CMD ").unwrap().1.trim());
    let installs = all(runtime, "RUN").join("\n");
    assert!(
        installs.contains(&format!("install -y --no-install-recommends {}", probe[0])),
        "{} is not installed",
        probe[0]
    );
}

// -------------------------------------------------------------------- nginx

const NGINX_EXAMPLE: &str = "deploy/nginx-esr.conf";

/// The example's host name: the certificate's, and the one the client asks
/// for (resolved to loopback by the client itself).
const HOST: &str = "esr.example.com";

/// The example with this machine's values put in; each replaced text must
/// be in it, so the example and this test stay in step.
fn render_example(replacements: &[(&str, &str)]) -> String {
    let mut text = read_workspace_file(NGINX_EXAMPLE);
    for (from, to) in replacements {
        assert_eq!(text.matches(from).count(), 1, "{NGINX_EXAMPLE} has no single `{from}`");
        text = text.replace(from, to);
    }
    text
}

/// nginx with the example in front of `upstream`, on `port`, with a
/// self-signed certificate and a client that trusts only it.
struct Proxy {
    _nginx: Running,
    port: u16,
    client: reqwest::blocking::Client,
    _dir: tempfile::TempDir,
}

impl Proxy {
    fn start(upstream: &str, port: u16) -> Proxy {
        let nginx = require("nginx", "run `make nginx` (`make test` does), or apt-get install nginx");
        let openssl = require("openssl", "apt-get install openssl");
        let dir = private_tempdir();
        let (certificate, key) = (dir.path().join("esr.pem"), dir.path().join("esr.key"));
        let made = Command::new(openssl)
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
            .args(["-subj", &format!("/CN={HOST}"), "-addext", &format!("subjectAltName=DNS:{HOST}")])
            .args(["-addext", "basicConstraints=critical,CA:FALSE", "-addext", "extendedKeyUsage=serverAuth"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&certificate)
            .output()
            .unwrap();
        assert!(made.status.success(), "openssl req: {}", String::from_utf8_lossy(&made.stderr));

        let site = render_example(&[
            ("listen 443 ssl;", &format!("listen 127.0.0.1:{port} ssl;")),
            ("    listen [::]:443 ssl;\n", ""),
            ("server 127.0.0.1:8080;", &format!("server {upstream};")),
            ("/etc/ssl/certs/esr.example.com.pem", &certificate.display().to_string()),
            ("/etc/ssl/private/esr.example.com.key", &key.display().to_string()),
        ]);
        std::fs::write(dir.path().join("esr.conf"), site).unwrap();
        // The example belongs in an http block: this one keeps nginx's
        // files in the temporary directory.
        let temporary: String = ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"]
            .iter()
            .map(|kind| format!("    {kind}_temp_path {};\n", dir.path().join(kind).display()))
            .collect();
        let main = format!(
            "events {{ worker_connections 1024; }}\nhttp {{\n    access_log {};\n{temporary}    include {};\n}}\n",
            dir.path().join("access.log").display(),
            dir.path().join("esr.conf").display()
        );
        std::fs::write(dir.path().join("nginx.conf"), main).unwrap();
        let arguments = |command: &mut Command| {
            command
                .args(["-e", "stderr", "-p"])
                .arg(dir.path())
                .arg("-c")
                .arg(dir.path().join("nginx.conf"))
                .arg("-g")
                // One process, as the current user: no worker outlives the
                // kill that ends the test.
                .arg(format!(
                    "daemon off; master_process off; pid {}; error_log stderr;",
                    dir.path().join("nginx.pid").display()
                ));
        };

        // The configuration check: no error, and no warning either.
        let mut check = Command::new(&nginx);
        arguments(&mut check);
        let checked = check.arg("-t").output().unwrap();
        let said = String::from_utf8_lossy(&checked.stderr);
        assert!(checked.status.success(), "nginx -t: {said}");
        assert!(
            !["[warn]", "[emerg]", "[alert]", "[crit]"].iter().any(|level| said.contains(level)),
            "nginx -t: {said}"
        );

        let log = dir.path().join("nginx.log");
        let mut command = Command::new(&nginx);
        arguments(&mut command);
        let child = command.stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
        let mut running = Running { child, what: "nginx", log };
        wait_until(Duration::from_secs(15), "nginx to listen", || {
            running.assert_running();
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });

        let trusted = reqwest::Certificate::from_pem(&std::fs::read(&certificate).unwrap()).unwrap();
        let client = reqwest::blocking::Client::builder()
            .add_root_certificate(trusted)
            .https_only(true)
            .resolve(HOST, SocketAddr::from(([127, 0, 0, 1], port)))
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        Proxy { _nginx: running, port, client, _dir: dir }
    }

    fn url(&self, path: &str) -> String {
        format!("https://{HOST}:{}{path}", self.port)
    }

    fn get(&self, path: &str, key: Option<&str>) -> reqwest::blocking::Response {
        let request = self.client.get(self.url(path));
        let request = match key {
            Some(key) => request.bearer_auth(key),
            None => request,
        };
        request.send().unwrap_or_else(|error| panic!("GET {path} through the proxy: {error:?}"))
    }
}

fn header(response: &reqwest::blocking::Response, name: &str) -> String {
    response.headers().get(name).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default()
}

#[test]
fn nginx_example_serves_the_public_api_over_tls_and_nothing_else() {
    let example = read_workspace_file(NGINX_EXAMPLE);
    // The admin listener (port 8081) is named nowhere but in comments.
    for line in example.lines().map(str::trim).filter(|line| !line.starts_with('#')) {
        assert!(!line.contains("8081") && !line.contains("admin"), "{NGINX_EXAMPLE}: {line}");
    }

    // The server's public URL is the proxy's address, as deploy/esr.service
    // sets it for the real one.
    let port = free_port();
    let public_url = format!("https://{HOST}:{port}");
    let server = Server::start_with(&plugins_dir(), &["--public-url", &public_url]);
    let proxy = Proxy::start(server.base.strip_prefix("http://").unwrap(), port);

    let health = proxy.get("/v1/health", None);
    assert_eq!(health.status(), 200);
    assert!(header(&health, "strict-transport-security").starts_with("max-age="));
    assert_eq!(header(&health, "server"), "nginx", "server_tokens off");
    let health: serde_json::Value = health.json().unwrap();
    assert_eq!(health["status"], "pass");

    // An authenticated list, its `Link` on the proxy's address.
    let list = proxy.get("/v1/endpoints?limit=1", Some(&server.keys[0]));
    assert_eq!(list.status(), 200);
    let link = header(&list, "link");
    assert!(link.starts_with(&format!("<{public_url}/v1/endpoints?")), "Link: {link}");
    let page: serde_json::Value = list.json().unwrap();
    assert_eq!(page["data"].as_array().unwrap().len(), 1);
    assert_eq!(page["total"], server.json("/v1/endpoints?limit=1")["total"]);

    // esr's own refusals pass through as they are.
    let refused = proxy.get("/v1/endpoints", None);
    assert_eq!(refused.status(), 401);
    assert_eq!(header(&refused, "content-type"), "application/problem+json");

    // A `Link` longer than nginx's default buffer for a response head.
    let scanners = vec!["trivy"; 1000].join(",");
    let long = format!("/v1/vulnerability-findings?limit=1&scanner={scanners}");
    let direct = server.get(&long);
    let direct_link = header(&direct, "link");
    assert!(direct_link.len() > 8 * 1024, "the direct answer's Link is short: {}", direct_link.len());
    let through = proxy.get(&long, Some(&server.keys[0]));
    assert_eq!(through.status(), 200);
    assert_eq!(header(&through, "link"), direct_link);

    // An export streams through, whole.
    let export = proxy.get("/v1/scopes/export", Some(&server.keys[0]));
    assert_eq!(export.status(), 200);
    assert_eq!(header(&export, "content-type"), "application/x-ndjson");
    let piece = crate::export::read_piece(export, None);
    assert!(piece.trailer.is_some(), "the export ended whole through the proxy");
    assert_eq!(piece.records.len() as u64, server.json("/v1/scopes?limit=1")["total"].as_u64().unwrap());

    // The reference, the token endpoint and its metadata pass too.
    assert_eq!(proxy.get("/docs", None).status(), 200);
    assert_eq!(proxy.get("/.well-known/jwks.json", None).status(), 200);
    let metadata: serde_json::Value = proxy.get("/.well-known/oauth-authorization-server", None).json().unwrap();
    assert_eq!(metadata["issuer"], public_url.as_str());
    let token =
        proxy.client.post(proxy.url("/oauth2/token")).form(&[("grant_type", "client_credentials")]).send().unwrap();
    assert_eq!(token.status(), 401, "no client: esr's own refusal");

    // The admin paths end at nginx (its own 404 page), even with the token.
    for path in ["/admin/v1/health", "/admin/v1/organizations", "/metrics", "/"] {
        let answer = proxy.get(path, Some(&server.admin_token()));
        assert_eq!(answer.status(), 404, "{path}");
        assert!(header(&answer, "content-type").starts_with("text/html"), "{path} reached esr");
    }
}

#[test]
fn nginx_example_sets_the_forwarded_headers_itself() {
    // An upstream that records the request head nginx sends it.
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = upstream.local_addr().unwrap().to_string();
    let recorder = std::thread::spawn(move || {
        let (mut connection, _) = upstream.accept().unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            connection.read_exact(&mut byte).unwrap();
            head.push(byte[0]);
        }
        connection.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok").unwrap();
        String::from_utf8(head).unwrap().to_ascii_lowercase()
    });
    let proxy = Proxy::start(&address, free_port());
    let answer = proxy
        .client
        .get(proxy.url("/v1/health"))
        .header("X-Forwarded-For", "203.0.113.9")
        .header("X-Forwarded-Proto", "http")
        .send()
        .unwrap();
    assert_eq!(answer.status(), 200);
    let head = recorder.join().unwrap();
    for expected in ["x-forwarded-for: 127.0.0.1\r\n", "x-forwarded-proto: https\r\n", &format!("host: {HOST}\r\n")] {
        assert!(head.contains(expected), "no `{}` in:\n{head}", expected.trim());
    }
    // What the client claimed is not passed on.
    assert!(!head.contains("203.0.113.9") && !head.contains("x-forwarded-proto: http\r\n"), "{head}");
}
