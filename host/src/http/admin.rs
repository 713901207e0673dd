//! The admin listener: loopback by default, separate from the public port,
//! authenticated with the admin token. It carries what operators change:
//! for now, plugin reload.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::problem::ApiError;
use super::request_id;
use crate::plugins::{PluginInfo, PluginRegistry};

/// The file the generated admin token is kept in, in the data directory.
pub const ADMIN_TOKEN_FILE: &str = "admin-token";

#[derive(Clone)]
pub struct AdminState {
    pub plugins: Arc<PluginRegistry>,
    /// SHA-256 of the admin token.
    pub token_hash: [u8; 32],
}

/// The admin token: `ESR_ADMIN_TOKEN` when set, else the one in
/// `<data-dir>/admin-token`, created (owner-only) on first start.
pub fn admin_token(data_dir: &Path) -> anyhow::Result<String> {
    if let Ok(token) = std::env::var("ESR_ADMIN_TOKEN") {
        anyhow::ensure!(token.len() >= 16, "ESR_ADMIN_TOKEN must be at least 16 characters");
        return Ok(token);
    }
    let path = data_dir.join(ADMIN_TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(token) if !token.trim().is_empty() => Ok(token.trim().to_owned()),
        _ => {
            let token = format!("esradm_{}", crate::auth::random_base62(40));
            crate::seed::write_private(&path, token.as_bytes())?;
            Ok(token)
        }
    }
}

/// The token a CLI subcommand uses to reach a running server.
pub fn read_admin_token(data_dir: &Path) -> anyhow::Result<String> {
    if let Ok(token) = std::env::var("ESR_ADMIN_TOKEN") {
        return Ok(token);
    }
    let path = data_dir.join(ADMIN_TOKEN_FILE);
    std::fs::read_to_string(&path).map(|t| t.trim().to_owned()).with_context(|| {
        format!("no admin token in {} (set ESR_ADMIN_TOKEN, or --data-dir to the server's)", path.display())
    })
}

pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/admin/v1/plugins/reload", any(reload))
        .fallback(|| async { ApiError::not_found("no such admin path") })
        .layer(middleware::from_fn(request_id))
        .with_state(state)
}

fn authorize(state: &AdminState, headers: &HeaderMap) -> Result<(), ApiError> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .ok_or_else(|| ApiError::unauthorized("the admin token is required: Authorization: Bearer <admin token>"))?;
    // Comparing digests keeps the comparison's timing independent of the token.
    let digest: [u8; 32] = Sha256::digest(presented.trim().as_bytes()).into();
    if digest == state.token_hash { Ok(()) } else { Err(ApiError::unauthorized("the admin token is not valid")) }
}

fn describe(info: &PluginInfo) -> serde_json::Value {
    json!({
        "group": info.group,
        "version": info.version,
        "file": info.file.display().to_string(),
        "content_hash": format!("sha256:{}", info.sha256),
        "wit_version": info.wit_version,
        "loaded_at": info.loaded_at,
    })
}

/// `POST /admin/v1/plugins/reload`: validates the whole directory and
/// swaps it in, or answers why not while the loaded components keep serving.
async fn reload(State(state): State<AdminState>, method: Method, headers: HeaderMap) -> Result<Response, ApiError> {
    if method != Method::POST {
        return Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "Method not allowed",
            "reload with POST",
        )
        .with_header(header::ALLOW, "POST"));
    }
    authorize(&state, &headers)?;
    let plugins = state.plugins.clone();
    let outcome = tokio::task::spawn_blocking(move || plugins.reload()).await.map_err(|_| ApiError::internal())?;
    match outcome {
        Ok(set) => {
            tracing::info!("plugins reloaded");
            let loaded: Vec<serde_json::Value> = set.infos().map(describe).collect();
            Ok((StatusCode::OK, axum::Json(json!({"loaded": loaded}))).into_response())
        }
        Err(error) => {
            let reason = format!("{error:#}");
            tracing::error!(error = %reason, "plugin reload refused; the loaded components keep serving");
            Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "reload-refused", "Reload refused", reason))
        }
    }
}
