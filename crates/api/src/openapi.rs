//! The API's OpenAPI 3.1 document (`GET /v1/openapi.json`).
//!
//! The host writes what it owns: paths, the list envelope, errors, headers,
//! authentication. Each component's `describe()` gives the rest: the query
//! parameters of its operations (with their JSON Schemas) and the schema of
//! its records or document. Replacing a component therefore changes the
//! document, and the document cannot drift from what the components accept.

use serde_json::{Map, Value, json};

use esr_contract::Collection;
use esr_contract::limits::MAX_CURSOR_CHARS;
use esr_contract::limits::MAX_LIMIT;

use super::changes::{DEFAULT_CHANGES_LIMIT, MAX_CHANGES_LIMIT, MAX_COLLECTION_PARAMETER_CHARS, MAX_HISTORY_ENTRIES};
use super::limits::{MAX_HEADER_BYTES, MAX_REQUEST_TARGET_BYTES};
use super::problem::{MAX_DETAIL_CHARS, MAX_INVALID_PARAMS, MAX_REASON_CHARS};
use super::{GROUPS, MAX_DOCUMENT_BYTES, MAX_LINK_CHARS};
use esr_contract::limits::{MAX_SUMMARY_GROUPS, MAX_SUMMARY_VALUE_CHARS};
use esr_runtime::{AGENT_GROUP, ComponentInfo, ComponentSet, ParameterDoc, SummaryDoc};

/// The OpenAPI document of a set of components as served (JSON,
/// pretty-printed), rendered once per set.
pub fn rendered(plugins: &ComponentSet) -> &[u8] {
    plugins.openapi_document(|plugins| {
        let mut text = serde_json::to_vec_pretty(&document(plugins.infos())).unwrap_or_else(|_| b"{}".to_vec());
        text.push(b'\n');
        text
    })
}

