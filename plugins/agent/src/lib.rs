//! The agent group: the configuration file a device agent is installed
//! with, for the caller's organization (`GET /v1/agent/config`).
//!
//! Query: `platform` (windows, macos, linux; required), `format` (json, the
//! default, or toml). The file holds `schema_version`, `organization_id`,
//! `api_base_url`, `enrollment_token`, `checkin_interval_seconds`,
//! `platform`, `log_level` and `active_scope_ids`: the active scopes that
//! apply to the platform (a scope whose endpoint filter names operating-
//! system families applies to those platforms only).

use esr_plugin_sdk::query::{Param, ParamKind, Query};
use esr_plugin_sdk::{
    Descriptor, DocumentPlugin, IndexPosition, IndexWalk, ORGANIZATION, PluginError, Rendered, Request, Store,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

const GROUP: &str = "agent";
const PLATFORMS: &[&str] = &["windows", "macos", "linux"];
const FORMATS: &[&str] = &["json", "toml"];
const SCOPES_COLLECTION: &str = "scopes";
/// How many scopes one store scan asks for (the store's cap).
const SCAN_BATCH: usize = 1000;

/// Bumped when a field changes meaning or goes away, so agents can refuse
/// a file they do not understand.
const SCHEMA_VERSION: u32 = 1;
const CHECKIN_INTERVAL_SECONDS: u32 = 300;
/// The most active scope ids a file lists (scopes are standing policies, but
/// benchmarks hold 100,000); more is an error rather than a file without bound.
const MAX_ACTIVE_SCOPES: usize = 1_000_000;
/// The longest `api_base_url`: the host's public URL is at most 2,048 characters, plus `/v1`.
const MAX_BASE_URL_CHARS: usize = 2051;
const LOG_LEVEL: &str = "info";

const PARAMETERS: &[Param] = &[
    Param::new("platform", ParamKind::OneOf(PLATFORMS), "The agent's platform.").required(),
    Param::new("format", ParamKind::OneOf(FORMATS), "The file format.").with_default("json"),
];

/// The agent-configuration plugin.
pub struct Agent;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Toml,
}

/// What the store's `organization()` gives; other members are ignored.
#[derive(Deserialize)]
struct Organization {
    organization_id: String,
    enrollment_token: String,
}

/// The configuration file; fields serialize in this order.
#[derive(Debug, Serialize)]
struct AgentConfig {
    schema_version: u32,
    organization_id: String,
    api_base_url: String,
    enrollment_token: String,
    checkin_interval_seconds: u32,
    platform: String,
    log_level: String,
    active_scope_ids: Vec<String>,
}

/// The JSON Schema of [`AgentConfig`] in its JSON form.
fn config_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "schema_version": {
                "type": "integer", "format": "int32", "const": SCHEMA_VERSION,
                "minimum": SCHEMA_VERSION, "maximum": SCHEMA_VERSION,
            },
            "organization_id": {"type": "string", "format": "uuid", "maxLength": 36},
            "api_base_url": {"type": "string", "format": "uri", "maxLength": MAX_BASE_URL_CHARS},
            "enrollment_token": {
                "type": "string", "maxLength": 256,
                "description": "The organization's enrollment-only secret; never an API key.",
            },
            "checkin_interval_seconds": {
                "type": "integer", "format": "int32",
                "minimum": CHECKIN_INTERVAL_SECONDS, "maximum": CHECKIN_INTERVAL_SECONDS,
            },
            "platform": {"type": "string", "enum": PLATFORMS},
            "log_level": {"type": "string", "enum": ["error", "warn", "info", "debug"]},
            "active_scope_ids": {
                "description": "Each active scope that applies to the platform: one whose endpoint filter names \
                                operating-system families applies to those platforms only.",
                "type": "array", "maxItems": MAX_ACTIVE_SCOPES,
                "items": {"type": "string", "format": "uuid", "maxLength": 36},
            },
        },
        "required": [
            "schema_version", "organization_id", "api_base_url", "enrollment_token",
            "checkin_interval_seconds", "platform", "log_level", "active_scope_ids",
        ],
    })
}

impl DocumentPlugin for Agent {
    fn describe() -> Descriptor {
        Descriptor::new(GROUP, env!("CARGO_PKG_VERSION"), PARAMETERS, &[])
            .with_response_schema(&config_schema())
            .with_reads(&[SCOPES_COLLECTION, ORGANIZATION])
    }

