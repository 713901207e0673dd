//! `esr serve`: opens the store, loads the components and serves the API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::Semaphore;

use esr_api::admin::{self, AdminState};
use esr_api::connections::{self, ConnectionSettings, serve_connections};
use esr_api::limits::{self, Quota, RateLimits};
use esr_api::metrics::Metrics;
use esr_api::slots::CallSlots;
use esr_api::store_calls::StoreCalls;
use esr_api::{AppState, SharedState};
use esr_demo::seed::{self, DemoKeys};
use esr_runtime::{ComponentEngine, ComponentRegistry, ComponentSet, Limits};

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
    /// A PostgreSQL database instead of sled in `data_dir`.
    pub database_url: Option<String>,
    /// Connections to the database at most (default: the backend's).
    pub database_pool_size: Option<u32>,
    /// Streaming replicas of the database that serve public reads.
    pub database_replicas: crate::store::postgres::Replicas,
    pub plugins_dir: PathBuf,
    /// Compiled components (default: `<data_dir>/component-cache`).
    pub component_cache_dir: Option<PathBuf>,
    pub demo: bool,
    /// The base URL clients reach the API at; defaults to the bound address.
    pub public_url: Option<String>,
    pub plugin_memory_mib: usize,
    pub plugin_deadline_ms: u64,
    /// A report importer call's memory cap and time limit.
    pub importer_memory_mib: usize,
    pub importer_deadline_ms: u64,
    /// Component calls one organization may run at once (default:
    /// [`CallSlots::default_per_organization`]).
    pub plugin_slots_per_organization: Option<usize>,
    /// How long a request may wait for a component call slot before `503`.
    pub plugin_slot_wait: Duration,
    /// The largest import batch accepted, in bytes.
    pub import_max_bytes: usize,
    /// The most lines an import batch may hold.
    pub import_max_lines: usize,
    /// The most findings one scanner report may make.
    pub import_max_findings: usize,
    /// Requests per API key.
    pub rate_limit: Quota,
    /// Requests per API key to `/v1/agent/config`.
    pub agent_config_rate_limit: Quota,
    /// Requests per client address without a valid key.
    pub address_rate_limit: Quota,
    /// Requests in progress at once; more are shed with `503`.
    pub max_concurrent_requests: usize,
    /// Connections the public listener holds at once; by default half of
    /// what the open-file limit leaves.
    pub max_connections: Option<usize>,
    /// Connections the public listener holds at once from one client address.
    pub max_connections_per_address: usize,
    /// How long a connection may take to send a request's headers, counted
    /// from when the server starts waiting for them.
    pub header_read_timeout: Duration,
    /// How long a connection may stay open with no request in progress.
    pub idle_timeout: Duration,
    /// Let the admin listener bind an address other than loopback.
    pub admin_allow_remote: bool,
    /// Connections the admin listener holds at once from one client address.
    pub admin_max_connections_per_address: usize,
    /// How long an admin connection may take to send a request's headers
    /// (before it has authenticated, it holds a place for that long at most).
    pub admin_header_read_timeout: Duration,
    /// Serve every group with the native baseline (measurement only).
    pub native_handlers: bool,
    /// How long the change feed keeps deletion events.
    pub change_retention: Duration,
    /// How webhooks are delivered.
    pub webhooks: esr_webhooks::WebhookSettings,
    /// How access tokens are issued and whose are trusted.
    pub oauth: esr_oauth::OAuthSettings,
    /// How the audit trail is kept (`None`: `--no-audit-trail`).
    pub audit: Option<esr_audit::AuditSettings>,
    /// How long a rotated API key keeps working beside its successor.
    pub key_rotation_overlap: Duration,
}

/// Issues and checks access tokens: this server's keys read (the first
/// made) now; the identity providers' fetched by [`keep_token_keys_fresh`].
fn authority(
    db: &Arc<dyn esr_store::Store>,
    settings: &esr_oauth::OAuthSettings,
    public_url: &str,
) -> anyhow::Result<esr_oauth::Authority> {
    let providers = settings
        .providers
        .iter()
        .map(|provider| esr_oauth::IdentityProvider::new(provider.clone(), settings.provider_rules))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let tokens = esr_oauth::TokenSettings {
        issuer: public_url.to_owned(),
        audience: settings.audience.clone().unwrap_or_else(|| format!("{public_url}/v1")),
        ttl: settings.token_ttl,
    };
    Ok(tokio::task::block_in_place(|| esr_oauth::Authority::new(db.clone(), tokens, providers))?)
}