/// The OpenAPI document for the API served by these components.
pub fn document<'a>(plugins: impl Iterator<Item = &'a ComponentInfo>) -> Value {
    let plugins: Vec<&ComponentInfo> = plugins.collect();
    let by_group = |group: &str| plugins.iter().copied().find(|info| info.group == group);
    let mut paths = Map::new();
    let mut schemas = shared_schemas();
    for group in &GROUPS {
        let Some(info) = by_group(group.collection.name()) else { continue };
        schemas.insert(group.schema.to_owned(), info.response_schema.clone());
        schemas.insert(format!("{}List", group.schema), list_envelope(group.schema));
        paths.insert(format!("/v1/{}", group.collection), json!({"get": list_operation(group, info)}));
        paths.insert(
            format!("/v1/{}/{{{}}}", group.collection, group.id_parameter),
            json!({"get": item_operation(group)}),
        );
        if group.history {
            paths.insert(
                format!("/v1/{}/{{{}}}/history", group.collection, group.id_parameter),
                json!({"get": history_operation(group)}),
            );
        }
        if let Some(formats) = &info.export_formats {
            paths.insert(
                format!("/v1/{}/export", group.collection),
                json!({"get": export_operation(group, info, formats)}),
            );
            if formats.iter().any(|format| format == "ocsf") && group.collection == Collection::VulnerabilityFindings {
                schemas.insert("OcsfVulnerabilityFinding".to_owned(), ocsf_finding_schema());
            }
        }
        if let Some(summary) = info.summary.as_ref().filter(|_| group.summary) {
            schemas.insert(format!("{}Summary", group.schema), summary_schema(&summary.group_by));
            paths
                .insert(format!("/v1/{}/summary", group.collection), json!({"get": summary_operation(group, summary)}));
        }
    }
    let followed: Vec<&super::Group> =
        GROUPS.iter().filter(|group| by_group(group.collection.name()).is_some()).collect();
    if !followed.is_empty() {
        let ocsf = schemas.contains_key("OcsfVulnerabilityFinding");
        schemas.insert("ChangeEvent".to_owned(), change_event_schema(&followed, ocsf));
        schemas.insert("ChangeFeed".to_owned(), change_feed_schema());
        paths.insert("/v1/changes".to_owned(), json!({"get": changes_operation(&followed, ocsf)}));
    }
    if GROUPS.iter().any(|group| group.history && by_group(group.collection.name()).is_some()) {
        schemas.insert("HistoryEntry".to_owned(), history_entry_schema());
        schemas.insert("History".to_owned(), json!({
            "type": "object",
            "required": ["data"],
            "properties": {"data": {"type": "array", "items": reference("schemas", "HistoryEntry"), "maxItems": MAX_HISTORY_ENTRIES}},
        }));
    }
    if let Some(info) = by_group(AGENT_GROUP) {
        schemas.insert("AgentConfig".to_owned(), info.response_schema.clone());
        paths.insert("/v1/agent/config".to_owned(), json!({"get": agent_operation(info)}));
    }
    paths.insert("/v1/health".to_owned(), json!({"get": health_operation()}));
    paths.insert("/v1/openapi.json".to_owned(), json!({"get": openapi_operation()}));

    let mut tags: Vec<Value> =
        GROUPS.iter().map(|group| json!({"name": group.tag, "description": group.tag_description})).collect();
    tags.extend([
        json!({"name": "Changes", "description": "Every create, update and delete of the organization's records, in commit order: what mirrors follow."}),
        json!({"name": "Agent", "description": "The configuration file a device agent is installed with."}),
        json!({"name": "System", "description": "Health of the service and this document; no key needed."}),
    ]);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Endpoint Security Remediation API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": DESCRIPTION,
            "license": {"name": "Apache-2.0", "url": "https://www.apache.org/licenses/LICENSE-2.0"},
            "contact": {"name": "The operator of this server"},
        },
        // The document is served by each deployment and names none.
        "servers": [{"url": "/", "description": "The server this document was fetched from.", "x-internal": false}],
        "security": security(&[]),
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
                    "schema": {"type": "string", "maxLength": MAX_HEADER_BYTES},
                },
                "RequestId": {
                    "name": "X-Request-Id", "in": "header", "required": false,
                    "description": "The caller's request id (1 to 128 visible ASCII characters), echoed back; \
                                    another value is replaced by a generated one.",
                    "schema": {"type": "string", "maxLength": MAX_HEADER_BYTES},
                },
            },
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key (`esr_…`) of one organization, with read scopes: \
                                    endpoints:read, targets:read, scopes:read, findings:read, agent:config:read.",
                },
                "oauth2": {
                    "type": "oauth2",
                    "description": "An access token (a JWT, RFC 9068, issued and checked as RFC8725 advises: \
                                    EdDSA only, typed at+jwt, issuer and audience checked) from `POST /oauth2/token` \
                                    with an API client's credentials, valid for `expires_in` seconds (15 minutes by \
                                    default; the client asks again, there is no refresh token), or from an identity \
                                    provider this server trusts. Refused tokens are 401 with `WWW-Authenticate: Bearer \
                                    error=\"invalid_token\"`.",
                    "flows": {
                        "clientCredentials": {
                            "tokenUrl": "/oauth2/token",
                            "scopes": esr_auth::keys::ALL_READ_SCOPES
                                .iter()
                                .map(|scope| (scope.to_string(), json!(scope_description(scope))))
                                .collect::<Map<String, Value>>(),
                        },
                    },
                },
            },
        },
    })
}

/// Either credential: an API key, or an access token with `scopes`.
fn security(scopes: &[&str]) -> Value {
    json!([{"bearerAuth": []}, {"oauth2": scopes}])
}

fn scope_description(scope: &str) -> &'static str {
    match scope {
        "endpoints:read" => "Read endpoints.",
        "targets:read" => "Read remediation targets.",
        "scopes:read" => "Read remediation scopes.",
        "findings:read" => "Read vulnerability findings.",
        _ => "Read the agent configuration.",
    }
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

/// The rate-limit fields every answer of a rate-limited operation carries.
const RATE_LIMIT_HEADERS: [&str; 5] =
    ["RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"];

