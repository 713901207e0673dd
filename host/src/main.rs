//! The `esr` command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use esr::plugins::{Limits, LoadedPlugin, PluginEngine};
use esr::server::{ServeOptions, serve};

#[derive(Parser)]
#[command(name = "esr", version, about = "Endpoint security remediation: the public read API")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API.
    Serve(ServeArgs),
    /// Add a generated organization of a given size (for benchmarks);
    /// its key goes to <data-dir>/seed-keys.json. Needs the data directory
    /// to itself: stop the server first.
    Seed {
        #[arg(long, env = "ESR_DATA_DIR", default_value = "./data")]
        data_dir: PathBuf,
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        endpoints: u32,
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=10_000))]
        findings_per_endpoint: u32,
    },
    /// Work with components.
    #[command(subcommand)]
    Plugins(PluginsCommand),
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
}

/// How a subcommand reaches a running server's admin listener.
#[derive(clap::Args)]
struct AdminArgs {
    /// The admin listener's URL.
    #[arg(long, env = "ESR_ADMIN_URL", default_value = "http://127.0.0.1:8081")]
    admin_url: String,
    /// The server's data directory, where its admin token is (or set ESR_ADMIN_TOKEN).
    #[arg(long, env = "ESR_DATA_DIR", default_value = "./data")]
    data_dir: PathBuf,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address of the public API (port 0 picks a free port).
    #[arg(long, env = "ESR_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Address of the admin listener (keep it on loopback).
    #[arg(long, env = "ESR_ADMIN_LISTEN", default_value = "127.0.0.1:8081")]
    admin_listen: SocketAddr,
    /// Where the database lives.
    #[arg(long, env = "ESR_DATA_DIR", default_value = "./data")]
    data_dir: PathBuf,
    /// The directory of built components (`make plugins` fills it).
    #[arg(long, env = "ESR_PLUGINS_DIR", default_value = "target/plugins")]
    plugins_dir: PathBuf,
    /// Create the demo data set and keys when the data directory is empty.
    #[arg(long, env = "ESR_DEMO", value_parser = clap::builder::BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    demo: bool,
    /// Log format.
    #[arg(long, env = "ESR_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Base URL clients reach this API at (default: http:// + the bound address).
    #[arg(long, env = "ESR_PUBLIC_URL")]
    public_url: Option<String>,
    /// Memory cap of one component call, in MiB.
    #[arg(long, env = "ESR_PLUGIN_MEMORY_MIB", default_value_t = 64, value_parser = clap::value_parser!(u16).range(2..=1024))]
    plugin_memory_mib: u16,
    /// CPU time limit of one component call, in milliseconds.
    #[arg(long, env = "ESR_PLUGIN_DEADLINE_MS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    plugin_deadline_ms: u64,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ESR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,wasmtime=warn,cranelift=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn seed(data_dir: &std::path::Path, endpoints: usize, findings_per_endpoint: usize) -> anyhow::Result<()> {
    let db = esr::store::Database::open(data_dir)?;
    let started = std::time::Instant::now();
    let spec = esr::demo::DemoSpec { endpoints, findings_per_endpoint };
    let keys = esr::seed::seed_generated(&db, data_dir, spec, |done| {
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
            data_dir.join(esr::seed::SEED_KEYS_FILE).display()
        );
    }
    Ok(())
}

/// Loads one component exactly as `esr serve` would and describes it.
fn check_plugin(file: &std::path::Path) -> anyhow::Result<()> {
    let engine = PluginEngine::new(Limits::default())?;
    let plugin = LoadedPlugin::load(&engine, file)?;
    let info = &plugin.info;
    println!("{}: ok", file.display());
    println!("  group        {}", info.group);
    println!("  version      {}", info.version);
    println!("  wit package  esr:plugin@{}", info.wit_version);
    println!("  sha256       {}", info.sha256);
    if !info.sort_keys.is_empty() {
        println!("  sort keys    {}", info.sort_keys.join(", "));
    }
    println!("  parameters");
    for (name, description) in &info.parameters {
        println!("    {name:<22} {description}");
    }
    Ok(())
}

/// `POST /admin/v1/plugins/reload` on a running server.
fn reload_plugins(admin: &AdminArgs) -> anyhow::Result<()> {
    let token = esr::http::admin::read_admin_token(&admin.data_dir)?;
    let url = format!("{}/admin/v1/plugins/reload", admin.admin_url.trim_end_matches('/'));
    let response = reqwest::blocking::Client::new().post(&url).bearer_auth(token).send().map_err(|error| {
        anyhow::anyhow!("no esr server answers at {} ({error}); start one with `esr serve`", admin.admin_url)
    })?;
    let status = response.status();
    let body: serde_json::Value = response.json().unwrap_or_default();
    if !status.is_success() {
        anyhow::bail!("reload refused ({status}): {}", body["error"].as_str().unwrap_or("no reason given"));
    }
    for plugin in body["loaded"].as_array().into_iter().flatten() {
        println!(
            "{:<24} {:<16} {}",
            plugin["group"].as_str().unwrap_or_default(),
            plugin["version"].as_str().unwrap_or_default(),
            plugin["content_hash"].as_str().unwrap_or_default()
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => {
            init_logging(args.log_format);
            let options = ServeOptions {
                listen: args.listen,
                admin_listen: args.admin_listen,
                data_dir: args.data_dir,
                plugins_dir: args.plugins_dir,
                demo: args.demo,
                public_url: args.public_url.map(|url| url.trim_end_matches('/').to_owned()),
                plugin_memory_mib: usize::from(args.plugin_memory_mib),
                plugin_deadline_ms: args.plugin_deadline_ms,
            };
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|runtime| runtime.block_on(serve(options)))
        }
        Command::Seed { data_dir, endpoints, findings_per_endpoint } => {
            seed(&data_dir, endpoints as usize, findings_per_endpoint as usize)
        }
        Command::Plugins(PluginsCommand::Check { file }) => check_plugin(&file),
        Command::Plugins(PluginsCommand::Reload(admin)) => reload_plugins(&admin),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("esr: {error:#}");
            ExitCode::FAILURE
        }
    }
}
