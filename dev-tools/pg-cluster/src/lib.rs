//! Local PostgreSQL clusters made from the distribution's binaries: a
//! throwaway one for each test binary (and the durability test), and the
//! primary and streaming replica `make run-postgres` keeps under
//! `./data-postgres/`.
//!
//! A cluster listens only on a Unix socket in its own private directory
//! (`listen_addresses=''`), so any number of them run side by side without
//! choosing ports. `initdb` and `postgres` refuse to run as root: when
//! `esr` runs as root they run as the `postgres` system user, which then
//! owns the cluster's directory.
//!
//! The server runs under a small shell that holds a pipe from this process:
//! when the [`Cluster`] is dropped, or this process dies in any way (a test
//! killed, a panic, Ctrl-C), the pipe closes and the shell stops the server
//! at once and, for a throwaway cluster, removes its directory.

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian's `postgresql` package puts a version's binaries.
const DEBIAN_BINARIES: &str = "/usr/lib/postgresql";

/// How long a cluster may take to accept connections after it starts.
const START_BOUND: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "PostgreSQL's server binaries were not found in {DEBIAN_BINARIES}/<version>/bin (or $ESR_POSTGRES_BIN): install Debian's `postgresql` package (`make test` does when run as root)"
    )]
    NoBinaries,
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{command} failed: {output}")]
    Command { command: String, output: String },
    #[error("PostgreSQL in {dir} did not accept connections within {bound:?}; its log: {log}")]
    NotReady { dir: String, bound: Duration, log: String },
}

/// How a cluster writes: throwaway clusters skip every flush to disk; a
/// test of durability (or anything kept) needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// `fsync`, `synchronous_commit` and `full_page_writes` off.
    Throwaway,
    /// PostgreSQL's defaults: a committed transaction survives a crash.
    Durable,
}

/// How [`Cluster::shut_down`] stops the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// Clients are disconnected (`admin_shutdown`), then a checkpoint.
    Fast,
    /// The server's processes quit at once, as in a crash; the next start
    /// replays the write-ahead log.
    Immediate,
}

/// The user the server runs as, when this process is root.
#[derive(Debug, Clone, Copy)]
struct RunAs {
    uid: u32,
    gid: u32,
}

/// A PostgreSQL cluster with its server running.
pub struct Cluster {
    /// Holds the directory this cluster lives in: `data/` and the socket.
    dir: PathBuf,
    binaries: PathBuf,
    run_as: Option<RunAs>,
    durability: Durability,
    /// Whether the guardian removes the directory once the server stops
    /// (a throwaway cluster), unless told to keep it.
    remove: bool,
    /// The shell that runs the server; closing its stdin stops it.
    guardian: Option<(Child, ChildStdin)>,
    /// Settings (`name=value`) the server starts with beside its own.
    settings: Vec<String>,
}

impl Cluster {
    /// A new cluster in a new private temporary directory, removed when the
    /// cluster is dropped or this process ends.
    pub fn temporary(durability: Durability) -> Result<Cluster, ClusterError> {
        let dir = std::env::temp_dir().join(format!("esr-postgres-{}", uuid::Uuid::new_v4().simple()));
        let mut cluster = Cluster::new(&dir, durability)?;
        cluster.initdb()?;
        cluster.start(true)?;
        Ok(cluster)
    }

    /// The cluster in `dir`, created there when it holds none yet, then
    /// started; kept when stopped.
    pub fn persistent(dir: &Path, durability: Durability) -> Result<Cluster, ClusterError> {
        Cluster::persistent_with(dir, durability, &[])
    }

    /// As [`Cluster::persistent`], the server started with `settings`
    /// (`name=value`) too.
    pub fn persistent_with(dir: &Path, durability: Durability, settings: &[String]) -> Result<Cluster, ClusterError> {
        let mut cluster = Cluster::new(dir, durability)?;
        cluster.settings = settings.to_vec();
        if !cluster.data_dir().join("PG_VERSION").exists() {
            cluster.initdb()?;
        }
        cluster.start(false)?;
        Ok(cluster)
    }

    /// A streaming replica of this cluster in `dir` (`pg_basebackup -R -X
    /// stream`), created there when it holds none yet, then started; removed
    /// with it when `temporary`.
    pub fn replica(&self, dir: &Path, temporary: bool) -> Result<Cluster, ClusterError> {
        let mut replica = Cluster::new(dir, self.durability)?;
        if !replica.data_dir().join("PG_VERSION").exists() {
            let source = format!("host={} port={} user=postgres", self.dir.display(), PORT);
            replica.run(
                Command::new(self.binaries.join("pg_basebackup"))
                    .args(["-R", "-X", "stream", "-c", "fast", "-d", &source, "-D"])
                    .arg(replica.data_dir()),
            )?;
        }
        replica.start(temporary)?;
        Ok(replica)
    }

