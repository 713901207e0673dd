//! `esr serve`: opens the store, loads the components and serves the API.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::http::admin::{self, AdminState};
use crate::http::limits::{Quota, RateLimits};
use crate::http::{self, AppState, SharedState};
use crate::plugins::{Limits, PluginEngine, PluginRegistry, PluginSet};
use crate::seed::{self, DemoKeys};
use crate::store::Database;

/// Concurrent component calls; the instance pool holds more than this so
/// that a reload can pre-instantiate beside the calls in flight.
const MAX_CONCURRENT_CALLS: usize = 64;

/// How `esr serve` announces the addresses it bound, one line each on
/// standard output (scripts and tests read them; port 0 picks a free port).
const LISTENING: &str = "listening on ";
const ADMIN_LISTENING: &str = "admin listening on ";

/// Reads `esr serve`'s standard output until it has announced the public
/// and the admin address; `None` when the output ends first.
pub fn read_listening_addresses(lines: &mut impl Iterator<Item = std::io::Result<String>>) -> Option<(String, String)> {
    let (mut public, mut admin) = (None, None);
    while public.is_none() || admin.is_none() {
        let line = lines.next()?.ok()?;
        if let Some(address) = line.strip_prefix(ADMIN_LISTENING) {
            admin = Some(address.trim().to_owned());
        } else if let Some(address) = line.strip_prefix(LISTENING) {
            public = Some(address.trim().to_owned());
        }
    }
    public.zip(admin)
}

/// What `esr serve` needs, after flags, environment and defaults.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub data_dir: PathBuf,
    pub plugins_dir: PathBuf,
    pub demo: bool,
    /// The base URL clients reach the API at; defaults to the bound address.
    pub public_url: Option<String>,
    pub plugin_memory_mib: usize,
    pub plugin_deadline_ms: u64,
    /// The largest import batch accepted, in bytes.
    pub import_max_bytes: usize,
    /// The most lines an import batch may hold.
    pub import_max_lines: usize,
    /// Requests per API key.
    pub rate_limit: Quota,
    /// Requests per API key to `/v1/agent/config`.
    pub agent_config_rate_limit: Quota,
    /// Requests per client address without a valid key.
    pub address_rate_limit: Quota,
    /// Requests in progress at once; more are shed with `503`.
    pub max_concurrent_requests: usize,
    /// How long a connection may take to send a request's headers,
    /// including while idle between requests.
    pub header_read_timeout: Duration,
    /// Serve every group with the native baseline (measurement only).
    pub native_handlers: bool,
}

