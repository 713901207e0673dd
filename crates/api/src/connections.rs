//! How both listeners (the public API and the admin listener) handle
//! connections: caps on connections overall and per client address,
//! enforced at accept (on the admin listener, by closing the oldest
//! connection that has not authenticated and is not in a request, when
//! there is one, else the new one); an idle timeout between requests; a
//! bound on the time a request's headers may take; graceful shutdown.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

/// How a listener treats its connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionSettings {
    /// Connections open at once; more are closed at accept.
    pub max_connections: usize,
    /// Connections open at once from one client address (an IPv6 client's
    /// /64); more are closed at accept.
    pub max_connections_per_address: usize,
    /// How long a connection may take to send a request's headers, counted
    /// from when the server starts waiting for them (idle time included).
    pub header_read_timeout: Duration,
    /// How long a connection may stay open with no request in progress and
    /// nothing received.
    pub idle_timeout: Duration,
    /// At a cap, close the oldest connection that has not authenticated
    /// and has no request in progress to admit the new one (the admin
    /// listener, whose router marks authenticated connections: slow or
    /// idle strangers cannot hold it against the operator).
    pub make_room_from_unauthenticated: bool,
}

/// File descriptors kept for everything but client connections: sled's
/// files, the component cache, the runtime, standard streams.
const RESERVED_FILE_DESCRIPTORS: u64 = 512;

/// The default cap never goes above this, however many files the process
/// may open: each connection also costs memory.
const DEFAULT_MAX_CONNECTIONS_CEILING: u64 = 10_000;

/// Raises the process's soft limit on open files to its hard limit and
/// returns how many connections the listeners may hold together without
/// the process ever running out of file descriptors.
pub fn connection_budget() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.maximum != limit.current {
        let raised = rustix::process::Rlimit { current: limit.maximum, maximum: limit.maximum };
        if let Err(error) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!(%error, "cannot raise the open-file limit; keeping the current one");
        }
    }
    // `None` is unlimited.
    let open_files = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    open_files.saturating_sub(RESERVED_FILE_DESCRIPTORS)
}

/// The default overall cap for a budget: half of it, so the process stays
/// well clear of its open-file limit.
pub fn default_max_connections(budget: u64) -> u64 {
    (budget / 2).clamp(1, DEFAULT_MAX_CONNECTIONS_CEILING)
}

/// What a listener knows of one open connection while it is open.
#[derive(Default)]
struct ConnectionState {
    /// Requests in progress: from the service call until hyper has dropped
    /// the response body (written, or abandoned).
    requests: AtomicUsize,
    /// A request on it presented the admin token.
    authenticated: AtomicBool,
    /// Closes the connection, to make room for a new one.
    closing: Notify,
}

impl ConnectionState {
    /// Whether it may be closed to make room: a stranger between requests.
    fn may_make_room(&self) -> bool {
        !self.authenticated.load(Ordering::Relaxed) && self.requests.load(Ordering::Relaxed) == 0
    }
}

/// The connection a request came on, in the request's extensions: the
/// admin listener's authentication marks it.
#[derive(Clone)]
pub struct ConnectionStanding(Arc<ConnectionState>);

impl ConnectionStanding {
    /// The connection's requests presented the admin token: the listener
    /// never closes it to make room.
    pub fn mark_authenticated(&self) {
        self.0.authenticated.store(true, Ordering::Relaxed);
    }
}

/// The open connections of a listener, overall and per address.
#[derive(Default)]
struct ConnectionTable {
    next_id: u64,
    /// By id: ids only grow, so the first is the oldest.
    open: BTreeMap<u64, OpenConnection>,
    per_address: HashMap<IpAddr, usize>,
}

struct OpenConnection {
    address: IpAddr,
    state: Arc<ConnectionState>,
}

impl ConnectionTable {
    fn remove(&mut self, id: u64) -> Option<OpenConnection> {
        let connection = self.open.remove(&id)?;
        if let Some(count) = self.per_address.get_mut(&connection.address) {
            *count -= 1;
            if *count == 0 {
                self.per_address.remove(&connection.address);
            }
        }
        Some(connection)
    }

