//! `GET /v1/<collection>/export`: every record the caller may read,
//! streamed as NDJSON in id order, without a job.
//!
//! The organization's change-feed sequence is read first and sent as
//! `ESR-Sequence`; then the group's component answers chunk after chunk
//! (`bulk-export.export-chunk`, each call bounded like any other and in
//! one of the organization's call slots, so an export takes turns with
//! ordinary requests); the last line is `{"sequence": S, "count": N}`. A
//! stream without it did not end whole: the client resumes with
//! `after=<the last id received>` and follows `/v1/changes?after=S`. A
//! client that goes away stops the walk at once: its chunk is abandoned
//! and no other is read.

use std::collections::HashSet;
use std::io::Write as _;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use flate2::Compression;
use flate2::write::GzEncoder;
use tokio::sync::mpsc;
use uuid::Uuid;

use esr_runtime::feed::{component_request, is_json};
use esr_runtime::{ExportChunk, Tenant};

use crate::problem::ApiError;
use crate::{AppState, Caller, RequestId, call_component, path_parameters, query_pairs, read_group, tenant};

/// The header carrying the organization's sequence when the stream began.
pub const SEQUENCE_HEADER: &str = "esr-sequence";

/// Records one chunk reads at most (the store's largest scan).
const CHUNK_RECORDS: u32 = esr_store::MAX_SCAN as u32;
/// Bytes of lines one chunk holds at most, so a chunk of large records
/// (or large renderings) stays a bounded piece of memory.
const CHUNK_BYTES: u32 = 4 << 20;
/// Chunks produced ahead of what the client has taken.
const CHUNKS_AHEAD: usize = 1;
/// The longest `after` (a record id), as the OpenAPI document states it.
pub const MAX_ID_CHARS: usize = 36;
/// What a refused second export is told to wait, in seconds.
const RETRY_AFTER_SECONDS: &str = "30";

/// The exports running on this host, by the principal running each: one
/// at a time per key (or client).
#[derive(Default)]
pub struct Exports(Arc<Mutex<HashSet<Uuid>>>);

/// An export in progress; dropped when its stream ends or is dropped.
struct Running {
    exports: Arc<Mutex<HashSet<Uuid>>>,
    principal: Uuid,
}

impl Exports {
    fn start(&self, principal: Uuid) -> Option<Running> {
        let mut running = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        running.insert(principal).then(|| Running { exports: self.0.clone(), principal })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.exports.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&self.principal);
    }
}

/// The lines of a chunk as sent: checked to be what the contract says
/// (each a JSON object on its own line, as many as the component counted),
/// since a component is untrusted and a corrupt line would be kept by
/// every client that reads it.
fn checked_lines(chunk: &ExportChunk) -> Option<&[u8]> {
    let lines = chunk.lines.as_slice();
    if lines.is_empty() {
        return (chunk.count == 0).then_some(lines);
    }
    let body = lines.strip_suffix(b"\n")?;
    let mut count = 0u32;
    for line in body.split(|byte| *byte == b'\n') {
        if !is_json(line, b'{') {
            return None;
        }
        count += 1;
    }
    (count == chunk.count).then_some(lines)
}

/// Where the walk stands between chunks.
struct Walk {
    state: AppState,
    caller: Caller,
    tenant: Tenant,
    collection: &'static str,
    request: esr_runtime::Request,
    request_id: String,
    organization: Uuid,
    after: Option<String>,
}

impl Walk {
    /// The next chunk, in a call of its own (a fresh deadline, its own
    /// read session at least as recent as the last one's).
    async fn next(&mut self) -> Result<ExportChunk, ApiError> {
        let tenant = Tenant { reads: Arc::default(), ..self.tenant.clone() };
        let position = self.tenant.reads.position.load(std::sync::atomic::Ordering::Relaxed);
        tenant.reads.at_least.fetch_max(position, std::sync::atomic::Ordering::Relaxed);
        self.tenant = tenant.clone();
        let caller =
            Caller { deadline: tokio::time::Instant::now() + self.state.request_deadline, ..self.caller.clone() };
        let (collection, request, request_id, after) =
            (self.collection, self.request.clone(), self.request_id.clone(), self.after.clone());
        let reads = tenant.reads.clone();
        let chunk = call_component(&self.state, collection, &caller, self.organization, &reads, move |plugins| {
            plugins.export_chunk(
                collection,
                tenant,
                &request,
                after.as_deref(),
                (CHUNK_RECORDS, CHUNK_BYTES),
                &request_id,
            )
        })
        .await?;
        if checked_lines(&chunk).is_none() {
            tracing::error!(plugin = collection, "an export chunk is not JSON objects, one per line, as counted");
            return Err(ApiError::internal());
        }
        self.after = chunk.last_read.clone();
        Ok(chunk)
    }
}

/// The bytes sent: plain, or gzip flushed at each chunk so a client reads
/// every record as soon as it is sent.
enum Encoding {
    Identity,
    Gzip(GzEncoder<Vec<u8>>),
}

impl Encoding {
    /// Gzip when the client accepts it (`Accept-Encoding: gzip`, not `q=0`).
    fn of(headers: &HeaderMap) -> Encoding {
        let accepts_gzip = |coding: &str| {
            let mut parts = coding.split(';').map(str::trim);
            let named = parts.next().is_some_and(|name| name.eq_ignore_ascii_case("gzip"));
            let weight = parts.find_map(|part| part.strip_prefix("q=")).map_or(Some(1.0), |q| q.parse::<f32>().ok());
            named && weight.is_some_and(|weight| weight > 0.0)
        };
        let gzip = headers
            .get_all(header::ACCEPT_ENCODING)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .any(|value| value.split(',').any(accepts_gzip));
        if gzip { Encoding::Gzip(GzEncoder::new(Vec::new(), Compression::fast())) } else { Encoding::Identity }
    }