    fn new(dir: &Path, durability: Durability) -> Result<Cluster, ClusterError> {
        let binaries = binaries()?;
        let run_as = run_as()?;
        if !dir.exists() {
            // The parents stay traversable: the server's user must reach
            // its directory, which alone is private.
            if let Some(parent) = dir.parent() {
                std::fs::create_dir_all(parent)?;
            }
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().mode(0o700).create(dir)?;
        }
        if let Some(user) = run_as {
            std::os::unix::fs::chown(dir, Some(user.uid), Some(user.gid))?;
        }
        let dir = dir.canonicalize()?;
        Ok(Cluster { dir, binaries, run_as, durability, remove: false, guardian: None, settings: Vec::new() })
    }

    /// The cluster's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The directory holding the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// A URL of `database` on this cluster, as `esr --database` takes it.
    pub fn url(&self, database: &str) -> String {
        let host: String =
            percent_encoding::utf8_percent_encode(&self.dir.display().to_string(), percent_encoding::NON_ALPHANUMERIC)
                .collect();
        format!("postgresql:///{database}?host={host}&port={PORT}&user=postgres")
    }

    /// Connection settings of `database` on this cluster.
    pub fn config(&self, database: &str) -> postgres::Config {
        let mut config = postgres::Config::new();
        config.host_path(&self.dir).port(PORT).user("postgres").dbname(database);
        config
    }

    /// Runs SQL on the `postgres` database (e.g. `CREATE DATABASE`).
    pub fn execute(&self, sql: &str) -> Result<(), ClusterError> {
        let mut client = self
            .config("postgres")
            .connect(postgres::NoTls)
            .map_err(|error| ClusterError::Command { command: "connect".into(), output: error.to_string() })?;
        client
            .batch_execute(sql)
            .map_err(|error| ClusterError::Command { command: sql.to_owned(), output: error.to_string() })
    }

    fn initdb(&mut self) -> Result<(), ClusterError> {
        let mut command = Command::new(self.binaries.join("initdb"));
        command
            .args(["-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-instructions"])
            .arg("-D")
            .arg(self.data_dir());
        if self.durability == Durability::Throwaway {
            command.arg("--no-sync");
        }
        self.run(&mut command)
    }