    /// Closes a connection that may make room: of `address` when given,
    /// else of the address holding the most places (so one that holds few,
    /// such as the operator's, keeps them), its oldest; false when none may.
    fn make_room(&mut self, address: Option<IpAddr>) -> bool {
        let holding = |open: &OpenConnection| self.per_address.get(&open.address).copied().unwrap_or(0);
        let mut candidates = self
            .open
            .iter()
            .filter(|(_, open)| address.is_none_or(|address| open.address == address) && open.state.may_make_room());
        // The largest holder's oldest candidate (candidates come oldest first).
        let chosen = candidates.next().map(|first| {
            candidates.fold(first, |chosen, next| if holding(next.1) > holding(chosen.1) { next } else { chosen })
        });
        match chosen.map(|(id, _)| *id).and_then(|id| self.remove(id)) {
            Some(closed) => {
                closed.state.closing.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Counts the open connections of a listener, overall and per address.
struct ConnectionLimits {
    max_connections: usize,
    per_address_cap: usize,
    make_room_from_unauthenticated: bool,
    table: Arc<Mutex<ConnectionTable>>,
    /// When a refusal was last logged: under a flood, one line per interval.
    last_refusal_logged: Mutex<Option<Instant>>,
    /// When a connection closed to make room was last logged.
    last_room_made_logged: Mutex<Option<Instant>>,
}

/// How often refused connections are logged at most.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// A connection counted against the caps until it is dropped.
struct AdmittedConnection {
    id: u64,
    state: Arc<ConnectionState>,
    table: Arc<Mutex<ConnectionTable>>,
    /// The cap at which an older connection was closed to admit this one.
    made_room_at: Option<&'static str>,
}

impl Drop for AdmittedConnection {
    fn drop(&mut self) {
        self.table.lock().unwrap_or_else(PoisonError::into_inner).remove(self.id);
    }
}

/// The address a client is counted under: IPv4 (IPv4-mapped IPv6 too) as
/// is, IPv6 by its /64, which one client usually holds whole.
fn client_key(address: IpAddr) -> IpAddr {
    match address.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(v6.to_bits() & !u128::from(u64::MAX))),
        v4 => v4,
    }
}

impl ConnectionLimits {
    fn new(settings: &ConnectionSettings) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: settings.max_connections,
            per_address_cap: settings.max_connections_per_address,
            make_room_from_unauthenticated: settings.make_room_from_unauthenticated,
            table: Arc::default(),
            last_refusal_logged: Mutex::new(None),
            last_room_made_logged: Mutex::new(None),
        }
    }

    /// Counts a new connection from `peer` (closing an older one to make
    /// room when the listener may), or says which cap it is over.
    fn admit(&self, peer: IpAddr) -> Result<AdmittedConnection, &'static str> {
        let address = client_key(peer);
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let mut made_room_at = None;
        // The address's cap first: room made there is room overall too.
        for (scope, cap) in [(Some(address), "connections per client address"), (None, "connections overall")] {
            let at_cap = match scope {
                Some(address) => table.per_address.get(&address).copied().unwrap_or(0) >= self.per_address_cap,
                None => table.open.len() >= self.max_connections,
            };
            if at_cap {
                if !(self.make_room_from_unauthenticated && table.make_room(scope)) {
                    return Err(cap);
                }
                made_room_at = Some(cap);
            }
        }
        let id = table.next_id;
        table.next_id += 1;
        let state = Arc::new(ConnectionState::default());
        table.open.insert(id, OpenConnection { address, state: state.clone() });
        *table.per_address.entry(address).or_default() += 1;
        Ok(AdmittedConnection { id, state, table: self.table.clone(), made_room_at })
    }

    fn log_refusal(&self, listener: &str, peer: SocketAddr, cap: &str) {
        if due(&self.last_refusal_logged) {
            tracing::warn!(listener, %peer, cap, "connection closed at accept: at the cap (logged once per 10 s)");
        }
    }

    fn log_room_made(&self, listener: &str, peer: SocketAddr, cap: &str) {
        if due(&self.last_room_made_logged) {
            tracing::warn!(
                listener,
                %peer,
                cap,
                "at the cap: closed an idle connection that had not authenticated to admit a new one (logged once per 10 s)"
            );
        }
    }
}

/// Whether a line logged at most once per [`REFUSAL_LOG_INTERVAL`] is due (and marks it logged).
fn due(last: &Mutex<Option<Instant>>) -> bool {
    let mut last = last.lock().unwrap_or_else(PoisonError::into_inner);
    let due = last.is_none_or(|at| at.elapsed() >= REFUSAL_LOG_INTERVAL);
    if due {
        *last = Some(Instant::now());
    }
    due
}

/// One request in progress on a connection, until dropped.
struct RequestInProgress(Arc<ConnectionState>);

impl RequestInProgress {
    fn start(connection: &Arc<ConnectionState>) -> RequestInProgress {
        connection.requests.fetch_add(1, Ordering::Relaxed);
        RequestInProgress(connection.clone())
    }
}