    fn render(store: &dyn Store, request: &Request) -> Result<Rendered, PluginError> {
        let names: Vec<&str> = PARAMETERS.iter().map(|param| param.name).collect();
        let mut query = Query::new(&request.query, &names);
        let platform = query.one_of("platform", PLATFORMS);
        if !request.query.iter().any(|param| param.name == "platform") {
            query.reject("platform", format!("required; one of {}", PLATFORMS.join(", ")));
        }
        let format = match query.one_of("format", FORMATS) {
            Some("toml") => Format::Toml,
            _ => Format::Json,
        };
        query.finish()?;
        // `finish` has already reported a missing or invalid platform.
        let Some(platform) = platform else { return Err(PluginError::invalid("platform", "required")) };

        let organization: Organization = serde_json::from_slice(&store.organization())
            .map_err(|e| PluginError::Internal(format!("organization record is unusable: {e}")))?;
        let config = AgentConfig {
            schema_version: SCHEMA_VERSION,
            organization_id: organization.organization_id,
            api_base_url: format!("{}/v1", request.base_url.trim_end_matches('/')),
            enrollment_token: organization.enrollment_token,
            checkin_interval_seconds: CHECKIN_INTERVAL_SECONDS,
            platform: platform.to_owned(),
            log_level: LOG_LEVEL.to_owned(),
            active_scope_ids: active_scope_ids(store, platform)?,
        };

        match format {
            Format::Json => {
                let mut body = serde_json::to_vec_pretty(&config).map_err(|e| PluginError::Internal(e.to_string()))?;
                body.push(b'\n');
                Ok(Rendered {
                    content_type: "application/json".to_owned(),
                    filename: "agent-config.json".to_owned(),
                    body,
                })
            }
            Format::Toml => Ok(Rendered {
                content_type: "application/toml".to_owned(),
                filename: "agent-config.toml".to_owned(),
                body: config.to_toml().into_bytes(),
            }),
        }
    }
}

/// Whether a scope applies to agents of `platform`: unless its endpoint
/// filter names operating-system families, and then only to those.
fn applies_to(scope: &Value, platform: &str) -> bool {
    match scope.pointer("/endpoint_filter/os_families").and_then(Value::as_array) {
        Some(families) if !families.is_empty() => families.iter().any(|family| family.as_str() == Some(platform)),
        _ => true,
    }
}

/// The ids of the organization's active scopes that apply to `platform`,
/// in creation order: the `status` index's `active` value, batch by batch
/// (memory is the ids and one batch of scopes).
fn active_scope_ids(store: &dyn Store, platform: &str) -> Result<Vec<String>, PluginError> {
    let mut ids = Vec::new();
    let mut after: Option<IndexPosition> = None;
    loop {
        let walk = IndexWalk::new("status", "active", SCAN_BATCH).after(after);
        let batch = store.index_positions(SCOPES_COLLECTION, &walk);
        let scopes = store.index_scan(SCOPES_COLLECTION, &walk);
        let done = batch.len() < SCAN_BATCH;
        after = batch.last().cloned();
        for scope in scopes {
            let record: Value = serde_json::from_slice(&scope.value)
                .map_err(|error| PluginError::Internal(format!("scope {}: {error}", scope.id)))?;
            if applies_to(&record, platform) {
                ids.push(scope.id);
            }
        }
        if ids.len() > MAX_ACTIVE_SCOPES {
            return Err(PluginError::Internal(format!("more than {MAX_ACTIVE_SCOPES} active scope ids to list")));
        }
        if done {
            return Ok(ids);
        }
    }
}

impl AgentConfig {
    /// The file as TOML, with the same keys in the same order as the JSON.
    fn to_toml(&self) -> String {
        let scope_ids: Vec<String> = self.active_scope_ids.iter().map(|id| toml_string(id)).collect();
        let lines = [
            format!("schema_version = {}", self.schema_version),
            format!("organization_id = {}", toml_string(&self.organization_id)),
            format!("api_base_url = {}", toml_string(&self.api_base_url)),
            format!("enrollment_token = {}", toml_string(&self.enrollment_token)),
            format!("checkin_interval_seconds = {}", self.checkin_interval_seconds),
            format!("platform = {}", toml_string(&self.platform)),
            format!("log_level = {}", toml_string(&self.log_level)),
            format!("active_scope_ids = [{}]", scope_ids.join(", ")),
        ];
        let mut out = lines.join("\n");
        out.push('\n');
        out
    }
}

/// A TOML basic string: quoted, with `"`, `\` and every control character
/// escaped (TOML forbids raw control characters, DEL included).
fn toml_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

esr_plugin_sdk::export_document_plugin!(crate::Agent);

#[cfg(test)]
mod tests {
    use esr_plugin_sdk::testing::MemoryStore;
    use serde_json::json;

    use super::*;

    const ORGANIZATION_ID: &str = "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9a00";
    const SCOPE_ACTIVE_1: &str = "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9b01";
    const SCOPE_PAUSED: &str = "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9b02";
    const SCOPE_ACTIVE_2: &str = "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9b03";
    const SCOPE_ARCHIVED: &str = "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9b04";