/// The headers every answer of a rate-limited operation carries.
fn common_headers() -> Map<String, Value> {
    let mut headers = Map::new();
    for name in std::iter::once("X-Request-Id").chain(RATE_LIMIT_HEADERS) {
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

fn list_operation(group: &super::Group, info: &ComponentInfo) -> Value {
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
    // Each record of the page leads to its item operation; the first one's
    // link is what generated clients and stateful testers follow.
    answers["200"]["links"] = json!({
        format!("get{}", group.schema): {
            "operationId": format!("get{}", group.schema),
            "parameters": {group.id_parameter: "$response.body#/data/0/id"},
            "description": format!("The first {} of the page, by its id.", group.resource),
        },
    });
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
        "security": security(&[group.scope]),
        "parameters": parameters,
        "responses": responses(answers, &AUTHENTICATED_ERRORS),
    })
}

/// The list's parameters an export does not take.
const PAGING_PARAMETERS: [&str; 5] = ["limit", "offset", "cursor", "sort", "id"];

fn export_operation(group: &super::Group, info: &ComponentInfo, formats: &[String]) -> Value {
    let mut parameters: Vec<Value> = info
        .parameters
        .iter()
        .filter(|parameter| !PAGING_PARAMETERS.contains(&parameter.name.as_str()))
        .map(query_parameter)
        .collect();
    parameters.push(json!({
        "name": "after", "in": "query", "required": false,
        "description": format!(
            "Resume after this {} id: the last record received from an export that did not end whole.",
            group.resource
        ),
        "schema": {"type": "string", "format": "uuid", "maxLength": super::export::MAX_ID_CHARS},
    }));
    if !formats.is_empty() {
        let mut names = vec![esr_runtime::feed::DEFAULT_FORMAT.to_owned()];
        names.extend(formats.iter().cloned());
        parameters.push(json!({
            "name": "format", "in": "query", "required": false,
            "description": "How each record is rendered: esr (as the item operation shows it) or ocsf (an OCSF Vulnerability Finding, docs/ocsf.md).",
            "schema": {"type": "string", "enum": names, "default": esr_runtime::feed::DEFAULT_FORMAT},
        }));
    }
    parameters.push(reference("parameters", "RequestId"));
    let mut headers = common_headers();
    headers.insert("ESR-Sequence".to_owned(), json!({
        "description": "The organization's change-feed sequence when the export began: follow /v1/changes?after= it.",
        "schema": {"type": "integer", "format": "int64", "minimum": 0, "maximum": i64::MAX},
    }));
    let mut answers = Map::new();
    answers.insert("200".to_owned(), json!({
        "description": format!(
            "Every matching {} as NDJSON, one record per line in id order, then the line              {{\"sequence\": S, \"count\": N}}: a stream without it did not end whole.",
            group.resource
        ),
        "headers": headers,
        // A stream: as long as the collection, no longer.
        "content": {"application/x-ndjson": {"schema": {"type": "string", "maxLength": i64::MAX}}},
    }));
    let mut errors = AUTHENTICATED_ERRORS.to_vec();
    errors.push("404");
    json!({
        "operationId": format!("export{}s", group.schema),
        "summary": format!("Export every {}", group.resource),
        "description": format!(
            "Needs the `{}` scope. Streams every {} the key may read that the list's filters match, as NDJSON \
             (gzip with Accept-Encoding: gzip), in id order, without a job: the header ESR-Sequence gives the \
             organization's sequence when it began and the last line is {{\"sequence\": S, \"count\": N}}. A \
             stream cut short resumes with `after` = the last id received; then follow /v1/changes?after=S. One \
             export runs at a time per key (429 with Retry-After). 404 when the loaded component serves no export.",
            group.scope, group.resource
        ),
        "tags": [group.tag],
        "security": security(&[group.scope]),
        "parameters": parameters,
        "responses": responses(answers, &errors),
    })
}