impl Drop for RequestInProgress {
    fn drop(&mut self) {
        self.0.requests.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection's socket that fails its reads once the connection has
/// been idle (no request in progress, no byte received or sent) for the
/// idle timeout, so hyper closes it. hyper polls the read side whenever
/// it waits for a request, so the timer is checked exactly then.
struct IdleTimeoutIo<T> {
    inner: T,
    connection: Arc<ConnectionState>,
    idle_timeout: Duration,
    last_activity: Instant,
    /// Rearmed lazily: when it fires early, it is set to the true deadline.
    timer: Pin<Box<Sleep>>,
}

impl<T> IdleTimeoutIo<T> {
    fn new(inner: T, connection: Arc<ConnectionState>, idle_timeout: Duration) -> Self {
        let now = Instant::now();
        IdleTimeoutIo {
            inner,
            connection,
            idle_timeout,
            last_activity: now,
            timer: Box::pin(tokio::time::sleep_until(now + idle_timeout)),
        }
    }

    /// `Ready(Err)` once idle for the timeout; otherwise keeps a wake-up armed.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        loop {
            ready!(self.timer.as_mut().poll(cx));
            let now = Instant::now();
            let idle_until = if self.connection.requests.load(Ordering::Relaxed) > 0 {
                now + self.idle_timeout
            } else {
                self.last_activity + self.idle_timeout
            };
            if idle_until <= now {
                return Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connection idle for longer than the idle timeout",
                )));
            }
            self.timer.as_mut().reset(idle_until);
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for IdleTimeoutIo<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    this.last_activity = Instant::now();
                }
                Poll::Ready(result)
            }
            Poll::Pending => match this.poll_idle(cx) {
                Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
                _ => Poll::Pending,
            },
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for IdleTimeoutIo<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = ready!(Pin::new(&mut this.inner).poll_write(cx, buf));
        if matches!(written, Ok(n) if n > 0) {
            this.last_activity = Instant::now();
        }
        Poll::Ready(written)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = ready!(Pin::new(&mut this.inner).poll_write_vectored(cx, bufs));
        if matches!(written, Ok(n) if n > 0) {
            this.last_activity = Instant::now();
        }
        Poll::Ready(written)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// What hyper refused itself, answering a bare `400` or `431` and closing
/// the connection: the API's own limits answer problem+json below these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// A header block past what is parsed ([`PARSED_HEADER_FIELDS`] fields,
    /// or hyper's read buffer).
    TooLarge,
    /// Framing that is not HTTP/1.1 (a bad request line, conflicting lengths).
    Framing,
}

impl Malformed {
    pub fn name(self) -> &'static str {
        match self {
            Malformed::TooLarge => "too-large",
            Malformed::Framing => "framing",
        }
    }

    fn of(error: &hyper::Error) -> Option<Malformed> {
        if error.is_parse_too_large() {
            Some(Malformed::TooLarge)
        } else if error.is_parse() {
            Some(Malformed::Framing)
        } else {
            None
        }
    }
}

/// Told of each request hyper refused (see [`Malformed`]) and the address it came from.
pub type OnMalformed = Arc<dyn Fn(IpAddr, Malformed) + Send + Sync>;

/// The most header fields hyper parses; the API's own limit (100) is
/// lower, so a request between the two gets a problem+json `431`.
pub const PARSED_HEADER_FIELDS: usize = 512;