    fn store_with_token(token: &str) -> MemoryStore {
        let mut store = MemoryStore::for_organization(
            &json!({"organization_id": ORGANIZATION_ID, "name": "Acme", "enrollment_token": token}),
        );
        for (id, status) in [
            (SCOPE_ACTIVE_1, "active"),
            (SCOPE_PAUSED, "paused"),
            (SCOPE_ACTIVE_2, "active"),
            (SCOPE_ARCHIVED, "archived"),
        ] {
            store.insert(SCOPES_COLLECTION, json!({"id": id, "name": "scope", "status": status}));
        }
        store
    }

    fn store() -> MemoryStore {
        store_with_token("enroll_abc123")
    }

    fn request(query: &[(&str, &str)]) -> Request {
        Request { base_url: "https://esr.example.com/".to_owned(), ..Request::with_query("/v1/agent/config", query) }
    }

    fn invalid_names(result: Result<Rendered, PluginError>) -> Vec<String> {
        match result {
            Err(PluginError::InvalidParameters(list)) => list.into_iter().map(|p| p.name).collect(),
            other => panic!("expected invalid parameters, got {other:?}"),
        }
    }

    #[test]
    fn a_scope_naming_families_is_only_their_platforms() {
        const LINUX_ONLY: &str = "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9b05";
        const DESKTOPS: &str = "0192f0b4-1c2d-7e3f-8a4b-5c6d7e8f9b06";
        let mut store = store();
        store.insert(
            SCOPES_COLLECTION,
            json!({"id": LINUX_ONLY, "name": "kernel", "status": "active", "endpoint_filter": {"os_families": ["linux"]}}),
        );
        store.insert(
            SCOPES_COLLECTION,
            json!({"id": DESKTOPS, "name": "desktops", "status": "active",
                   "endpoint_filter": {"os_families": ["windows", "macos"]}}),
        );
        let ids = |platform: &str| -> Value {
            let body = Agent::render(&store, &request(&[("platform", platform)])).expect("render").body;
            serde_json::from_slice::<Value>(&body).expect("json")["active_scope_ids"].clone()
        };
        assert_eq!(ids("linux"), json!([SCOPE_ACTIVE_1, SCOPE_ACTIVE_2, LINUX_ONLY]));
        assert_eq!(ids("windows"), json!([SCOPE_ACTIVE_1, SCOPE_ACTIVE_2, DESKTOPS]));
        assert_eq!(ids("macos"), json!([SCOPE_ACTIVE_1, SCOPE_ACTIVE_2, DESKTOPS]));
    }

    #[test]
    fn renders_json_by_default() {
        let rendered = Agent::render(&store(), &request(&[("platform", "linux")])).expect("render");
        assert_eq!(rendered.content_type, "application/json");
        assert_eq!(rendered.filename, "agent-config.json");
        let config: Value = serde_json::from_slice(&rendered.body).expect("json");
        assert_eq!(
            config,
            json!({
                "schema_version": 1,
                "organization_id": ORGANIZATION_ID,
                "api_base_url": "https://esr.example.com/v1",
                "enrollment_token": "enroll_abc123",
                "checkin_interval_seconds": 300,
                "platform": "linux",
                "log_level": "info",
                "active_scope_ids": [SCOPE_ACTIVE_1, SCOPE_ACTIVE_2],
            })
        );
        let explicit = Agent::render(&store(), &request(&[("format", "json"), ("platform", "linux")])).expect("render");
        assert_eq!(explicit, rendered);
    }

    #[test]
    fn the_declared_schema_names_every_member_of_the_document() {
        let rendered = Agent::render(&store(), &request(&[("platform", "macos")])).expect("render");
        let config: Value = serde_json::from_slice(&rendered.body).expect("json");
        let schema: Value = serde_json::from_str(&Agent::describe().response_schema).expect("schema");
        let mut members: Vec<&str> = config.as_object().expect("object").keys().map(String::as_str).collect();
        let mut required: Vec<&str> =
            schema["required"].as_array().expect("list").iter().filter_map(Value::as_str).collect();
        members.sort_unstable();
        required.sort_unstable();
        assert_eq!(members, required);
        for member in members {
            assert!(schema["properties"].get(member).is_some(), "{member}");
        }
    }

    #[test]
    fn renders_toml_on_request() {
        let rendered = Agent::render(&store(), &request(&[("platform", "macos"), ("format", "toml")])).expect("render");
        assert_eq!(rendered.content_type, "application/toml");
        assert_eq!(rendered.filename, "agent-config.toml");
        let expected = format!(
            "schema_version = 1\n\
             organization_id = \"{ORGANIZATION_ID}\"\n\
             api_base_url = \"https://esr.example.com/v1\"\n\
             enrollment_token = \"enroll_abc123\"\n\
             checkin_interval_seconds = 300\n\
             platform = \"macos\"\n\
             log_level = \"info\"\n\
             active_scope_ids = [\"{SCOPE_ACTIVE_1}\", \"{SCOPE_ACTIVE_2}\"]\n"
        );
        assert_eq!(String::from_utf8(rendered.body).expect("utf-8"), expected);
    }

