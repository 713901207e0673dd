//! Errors as `application/problem+json` (RFC 9457) with the `error` member
//! clients of the published API read.
//!
//! Handlers return an [`ApiError`]; it travels in the response's extensions
//! and the request-id middleware renders it, so every problem carries the
//! request's id and path without each handler threading them through.

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use esr_store::StoreError;

/// One problem, before it is rendered.
/// The longest `detail` (and `error`) sent; longer text is cut, ending in `…`
/// (`invalid_params` names each parameter).
pub const MAX_DETAIL_CHARS: usize = 4096;
/// The most `invalid_params` entries sent (a request may name thousands).
pub const MAX_INVALID_PARAMS: usize = 100;
/// The longest `reason` of an invalid parameter sent (a component writes it).
pub const MAX_REASON_CHARS: usize = 1024;

/// `text` cut to at most `max` characters, the last of them `…` when cut.
fn cut(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => text.into(),
        Some(_) => {
            let kept: String = text.chars().take(max - 1).collect();
            format!("{kept}…").into()
        }
    }
}

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    /// The last segment of the problem type URI, e.g. `invalid-parameter`.
    pub kind: &'static str,
    pub title: &'static str,
    pub detail: String,
    pub invalid_params: Vec<(String, String)>,
    /// Further members of the body, such as an import's `invalid_lines`.
    /// (Boxed: most problems have none, and errors stay small.)
    pub members: Option<Box<serde_json::Map<String, serde_json::Value>>>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, title: &'static str, detail: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            title,
            detail: detail.into(),
            invalid_params: Vec::new(),
            members: None,
            headers: Vec::new(),
        }
    }

    pub fn with_header(mut self, name: HeaderName, value: &'static str) -> ApiError {
        self.headers.push((name, HeaderValue::from_static(value)));
        self
    }

    pub fn with_member(mut self, name: &'static str, value: serde_json::Value) -> ApiError {
        self.members.get_or_insert_default().insert(name.to_owned(), value);
        self
    }

    /// `400` naming each invalid parameter and why.
    pub fn invalid_parameters(params: Vec<(String, String)>) -> ApiError {
        let detail = params.iter().map(|(name, reason)| format!("{name}: {reason}")).collect::<Vec<_>>().join("; ");
        let title = if params.len() == 1 { "Invalid parameter" } else { "Invalid parameters" };
        ApiError {
            invalid_params: params,
            ..ApiError::new(StatusCode::BAD_REQUEST, "invalid-parameter", title, detail)
        }
    }

    pub fn invalid_id(resource: &str) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid-id", "Invalid ID", format!("Invalid {resource} ID format"))
    }

    pub fn not_found(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not-found", "Not found", detail)
    }

    pub fn unauthorized(detail: &str) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "Unauthorized", detail)
            .with_header(header::WWW_AUTHENTICATE, "Bearer")
    }

    /// A refused access token (RFC 6750 §3.1 `invalid_token`).
    pub fn invalid_token(why: &str) -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Unauthorized",
            format!("the access token is refused: {why}"),
        )
        .with_header(header::WWW_AUTHENTICATE, "Bearer error=\"invalid_token\"")
    }

    /// `credential` ("API key", "access token") lacks `scope`; a token's
    /// `403` says so in RFC 6750's words.
    pub fn forbidden(scope: &str, token: bool) -> ApiError {
        let problem = ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "Forbidden",
            format!(
                "this {} lacks the {scope} scope this operation needs",
                if token { "access token" } else { "API key" }
            ),
        );
        if token {
            problem.with_header(header::WWW_AUTHENTICATE, "Bearer error=\"insufficient_scope\"")
        } else {
            problem
        }
    }

    pub fn method_not_allowed() -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "Method not allowed",
            "this API is read-only: use GET or HEAD",
        )
        .with_header(header::ALLOW, "GET, HEAD")
    }

    /// `500`; the cause is logged by the caller, never sent.
    pub fn internal() -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
            "the request failed inside the service; quote its request id when reporting it",
        )
    }

    /// `503` with `Retry-After` for a failed store call the database's
    /// outage caused ([`StoreError::Unavailable`]), else `500`; the cause
    /// goes to the log with `doing`, never to the client.
    pub fn store_failure(error: &StoreError, doing: &str) -> ApiError {
        if error.is_unavailable() {
            tracing::warn!(%error, "{doing}: the database is unavailable");
            ApiError::database_unavailable()
        } else {
            tracing::error!(%error, "{doing}: storage failed");
            ApiError::internal()
        }
    }

    /// `503` with `Retry-After`: the database cannot serve now.
    pub fn database_unavailable() -> ApiError {
        ApiError::unavailable("the database is unavailable; retry shortly")
    }

    /// `503` with `Retry-After`.
    pub fn unavailable(detail: &str) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "Service unavailable", detail)
            .with_header(header::RETRY_AFTER, "1")
    }

    /// The response body, for the request with this id and path.
    pub fn render(&self, request_id: &str, instance: &str) -> Response {
        let detail = cut(&self.detail, MAX_DETAIL_CHARS);
        let mut body = json!({
            "type": format!("/v1/problems/{}", self.kind),
            "title": self.title,
            "status": self.status.as_u16(),
            "detail": detail,
            "error": detail,
            "instance": instance,
            "request_id": request_id,
        });
        if !self.invalid_params.is_empty() {
            body["invalid_params"] = self
                .invalid_params
                .iter()
                .take(MAX_INVALID_PARAMS)
                .map(|(name, reason)| json!({"name": name, "reason": cut(reason, MAX_REASON_CHARS)}))
                .collect();
        }
        for (name, value) in self.members.iter().flat_map(|members| members.iter()) {
            body[name] = value.clone();
        }
        let mut response = (self.status, body.to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
        }
        response
    }
}

impl IntoResponse for ApiError {
    /// A placeholder the request-id middleware replaces with [`ApiError::render`].
    fn into_response(self) -> Response {
        let mut response = self.status.into_response();
        response.extensions_mut().insert(self);
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_to_its_bound_in_characters() {
        assert_eq!(cut("short", 5), "short");
        assert_eq!(cut("ééééé", 4), "ééé…");
        assert_eq!(cut("abcdef", 4).chars().count(), 4);
    }

    #[test]
    fn a_rendered_problem_keeps_the_bounds_the_document_states() {
        let many: Vec<(String, String)> =
            (0..MAX_INVALID_PARAMS + 50).map(|n| (format!("p{n}"), "x".repeat(MAX_REASON_CHARS + 10))).collect();
        let response = ApiError::invalid_parameters(many).render("id", "/v1/scopes");
        let body = body_json(response);
        assert_eq!(body["detail"].as_str().map(|d| d.chars().count()), Some(MAX_DETAIL_CHARS));
        assert_eq!(body["detail"], body["error"]);
        let params = body["invalid_params"].as_array().map(Vec::len);
        assert_eq!(params, Some(MAX_INVALID_PARAMS));
        assert_eq!(body["invalid_params"][0]["reason"].as_str().map(|r| r.chars().count()), Some(MAX_REASON_CHARS));
    }

    fn body_json(response: Response) -> serde_json::Value {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let bytes = runtime.block_on(axum::body::to_bytes(response.into_body(), usize::MAX)).expect("body");
        serde_json::from_slice(&bytes).expect("json")
    }
}