/// How long requests in flight at shutdown may take to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `shutdown`. A connection over a cap is
/// closed at accept, before anything is read from it; an admitted one must
/// send each request's headers within the header read timeout and is
/// closed after the idle timeout with no request in progress. Each request
/// sees its client address. At shutdown the listener closes, and requests
/// in flight get [`SHUTDOWN_GRACE`] to finish.
pub async fn serve_connections(
    name: &'static str,
    listener: tokio::net::TcpListener,
    app: axum::Router,
    settings: ConnectionSettings,
    on_malformed: OnMalformed,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use http_body_util::BodyExt;
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::ServiceExt;

    // HTTP/1 only: the version-sniffing auto builder waits for a first
    // byte without any timeout.
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout)
        .max_headers(PARSED_HEADER_FIELDS);
    let limits = ConnectionLimits::new(&settings);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(listener = name, %error, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let admitted = match limits.admit(peer.ip()) {
            Ok(admitted) => admitted,
            Err(cap) => {
                drop(stream);
                limits.log_refusal(name, peer, cap);
                continue;
            }
        };
        if let Some(cap) = admitted.made_room_at {
            limits.log_room_made(name, peer, cap);
        }
        let state = admitted.state.clone();
        let app = app.clone();
        let in_progress = state.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            let request_in_progress = RequestInProgress::start(&in_progress);
            request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
            request.extensions_mut().insert(ConnectionStanding(in_progress.clone()));
            let response = app.clone().oneshot(request.map(axum::body::Body::new));
            async move {
                let response = response.await?;
                // The request stays in progress until its body is written.
                Ok::<_, std::convert::Infallible>(response.map(move |body| {
                    body.map_frame(move |frame| {
                        let _ = &request_in_progress;
                        frame
                    })
                }))
            }
        });
        let io = TokioIo::new(IdleTimeoutIo::new(stream, state.clone(), settings.idle_timeout));
        let connection = graceful.watch(builder.serve_connection(io, service));
        let on_malformed = on_malformed.clone();
        tokio::spawn(async move {
            tokio::select! {
                ended = connection => if let Err(error) = ended {
                    match Malformed::of(&error) {
                        Some(malformed) => {
                            tracing::info!(listener = name, %peer, kind = malformed.name(), %error, "malformed request refused");
                            on_malformed(peer.ip(), malformed);
                        }
                        None => tracing::debug!(%error, "connection ended"),
                    }
                },
                // Dropping the connection closes it.
                () = state.closing.notified() => tracing::debug!("connection closed to make room for a new one"),
            }
            drop(admitted);
        });
    }
    drop(listener);
    tracing::info!(listener = name, "shutting down: no new connections; letting requests in flight finish");
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await.is_err() {
        tracing::warn!(
            listener = name,
            grace_seconds = SHUTDOWN_GRACE.as_secs(),
            "requests still in flight at the end of the grace period"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_counted_by_address_and_ipv6_by_its_64() -> Result<(), std::net::AddrParseError> {
        let v4: IpAddr = "192.0.2.7".parse()?;
        assert_eq!(client_key("::ffff:192.0.2.7".parse()?), v4);
        let one = client_key("2001:db8:1:2:aaaa::1".parse()?);
        assert_eq!(one, client_key("2001:db8:1:2:bbbb::9".parse()?));
        assert_ne!(one, client_key("2001:db8:1:3::1".parse()?));
        Ok(())
    }

    #[test]
    fn a_connection_over_either_cap_is_refused_and_a_closed_one_frees_its_place() {
        let settings = ConnectionSettings {
            max_connections: 3,
            max_connections_per_address: 2,
            header_read_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
            make_room_from_unauthenticated: false,
        };
        let limits = ConnectionLimits::new(&settings);
        let (a, b, c) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]), IpAddr::from([10, 0, 0, 3]));
        let first = limits.admit(a);
        let second = limits.admit(a);
        assert!(first.is_ok() && second.is_ok());
        assert_eq!(limits.admit(a).err(), Some("connections per client address"));
        let third = limits.admit(b);
        assert!(third.is_ok());
        assert_eq!(limits.admit(c).err(), Some("connections overall"));
        drop(first);
        assert!(limits.admit(a).is_ok(), "a closed connection frees its places");
        drop(third);
        assert!(!limits.table.lock().unwrap_or_else(PoisonError::into_inner).per_address.contains_key(&b));
    }

    #[test]
    fn at_a_cap_an_idle_stranger_makes_room_never_an_authenticated_or_busy_connection() {
        let settings = ConnectionSettings {
            max_connections: 4,
            max_connections_per_address: 2,
            header_read_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
            make_room_from_unauthenticated: true,
        };
        let limits = ConnectionLimits::new(&settings);
        let (a, b, c) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]), IpAddr::from([10, 0, 0, 3]));
        let admit = |peer| limits.admit(peer).unwrap_or_else(|cap| panic!("refused at {cap}"));
        let is_open = |connection: &AdmittedConnection| {
            limits.table.lock().unwrap_or_else(PoisonError::into_inner).open.contains_key(&connection.id)
        };
        // Per address: the address's oldest stranger makes room.
        let (a1, a2) = (admit(a), admit(a));
        let a3 = admit(a);
        assert_eq!(a3.made_room_at, Some("connections per client address"));
        assert!(!is_open(&a1) && is_open(&a2) && is_open(&a3));
        // An authenticated connection, or one in a request, never does.
        ConnectionStanding(a2.state.clone()).mark_authenticated();
        let busy = RequestInProgress::start(&a3.state);
        assert_eq!(limits.admit(a).err(), Some("connections per client address"));
        drop(busy);
        let a4 = admit(a);
        assert!(is_open(&a2) && !is_open(&a3) && is_open(&a4));
        // Overall: the oldest stranger of any address.
        let (b1, c1) = (admit(b), admit(c));
        assert!(is_open(&a4) && is_open(&b1));
        let c2 = admit(c);
        assert_eq!(c2.made_room_at, Some("connections overall"));
        assert!(!is_open(&a4) && is_open(&b1) && is_open(&c1) && is_open(&c2));
        // The address holding the most places gives one up, not the oldest stranger's.
        let d1 = admit(IpAddr::from([10, 0, 0, 4]));
        assert!(is_open(&b1) && !is_open(&c1) && is_open(&c2) && is_open(&d1));
        let table = limits.table.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!((table.open.len(), table.per_address.get(&a).copied()), (4, Some(1)));
    }
}
