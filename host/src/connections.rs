//! How both listeners (the public API and the admin listener) handle
//! connections: caps on connections overall and per client address,
//! enforced at accept; an idle timeout between requests; a bound on the
//! time a request's headers may take; graceful shutdown.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
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

/// Counts the open connections of a listener, overall and per address.
struct ConnectionLimits {
    overall: Arc<Semaphore>,
    per_address_cap: usize,
    per_address: Arc<Mutex<HashMap<IpAddr, usize>>>,
    /// When a refusal was last logged: under a flood, one line per interval.
    last_refusal_logged: Mutex<Option<Instant>>,
}

/// How often refused connections are logged at most.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// A connection counted against the caps until it is dropped.
struct AdmittedConnection {
    _overall: OwnedSemaphorePermit,
    address: IpAddr,
    per_address: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for AdmittedConnection {
    fn drop(&mut self) {
        let mut counts = self.per_address.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.address);
            }
        }
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
            overall: Arc::new(Semaphore::new(settings.max_connections)),
            per_address_cap: settings.max_connections_per_address,
            per_address: Arc::default(),
            last_refusal_logged: Mutex::new(None),
        }
    }

    /// Counts a new connection from `peer`, or says which cap it is over.
    fn admit(&self, peer: IpAddr) -> Result<AdmittedConnection, &'static str> {
        let overall = self.overall.clone().try_acquire_owned().map_err(|_| "connections overall")?;
        let address = client_key(peer);
        let mut counts = self.per_address.lock().unwrap_or_else(PoisonError::into_inner);
        let count = counts.entry(address).or_default();
        if *count >= self.per_address_cap {
            return Err("connections per client address");
        }
        *count += 1;
        Ok(AdmittedConnection { _overall: overall, address, per_address: self.per_address.clone() })
    }

    fn log_refusal(&self, listener: &str, peer: SocketAddr, cap: &str) {
        let mut last = self.last_refusal_logged.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_none_or(|at| at.elapsed() >= REFUSAL_LOG_INTERVAL) {
            *last = Some(Instant::now());
            tracing::warn!(listener, %peer, cap, "connection closed at accept: at the cap (logged once per 10 s)");
        }
    }
}

/// Requests in progress on one connection: from the service call until
/// hyper has dropped the response body (written, or abandoned).
#[derive(Default)]
struct RequestsInProgress(AtomicUsize);

struct RequestInProgress(Arc<RequestsInProgress>);

impl RequestInProgress {
    fn start(requests: &Arc<RequestsInProgress>) -> RequestInProgress {
        requests.0.fetch_add(1, Ordering::Relaxed);
        RequestInProgress(requests.clone())
    }
}

impl Drop for RequestInProgress {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection's socket that fails its reads once the connection has
/// been idle (no request in progress, no byte received or sent) for the
/// idle timeout, so hyper closes it. hyper polls the read side whenever
/// it waits for a request, so the timer is checked exactly then.
struct IdleTimeoutIo<T> {
    inner: T,
    requests: Arc<RequestsInProgress>,
    idle_timeout: Duration,
    last_activity: Instant,
    /// Rearmed lazily: when it fires early, it is set to the true deadline.
    timer: Pin<Box<Sleep>>,
}

impl<T> IdleTimeoutIo<T> {
    fn new(inner: T, requests: Arc<RequestsInProgress>, idle_timeout: Duration) -> Self {
        let now = Instant::now();
        IdleTimeoutIo {
            inner,
            requests,
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
            let idle_until = if self.requests.0.load(Ordering::Relaxed) > 0 {
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
    shutdown: impl std::future::Future<Output = ()>,
) {
    use http_body_util::BodyExt;
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::ServiceExt;

    // HTTP/1 only: the version-sniffing auto builder waits for a first
    // byte without any timeout.
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(settings.header_read_timeout);
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
        let requests = Arc::new(RequestsInProgress::default());
        let app = app.clone();
        let in_progress = requests.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            let request_in_progress = RequestInProgress::start(&in_progress);
            request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
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
        let io = TokioIo::new(IdleTimeoutIo::new(stream, requests, settings.idle_timeout));
        let connection = graceful.watch(builder.serve_connection(io, service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended");
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
        assert!(limits.per_address.lock().unwrap_or_else(PoisonError::into_inner).get(&b).is_none());
    }
}
