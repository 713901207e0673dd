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
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address of the public API (port 0 picks a free port).
    #[arg(long, env = "ESR_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => {
            init_logging(args.log_format);
            let options = ServeOptions {
                listen: args.listen,
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
        Command::Plugins(PluginsCommand::Check { file }) => check_plugin(&file),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("esr: {error:#}");
            ExitCode::FAILURE
        }
    }
}