/// What the OpenAPI document says of an OCSF finding: its class and the
/// schema version; the OCSF schema itself is the reference.
fn ocsf_finding_schema() -> Value {
    json!({
        "type": "object",
        "description": "An OCSF Vulnerability Finding (class_uid 2002), as docs/ocsf.md maps it; the OCSF schema named by metadata.version is the reference.",
        "required": ["class_uid", "category_uid", "activity_id", "type_uid", "severity_id", "time", "metadata", "finding_info"],
        "properties": {
            "class_uid": {"const": 2002},
            "category_uid": {"const": 2},
            "activity_id": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 99},
            "type_uid": {"type": "integer", "format": "int32", "minimum": 200200, "maximum": 200299},
            "severity_id": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 99},
            "time": {"type": "integer", "format": "int64", "minimum": 0, "maximum": i64::MAX},
            "metadata": {"type": "object"},
            "finding_info": {"type": "object"},
        },
    })
}

fn summary_operation(group: &super::Group, summary: &SummaryDoc) -> Value {
    let mut parameters: Vec<Value> = summary.parameters.iter().map(query_parameter).collect();
    parameters.extend([reference("parameters", "IfNoneMatch"), reference("parameters", "RequestId")]);
    let mut answers = Map::new();
    answers.insert(
        "200".to_owned(),
        json_ok(
            &format!("Exact counts of the matching {}s per group, and their total.", group.resource),
            reference("schemas", &format!("{}Summary", group.schema)),
            &[],
        ),
    );
    answers.insert("304".to_owned(), not_modified());
    let mut errors = AUTHENTICATED_ERRORS.to_vec();
    errors.push("404");
    json!({
        "operationId": format!("summarize{}s", group.schema),
        "summary": format!("Count {}s by fields", group.resource),
        "description": format!(
            "Needs the `{}` scope. `groupBy` names one or two of: {}; every filter of the list narrows \
             what is counted, in any combination, and `total` is the list's. Groups with no record are left \
             out; groups are ordered by count, largest first. Filters on indexed fields and ranges (any \
             number of them together) are counted from the server's indexes without reading records; a \
             filter tested on each record (a text prefix) reads the records it selects, and is refused \
             with 400 naming it when that would be more than the list reads for a total, as the list's \
             total is. A summary of more groups than the server answers, or one counted per combination of \
             values past its budget, is 400 saying to add a filter or group by fewer fields. A bad \
             `groupBy` (unknown field, repeated, more than two) is 400 naming it and the fields allowed; \
             404 when the loaded component serves no summary.",
            group.scope,
            summary.group_by.join(", ")
        ),
        "tags": [group.tag],
        "security": security(&[group.scope]),
        "parameters": parameters,
        "responses": responses(answers, &errors),
    })
}

/// A summary answer grouped by some of `fields`.
fn summary_schema(fields: &[String]) -> Value {
    let mut properties = Map::new();
    for field in fields {
        properties.insert(
            field.clone(),
            json!({"type": ["string", "boolean"], "maxLength": MAX_SUMMARY_VALUE_CHARS, "description": "The group's value of this field, when grouped by it."}),
        );
    }
    properties.insert(
        "count".to_owned(),
        json!({"type": "integer", "format": "int64", "minimum": 1, "maximum": i64::MAX, "description": "How many records hold the group's values."}),
    );
    json!({
        "type": "object",
        "required": ["groups", "total"],
        "properties": {
            "groups": {
                "type": "array",
                "maxItems": MAX_SUMMARY_GROUPS,
                "items": {"type": "object", "required": ["count"], "properties": properties, "additionalProperties": false},
            },
            "total": {
                "type": "integer", "format": "int64", "minimum": 0, "maximum": i64::MAX,
                "description": "The exact number of records matching the filters (grouped or not).",
            },
        },
    })
}

fn item_operation(group: &super::Group) -> Value {
    let mut answers = Map::new();
    answers.insert(
        "200".to_owned(),
        json_ok(&format!("The {}.", group.resource), reference("schemas", group.schema), &[]),
    );
    if group.history {
        answers["200"]["links"] = json!({
            format!("get{}History", group.schema): {
                "operationId": format!("get{}History", group.schema),
                "parameters": {group.id_parameter: "$response.body#/id"},
                "description": format!("The {}'s status history.", group.resource),
            },
        });
    }
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
        "security": security(&[group.scope]),
        "parameters": record_parameters(group),
        "responses": responses(answers, &errors),
    })
}