/// Runs the server until SIGINT or SIGTERM.
pub async fn serve(options: ServeOptions) -> anyhow::Result<()> {
    let db = Database::open(&options.data_dir)?;
    if options.demo {
        let seeded = tokio::task::block_in_place(|| seed::seed_demo_if_empty(&db, &options.data_dir))
            .context("creating the demo data")?;
        match seeded.or_else(|| seed::read_demo_keys(&options.data_dir)) {
            Some(keys) => print_demo_keys(&keys, &options),
            None => println!("demo: the data directory already holds data; no demo keys to show"),
        }
    }

    let limits = Limits {
        memory_bytes: options.plugin_memory_mib << 20,
        deadline: Duration::from_millis(options.plugin_deadline_ms),
    };
    let engine = PluginEngine::new(limits)?.with_cache(options.data_dir.join("component-cache"));
    let plugins = Arc::new(tokio::task::block_in_place(|| {
        PluginRegistry::load_serving(engine, &options.plugins_dir, options.native_handlers)
    })?);
    if options.native_handlers {
        tracing::warn!("serving with the native baseline: no isolation, deadlines or memory caps (measurement only)");
    }
    log_loaded(&plugins.current());
    tokio::spawn(reload_on_hangup(plugins.clone()));

    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .with_context(|| format!("cannot listen on {}", options.listen))?;
    let bound = listener.local_addr()?;
    let state = AppState::new(SharedState {
        cursor_key: db.secret("cursor")?,
        db: db.clone(),
        plugins,
        public_url: options.public_url.clone().unwrap_or_else(|| format!("http://{bound}")),
        plugin_permits: Arc::new(Semaphore::new(MAX_CONCURRENT_CALLS)),
        request_permits: Arc::new(Semaphore::new(options.max_concurrent_requests)),
        metrics: Arc::default(),
        component_health: std::sync::Mutex::default(),
        rate_limits: RateLimits::new(options.rate_limit, options.agent_config_rate_limit, options.address_rate_limit),
    });
    let admin_listener = tokio::net::TcpListener::bind(options.admin_listen)
        .await
        .with_context(|| format!("cannot listen on {} (admin)", options.admin_listen))?;
    let admin_bound = admin_listener.local_addr()?;
    let admin_state = AdminState {
        plugins: state.plugins.clone(),
        db: db.clone(),
        import_max_bytes: options.import_max_bytes,
        import_max_lines: options.import_max_lines,
        metrics: state.metrics.clone(),
        token_hash: Sha256::digest(admin::admin_token(&options.data_dir)?.as_bytes()).into(),
    };
    println!("{LISTENING}http://{bound}");
    println!("{ADMIN_LISTENING}http://{admin_bound}");
    tracing::info!(address = %bound, admin = %admin_bound, "listening");

    let (stop_admin, admin_stopped) = tokio::sync::oneshot::channel::<()>();
    let admin = tokio::spawn(
        axum::serve(admin_listener, admin::router(admin_state))
            .with_graceful_shutdown(async {
                let _ = admin_stopped.await;
            })
            .into_future(),
    );
    serve_public(listener, http::router(state), options.header_read_timeout, shutdown_signal()).await;
    let _ = stop_admin.send(());
    let _ = admin.await;
    db.flush()?;
    tracing::info!("stopped");
    Ok(())
}

/// How long requests in flight at shutdown may take to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Serves the public API until `shutdown`: each connection must send a
/// request's headers within `header_read_timeout` (idle keep-alive
/// connections too) or is closed, so slow and idle clients cannot hold
/// connections open; each request sees its client address. At shutdown the
/// listener closes, and requests in flight get [`SHUTDOWN_GRACE`] to finish.
async fn serve_public(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    header_read_timeout: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::ServiceExt;

    // HTTP/1 only: the version-sniffing auto builder waits for a first
    // byte without any timeout.
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(header_read_timeout);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(%error, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
            app.clone().oneshot(request.map(axum::body::Body::new))
        });
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended");
            }
        });
    }
    drop(listener);
    tracing::info!("shutting down: no new connections; letting requests in flight finish");
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await.is_err() {
        tracing::warn!(
            grace_seconds = SHUTDOWN_GRACE.as_secs(),
            "requests still in flight at the end of the grace period"
        );
    }
}

fn log_loaded(plugins: &PluginSet) {
    for info in plugins.infos() {
        tracing::info!(
            group = %info.group, version = %info.version, file = %info.file.display(), sha256 = %info.sha256,
            "plugin loaded"
        );
    }
}

/// SIGHUP re-reads the plugins directory; a directory that does not
/// validate is logged and the components in service keep serving.
async fn reload_on_hangup(plugins: Arc<PluginRegistry>) {
    #[cfg(unix)]
    {
        let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP; plugin reload by signal is off");
            return;
        };
        while hangups.recv().await.is_some() {
            let registry = plugins.clone();
            match tokio::task::spawn_blocking(move || registry.reload()).await {
                Ok(Ok(set)) => {
                    tracing::info!("plugins reloaded");
                    log_loaded(&set);
                }
                Ok(Err(error)) => {
                    tracing::error!(error = %format!("{error:#}"), "plugin reload refused; the loaded components keep serving")
                }
                Err(error) => tracing::error!(%error, "plugin reload task failed"),
            }
        }
    }
    #[cfg(not(unix))]
    let _ = plugins;
}

fn print_demo_keys(keys: &DemoKeys, options: &ServeOptions) {
    println!("demo API keys (also in {}):", options.data_dir.join(seed::DEMO_KEYS_FILE).display());
    for key in &keys.organizations {
        println!("  {:<10} organization {}  key {}", key.name, key.organization_id, key.api_key);
    }
}

async fn shutdown_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
    tracing::info!("shutting down: finishing requests in flight");
}
