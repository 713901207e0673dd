//! The `esr` command line.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use esr::admin_client::AdminClient;
use esr::server::{ServeOptions, serve};
use esr_api::limits::Quota;
use esr_runtime::{ComponentEngine, Limits};
use serde_json::{Value, json};

// An import allocates and frees a map per field of every line it checks
// and every record it writes: glibc's allocator was a third of the host's
// CPU in an import into PostgreSQL (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod audit_cli;
mod config_file;
mod oauth_cli;
mod webhooks_cli;

#[derive(Parser)]
#[command(name = "esr", version, about = "Endpoint security remediation: the public read API")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API.
    Serve(Box<ServeArgs>),
    /// Add a generated organization of a given size (for benchmarks);
    /// its key goes to <data-dir>/seed-keys.json. Needs the data directory
    /// to itself: stop the server first.
    Seed {
        /// A TOML file of `esr serve` settings: its store keys (`data-dir`,
        /// `database`, …) apply here; flags and the environment win.
        #[arg(long, env = "ESR_CONFIG", value_name = "FILE")]
        config: Option<PathBuf>,
        /// The data directory to load (an embedded store; created if missing).
        #[arg(long, env = "ESR_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
        #[command(flatten)]
        database: DatabaseArgs,
        /// Endpoints of the generated organization.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        endpoints: u32,
        /// Vulnerability findings on each endpoint.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=10_000))]
        findings_per_endpoint: u32,
        /// Scopes to add beyond the organization's own (its scopes again,
        /// per team), for measuring scope lists and the agent configuration.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
        scopes: u32,
    },
    /// Work with components.
    #[command(subcommand)]
    Plugins(PluginsCommand),
    /// Create or list organizations (through a running server).
    #[command(subcommand)]
    Organizations(OrganizationsCommand),
    /// Create, list, rotate or revoke API keys (through a running server).
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Subscribe destinations to an organization's changes (through a
    /// running server).
    #[command(subcommand)]
    Webhooks(webhooks_cli::WebhooksCommand),
    /// API clients for OAuth 2.0 client credentials (through the admin listener).
    #[command(subcommand)]
    Clients(oauth_cli::ClientsCommand),
    /// The keys this server signs access tokens with (through the admin listener).
    #[command(subcommand)]
    SigningKeys(oauth_cli::SigningKeysCommand),
    /// An organization's audit trail: who read what, and when (through the
    /// admin listener).
    Audit(audit_cli::AuditArgs),
    /// Import an NDJSON file of records into an organization (through a
    /// running server), in batches that are each all or nothing; or, with
    /// `--report`, a scanner report (Trivy, Grype, OSV-Scanner, SARIF,
    /// CycloneDX, Wazuh), all or nothing.
    Import {
        /// The id of the organization the records belong to.
        #[arg(long)]
        organization: String,
        /// NDJSON: endpoints, remediation-targets, scopes or vulnerability-findings.
        #[arg(long, required_unless_present = "report", conflicts_with = "report")]
        collection: Option<String>,
        /// NDJSON: one JSON record per line; `-` reads standard input.
        #[arg(required_unless_present = "report", conflicts_with = "report")]
        file: Option<PathBuf>,
        /// NDJSON: the most lines one batch holds (at least 1).
        #[arg(long, default_value_t = esr::admin_client::BATCH_LINES, value_parser = clap::value_parser!(u32).range(1..))]
        batch_lines: u32,
        /// A scanner report to import (`-` reads standard input).
        #[arg(long)]
        report: Option<PathBuf>,
        /// Reports only: the report's format; `auto` detects it from the content.
        #[arg(long, default_value = "auto", requires = "report")]
        format: String,
        /// Reports only: the endpoint the report is about (an id or a host
        /// name), when the report names no host.
        #[arg(long, requires = "report")]
        endpoint: Option<String>,
        /// Reports only: create the --endpoint host name when no endpoint has it (without
        /// this, a name that matches none is refused: most often a typo).
        #[arg(long, requires = "endpoint")]
        create_endpoint: bool,
        /// Reports only: the scanner whose findings the report is compared with (and
        /// resolves), when not the importer's own: e.g. `trivy` for a
        /// CycloneDX file Trivy wrote. Recorded in the history.
        #[arg(long, requires = "report")]
        scanner: Option<String>,
        /// Check everything and answer what would change; write nothing.
        /// For NDJSON, each batch is checked against the store as it is: a
        /// line naming a record an earlier batch of the same run would
        /// create is reported missing.
        #[arg(long)]
        dry_run: bool,
        /// Reports only: print what changed as one JSON object.
        #[arg(long, requires = "report")]
        json: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Delete one record of an organization (through a running server): an
    /// endpoint goes with its findings and remediation targets, and other
    /// records' references to what is deleted are cleared, all at once.
    Delete {
        /// The id of the organization the record belongs to.
        #[arg(long)]
        organization: String,
        /// endpoints, remediation-targets, scopes or vulnerability-findings.
        #[arg(long)]
        collection: String,
        /// The record's id.
        id: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Copy a sled deployment (organizations, keys, records, indexes,
    /// secrets) into an empty PostgreSQL database (server stopped); API
    /// keys, cursors and the admin token keep working.
    Migrate {
        /// The sled deployment's data directory.
        #[arg(long, env = "ESR_DATA_DIR")]
        from: PathBuf,
        /// The PostgreSQL database (`postgres://…`), empty.
        #[arg(long, env = "ESR_DATABASE_URL")]
        to: String,
    },
    /// Check that every index agrees with the records (server stopped).
    Check {
        /// A TOML file of `esr serve` settings: its store keys (`data-dir`,
        /// `database`, …) apply here; flags and the environment win.
        #[arg(long, env = "ESR_CONFIG", value_name = "FILE")]
        config: Option<PathBuf>,
        /// The data directory of a deployment (its store; refused if it holds none).
        #[arg(long, env = "ESR_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

impl Command {
    /// The config file of a subcommand that takes one.
    fn config_file(&self) -> Option<&Path> {
        match self {
            Command::Serve(args) => args.config.as_deref(),
            Command::Seed { config, .. } | Command::Check { config, .. } => config.as_deref(),
            _ => None,
        }
    }
}

#[derive(Subcommand)]
enum OrganizationsCommand {
    /// Create an organization and print its id.
    Create {
        /// The organization's name.
        name: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List organizations.
    List(AdminArgs),
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Create an API key; it is printed this once.
    Create {
        /// The id of the organization whose records the key reads.
        #[arg(long)]
        organization: String,
        /// A name to tell the key by (e.g. the integration using it).
        #[arg(long)]
        name: String,
        /// A read scope; repeat for several (default: every read scope).
        #[arg(long = "scope", value_parser = clap::builder::PossibleValuesParser::new(esr_auth::keys::ALL_READ_SCOPES))]
        scopes: Vec<String>,
        /// When the key stops working (RFC 3339).
        #[arg(long, conflicts_with = "expires_in")]
        expires_at: Option<String>,
        /// How long until the key stops working: 90d, 12h, 30m.
        #[arg(long)]
        expires_in: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List keys (never the keys themselves), with when each was last used.
    List {
        /// Only this organization's keys.
        #[arg(long)]
        organization: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Revoke a key at once.
    Revoke {
        /// The key's id (`esr keys list`), not the key.
        key_id: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Replace a key without downtime: a new key of the same organization,
    /// name, scopes and expiry is printed this once; the old one keeps
    /// working for the server's --key-rotation-overlap-hours.
    Rotate {
        /// The key's id (`esr keys list`), not the key.
        key_id: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

#[derive(Subcommand)]
enum PluginsCommand {
    /// Validate a component without serving it and print what it serves.
    Check {
        /// The component file (`.wasm`).
        file: PathBuf,
    },
    /// Make a running server re-read its plugins directory.
    Reload(AdminArgs),
    /// Print the OpenAPI document the components in a plugins directory
    /// make (what the server answers at /v1/openapi.json).
    Openapi {
        /// The directory of the components (`.wasm`) whose document to print.
        #[arg(long, env = "ESR_PLUGINS_DIR", default_value = "target/plugins")]
        plugins_dir: PathBuf,
    },
}

/// How a subcommand reaches a running server's admin listener.
#[derive(clap::Args)]
struct AdminArgs {
    /// The admin listener's URL.
    #[arg(long, env = "ESR_ADMIN_URL", default_value = "http://127.0.0.1:8081")]
    admin_url: String,
    /// The server's data directory, where its admin token is (or set
    /// ESR_ADMIN_TOKEN: at least 128 bits, e.g. 32 hex or 22 base64 characters).
    #[arg(long, env = "ESR_DATA_DIR", default_value = "./data")]
    data_dir: PathBuf,
}

/// Which store: sled in the data directory, or a PostgreSQL database.
#[derive(clap::Args)]
struct DatabaseArgs {
    /// A PostgreSQL database (`postgres://…` or `postgresql://…`) instead
    /// of sled in the data directory; the data directory then holds only
    /// the compile cache and this machine's copy of the admin token (the
    /// database keeps only its SHA-256).
    #[arg(long = "database", env = "ESR_DATABASE_URL")]
    url: Option<String>,
    /// Connections to the database this process keeps open at most for
    /// tenants' work (default 16), beside 2 for authentication and health;
    /// hosts × (this + 2) must stay under the server's max_connections.
    #[arg(long = "database-pool-size", env = "ESR_DATABASE_POOL_SIZE", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pool_size: Option<u32>,
    /// A streaming replica of the database that serves public reads
    /// (repeatable; the environment variable takes a comma-separated list).
    /// Writes, and reads of what this host has just written, go to the primary.
    #[arg(long = "database-replica-url", env = "ESR_DATABASE_REPLICA_URLS", value_delimiter = ',')]
    replica_urls: Vec<String>,
    /// A replica further behind than this (milliseconds) is skipped until it catches up.
    #[arg(long = "replica-max-lag-ms", env = "ESR_REPLICA_MAX_LAG_MS", default_value_t = 1000)]
    replica_max_lag_ms: u64,
}

impl DatabaseArgs {
    fn replicas(&self) -> esr::store::postgres::Replicas {
        esr::store::postgres::Replicas {
            urls: self.replica_urls.clone(),
            max_lag: std::time::Duration::from_millis(self.replica_max_lag_ms),
        }
    }

    fn open(&self, data_dir: &Path) -> anyhow::Result<std::sync::Arc<dyn esr::store::Store>> {
        let options = esr::store::StoreOptions {
            pool_size: self.pool_size,
            ..esr::store::StoreOptions::at(self.url.as_deref(), data_dir)
        };
        Ok(esr::store::open_with(&options)?)
    }
}

#[derive(clap::Args)]
struct ServeArgs {
    /// A TOML file of settings: each key a flag's name without `--`
    /// (`rate-limit-burst = 50`); flags and the environment win over it.
    #[arg(long, env = "ESR_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address of the public API (port 0 picks a free port).
    #[arg(long, env = "ESR_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Address of the admin listener (keep it on loopback).
    #[arg(long, env = "ESR_ADMIN_LISTEN", default_value = "127.0.0.1:8081")]
    admin_listen: SocketAddr,
    /// Let --admin-listen be an address other than loopback (the admin
    /// listener creates organizations and keys and imports data).
    #[arg(long, env = "ESR_ADMIN_ALLOW_REMOTE", value_parser = clap::builder::BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    admin_allow_remote: bool,
    /// Connections the admin listener holds at once from one client address
    /// (an IPv6 /64), of its 32; at either cap, the oldest connection that
    /// has not presented the admin token and is between requests is closed
    /// to admit the new one.
    #[arg(long, env = "ESR_ADMIN_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=32))]
    admin_max_connections_per_address: u32,
    /// Seconds an admin connection may take to send a request's headers,
    /// counted from when the server starts waiting for them, before it is
    /// closed (short: a connection holds an admin place until it authenticates).
    #[arg(long, env = "ESR_ADMIN_HEADER_READ_TIMEOUT_SECS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    admin_header_read_timeout_secs: u64,
    /// Where the database lives (with --database: the compile cache), and
    /// the admin token (`admin-token`, generated on first start) unless
    /// ESR_ADMIN_TOKEN sets it: at least 128 bits of entropy (e.g. 32 hex or
    /// 22 base64 characters), else esr refuses to start.
    #[arg(long, env = "ESR_DATA_DIR", default_value = "./data")]
    data_dir: PathBuf,
    #[command(flatten)]
    database: DatabaseArgs,
    /// The directory of built components (`make plugins` fills it).
    #[arg(long, env = "ESR_PLUGINS_DIR", default_value = "target/plugins")]
    plugins_dir: PathBuf,
    /// Where compiled components are kept so that a restart skips compiling
    /// (default: <data-dir>/component-cache). It must belong to the user
    /// esr runs as and be writable by no one else, or it is not used.
    #[arg(long, env = "ESR_COMPONENT_CACHE_DIR")]
    component_cache_dir: Option<PathBuf>,
    /// Create the demo data set and keys when the data directory is empty.
    #[arg(long, env = "ESR_DEMO", value_parser = clap::builder::BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    demo: bool,
    /// Log format.
    #[arg(long, env = "ESR_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Base URL clients reach this API at (default: http:// + the bound address).
    #[arg(long, env = "ESR_PUBLIC_URL", value_parser = parse_public_url)]
    public_url: Option<String>,
    /// Memory cap of one component call, in MiB.
    #[arg(long, env = "ESR_PLUGIN_MEMORY_MIB", default_value_t = 64, value_parser = clap::value_parser!(u16).range(2..=1024))]
    plugin_memory_mib: u16,
    /// Time limit of one component call, in milliseconds: guest code and
    /// its waits in WASI (a sleep, a clock poll) alike.
    #[arg(long, env = "ESR_PLUGIN_DEADLINE_MS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    plugin_deadline_ms: u64,
    /// Component calls one organization may run at once, of the 64 the
    /// server runs (default: twice the cores, at least 4, at most 32).
    #[arg(long, env = "ESR_PLUGIN_SLOTS_PER_ORGANIZATION", value_parser = clap::value_parser!(u16).range(1..=64))]
    plugin_slots_per_organization: Option<u16>,
    /// Milliseconds a request may wait for a component call slot (its
    /// organization's, then the server's) before it is answered 503.
    #[arg(long, env = "ESR_PLUGIN_SLOT_WAIT_MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    plugin_slot_wait_ms: u64,
    /// Requests per minute per API key (sustained).
    #[arg(long, env = "ESR_RATE_LIMIT_PER_MINUTE", default_value_t = 600, value_parser = clap::value_parser!(u32).range(1..))]
    rate_limit_per_minute: u32,
    /// Requests per API key at once (the bucket's size).
    #[arg(long, env = "ESR_RATE_LIMIT_BURST", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    rate_limit_burst: u32,
    /// Requests per minute per API key to /v1/agent/config.
    #[arg(long, env = "ESR_AGENT_CONFIG_RATE_LIMIT_PER_MINUTE", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    agent_config_rate_limit_per_minute: u32,
    /// Requests at once per API key to /v1/agent/config.
    #[arg(long, env = "ESR_AGENT_CONFIG_RATE_LIMIT_BURST", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    agent_config_rate_limit_burst: u32,
    /// Requests per minute per client address without a valid key (and
    /// before the lookup of a key not known valid); health's too, in
    /// buckets of its own.
    #[arg(long, env = "ESR_ADDRESS_RATE_LIMIT_PER_MINUTE", default_value_t = 120, value_parser = clap::value_parser!(u32).range(1..))]
    address_rate_limit_per_minute: u32,
    /// Requests at once per client address without a valid key.
    #[arg(long, env = "ESR_ADDRESS_RATE_LIMIT_BURST", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    address_rate_limit_burst: u32,
    /// Requests in progress at once; more are answered 503 at once.
    #[arg(long, env = "ESR_MAX_CONCURRENT_REQUESTS", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_concurrent_requests: u32,
    /// Seconds a connection may take to send a request's headers, counted
    /// from when the server starts waiting for them, before it is closed.
    #[arg(long, env = "ESR_HEADER_READ_TIMEOUT_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    header_read_timeout_secs: u64,
    /// Seconds a keep-alive connection may stay open with no request in
    /// progress and nothing received before it is closed.
    #[arg(long, env = "ESR_IDLE_TIMEOUT_SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    idle_timeout_secs: u64,
    /// Days the change feed keeps deletion events (`GET /v1/changes`); a
    /// client that has not read the feed for longer is told to list again
    /// (`410`). 0 prunes them within seconds.
    #[arg(long, env = "ESR_CHANGE_RETENTION_DAYS", default_value_t = 30, value_parser = clap::value_parser!(u32).range(0..=3650))]
    change_retention_days: u32,
    /// Connections open at once on the public listener; more are closed at
    /// accept (default: half of what the open-file limit leaves, at most 10,000).
    #[arg(long, env = "ESR_MAX_CONNECTIONS", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: Option<u32>,
    /// Connections open at once from one client address (an IPv6 /64);
    /// more are closed at accept. Raise it behind a proxy or a large NAT.
    #[arg(long, env = "ESR_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections_per_address: u32,
    /// Serve every group with the plugins' logic compiled into this binary
    /// instead of the components: a baseline for measurements only (no
    /// isolation, deadlines or memory caps). Needs a build with
    /// `--features native-baseline`.
    #[arg(long)]
    native_handlers: bool,
    /// Memory cap of one report importer call, in MiB.
    #[arg(long, env = "ESR_IMPORTER_MEMORY_MIB", default_value_t = 512, value_parser = clap::value_parser!(u16).range(16..=4096))]
    importer_memory_mib: u16,
    /// Time limit of one report importer call, in milliseconds.
    #[arg(long, env = "ESR_IMPORTER_DEADLINE_MS", default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    importer_deadline_ms: u64,
    /// The largest import batch (or scanner report) the admin listener accepts, in MiB.
    #[arg(long, env = "ESR_IMPORT_MAX_MIB", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=4096))]
    import_max_mib: u16,
    /// The most lines an import batch may hold; more is `413`. What a
    /// batch holds in memory while it is checked and written grows with
    /// its lines as much as with its bytes.
    #[arg(long, env = "ESR_IMPORT_MAX_LINES", default_value_t = esr_write::ingest::DEFAULT_MAX_LINES, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    import_max_lines: u32,
    /// The most findings one scanner report may make (its entries, after a
    /// format's fan-out); more is `413`. A report is written all or
    /// nothing in one batch, so this bounds what its write holds in memory.
    #[arg(long, env = "ESR_IMPORT_MAX_FINDINGS", default_value_t = esr_write::reports::DEFAULT_MAX_FINDINGS, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    import_max_findings: u32,
    /// Hours a rotated API key (`esr keys rotate`) keeps working beside
    /// its successor (fractions allowed), unless it expires sooner.
    #[arg(long, env = "ESR_KEY_ROTATION_OVERLAP_HOURS", default_value_t = 24.0, value_parser = overlap_hours)]
    key_rotation_overlap_hours: f64,
    #[command(flatten)]
    webhooks: webhooks_cli::WebhookArgs,
    #[command(flatten)]
    oauth: oauth_cli::OAuthArgs,
    /// Days the audit trail keeps its entries.
    #[arg(long, env = "ESR_AUDIT_RETENTION_DAYS", default_value_t = esr_audit::DEFAULT_RETENTION_DAYS, value_parser = clap::value_parser!(u32).range(1..=3650))]
    audit_retention_days: u32,
    /// Keep no audit trail (to measure what it costs, or where a proxy in
    /// front keeps one).
    #[arg(long, env = "ESR_NO_AUDIT_TRAIL")]
    no_audit_trail: bool,
}

/// More than 0 hours and at most a year of them.
fn overlap_hours(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(hours) if hours.is_finite() && hours > 0.0 && hours <= 24.0 * 365.0 => Ok(hours),
        _ => Err(format!("not a number of hours more than 0 and at most a year: {text}")),
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ESR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,wasmtime=warn,cranelift=warn"));
    // Colours only for a person at a terminal: piped or collected logs get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn seed(
    data_dir: &std::path::Path,
    database: &DatabaseArgs,
    endpoints: usize,
    findings_per_endpoint: usize,
    team_scopes: usize,
) -> anyhow::Result<()> {
    let db = database.open(data_dir)?;
    let started = std::time::Instant::now();
    let spec = esr_demo::DemoSpec { endpoints, findings_per_endpoint };
    let keys = esr_demo::seed::seed_generated(db.as_ref(), data_dir, spec, team_scopes, |done| {
        if done % 1000 == 0 || done == endpoints {
            eprint!("\rseeded {done}/{endpoints} endpoints");
        }
    })?;
    eprintln!();
    for key in &keys.organizations {
        println!(
            "{}: organization {} ({} endpoints, {} findings) in {:.1}s; key in {}",
            key.name,
            key.organization_id,
            endpoints,
            endpoints * findings_per_endpoint,
            started.elapsed().as_secs_f64(),
            data_dir.join(esr_demo::seed::SEED_KEYS_FILE).display()
        );
    }
    Ok(())
}

/// Loads one component exactly as `esr serve` would and describes it.
fn check_plugin(file: &std::path::Path) -> anyhow::Result<()> {
    let engine = ComponentEngine::new(Limits::default())?;
    let plugin = match esr_runtime::load_component(&engine, file)? {
        esr_runtime::LoadedComponent::Group(plugin) => plugin,
        esr_runtime::LoadedComponent::Importer(importer) => {
            let info = &importer.info;
            println!("{}: ok", file.display());
            println!("  importer     {}", info.format);
            println!("  version      {}", info.version);
            println!("  wit package  esr:plugin@{}", info.wit_version);
            println!("  sha256       {}", info.sha256);
            println!("  description  {}", info.description);
            return Ok(());
        }
    };
    let info = &plugin.info;
    println!("{}: ok", file.display());
    println!("  group        {}", info.group);
    println!("  version      {}", info.version);
    println!("  wit package  esr:plugin@{}", info.wit_version);
    println!("  sha256       {}", info.sha256);
    println!("  reads        {}", info.reads.names().join(", "));
    if !info.sort_keys.is_empty() {
        println!("  sort keys    {}", info.sort_keys.join(", "));
    }
    println!("  parameters");
    for parameter in &info.parameters {
        let required = if parameter.required { " (required)" } else { "" };
        println!("    {:<22} {}{required}", parameter.name, parameter.description);
        println!("    {:<22} {}", "", parameter.schema);
    }
    Ok(())
}

fn print_openapi(plugins_dir: &Path) -> anyhow::Result<()> {
    let engine = ComponentEngine::new(Limits::default())?;
    let plugins = esr_runtime::ComponentSet::load_dir(&engine, plugins_dir)?;
    std::io::Write::write_all(&mut std::io::stdout().lock(), esr_api::openapi::rendered(&plugins))?;
    Ok(())
}

fn admin_client(admin: &AdminArgs) -> anyhow::Result<AdminClient> {
    AdminClient::new(&admin.admin_url, &admin.data_dir)
}

/// `POST /admin/v1/plugins/reload` on a running server.
fn reload_plugins(admin: &AdminArgs) -> anyhow::Result<()> {
    let body = admin_client(admin)?.post_json("/admin/v1/plugins/reload", &json!({}))?;
    for plugin in body["loaded"].as_array().into_iter().flatten() {
        println!("{:<24} {:<16} {}", text(&plugin["group"]), text(&plugin["version"]), text(&plugin["content_hash"]));
    }
    Ok(())
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or("-")
}

fn organizations(command: OrganizationsCommand) -> anyhow::Result<()> {
    match command {
        OrganizationsCommand::Create { name, admin } => {
            let created = admin_client(&admin)?.post_json("/admin/v1/organizations", &json!({"name": name}))?;
            // The id alone on standard output: `ORG=$(esr organizations create …)`.
            println!("{}", text(&created["organization_id"]));
            eprintln!("created organization {}", text(&created["name"]));
        }
        OrganizationsCommand::List(admin) => {
            for organization in
                admin_client(&admin)?.get("/admin/v1/organizations")?["data"].as_array().into_iter().flatten()
            {
                println!("{}  {}", text(&organization["organization_id"]), text(&organization["name"]));
            }
        }
    }
    Ok(())
}

fn keys(command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Create { organization, name, scopes, expires_at, expires_in, admin } => {
            let scopes: Vec<String> = if scopes.is_empty() {
                esr_auth::keys::ALL_READ_SCOPES.iter().map(|scope| (*scope).to_owned()).collect()
            } else {
                scopes
            };
            let expires_at = match expires_in {
                Some(lifetime) => Some(oauth_cli::expires_in(&lifetime)?),
                None => expires_at,
            };
            let body =
                json!({"organization_id": organization, "name": name, "scopes": scopes, "expires_at": expires_at});
            let created = admin_client(&admin)?.post_json("/admin/v1/keys", &body)?;
            println!("{}", text(&created["api_key"]));
            eprintln!(
                "key {} for organization {} ({}); shown this once, store it now",
                text(&created["id"]),
                text(&created["organization_id"]),
                scopes.join(", ")
            );
        }
        KeysCommand::List { organization, admin } => {
            let path = match organization {
                Some(organization) => format!("/admin/v1/keys?organizationId={organization}"),
                None => "/admin/v1/keys".to_owned(),
            };
            for key in admin_client(&admin)?.get(&path)?["data"].as_array().into_iter().flatten() {
                let state = match (key["revoked_at"].as_str(), key["expires_at"].as_str()) {
                    (Some(at), _) => format!("revoked {at}"),
                    (None, Some(at)) => format!("expires {at}"),
                    (None, None) => "active".to_owned(),
                };
                let scopes: Vec<&str> =
                    key["scopes"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
                let used = key["last_used_at"].as_str().map_or("never used".to_owned(), |at| format!("used {at}"));
                println!(
                    "{}  {}  {}…  {:<20}  {}  {}  {}",
                    text(&key["id"]),
                    text(&key["organization_id"]),
                    text(&key["prefix"]),
                    text(&key["name"]),
                    state,
                    used,
                    scopes.join(",")
                );
            }
        }
        KeysCommand::Revoke { key_id, admin } => {
            admin_client(&admin)?.delete(&format!("/admin/v1/keys/{key_id}"))?;
            println!("revoked {key_id}");
        }
        KeysCommand::Rotate { key_id, admin } => {
            let created = admin_client(&admin)?.post_json(&format!("/admin/v1/keys/{key_id}/rotate"), &json!({}))?;
            println!("{}", text(&created["api_key"]));
            eprintln!(
                "key {} replaces {key_id}, which keeps working until {}; shown this once, store it now",
                text(&created["id"]),
                text(&created["rotated_key_expires_at"]),
            );
        }
    }
    Ok(())
}

/// `esr import --report`: one report through the admin route; prints what
/// changed.
fn import_report(
    organization: &str,
    report: &Path,
    request: &esr::admin_client::ReportRequest,
    as_json: bool,
    admin: &AdminArgs,
) -> anyhow::Result<()> {
    let outcome = admin_client(admin)?.import_report(organization, report, request)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&outcome)?);
        return Ok(());
    }
    let count = |name: &str| outcome[name].as_u64().unwrap_or(0);
    for warning in outcome["warnings"].as_array().into_iter().flatten() {
        eprintln!("warning: {}", text(warning));
    }
    println!(
        "{}{} report from {} ({}): {} created, {} updated, {} unchanged, {} resolved, {} reopened, {} skipped",
        if outcome["dry_run"] == true { "dry run: nothing written; " } else { "" },
        text(&outcome["format"]),
        text(&outcome["scanner"]),
        text(&outcome["scanned_at"]),
        count("created"),
        count("updated"),
        count("unchanged"),
        count("resolved"),
        count("reopened"),
        outcome["skipped"].as_array().map_or(0, Vec::len),
    );
    println!(
        "endpoints: {} created; remediation targets: {} created, {} updated",
        count("endpoints_created"),
        count("targets_created"),
        count("targets_updated")
    );
    if let Some(batch) = outcome["batch_id"].as_str() {
        println!("batch {batch} (the cause its findings' and targets' history entries name)");
    }
    for skipped in outcome["skipped"].as_array().into_iter().flatten() {
        println!("skipped {}: {}", text(&skipped["entry"]), text(&skipped["reason"]));
    }
    for older in outcome["older_than_last"].as_array().into_iter().flatten() {
        println!(
            "endpoint {}: a report from {} was imported already; this older one changed nothing there",
            text(&older["endpoint_id"]),
            text(&older["last_imported_at"])
        );
    }
    Ok(())
}

fn import(
    organization: &str,
    collection: &str,
    file: &Path,
    batch_lines: usize,
    dry_run: bool,
    admin: &AdminArgs,
) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let client = admin_client(admin)?;
    let batches = esr::admin_client::Batches { lines: batch_lines, bytes: esr::admin_client::BATCH_BYTES, dry_run };
    let totals = client.import(organization, collection, file, &batches)?;
    let records = totals.created + totals.updated + totals.unchanged;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{}{records} records in {seconds:.1}s ({:.0}/s): {} created, {} updated, {} unchanged",
        if dry_run { "dry run: nothing written; " } else { "" },
        records as f64 / seconds.max(1e-9),
        totals.created,
        totals.updated,
        totals.unchanged
    );
    Ok(())
}

/// `esr check`: the store's own consistency check, offline.
fn check(data_dir: &Path, database: &DatabaseArgs) -> anyhow::Result<()> {
    // A directory without a store is refused, not made into an empty one.
    let db = match database.url {
        Some(_) => database.open(data_dir)?,
        None => esr::store::open_existing_sled(data_dir)?,
    };
    let mut problems = db.verify_indexes()?;
    problems.extend(esr_write::pairing::verify(db.as_ref())?);
    if problems.is_empty() {
        let place = if database.url.is_some() { "the database".to_owned() } else { data_dir.display().to_string() };
        println!("{place}: every index agrees with the records, and every finding with its remediation target");
        return Ok(());
    }
    for problem in &problems {
        println!("{problem}");
    }
    anyhow::bail!("{} problem(s) found", problems.len())
}

fn main() -> ExitCode {
    let config_file::Parsed { cli, warnings } =
        match config_file::parse::<Cli>(std::env::args_os().collect(), |cli| cli.command.config_file()) {
            Ok(parsed) => parsed,
            Err(failure) => return failure.exit(),
        };
    // serve logs them once its log format is set; other commands say them now.
    let warnings = if matches!(cli.command, Command::Serve(_)) {
        warnings
    } else {
        warnings.iter().for_each(|warning| eprintln!("esr: warning: {warning}"));
        Vec::new()
    };
    // Everything esr writes (the data directory: sled's files, the cursor
    // key, enrollment tokens, the admin token) is for its owner alone.
    rustix::process::umask(rustix::fs::Mode::RWXG | rustix::fs::Mode::RWXO);
    let result = match cli.command {
        Command::Serve(args) => {
            init_logging(args.log_format);
            warnings.iter().for_each(|warning| tracing::warn!("{warning}"));
            let options = ServeOptions {
                listen: args.listen,
                admin_listen: args.admin_listen,
                admin_allow_remote: args.admin_allow_remote,
                admin_max_connections_per_address: args.admin_max_connections_per_address as usize,
                admin_header_read_timeout: std::time::Duration::from_secs(args.admin_header_read_timeout_secs),
                data_dir: args.data_dir,
                database_replicas: args.database.replicas(),
                database_url: args.database.url,
                database_pool_size: args.database.pool_size,
                plugins_dir: args.plugins_dir,
                component_cache_dir: args.component_cache_dir,
                demo: args.demo,
                public_url: args.public_url.map(|url| url.trim_end_matches('/').to_owned()),
                plugin_memory_mib: usize::from(args.plugin_memory_mib),
                plugin_deadline_ms: args.plugin_deadline_ms,
                importer_memory_mib: usize::from(args.importer_memory_mib),
                importer_deadline_ms: args.importer_deadline_ms,
                plugin_slots_per_organization: args.plugin_slots_per_organization.map(usize::from),
                plugin_slot_wait: std::time::Duration::from_millis(args.plugin_slot_wait_ms),
                import_max_bytes: usize::from(args.import_max_mib) << 20,
                import_max_lines: args.import_max_lines as usize,
                import_max_findings: args.import_max_findings as usize,
                rate_limit: Quota { per_minute: args.rate_limit_per_minute, burst: args.rate_limit_burst },
                agent_config_rate_limit: Quota {
                    per_minute: args.agent_config_rate_limit_per_minute,
                    burst: args.agent_config_rate_limit_burst,
                },
                address_rate_limit: Quota {
                    per_minute: args.address_rate_limit_per_minute,
                    burst: args.address_rate_limit_burst,
                },
                max_concurrent_requests: args.max_concurrent_requests as usize,
                max_connections: args.max_connections.map(|max| max as usize),
                max_connections_per_address: args.max_connections_per_address as usize,
                header_read_timeout: std::time::Duration::from_secs(args.header_read_timeout_secs),
                idle_timeout: std::time::Duration::from_secs(args.idle_timeout_secs),
                native_handlers: args.native_handlers,
                change_retention: std::time::Duration::from_secs(u64::from(args.change_retention_days) * 86_400),
                key_rotation_overlap: std::time::Duration::from_secs_f64(args.key_rotation_overlap_hours * 3600.0),
                webhooks: Default::default(),
                oauth: Default::default(),
                audit: (!args.no_audit_trail).then(|| esr_audit::AuditSettings {
                    retention_days: args.audit_retention_days,
                    ..Default::default()
                }),
            };
            let settings = args.webhooks.settings().and_then(|webhooks| Ok((webhooks, args.oauth.settings()?)));
            settings.map(|(webhooks, oauth)| ServeOptions { webhooks, oauth, ..options }).and_then(|options| {
                tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()
                    .map_err(anyhow::Error::from)
                    .and_then(|runtime| runtime.block_on(serve(options)))
            })
        }
        Command::Seed { data_dir, database, endpoints, findings_per_endpoint, scopes, .. } => {
            seed(&data_dir, &database, endpoints as usize, findings_per_endpoint as usize, scopes as usize)
        }
        Command::Plugins(PluginsCommand::Check { file }) => check_plugin(&file),
        Command::Plugins(PluginsCommand::Reload(admin)) => reload_plugins(&admin),
        Command::Plugins(PluginsCommand::Openapi { plugins_dir }) => print_openapi(&plugins_dir),
        Command::Organizations(command) => organizations(command),
        Command::Keys(command) => keys(command),
        Command::Webhooks(command) => webhooks_cli::run(command),
        Command::Clients(command) => oauth_cli::clients(command),
        Command::SigningKeys(command) => oauth_cli::signing_keys(command),
        Command::Audit(args) => audit_cli::run(args),
        Command::Import {
            organization,
            collection,
            file,
            batch_lines,
            report,
            format,
            endpoint,
            create_endpoint,
            scanner,
            dry_run,
            json,
            admin,
        } => match (report, collection, file) {
            (Some(report), _, _) => import_report(
                &organization,
                &report,
                &esr::admin_client::ReportRequest { format, endpoint, create_endpoint, scanner, dry_run },
                json,
                &admin,
            ),
            (None, Some(collection), Some(file)) => {
                import(&organization, &collection, &file, batch_lines as usize, dry_run, &admin)
            }
            _ => Err(anyhow::anyhow!("give --collection and a file, or --report")),
        },
        Command::Delete { organization, collection, id, admin } => {
            admin_client(&admin).and_then(|client| client.delete_record(&organization, &collection, &id)).map(|()| {
                println!("deleted {collection} {id}");
            })
        }
        Command::Check { data_dir, database, .. } => check(&data_dir, &database),
        Command::Migrate { from, to } => esr::migrate::migrate(&from, &to).map(|copied| {
            println!(
                "copied {} organizations, {} API keys, {} records, {} secrets, {} documents (webhooks, API clients, \
                 signing keys) and {} audit entries; every index agrees with the records",
                copied.organizations,
                copied.api_keys,
                copied.records,
                copied.secrets,
                copied.documents,
                copied.audit_entries
            );
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("esr: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// `--public-url`: at most [`esr_api::MAX_PUBLIC_URL_CHARS`] characters,
/// the bound the OpenAPI document states for the URLs built from it.
fn parse_public_url(text: &str) -> Result<String, String> {
    let limit = esr_api::MAX_PUBLIC_URL_CHARS;
    if text.chars().count() > limit {
        return Err(format!("longer than {limit} characters"));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Every command and every argument of every command says what it is.
    #[test]
    fn every_argument_has_a_description() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let path = format!("{path} {}", command.get_name());
            if command.get_about().is_none() {
                missing.push(path.clone());
            }
            for argument in command.get_arguments() {
                let builtin = matches!(argument.get_id().as_str(), "help" | "version");
                if !builtin && argument.get_help().is_none() && argument.get_long_help().is_none() {
                    missing.push(format!("{path} {}", argument.get_id()));
                }
            }
            for sub in command.get_subcommands() {
                walk(sub, &path, missing);
            }
        }
        let command = Cli::command();
        command.clone().debug_assert();
        let mut missing = Vec::new();
        walk(&command, "", &mut missing);
        assert!(missing.is_empty(), "without a description: {missing:?}");
    }
}