fn agent_operation(info: &ComponentInfo) -> Value {
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
                "application/toml": {"schema": {"type": "string", "maxLength": MAX_DOCUMENT_BYTES}},
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
        "security": security(&["agent:config:read"]),
        "parameters": parameters,
        "responses": responses(answers, &AUTHENTICATED_ERRORS),
    })
}

fn health_operation() -> Value {
    let answer = |description: &str| {
        let mut headers = common_headers();
        headers.insert("Cache-Control".to_owned(), reference("headers", "Cache-Control"));
        json!({
            "description": description,
            "headers": headers,
            "content": {"application/health+json": {"schema": reference("schemas", "Health")}},
        })
    };
    let mut answers = Map::new();
    answers.insert("200".to_owned(), answer("Pass or warn."));
    answers.insert("503".to_owned(), answer("Fail: storage or a required component is unusable."));
    json!({
        "operationId": "getHealth",
        "summary": "Check the health of the public API",
        "description": "No key. Limited per client address (policy `health`: the per-address quota, in buckets \
                        of its own). Checks storage with a cheap read and each component, at most once a second \
                        for every caller. Says pass or fail per check; what runs where (host, component \
                        versions and hashes, replicas) is on the admin listener.",
        "tags": ["System"],
        "security": [],
        "parameters": [reference("parameters", "RequestId")],
        "responses": responses(answers, &["414", "429", "431"]),
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
        "required": ["data", "total", "limit", "offset", "next_cursor", "sequence"],
        "properties": {
            "data": {"type": "array", "items": reference("schemas", schema), "maxItems": MAX_LIMIT},
            "total": {
                "type": "integer", "format": "int64", "minimum": 0, "maximum": i64::MAX,
                "description": "The exact number of matching records.",
            },
            "limit": {"type": "integer", "format": "int32", "minimum": 1, "maximum": MAX_LIMIT},
            "offset": {
                "type": ["integer", "null"], "format": "int64", "minimum": 0, "maximum": i64::MAX,
                "description": "null when the page was addressed by cursor.",
            },
            "next_cursor": {
                "type": ["string", "null"], "maxLength": MAX_CURSOR_CHARS,
                "description": "The cursor of the next page; null on the last page.",
            },
            "sequence": sequence_schema(
                "The organization's latest change-feed sequence when the page was read: list everything, then \
                 follow /v1/changes?after= the first page's sequence. It counts the changes of every \
                 collection of the organization, those the key's scopes do not read included.",
            ),
        },
    })
}

/// A change-feed sequence.
fn sequence_schema(description: &str) -> Value {
    json!({"type": "integer", "format": "int64", "minimum": 0, "maximum": i64::MAX, "description": description})
}

