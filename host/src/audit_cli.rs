//! `esr audit`: an organization's audit trail through a running server's
//! admin listener, as a table or as NDJSON (every page, oldest first).

use super::{AdminArgs, admin_client, text};

/// `esr audit`'s arguments.
#[derive(clap::Args)]
pub struct AuditArgs {
    /// The organization whose trail to read.
    #[arg(long)]
    organization: String,
    /// Only entries at or after this time (RFC 3339).
    #[arg(long)]
    since: Option<String>,
    /// Only entries of this principal (an API key's or client's id, a
    /// token's subject).
    #[arg(long)]
    principal: Option<String>,
    /// One JSON entry per line, for export.
    #[arg(long)]
    ndjson: bool,
    #[command(flatten)]
    admin: AdminArgs,
}

pub fn run(args: AuditArgs) -> anyhow::Result<()> {
    let client = admin_client(&args.admin)?;
    let mut query: Vec<(String, String)> = vec![("limit".into(), "1000".into())];
    query.extend(args.since.map(|since| ("since".to_owned(), since)));
    query.extend(args.principal.map(|principal| ("principal".to_owned(), principal)));
    let mut after: Option<String> = None;
    loop {
        let mut pairs = form_urlencoded::Serializer::new(String::new());
        for (name, value) in &query {
            pairs.append_pair(name, value);
        }
        if let Some(after) = &after {
            pairs.append_pair("after", after);
        }
        let page = client.get(&format!("/admin/v1/organizations/{}/audit?{}", args.organization, pairs.finish()))?;
        for entry in page["data"].as_array().into_iter().flatten() {
            if args.ndjson {
                println!("{entry}");
            } else {
                let principal = &entry["principal"];
                println!(
                    "{}  {:<7} {:<36} {:<6} {:<40} {}  {}",
                    text(&entry["at"]),
                    text(&principal["kind"]),
                    text(&principal["id"]),
                    text(&entry["method"]),
                    text(&entry["route"]),
                    entry["status"],
                    entry["records"].as_u64().map(|n| format!("{n} records")).unwrap_or_default()
                );
            }
        }
        // `null` at the end of what is recorded so far.
        match page["next_cursor"].as_str() {
            Some(next) if Some(next) != after.as_deref() => after = Some(next.to_owned()),
            _ => return Ok(()),
        }
    }
}
