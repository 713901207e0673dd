//! The API's OpenAPI 3.1 document (`GET /v1/openapi.json`).
//!
//! The host writes what it owns: paths, the list envelope, errors, headers,
//! authentication. Each component's `describe()` gives the rest: the query
//! parameters of its operations (with their JSON Schemas) and the schema of
//! its records or document. Replacing a component therefore changes the
//! document, and the document cannot drift from what the components accept.

use serde_json::{Map, Value, json};

use super::GROUPS;
use crate::plugins::{AGENT_GROUP, ParameterDoc, PluginInfo, PluginSet};

/// The OpenAPI document of a set of components as served (JSON,
/// pretty-printed), rendered once per set.
pub fn rendered(plugins: &PluginSet) -> &[u8] {
    plugins.openapi_document(|plugins| {
        let mut text = serde_json::to_vec_pretty(&document(plugins.infos())).unwrap_or_else(|_| b"{}".to_vec());
        text.push(b'\n');
        text
    })
}

/// The OpenAPI document for the API served by these components.
pub fn document<'a>(plugins: impl Iterator<Item = &'a PluginInfo>) -> Value {
    let plugins: Vec<&PluginInfo> = plugins.collect();
    let by_group = |group: &str| plugins.iter().copied().find(|info| info.group == group);
    let mut paths = Map::new();
    let mut schemas = shared_schemas();
    for group in &GROUPS {
        let Some(info) = by_group(group.collection) else { continue };
        schemas.insert(group.schema.to_owned(), info.response_schema.clone());
        schemas.insert(format!("{}List", group.schema), list_envelope(group.schema));
        paths.insert(format!("/v1/{}", group.collection), json!({"get": list_operation(group, info)}));
        paths.insert(
            format!("/v1/{}/{{{}}}", group.collection, group.id_parameter),
            json!({"get": item_operation(group)}),
        );
    }
    if let Some(info) = by_group(AGENT_GROUP) {
        schemas.insert("AgentConfig".to_owned(), info.response_schema.clone());
        paths.insert("/v1/agent/config".to_owned(), json!({"get": agent_operation(info)}));
    }
    paths.insert("/v1/health".to_owned(), json!({"get": health_operation()}));
    paths.insert("/v1/openapi.json".to_owned(), json!({"get": openapi_operation()}));

    let mut tags: Vec<Value> = GROUPS.iter().map(|group| json!({"name": group.tag})).collect();
    tags.extend([json!({"name": "Agent"}), json!({"name": "System"})]);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Endpoint Security Remediation API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": DESCRIPTION,
        },
        "servers": [{"url": "/", "description": "this server"}],
        "security": [{"bearerAuth": []}],
        "tags": tags,
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": shared_responses(),
            "headers": shared_headers(),
            "parameters": {
                "IfNoneMatch": {
                    "name": "If-None-Match", "in": "header", "required": false,
                    "description": "ETags of copies the client holds; a match answers 304.",
                    "schema": {"type": "string"},
                },
                "RequestId": {
                    "name": "X-Request-Id", "in": "header", "required": false,
                    "description": "The caller's request id (1 to 128 visible ASCII characters), echoed back; \
                                    another value is replaced by a generated one.",
                    "schema": {"type": "string"},
                },
            },
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key (`esr_…`) of one organization, with read scopes: \
                                    endpoints:read, targets:read, scopes:read, findings:read, agent:config:read.",
                },
            },
        },
    })
}

const DESCRIPTION: &str = "The public read API of the endpoint security remediation service: the devices it \
manages (endpoints), what vulnerability scanners found on them (vulnerability findings), the standing policies \
of what to keep healthy (remediation scopes) and the fix-up work on each device (remediation targets).\n\n\
Every operation is a GET and also answers HEAD. An API key sees its own organization's records only. Errors are \
`application/problem+json` (RFC 9457) with an `error` member. Lists page with `limit` and `offset` or with \
`cursor` (from `next_cursor`, bound to the organization, collection, filters and sort), and carry `Link: \
rel=\"next\"` while there is a next page. Lists and records carry a strong `ETag`; `If-None-Match` answers 304.";