fn changes_operation(groups: &[&super::Group], ocsf: bool) -> Value {
    let collections: Vec<&str> = groups.iter().map(|group| group.collection.name()).collect();
    let mut answers = Map::new();
    answers.insert(
        "200".to_owned(),
        json_ok(
            "A page of change events, oldest first, the next cursor, and the organization's latest sequence.",
            reference("schemas", "ChangeFeed"),
            &[],
        ),
    );
    answers.insert("304".to_owned(), not_modified());
    let mut errors = AUTHENTICATED_ERRORS.to_vec();
    errors.push("410");
    let scopes: Vec<String> = groups.iter().map(|group| format!("`{}` ({})", group.scope, group.collection)).collect();
    json!({
        "operationId": "listChanges",
        "summary": "Follow every change, in commit order",
        "description": format!(
            "Every create, update and delete of the organization's records, in commit order, each record shaped \
             as its item operation shows it (`null` for a deletion). A key sees the events of the collections its \
             scopes read: {}; naming another in `collection` is 403. Each record keeps only its latest event: a \
             record changed again moves to the end. Start from a list's `sequence` (`after`), then follow \
             `next_cursor` while it is not null, then poll with `after` = the answer's `sequence`. Deletions are \
             kept for the server's retention (30 days by default): an older cursor or `after` is 410, and the \
             client lists again.",
            scopes.join(", ")
        ),
        "tags": ["Changes"],
        "security": security(&[]),
        "parameters": [
            {
                "name": "limit", "in": "query", "required": false,
                "description": format!("Events per page, 1 to {MAX_CHANGES_LIMIT} (default {DEFAULT_CHANGES_LIMIT})."),
                "schema": {"type": "integer", "format": "int32", "minimum": 1, "maximum": MAX_CHANGES_LIMIT, "default": DEFAULT_CHANGES_LIMIT},
            },
            {
                "name": "after", "in": "query", "required": false,
                "description": "Events after this sequence (from a list's or this feed's `sequence`, or an event's). Not with `cursor`.",
                "schema": {"type": "integer", "format": "int64", "minimum": 0, "maximum": i64::MAX},
            },
            {
                "name": "cursor", "in": "query", "required": false,
                "description": "From `next_cursor`, with the same `collection`. Not with `after`.",
                "schema": {"type": "string", "maxLength": MAX_CURSOR_CHARS},
            },
            {
                "name": "collection", "in": "query", "required": false,
                "description": format!("Only these collections, comma-separated: {}.", collections.join(", ")),
                "schema": {"type": "string", "maxLength": MAX_COLLECTION_PARAMETER_CHARS, "pattern": format!("^({0})(,({0}))*$", collections.join("|"))},
            },
            {
                "name": "format", "in": "query", "required": false,
                "description": "How records are rendered: esr (as the item operations show them), or ocsf: findings as OCSF Vulnerability Findings (docs/ocsf.md), other records as esr.",
                "schema": {"type": "string", "enum": if ocsf { vec!["esr", "ocsf"] } else { vec!["esr"] }, "default": "esr"},
            },
            reference("parameters", "IfNoneMatch"),
            reference("parameters", "RequestId"),
        ],
        "responses": responses(answers, &errors),
    })
}

fn change_event_schema(groups: &[&super::Group], ocsf: bool) -> Value {
    let mut records: Vec<Value> = groups.iter().map(|group| reference("schemas", group.schema)).collect();
    if ocsf {
        records.push(reference("schemas", "OcsfVulnerabilityFinding"));
    }
    records.push(json!({"type": "null"}));
    json!({
        "type": "object",
        "required": ["sequence", "collection", "id", "operation", "changed_at", "record"],
        "properties": {
            "sequence": sequence_schema("The change's place in the organization's commit order."),
            "collection": {"type": "string", "enum": groups.iter().map(|group| group.collection).collect::<Vec<_>>()},
            "id": {"type": "string", "format": "uuid", "maxLength": 36},
            "operation": {"type": "string", "enum": ["created", "updated", "deleted"]},
            "changed_at": {"type": "string", "format": "date-time", "maxLength": 30},
            "record": {
                "description": "The record as its item operation shows it now; null for a deletion.",
                "anyOf": records,
            },
        },
    })
}

fn change_feed_schema() -> Value {
    json!({
        "type": "object",
        "required": ["data", "next_cursor", "sequence"],
        "properties": {
            "data": {"type": "array", "items": reference("schemas", "ChangeEvent"), "maxItems": MAX_CHANGES_LIMIT},
            "next_cursor": {
                "type": ["string", "null"], "maxLength": MAX_CURSOR_CHARS,
                "description": "The cursor of the next page; null when this page reached the latest change.",
            },
            "sequence": sequence_schema(
                "The organization's latest sequence when the page was read: poll with `after` = this once \
                 `next_cursor` is null. Sequences count every collection's changes: a key sees gaps where \
                 the changes of collections its scopes do not read were.",
            ),
        },
    })
}