    fn encode(&mut self, bytes: &[u8]) -> std::io::Result<Bytes> {
        match self {
            Encoding::Identity => Ok(Bytes::copy_from_slice(bytes)),
            Encoding::Gzip(encoder) => {
                encoder.write_all(bytes)?;
                encoder.flush()?;
                Ok(Bytes::from(std::mem::take(encoder.get_mut())))
            }
        }
    }

    fn finish(self) -> std::io::Result<Bytes> {
        match self {
            Encoding::Identity => Ok(Bytes::new()),
            Encoding::Gzip(encoder) => encoder.finish().map(Bytes::from),
        }
    }
}

pub(crate) async fn export(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    RawQuery(raw): RawQuery,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    axum::Extension(caller): axum::Extension<Caller>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let [collection, _] = path_parameters::<2>(&uri);
    let (group, principal) = read_group(&method, &collection, &caller)?;
    let name = group.collection.name();
    let plugins = state.plugins.current();
    if let Some(info) = plugins.get(name)
        && info.export_formats.is_none()
    {
        return Err(ApiError::not_found(format!(
            "the component serving {name} serves no export (it is built against esr:plugin@{}; exports need 0.3.3 or later)",
            info.wit_version
        )));
    }
    let tenant = tenant(&state, &caller)?;
    let mut query = query_pairs(raw.as_deref());
    let mut afters = query.iter().filter(|(name, _)| name == "after").map(|(_, value)| value.clone());
    let after = match (afters.next(), afters.next()) {
        (None, _) => None,
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid_parameters(vec![("after".into(), "given more than once".into())]));
        }
        (Some(text), None) => {
            let why = if text.chars().count() > MAX_ID_CHARS {
                format!("longer than {MAX_ID_CHARS} characters")
            } else {
                "not a record id (a UUID)".to_owned()
            };
            Some(crate::parse_id(&text).ok_or_else(|| ApiError::invalid_parameters(vec![("after".into(), why)]))?)
        }
    };
    query.retain(|(name, _)| name != "after");
    crate::within_declared_lengths(&state, name, &query, |info| Some(&info.parameters))?;
    let Some(running) = state.exports.start(principal.id) else {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "export-running",
            "An export is running",
            "this key (or client) is already running an export; one runs at a time per key: wait for it to end",
        )
        .with_header(header::RETRY_AFTER, RETRY_AFTER_SECONDS));
    };
    let reads = tenant.reads.clone();
    let start_tenant = tenant.clone();
    let (sequence, known) = call_component(&state, name, &caller, principal.organization_id, &reads, move |plugins| {
        plugins.export_start(name, &start_tenant, after)
    })
    .await?;
    if !known {
        return Err(ApiError::invalid_parameters(vec![(
            "after".into(),
            format!(
                "names no {} of this organization; resume after another id received (or export again)",
                group.resource
            ),
        )]));
    }
    let mut walk = Walk {
        state: state.clone(),
        caller,
        tenant,
        collection: name,
        request: component_request(&format!("/v1/{name}/export"), &state.public_url, &query),
        request_id,
        organization: principal.organization_id,
        after: after.map(|id| id.to_string()),
    };
    // The first chunk before the answer: a refused filter is a `400`.
    let first = walk.next().await?;
    let mut encoding = Encoding::of(&headers);
    let gzip = matches!(encoding, Encoding::Gzip(_));
    let (sender, mut receiver) = mpsc::channel::<std::io::Result<Bytes>>(CHUNKS_AHEAD);
    tokio::spawn(async move {
        let mut count = u64::from(first.count);
        let mut chunk = Some(first);
        let failure = loop {
            let Some(current) = chunk.take() else { break None };
            let more = current.last_read.is_some();
            match encoding.encode(&current.lines) {
                Ok(bytes) if bytes.is_empty() => {}
                Ok(bytes) => {
                    if sender.send(Ok(bytes)).await.is_err() {
                        return;
                    }
                }
                Err(error) => break Some(error),
            }
            drop(current);
            if !more {
                break None;
            }
            // The client going away ends the walk, its chunk abandoned.
            let next = tokio::select! {
                next = walk.next() => next,
                () = sender.closed() => return,
            };
            match next {
                Ok(next) => {
                    count += u64::from(next.count);
                    chunk = Some(next);
                }
                Err(error) => {
                    tracing::warn!(status = %error.status, "an export stopped before its end; the client can resume");
                    break Some(std::io::Error::other("the export stopped"));
                }
            }
        };
        // The key may start its next export once this one's end is sent:
        // released before it, so a client that read the last line and
        // starts again at once is not refused.
        drop(running);
        if let Some(error) = failure {
            // An error ends the body without its last line: the client sees
            // a stream that did not end whole.
            let _ = sender.send(Err(error)).await;
            return;
        }
        let trailer = format!("{{\"sequence\":{sequence},\"count\":{count}}}\n");
        let end = encoding.encode(trailer.as_bytes()).and_then(|mut bytes| {
            let tail = encoding.finish()?;
            if !tail.is_empty() {
                let mut joined = bytes.to_vec();
                joined.extend_from_slice(&tail);
                bytes = Bytes::from(joined);
            }
            Ok(bytes)
        });
        let _ = sender.send(end).await;
    });
    let stream = futures_util::stream::poll_fn(move |context| receiver.poll_recv(context));
    let mut response = Body::from_stream(stream).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    if gzip {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    if let Ok(value) = HeaderValue::from_str(&sequence.to_string()) {
        headers.insert(SEQUENCE_HEADER, value);
    }
    Ok(response)
}
