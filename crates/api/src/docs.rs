//! `GET /docs`: a browsable reference of the API's own OpenAPI document
//! (`/v1/openapi.json`), with "try it out", rendered in the browser by
//! Swagger UI. The renderer is vendored in `assets/swagger-ui/` (its
//! README says which version and how to update it) and built into the
//! binary: nothing is fetched from elsewhere, at build or at run time.
//!
//! Public, like the document it renders. The page's Content-Security-Policy
//! admits scripts and styles only from these files and requests only to
//! this server, so a key typed into the page goes nowhere else.

use std::sync::LazyLock;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use sha2::{Digest, Sha256};

use crate::{ApiError, allow_read_only, path_parameters, routes};

/// The page's policy. Swagger UI sets styles through the DOM's style
/// properties only, which `style-src 'self'` allows: no `'unsafe-inline'`.
/// The stylesheet's icons are `data:` images.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// A file the page loads, served at `/docs/<name>`.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const ASSETS: [Asset; 6] = [
    Asset {
        name: "swagger-ui-bundle.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../assets/swagger-ui/swagger-ui-bundle.js"),
    },
    Asset {
        name: "swagger-ui.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../assets/swagger-ui/swagger-ui.css"),
    },
    Asset {
        name: "docs.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../assets/docs.js"),
    },
    // What the bundle's first line points to, and the renderer's licence
    // and notice, which Apache-2.0 asks to pass on with it.
    Asset {
        name: "swagger-ui-bundle.js.LICENSE.txt",
        content_type: "text/plain; charset=utf-8",
        body: include_bytes!("../assets/swagger-ui/swagger-ui-bundle.js.LICENSE.txt"),
    },
    Asset {
        name: "swagger-ui-LICENSE.txt",
        content_type: "text/plain; charset=utf-8",
        body: include_bytes!("../assets/swagger-ui/LICENSE"),
    },
    Asset {
        name: "swagger-ui-NOTICE.txt",
        content_type: "text/plain; charset=utf-8",
        body: include_bytes!("../assets/swagger-ui/NOTICE"),
    },
];

/// Each asset's strong ETag (a digest of its bytes), in [`ASSETS`]' order.
/// The page links each asset with it too, so a new build's files are new
/// URLs and an old copy can be kept for a year.
static ETAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    ASSETS.iter().map(|asset| format!("\"{}\"", &hex::encode(Sha256::digest(asset.body))[..32])).collect()
});

/// The page: only links to the assets (no inline script or style, which
/// the policy refuses), versioned by their digests.
static PAGE_HTML: LazyLock<String> = LazyLock::new(|| {
    let link = |name: &str| {
        let index = ASSETS.iter().position(|asset| asset.name == name).unwrap_or_default();
        let version = ETAGS.get(index).map_or("", |etag| etag.trim_matches('"'));
        format!("{}/{name}?v={version}", routes::DOCS)
    };
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Endpoint Security Remediation API reference</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="{css}">
</head>
<body>
<noscript>This reference needs JavaScript. The OpenAPI document it renders is at <a href="{openapi}">{openapi}</a>.</noscript>
<div id="swagger-ui"></div>
<script src="{bundle}"></script>
<script src="{init}"></script>
</body>
</html>
"#,
        css = link("swagger-ui.css"),
        bundle = link("swagger-ui-bundle.js"),
        init = link("docs.js"),
        openapi = routes::OPENAPI,
    )
});

/// The reference's routes: the page and its assets.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new().route(routes::DOCS, any(page)).route(routes::DOCS_ASSET, any(asset))
}

/// `GET /docs`.
async fn page(method: Method) -> Result<Response, ApiError> {
    allow_read_only(&method)?;
    let mut response = (StatusCode::OK, PAGE_HTML.as_str()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // Revalidated, so a new build's asset links are seen at once.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}

/// `GET /docs/<file>`: one of [`ASSETS`], cached for a year (its URL
/// changes with its bytes), `304` when `If-None-Match` holds its ETag.
async fn asset(method: Method, uri: Uri, request_headers: HeaderMap) -> Result<Response, ApiError> {
    allow_read_only(&method)?;
    let [name] = path_parameters(&uri);
    let index = ASSETS
        .iter()
        .position(|asset| asset.name == name)
        .ok_or_else(|| ApiError::not_found("no such path in this API"))?;
    let (asset, etag) = (&ASSETS[index], ETAGS.get(index).ok_or_else(ApiError::internal)?);
    let held = request_headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|tag| tag.trim())
        .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag.as_str());
    let mut response = if held {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (StatusCode::OK, Body::from(asset.body)).into_response()
    };
    let headers = response.headers_mut();
    if !held {
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    }
    if let Ok(value) = HeaderValue::from_str(etag) {
        headers.insert(header::ETAG, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=31536000, immutable"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page names nothing outside this server, and only files it serves.
    #[test]
    fn the_page_links_only_its_own_assets() {
        assert!(!PAGE_HTML.contains("http:") && !PAGE_HTML.contains("https:") && !PAGE_HTML.contains("//"));
        for source in PAGE_HTML.split(['"']).filter(|part| part.starts_with("/docs/")) {
            let name = source.trim_start_matches("/docs/").split('?').next().unwrap_or_default();
            assert!(ASSETS.iter().any(|asset| asset.name == name), "{source}");
        }
        assert!(!PAGE_HTML.contains("<style") && !PAGE_HTML.contains("style=") && !PAGE_HTML.contains("<script>"));
    }

    /// Our script sends requests nowhere but this server, and turns off
    /// what could fetch from elsewhere.
    #[test]
    fn the_init_script_stays_on_this_server() {
        let script = ASSETS.iter().find(|asset| asset.name == "docs.js").map(|asset| asset.body).unwrap_or_default();
        let script = std::str::from_utf8(script).unwrap_or_default();
        assert!(!script.contains("http:") && !script.contains("https:"), "{script}");
        for setting in ["queryConfigEnabled: false", "validatorUrl: null", "persistAuthorization: false"] {
            assert!(script.contains(setting), "{setting}");
        }
    }
}