fn reference(kind: &str, name: &str) -> Value {
    json!({"$ref": format!("#/components/{kind}/{name}")})
}

/// A query parameter as its component documents it.
fn query_parameter(parameter: &ParameterDoc) -> Value {
    json!({
        "name": parameter.name,
        "in": "query",
        "required": parameter.required,
        "description": parameter.description,
        "schema": parameter.schema,
    })
}

/// The headers every answer of an authenticated operation may carry.
fn common_headers() -> Map<String, Value> {
    let mut headers = Map::new();
    for name in [
        "X-Request-Id",
        "RateLimit-Policy",
        "RateLimit",
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
    ] {
        headers.insert(name.to_owned(), reference("headers", name));
    }
    headers
}

/// A `200` answer of JSON of this schema, with a strong ETag.
fn json_ok(description: &str, schema: Value, extra_headers: &[&str]) -> Value {
    let mut headers = common_headers();
    headers.insert("ETag".to_owned(), reference("headers", "ETag"));
    for name in extra_headers {
        headers.insert((*name).to_owned(), reference("headers", name));
    }
    json!({"description": description, "headers": headers, "content": {"application/json": {"schema": schema}}})
}

fn not_modified() -> Value {
    let mut headers = common_headers();
    headers.insert("ETag".to_owned(), reference("headers", "ETag"));
    json!({"description": "The client's copy (If-None-Match) is current.", "headers": headers})
}

/// Responses of an operation: `ok` and the named shared errors.
fn responses(mut answers: Map<String, Value>, errors: &[&str]) -> Value {
    for status in errors {
        answers.insert((*status).to_owned(), reference("responses", &format!("Status{status}")));
    }
    Value::Object(answers)
}

/// The errors any authenticated operation can answer.
const AUTHENTICATED_ERRORS: [&str; 9] = ["400", "401", "403", "414", "429", "431", "500", "503", "406"];

fn list_operation(group: &super::Group, info: &PluginInfo) -> Value {
    let mut parameters: Vec<Value> = info.parameters.iter().map(query_parameter).collect();
    parameters.extend([reference("parameters", "IfNoneMatch"), reference("parameters", "RequestId")]);
    let sort_keys = info.sort_keys.join(", ");
    let mut answers = Map::new();
    answers.insert(
        "200".to_owned(),
        json_ok(
            &format!("A page of {}s: the matching records, their exact total, and the next cursor.", group.resource),
            reference("schemas", &format!("{}List", group.schema)),
            &["Link"],
        ),
    );
    answers.insert("304".to_owned(), not_modified());
    json!({
        "operationId": format!("list{}s", group.schema),
        "summary": format!("List {}s", group.resource),
        "description": format!(
            "Needs the `{}` scope. Sort keys: {sort_keys} (`-` prefix for descending; default created_at \
             ascending, ties by id). An unknown, repeated or malformed parameter is 400 naming each.",
            group.scope
        ),
        "tags": [group.tag],
        "parameters": parameters,
        "responses": responses(answers, &AUTHENTICATED_ERRORS),
    })
}

fn item_operation(group: &super::Group) -> Value {
    let mut answers = Map::new();
    answers.insert(
        "200".to_owned(),
        json_ok(&format!("The {}.", group.resource), reference("schemas", group.schema), &[]),
    );
    answers.insert("304".to_owned(), not_modified());
    let mut errors = AUTHENTICATED_ERRORS.to_vec();
    errors.push("404");
    json!({
        "operationId": format!("get{}", group.schema),
        "summary": format!("Get one {}", group.resource),
        "description": format!(
            "Needs the `{}` scope. An id that is not a UUID is 400 (\"Invalid {} ID format\"); a record of \
             another organization is 404, as one that does not exist.",
            group.scope, group.resource
        ),
        "tags": [group.tag],
        "parameters": [
            {
                "name": group.id_parameter, "in": "path", "required": true,
                "description": format!("The {}'s id.", group.resource),
                "schema": {"type": "string", "format": "uuid"},
            },
            reference("parameters", "IfNoneMatch"),
            reference("parameters", "RequestId"),
        ],
        "responses": responses(answers, &errors),
    })
}