/// Rereads this server's signing keys every
/// [`esr_oauth::signing_keys::REREAD_EVERY`] (a rotation on another host,
/// a retired key's end) and fetches each identity provider's keys when
/// they are missing or old.
async fn keep_token_keys_fresh(authority: Arc<esr_oauth::Authority>) {
    let mut every = tokio::time::interval(esr_oauth::signing_keys::REREAD_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        for provider in authority.providers.iter().filter(|provider| provider.keys_are_stale()) {
            provider.refetch().await;
        }
        let reread = authority.clone();
        match tokio::task::spawn_blocking(move || reread.reread_keys()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "the signing keys could not be reread"),
            Err(error) => tracing::warn!(%error, "rereading the signing keys failed"),
        }
    }
}

/// Connections the admin listener holds at once (operators and scripts).
const ADMIN_MAX_CONNECTIONS: usize = 32;

/// Runs the server until SIGINT or SIGTERM.
pub async fn serve(options: ServeOptions) -> anyhow::Result<()> {
    if !options.admin_listen.ip().is_loopback() && !options.admin_allow_remote {
        anyhow::bail!(
            "the admin listener would listen on {}, which is not a loopback address: it creates organizations and \
             keys and imports data, so keep it on 127.0.0.1 or ::1, or pass --admin-allow-remote \
             (ESR_ADMIN_ALLOW_REMOTE=true) to expose it on purpose",
            options.admin_listen
        );
    }
    // A weak ESR_ADMIN_TOKEN is refused before anything is opened.
    esr_auth::admin_token::environment_token()?;
    let connections = public_connection_settings(&options)?;
    crate::store::check_data_dir_private(&options.data_dir)?;
    // Store calls block (a network database's client must not run on the
    // async threads): start-up makes them in place, requests on the
    // blocking pool.
    let db = tokio::task::block_in_place(|| {
        crate::store::open_with(&crate::store::StoreOptions {
            database_url: options.database_url.as_deref(),
            data_dir: &options.data_dir,
            pool_size: options.database_pool_size,
            // A request waits for a connection within its deadline, never past it.
            connection_wait: Some(Duration::from_millis(options.plugin_deadline_ms)),
            replicas: options.database_replicas.clone(),
        })
    })?;
    if options.demo {
        let seeded = tokio::task::block_in_place(|| seed::seed_demo_if_empty(db.as_ref(), &options.data_dir))
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
    let importer_limits = Limits {
        memory_bytes: options.importer_memory_mib << 20,
        deadline: Duration::from_millis(options.importer_deadline_ms),
    };
    let engine = ComponentEngine::with_importer_limits(limits, importer_limits)?
        .with_cache(options.component_cache_dir.clone().unwrap_or_else(|| options.data_dir.join("component-cache")));
    let plugins = Arc::new(tokio::task::block_in_place(|| {
        ComponentRegistry::load_serving(engine, &options.plugins_dir, native_calls(options.native_handlers)?)
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
    let store_calls = StoreCalls::for_store(db.as_ref());
    let host = host_name(bound.port());
    let rate_limits = RateLimits::new(options.rate_limit, options.agent_config_rate_limit, options.address_rate_limit);
    rate_limits.set_hosts(tokio::task::block_in_place(|| db.host_heartbeat(&host, HOSTS_SEEN_WITHIN))?);
    let public_url = options.public_url.clone().unwrap_or_else(|| format!("http://{bound}"));
    let authority = Arc::new(authority(&db, &options.oauth, &public_url)?);
    let audit = options.audit.clone().map(|settings| esr_audit::Recorder::new(db.clone(), settings));
    let recording = audit.clone().map(|recorder| tokio::spawn(recorder.run()));
    let state = AppState::new(SharedState {
        host: host.clone(),
        cursor_key: tokio::task::block_in_place(|| db.secret("cursor"))?,
        db: db.clone(),
        plugins,
        public_url,
        oauth: esr_api::oauth::OAuth::new(authority.clone()),
        audit: audit.clone(),
        plugin_slots: CallSlots::new(
            MAX_CONCURRENT_CALLS,
            options.plugin_slots_per_organization.unwrap_or_else(CallSlots::default_per_organization),
            options.plugin_slot_wait,
        ),
        store_calls: store_calls.clone(),
        admission_calls: StoreCalls::for_admission(db.as_ref()),
        known_keys: esr_api::known_keys::KnownKeys::default(),
        request_deadline: Duration::from_millis(options.plugin_deadline_ms),
        request_permits: Arc::new(Semaphore::new(options.max_concurrent_requests)),
        metrics: Arc::new({
            let metrics = Metrics::with_rate_limit_policies(&limits::POLICIES);
            metrics.declare_call_failures(&esr_api::CALL_GROUPS);
            metrics
        }),
        health: tokio::sync::Mutex::default(),
        exports: Default::default(),
        rate_limits,
    });
    let heartbeats = tokio::spawn(heartbeat(state.clone()));
    let pruning = tokio::spawn(prune_changes(db.clone(), store_calls.clone(), options.change_retention));
    let suppression_expiry = tokio::spawn(expire_suppressions(db.clone(), store_calls.clone()));
    let webhooks = esr_webhooks::Dispatcher::new(
        db.clone(),
        state.plugins.clone(),
        esr_webhooks::WebhookSettings { single_host: options.database_url.is_none(), ..options.webhooks.clone() },
        host.clone(),
        state.public_url.clone(),
        state.metrics.clone(),
    )?;
    let deliveries = tokio::spawn(webhooks.clone().run());
    let token_keys = tokio::spawn(keep_token_keys_fresh(authority));
    let admin_listener = tokio::net::TcpListener::bind(options.admin_listen)
        .await
        .with_context(|| format!("cannot listen on {} (admin)", options.admin_listen))?;
    let admin_bound = admin_listener.local_addr()?;
    let admin_state = AdminState {
        plugins: state.plugins.clone(),
        db: db.clone(),
        store_calls,
        import_max_bytes: options.import_max_bytes,
        import_max_lines: options.import_max_lines,
        import_max_findings: options.import_max_findings,
        metrics: state.metrics.clone(),
        serving: state.clone(),
        token_hash: tokio::task::block_in_place(|| {
            esr_auth::admin_token::admin_token_digest(
                &options.data_dir,
                options.database_url.is_some().then_some(db.as_ref()),
            )
        })?,
        failed_authentications: Arc::default(),
        webhooks,
        key_rotation_overlap: options.key_rotation_overlap,
    };
    println!("{LISTENING}http://{bound}");
    println!("{ADMIN_LISTENING}http://{admin_bound}");
    tracing::info!(address = %bound, admin = %admin_bound, pid = std::process::id(), "listening");

    let (stop_admin, admin_stopped) = tokio::sync::oneshot::channel::<()>();
    let admin_connections = ConnectionSettings {
        max_connections: ADMIN_MAX_CONNECTIONS,
        max_connections_per_address: options.admin_max_connections_per_address.min(ADMIN_MAX_CONNECTIONS),
        header_read_timeout: options.admin_header_read_timeout,
        // Strangers holding places (a slowloris) make room for the operator.
        make_room_from_unauthenticated: true,
        ..connections
    };
    let admin = tokio::spawn(serve_connections(
        "admin",
        admin_listener,
        admin::router(admin_state),
        admin_connections,
        esr_api::on_malformed(&state, "admin"),
        async {
            let _ = admin_stopped.await;
        },
    ));
    let on_malformed = esr_api::on_malformed(&state, "public");
    serve_connections("public", listener, esr_api::router(state), connections, on_malformed, shutdown_signal()).await;
    let _ = stop_admin.send(());
    let _ = admin.await;
    heartbeats.abort();
    pruning.abort();
    suppression_expiry.abort();
    deliveries.abort();
    token_keys.abort();
    // What the audit trail holds of the last requests is written before
    // the store is closed, unless the store does not answer.
    if let Some(recorder) = &audit
        && tokio::time::timeout(Duration::from_secs(5), recorder.flush()).await.is_err()
    {
        tracing::warn!(queued = recorder.queued(), "the audit trail's last entries could not be written at shutdown");
    }
    if let Some(recording) = recording {
        recording.abort();
    }
    // A store call whose client went away may still be running.
    if !esr_api::call_threads::CallThreads::process_wide().finish(Duration::from_secs(30)).await {
        tracing::warn!("store calls still running at shutdown after 30 s");
    }
    tokio::task::block_in_place(|| {
        if let Err(error) = db.host_leaving(&host) {
            tracing::warn!(%error, "could not record that this host stopped serving");
        }
        db.flush()
    })?;
    tracing::info!("stopped");
    Ok(())
}

/// How often a host tells the store it serves.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
/// A host not heard from for this long no longer shares the rate limits.
const HOSTS_SEEN_WITHIN: Duration = Duration::from_secs(10);

/// This host's name among the hosts of one database, as health gives it:
/// the machine's host name and the public port.
fn host_name(port: u16) -> String {
    let machine = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let machine = machine.trim();
    format!("{}:{port}", if machine.is_empty() { "localhost" } else { machine })
}

/// Tells the store this host serves, every [`HEARTBEAT_EVERY`], and
/// divides the rate limits among the hosts it counts; a failed beat keeps
/// the last count.
async fn heartbeat(state: AppState) {
    let mut ticks = tokio::time::interval(HEARTBEAT_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let (db, host) = (state.db.clone(), state.host.clone());
        match tokio::task::spawn_blocking(move || db.host_heartbeat(&host, HOSTS_SEEN_WITHIN)).await {
            Ok(Ok(hosts)) => state.rate_limits.set_hosts(hosts),
            Ok(Err(error)) => tracing::warn!(%error, "heartbeat: the store did not answer"),
            Err(error) => tracing::warn!(%error, "heartbeat task failed"),
        }
    }
}

/// Prunes the change feed's deletion events past `retention`, now and then
/// every [`esr_write::change_retention::prune_every`], with a store permit like any
/// request (each host of a shared database does: pruning twice removes
/// nothing more).
async fn prune_changes(db: Arc<dyn crate::store::Store>, store_calls: StoreCalls, retention: Duration) {
    let every = esr_write::change_retention::prune_every(retention);
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let db = db.clone();
        let deadline = tokio::time::Instant::now() + every;
        match store_calls.run(deadline, move || esr_write::change_retention::prune(db.as_ref(), retention)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(removed)) => tracing::info!(removed, "change feed: pruned deletions past retention"),
            Ok(Err(error)) => tracing::warn!(%error, "change feed: pruning failed; trying again later"),
            Err(_) => tracing::warn!("change feed: no store permit came in time; pruning at the next tick"),
        }
    }
}

/// Reopens expired suppressions in every organization at start and every
/// [`esr_write::suppression_expiry::EXPIRY_EVERY`], with a store permit like any request.
async fn expire_suppressions(db: Arc<dyn crate::store::Store>, store_calls: StoreCalls) {
    let mut ticks = tokio::time::interval(esr_write::suppression_expiry::EXPIRY_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let db = db.clone();
        let deadline = tokio::time::Instant::now() + esr_write::suppression_expiry::EXPIRY_EVERY;
        if store_calls
            .run(deadline, move || esr_write::suppression_expiry::expire_everywhere(db.as_ref()))
            .await
            .is_err()
        {
            tracing::warn!("suppression expiry: no store permit came in time; trying again at the next tick");
        }
    }
}

/// The native baseline when asked for (`--native-handlers`).
#[cfg(feature = "native-baseline")]
fn native_calls(wanted: bool) -> anyhow::Result<Option<Arc<dyn esr_runtime::NativeCalls>>> {
    Ok(wanted.then(|| Arc::new(crate::native::NativeBaseline) as Arc<dyn esr_runtime::NativeCalls>))
}

/// The native baseline when asked for: not in this build.
#[cfg(not(feature = "native-baseline"))]
fn native_calls(wanted: bool) -> anyhow::Result<Option<Arc<dyn esr_runtime::NativeCalls>>> {
    if wanted {
        anyhow::bail!("--native-handlers needs a host built with `cargo build --features native-baseline`");
    }
    Ok(None)
}

/// The public listener's connection handling; its cap, with the admin
/// listener's, kept within what the open-file limit allows.
fn public_connection_settings(options: &ServeOptions) -> anyhow::Result<ConnectionSettings> {
    let budget = connections::connection_budget().saturating_sub(ADMIN_MAX_CONNECTIONS as u64);
    let max_connections = match options.max_connections {
        None => connections::default_max_connections(budget),
        Some(wanted) if wanted as u64 > budget => anyhow::bail!(
            "--max-connections {wanted} is more than this process can hold open: its open-file limit leaves room for \
             {budget} connections; raise the limit (ulimit -n, or LimitNOFILE= under systemd) or lower --max-connections"
        ),
        Some(wanted) => wanted as u64,
    };
    Ok(ConnectionSettings {
        max_connections: usize::try_from(max_connections).unwrap_or(usize::MAX),
        max_connections_per_address: options.max_connections_per_address,
        header_read_timeout: options.header_read_timeout,
        idle_timeout: options.idle_timeout,
        make_room_from_unauthenticated: false,
    })
}

fn log_loaded(plugins: &ComponentSet) {
    for info in plugins.infos() {
        tracing::info!(
            group = %info.group, version = %info.version, file = %info.file.display(), sha256 = %info.sha256,
            "plugin loaded"
        );
    }
    for info in plugins.importer_infos() {
        tracing::info!(
            format = %info.format, version = %info.version, file = %info.file.display(), sha256 = %info.sha256,
            "report importer loaded"
        );
    }
}

/// SIGHUP re-reads the plugins directory; a directory that does not
/// validate is logged and the components in service keep serving.
async fn reload_on_hangup(plugins: Arc<ComponentRegistry>) {
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