fn history_entry_schema() -> Value {
    json!({
        "type": "object",
        "required": ["status", "at", "cause"],
        "properties": {
            "status": {"type": "string", "maxLength": 32, "description": "The status the record took."},
            "at": {"type": "string", "format": "date-time", "maxLength": 30},
            "cause": {
                "type": "object",
                "required": ["kind", "scanner", "batch_id"],
                "properties": {
                    "kind": {"type": "string", "enum": ["import", "report", "suppression_expired", "deletion"]},
                    "scanner": {"type": ["string", "null"], "maxLength": 64, "description": "The scanner whose report changed it."},
                    "batch_id": {
                        "type": ["string", "null"], "format": "uuid", "maxLength": 36,
                        "description": "The import or report that changed it (its answer's batch_id).",
                    },
                    "scanner_declared": {
                        "type": "boolean",
                        "description": "Reports: whether the uploader declared the scanner (else the importer named it).",
                    },
                    "format": {"type": "string", "maxLength": 64, "description": "Reports: the importer's format."},
                    "importer_version": {"type": "string", "maxLength": 64, "description": "Reports: the importer's version."},
                    "tool": {
                        "type": ["string", "null"], "maxLength": 64,
                        "description": "Reports: the tool the document names (never matched on).",
                    },
                    "request_id": {"type": "string", "maxLength": 64, "description": "Reports: the import's request id."},
                },
            },
        },
    })
}

fn history_operation(group: &super::Group) -> Value {
    let mut answers = Map::new();
    answers.insert(
        "200".to_owned(),
        json_ok(
            &format!("The {}'s status changes, oldest first.", group.resource),
            reference("schemas", "History"),
            &[],
        ),
    );
    answers.insert("304".to_owned(), not_modified());
    let mut errors = AUTHENTICATED_ERRORS.to_vec();
    errors.push("404");
    json!({
        "operationId": format!("get{}History", group.schema),
        "summary": format!("Status history of one {}", group.resource),
        "description": format!(
            "Needs the `{}` scope. Each status the {} took, when, and why (an import, a scanner's report, a \
             suppression that expired), oldest first, kept as long as the record exists.",
            group.scope, group.resource
        ),
        "tags": [group.tag],
        "security": security(&[group.scope]),
        "parameters": record_parameters(group),
        "responses": responses(answers, &errors),
    })
}

/// The parameters of an operation on one record: its id in the path, and
/// the conditional and request-id headers.
fn record_parameters(group: &super::Group) -> Value {
    json!([
        {
            "name": group.id_parameter, "in": "path", "required": true,
            "description": format!("The {}'s id.", group.resource),
            "schema": {"type": "string", "format": "uuid", "maxLength": 36},
        },
        reference("parameters", "IfNoneMatch"),
        reference("parameters", "RequestId"),
    ])
}

fn shared_schemas() -> Map<String, Value> {
    let check = json!({
        "type": "object",
        "required": ["status"],
        "properties": {
            "status": {"type": "string", "enum": ["pass", "warn", "fail"]},
            "component_type": {"type": "string", "enum": ["datastore", "component", "system"]},
            "output": {"type": "string", "maxLength": 256},
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
                "type": {
                    "type": "string", "pattern": "^/v1/problems/[a-z-]+$", "maxLength": 64,
                    "description": "The kind of problem, e.g. /v1/problems/invalid-parameter.",
                },
                "title": {"type": "string", "maxLength": 64},
                "status": {"type": "integer", "format": "int32", "minimum": 400, "maximum": 599},
                "detail": {"type": "string", "maxLength": MAX_DETAIL_CHARS},
                "error": {"type": "string", "maxLength": MAX_DETAIL_CHARS, "description": "The same text as detail."},
                "instance": {"type": "string", "maxLength": MAX_REQUEST_TARGET_BYTES},
                "request_id": {"type": "string", "maxLength": 128},
                "invalid_params": {
                    "type": "array", "items": reference("schemas", "InvalidParam"), "maxItems": MAX_INVALID_PARAMS,
                },
            },
        }),
    );
    schemas.insert(
        "InvalidParam".to_owned(),
        json!({
            "type": "object",
            "required": ["name", "reason"],
            "properties": {
                "name": {"type": "string", "maxLength": MAX_REQUEST_TARGET_BYTES},
                "reason": {"type": "string", "maxLength": MAX_REASON_CHARS},
            },
        }),
    );
    schemas.insert(
        "Health".to_owned(),
        json!({
            "type": "object",
            "required": ["status", "version", "checks"],
            "properties": {
                "status": {"type": "string", "enum": ["pass", "warn", "fail"]},
                "version": {"type": "string", "maxLength": 64},
                "checks": {"type": "object", "additionalProperties": {"type": "array", "items": check, "maxItems": 1}},
            },
        }),
    );
    schemas
}