fn agent_operation(info: &PluginInfo) -> Value {
    let mut parameters: Vec<Value> = info.parameters.iter().map(query_parameter).collect();
    parameters.push(reference("parameters", "RequestId"));
    let mut headers = common_headers();
    for name in ["Content-Disposition", "Cache-Control"] {
        headers.insert(name.to_owned(), reference("headers", name));
    }
    let mut answers = Map::new();
    answers.insert(
        "200".to_owned(),
        json!({
            "description": "The configuration file, as an attachment.",
            "headers": headers,
            "content": {
                "application/json": {"schema": reference("schemas", "AgentConfig")},
                "application/toml": {"schema": {"type": "string"}},
            },
        }),
    );
    json!({
        "operationId": "getAgentConfig",
        "summary": "Download agent configuration",
        "description": "Needs the `agent:config:read` scope. The file a device agent is installed with: the \
                        organization's enrollment-only secret, never the caller's key. It has its own, lower \
                        rate limit.",
        "tags": ["Agent"],
        "parameters": parameters,
        "responses": responses(answers, &AUTHENTICATED_ERRORS),
    })
}

fn health_operation() -> Value {
    let answer = |description: &str| {
        json!({
            "description": description,
            "headers": {"X-Request-Id": reference("headers", "X-Request-Id"), "Cache-Control": reference("headers", "Cache-Control")},
            "content": {"application/health+json": {"schema": reference("schemas", "Health")}},
        })
    };
    let mut answers = Map::new();
    answers.insert("200".to_owned(), answer("Pass or warn."));
    answers.insert("503".to_owned(), answer("Fail: storage or a required component is unusable."));
    json!({
        "operationId": "getHealth",
        "summary": "Check the health of the public API",
        "description": "No key and no rate limit. Checks storage with a cheap read and each component.",
        "tags": ["System"],
        "security": [],
        "parameters": [reference("parameters", "RequestId")],
        "responses": responses(answers, &["414", "431"]),
    })
}

fn openapi_operation() -> Value {
    let mut answers = Map::new();
    answers.insert("200".to_owned(), json_ok("This document.", json!({"type": "object"}), &[]));
    answers.insert("304".to_owned(), not_modified());
    json!({
        "operationId": "getOpenApiDocument",
        "summary": "The OpenAPI 3.1 document of this API",
        "description": "No key. Each group's parameters and record schema come from its loaded component.",
        "tags": ["System"],
        "security": [],
        "parameters": [reference("parameters", "IfNoneMatch"), reference("parameters", "RequestId")],
        "responses": responses(answers, &["400", "414", "429", "431", "500", "503", "406"]),
    })
}