    #[test]
    fn json_and_toml_carry_the_same_keys_in_order() {
        let json_body = Agent::render(&store(), &request(&[("platform", "windows")])).expect("render").body;
        let json_text = String::from_utf8(json_body).expect("utf-8");
        // Pretty JSON puts each top-level key at the start of its own line, indented two spaces.
        let json_keys: Vec<&str> = json_text
            .lines()
            .filter_map(|line| line.strip_prefix("  \"")?.split_once('"').map(|(key, _)| key))
            .collect();
        let toml_body =
            Agent::render(&store(), &request(&[("platform", "windows"), ("format", "toml")])).expect("render").body;
        let toml_text = String::from_utf8(toml_body).expect("utf-8");
        let toml_keys: Vec<&str> =
            toml_text.lines().filter_map(|line| line.split_once(" = ").map(|(key, _)| key)).collect();
        assert_eq!(json_keys, toml_keys);
        assert_eq!(toml_keys.len(), 8);
    }

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(toml_string("line\nfeed\ttab\r\u{8}\u{c}"), r#""line\nfeed\ttab\r\b\f""#);
        assert_eq!(toml_string("nul\u{0}del\u{7f}"), r#""nul\u0000del\u007F""#);
        assert_eq!(toml_string("café ✓"), "\"café ✓\"");

        let store = store_with_token("tok\"en\\\n");
        let rendered = Agent::render(&store, &request(&[("platform", "linux"), ("format", "toml")])).expect("render");
        let text = String::from_utf8(rendered.body).expect("utf-8");
        assert!(text.contains("enrollment_token = \"tok\\\"en\\\\\\n\"\n"), "{text}");
    }

    #[test]
    fn platform_is_required_and_checked() {
        assert_eq!(invalid_names(Agent::render(&store(), &request(&[]))), ["platform"]);
        assert_eq!(invalid_names(Agent::render(&store(), &request(&[("format", "toml")]))), ["platform"]);
        assert_eq!(invalid_names(Agent::render(&store(), &request(&[("platform", "")]))), ["platform"]);
        assert_eq!(invalid_names(Agent::render(&store(), &request(&[("platform", "Linux")]))), ["platform"]);
        let Err(PluginError::InvalidParameters(list)) = Agent::render(&store(), &request(&[("platform", "beos")]))
        else {
            panic!("expected 400")
        };
        assert_eq!(list[0].reason, "not one of windows, macos, linux");
        let Err(PluginError::InvalidParameters(list)) = Agent::render(&store(), &request(&[])) else {
            panic!("expected 400")
        };
        assert_eq!(list[0].reason, "required; one of windows, macos, linux");
    }

    #[test]
    fn every_bad_parameter_is_named() {
        let result = Agent::render(&store(), &request(&[("platform", "beos"), ("format", "yaml"), ("apiKey", "x")]));
        assert_eq!(invalid_names(result), ["apiKey", "platform", "format"]);
        let repeated = Agent::render(&store(), &request(&[("platform", "linux"), ("platform", "macos")]));
        assert_eq!(invalid_names(repeated), ["platform"]);
    }

    #[test]
    fn an_unusable_organization_is_internal() {
        let store = MemoryStore::for_organization(&json!({}));
        let result = Agent::render(&store, &request(&[("platform", "linux")]));
        assert!(matches!(result, Err(PluginError::Internal(_))), "{result:?}");
    }

    #[test]
    fn active_scopes_are_found_past_one_scan_batch() {
        let mut store = store();
        store.collections.remove(SCOPES_COLLECTION);
        for index in 0..2500_u32 {
            let status = if index % 1000 == 999 { "active" } else { "paused" };
            let id = format!("00000000-0000-7000-8000-{index:012}");
            store.insert(SCOPES_COLLECTION, json!({"id": id, "status": status}));
        }
        assert_eq!(
            active_scope_ids(&store, "linux"),
            Ok(vec![
                "00000000-0000-7000-8000-000000000999".to_owned(),
                "00000000-0000-7000-8000-000000001999".to_owned()
            ])
        );
    }

    #[test]
    fn describe_names_the_group_and_parameters() {
        let descriptor = Agent::describe();
        assert_eq!(descriptor.group, "agent");
        assert!(descriptor.sort_keys.is_empty());
        let names: Vec<&str> = descriptor.parameters.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["platform", "format"]);
        assert_eq!(descriptor.reads, ["scopes", "organization"], "exactly what render reads");
    }
}