fn shared_responses() -> Value {
    // Errors of the limits in front of the rate limit (`414`, `431`) are
    // charged to the client address's; only a shed `503` and a `500` before
    // authentication go without the fields.
    let problem = |description: &str, extra: &[&str], rate_limited: bool| {
        let mut headers = common_headers();
        if !rate_limited {
            for name in RATE_LIMIT_HEADERS {
                headers.insert(name.to_owned(), reference("headers", &format!("{name}-Optional")));
            }
        }
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
        "Status400": problem("A parameter or the id is malformed, unknown, repeated, too long or out of range; invalid_params names each.", &[], true),
        "Status401": problem("No API key or access token, or one that is not valid (unknown, revoked, expired; a token \
                              that does not verify).", &["WWW-Authenticate"], true),
        "Status403": problem("The API key or access token lacks the scope this operation needs.", &[], true),
        "Status404": problem("No such record in the caller's organization.", &[], true),
        "Status410": problem("The cursor or `after` is older than the change feed keeps: list again, then follow from the list's sequence.", &[], true),
        "Status406": problem("The Accept header admits no media type this operation answers.", &[], true),
        "Status414": problem("The request target is longer than 8 KiB.", &[], true),
        "Status429": problem("Rate limit exceeded; retry after Retry-After seconds.", &["Retry-After"], true),
        "Status431": problem("The request headers are larger than 64 KiB.", &[], true),
        "Status500": problem("An internal error; details are logged, never sent.", &[], false),
        "Status503": problem("Overloaded or a handler overran its time; retry after Retry-After seconds.", &["Retry-After"], false),
    })
}

fn shared_headers() -> Value {
    let header = |description: &str, schema: Value, required: bool| json!({"description": description, "required": required, "schema": schema});
    let text = |max: usize| json!({"type": "string", "maxLength": max});
    let seconds = json!({"type": "integer", "format": "int64", "minimum": 0, "maximum": i64::MAX});
    let requests = json!({"type": "integer", "format": "int64", "minimum": 0, "maximum": u32::MAX});
    let policy = "The caller's rate-limit policy (IETF httpapi draft), e.g. \"per-key\";q=600;w=60.";
    let remaining = "What remains of the caller's limit (IETF httpapi draft), e.g. \"per-key\";r=99;t=1.";
    let mut headers = json!({
        "X-Request-Id": header("The request's id: the caller's when sane, else generated.", text(128), true),
        "ETag": header("A strong validator of the body.", json!({"type": "string", "pattern": "^\"[0-9a-f]{32}\"$", "maxLength": 34}), true),
        "Link": header("RFC 8288: rel=\"next\" while there is a next page.", text(MAX_LINK_CHARS), false),
        "RateLimit-Policy": header(policy, text(128), true),
        "RateLimit": header(remaining, text(128), true),
        "X-RateLimit-Limit": header("Requests per minute.", requests.clone(), true),
        "X-RateLimit-Remaining": header("Requests left now.", requests.clone(), true),
        "X-RateLimit-Reset": header("Seconds until the limit is whole again.", seconds.clone(), true),
        "Retry-After": header("Seconds to wait before retrying.", seconds, true),
        "WWW-Authenticate": header("Bearer.", json!({"type": "string", "enum": ["Bearer"]}), true),
        "Content-Disposition": header("attachment; filename=\"agent-config.json\" (or .toml).", text(128), true),
        "Cache-Control": header("no-store.", json!({"type": "string", "enum": ["no-store"]}), true),
    });
    // The same fields where an answer may go without them.
    for name in RATE_LIMIT_HEADERS {
        let mut optional = headers[name].clone();
        optional["required"] = json!(false);
        headers[format!("{name}-Optional")] = optional;
    }
    headers
}