/// The list envelope around records of `schema`.
fn list_envelope(schema: &str) -> Value {
    json!({
        "type": "object",
        "required": ["data", "total", "limit", "offset", "next_cursor"],
        "properties": {
            "data": {"type": "array", "items": reference("schemas", schema)},
            "total": {"type": "integer", "minimum": 0, "description": "The exact number of matching records."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            "offset": {
                "type": ["integer", "null"], "minimum": 0,
                "description": "null when the page was addressed by cursor.",
            },
            "next_cursor": {
                "type": ["string", "null"],
                "description": "The cursor of the next page; null on the last page.",
            },
        },
    })
}

fn shared_schemas() -> Map<String, Value> {
    let check = json!({
        "type": "object",
        "required": ["status"],
        "properties": {
            "status": {"type": "string", "enum": ["pass", "warn", "fail"]},
            "component_type": {"type": "string"},
            "name": {"type": "string"},
            "version": {"type": "string"},
            "content_hash": {"type": "string"},
            "wit_version": {"type": "string"},
            "loaded_at": {"type": "string", "format": "date-time"},
            "output": {"type": "string"},
        },
    });
    let mut schemas = Map::new();
    schemas.insert(
        "Problem".to_owned(),
        json!({
            "type": "object",
            "description": "An error (RFC 9457), with the `error` member clients of the published API read.",
            "required": ["type", "title", "status", "detail", "error", "instance", "request_id"],
            "properties": {
                "type": {"type": "string", "description": "The kind of problem, e.g. /v1/problems/invalid-parameter."},
                "title": {"type": "string"},
                "status": {"type": "integer", "minimum": 400, "maximum": 599},
                "detail": {"type": "string"},
                "error": {"type": "string", "description": "The same text as detail."},
                "instance": {"type": "string"},
                "request_id": {"type": "string"},
                "invalid_params": {"type": "array", "items": reference("schemas", "InvalidParam")},
            },
        }),
    );
    schemas.insert(
        "InvalidParam".to_owned(),
        json!({
            "type": "object",
            "required": ["name", "reason"],
            "properties": {"name": {"type": "string"}, "reason": {"type": "string"}},
        }),
    );
    schemas.insert(
        "Health".to_owned(),
        json!({
            "type": "object",
            "required": ["status", "version", "checks"],
            "properties": {
                "status": {"type": "string", "enum": ["pass", "warn", "fail"]},
                "version": {"type": "string"},
                "checks": {"type": "object", "additionalProperties": {"type": "array", "items": check}},
            },
        }),
    );
    schemas
}

fn shared_responses() -> Value {
    let problem = |description: &str, extra: &[&str]| {
        let mut headers = common_headers();
        for name in extra {
            headers.insert((*name).to_owned(), reference("headers", name));
        }
        json!({
            "description": description,
            "headers": headers,
            "content": {"application/problem+json": {"schema": reference("schemas", "Problem")}},
        })
    };
    json!({
        "Status400": problem("A parameter or the id is malformed, unknown, repeated or out of range; invalid_params names each.", &[]),
        "Status401": problem("No API key, or one that is not valid (unknown, revoked, expired).", &["WWW-Authenticate"]),
        "Status403": problem("The API key lacks the scope this operation needs.", &[]),
        "Status404": problem("No such record in the caller's organization.", &[]),
        "Status406": problem("The Accept header admits no media type this operation answers.", &[]),
        "Status414": problem("The request target is longer than 8 KiB.", &[]),
        "Status429": problem("Rate limit exceeded; retry after Retry-After seconds.", &["Retry-After"]),
        "Status431": problem("The request headers are larger than 64 KiB.", &[]),
        "Status500": problem("An internal error; details are logged, never sent.", &[]),
        "Status503": problem("Overloaded or a handler overran its time; retry after Retry-After seconds.", &["Retry-After"]),
    })
}

fn shared_headers() -> Value {
    let header = |description: &str, schema: Value, required: bool| json!({"description": description, "required": required, "schema": schema});
    let text = json!({"type": "string"});
    let count = json!({"type": "integer", "minimum": 0});
    json!({
        "X-Request-Id": header("The request's id: the caller's when sane, else generated.", text.clone(), true),
        "ETag": header("A strong validator of the body.", text.clone(), true),
        "Link": header("RFC 8288: rel=\"next\" while there is a next page.", text.clone(), false),
        "RateLimit-Policy": header("The caller's rate-limit policy (IETF httpapi draft).", text.clone(), false),
        "RateLimit": header("What remains of the caller's limit (IETF httpapi draft).", text.clone(), false),
        "X-RateLimit-Limit": header("Requests per window.", count.clone(), false),
        "X-RateLimit-Remaining": header("Requests left in the window.", count.clone(), false),
        "X-RateLimit-Reset": header("Seconds until the limit is whole again.", count.clone(), false),
        "Retry-After": header("Seconds to wait before retrying.", count, true),
        "WWW-Authenticate": header("Bearer.", text.clone(), true),
        "Content-Disposition": header("attachment; filename=\"agent-config.json\" (or .toml).", text.clone(), true),
        "Cache-Control": header("no-store.", text, true),
    })
}