    /// Starts the server under its guardian shell and waits until it
    /// accepts connections; `remove` makes the guardian delete the
    /// cluster's directory once the server has stopped.
    fn start(&mut self, remove: bool) -> Result<(), ClusterError> {
        let mut server = vec![
            self.binaries.join("postgres").display().to_string(),
            "-D".into(),
            self.data_dir().display().to_string(),
            "-k".into(),
            self.dir.display().to_string(),
            "-p".into(),
            PORT.to_string(),
            "-c".into(),
            "listen_addresses=".into(),
            "-c".into(),
            "hot_standby_feedback=on".into(),
            // WAL a starting `pg_basebackup -X stream` still needs must not be
            // recycled before its slot holds it (seen on a busy machine).
            "-c".into(),
            "wal_keep_size=128MB".into(),
        ];
        if self.durability == Durability::Throwaway {
            for setting in ["fsync=off", "synchronous_commit=off", "full_page_writes=off"] {
                server.extend(["-c".into(), setting.into()]);
            }
        }
        for setting in &self.settings {
            server.extend(["-c".into(), setting.clone()]);
        }
        // `$@` is the server's command line; its output goes to `server.log`.
        // A line `crash` (or `fast`) on stdin stops the server with an
        // immediate (or fast) shutdown and keeps the directory (a restart
        // follows); the end of stdin stops it and, if `remove`, removes the
        // directory. SIGQUIT is PostgreSQL's immediate shutdown, SIGINT its
        // fast one (what `pg_ctl stop -m immediate` and `-m fast` send).
        self.remove = remove;
        let script = format!(
            r#""$@" >>"{log}" 2>&1 & server=$!
read command
case "$command" in crash) kill -QUIT "$server" ;; fast) kill -INT "$server" ;; *) kill -{signal} "$server" ;; esac 2>/dev/null
wait "$server"
case "$command" in crash|fast) ;; *) {remove} ;; esac"#,
            log = self.dir.join("server.log").display(),
            // Immediate shutdown for a throwaway cluster, a fast one (with a
            // checkpoint) for a kept one.
            signal = if remove { "QUIT" } else { "INT" },
            remove = if remove { format!("rm -rf \"{}\"", self.dir.display()) } else { "true".to_owned() },
        );
        let mut command = Command::new("sh");
        command.arg("-c").arg(script).arg("postgres-guardian").args(&server).stdin(Stdio::piped());
        self.as_server_user(&mut command);
        let mut child = command.spawn()?;
        let stdin = child.stdin.take().ok_or_else(|| std::io::Error::other("no stdin for the guardian"))?;
        self.guardian = Some((child, stdin));
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<(), ClusterError> {
        let deadline = Instant::now() + START_BOUND;
        let mut config = self.config("postgres");
        config.connect_timeout(Duration::from_secs(5));
        loop {
            if config.connect(postgres::NoTls).is_ok() {
                return Ok(());
            }
            let exited = match self.guardian.as_mut() {
                Some((child, _)) => child.try_wait()?.is_some(),
                None => true,
            };
            if exited || Instant::now() >= deadline {
                let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                return Err(ClusterError::NotReady { dir: self.dir.display().to_string(), bound: START_BOUND, log });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server: at once for a throwaway cluster (then removed),
    /// with a fast shutdown for a kept one.
    pub fn stop(&mut self) {
        if let Some((mut child, stdin)) = self.guardian.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }

    /// Stops the server at once, as a crash would (no checkpoint: the next
    /// start replays the write-ahead log), and starts it again.
    pub fn crash_and_restart(&mut self) -> Result<(), ClusterError> {
        self.shut_down(Shutdown::Immediate)?;
        self.start_again()
    }

    /// Stops the server as `mode` says and keeps its directory, for
    /// [`Cluster::start_again`].
    pub fn shut_down(&mut self, mode: Shutdown) -> Result<(), ClusterError> {
        if let Some((mut child, mut stdin)) = self.guardian.take() {
            use std::io::Write;
            stdin.write_all(match mode {
                Shutdown::Immediate => b"crash\n",
                Shutdown::Fast => b"fast\n",
            })?;
            drop(stdin);
            child.wait()?;
        }
        Ok(())
    }

    /// Starts a server stopped by [`Cluster::shut_down`] again, on the same
    /// socket, and waits until it accepts connections.
    pub fn start_again(&mut self) -> Result<(), ClusterError> {
        self.start(self.remove)
    }

    fn as_server_user(&self, command: &mut Command) {
        if let Some(user) = self.run_as {
            use std::os::unix::process::CommandExt;
            command.uid(user.uid).gid(user.gid);
        }
    }

    fn run(&self, command: &mut Command) -> Result<(), ClusterError> {
        self.as_server_user(command);
        let output = command.stdin(Stdio::null()).output()?;
        if output.status.success() {
            return Ok(());
        }
        let mut text = String::from_utf8_lossy(&output.stderr).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stdout));
        Err(ClusterError::Command { command: format!("{command:?}"), output: text })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("dir", &self.dir).finish_non_exhaustive()
    }
}

/// Every cluster listens on its own socket directory, so they share the
/// default port number.
const PORT: u16 = 5432;

/// The server binaries: `$ESR_POSTGRES_BIN`, else the newest version under
/// Debian's `/usr/lib/postgresql`.
pub fn binaries() -> Result<PathBuf, ClusterError> {
    if let Some(dir) = std::env::var_os("ESR_POSTGRES_BIN") {
        let dir = PathBuf::from(dir);
        return if dir.join("initdb").exists() { Ok(dir) } else { Err(ClusterError::NoBinaries) };
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(DEBIAN_BINARIES)
        .map_err(|_| ClusterError::NoBinaries)?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or(ClusterError::NoBinaries)
}

/// The `postgres` system user's ids when this process is root (PostgreSQL
/// refuses to run as root), else none.
fn run_as() -> Result<Option<RunAs>, ClusterError> {
    if !rustix::process::getuid().is_root() {
        return Ok(None);
    }
    let id = |flag: &str| -> Result<u32, ClusterError> {
        let output = Command::new("id").args([flag, "postgres"]).output()?;
        String::from_utf8_lossy(&output.stdout).trim().parse().map_err(|_| ClusterError::Command {
            command: format!("id {flag} postgres"),
            output: format!(
                "running as root, PostgreSQL needs the `postgres` system user (Debian's `postgresql` package creates it): {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        })
    };
    Ok(Some(RunAs { uid: id("-u")?, gid: id("-g")? }))
}
