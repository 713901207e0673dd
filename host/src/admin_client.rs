//! The command line's side of the admin listener: `esr organizations`,
//! `esr keys`, `esr import`, `esr delete` and `esr plugins reload` talk to a running
//! server through it, since only the server opens the database.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use reqwest::blocking::{Client, RequestBuilder};
use serde_json::Value;

/// A running server's admin listener, with its token.
pub struct AdminClient {
    url: String,
    token: String,
    data_dir: PathBuf,
    http: Client,
}

/// How many lines and bytes `esr import` sends per batch, by default.
pub const BATCH_LINES: u32 = 10_000;
pub const BATCH_BYTES: usize = 16 << 20;

impl AdminClient {
    /// The client for the server at `url` whose data directory (and admin
    /// token, unless `ESR_ADMIN_TOKEN` is set) is `data_dir`.
    pub fn new(url: &str, data_dir: &Path) -> anyhow::Result<AdminClient> {
        let token = esr_auth::admin_token::read_admin_token(data_dir)?;
        // An idle connection is dropped well before the admin listener's
        // header read timeout (5 s by default) could close it under a request.
        let http = Client::builder().timeout(None).pool_idle_timeout(std::time::Duration::from_secs(2)).build()?;
        Ok(AdminClient { url: url.trim_end_matches('/').to_owned(), token, data_dir: data_dir.to_owned(), http })
    }

    /// Sends a request and returns the JSON body of a success, or an error
    /// that says what the server answered (or that none is running).
    pub fn send(&self, request: RequestBuilder) -> anyhow::Result<Value> {
        let response = request.bearer_auth(&self.token).send().map_err(|error| {
            anyhow::anyhow!(
                "no esr server answers at {} ({error}); start one with `esr serve --data-dir {}`",
                self.url,
                self.data_dir.display()
            )
        })?;
        let status = response.status();
        let text = response.text().unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(body);
        }
        if status == reqwest::StatusCode::UNAUTHORIZED {
            bail!(
                "the server refused the admin token ({status}); run on the server's --data-dir or set ESR_ADMIN_TOKEN"
            );
        }
        Err(AdminRefusal { status: status.as_u16(), body }.into())
    }

    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.send(self.http.get(format!("{}{path}", self.url)))
    }

    pub fn post_json(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.send(self.http.post(format!("{}{path}", self.url)).json(body))
    }

    pub fn patch_json(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.send(self.http.patch(format!("{}{path}", self.url)).json(body))
    }

    pub fn delete(&self, path: &str) -> anyhow::Result<Value> {
        self.send(self.http.delete(format!("{}{path}", self.url)))
    }

    /// Streams an NDJSON file (or `-` for standard input) to the import
    /// route in batches of at most `batch_lines` lines and `batch_bytes`
    /// bytes, each all or nothing, with a progress bar. Stops at the first
    /// refused batch and says which lines were imported before it.
    pub fn import(
        &self,
        organization: &str,
        collection: &str,
        file: &Path,
        batches: &Batches,
    ) -> anyhow::Result<ImportTotals> {
        let (reader, length): (Box<dyn Read>, Option<u64>) = if file.as_os_str() == "-" {
            (Box::new(std::io::stdin()), None)
        } else {
            let opened = std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
            let length = opened.metadata().ok().map(|metadata| metadata.len());
            (Box::new(opened), length)
        };
        let progress = match length {
            Some(length) => indicatif::ProgressBar::new(length).with_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            ),
            None => indicatif::ProgressBar::new_spinner(),
        };
        let dry_run = if batches.dry_run { "?dryRun=true" } else { "" };
        let path = format!("/admin/v1/organizations/{organization}/import/{collection}{dry_run}");
        let (batch_lines, batch_bytes) = (batches.lines.max(1), batches.bytes);
        let mut totals = ImportTotals::default();
        let mut lines = BufReader::new(reader).lines();
        let mut first_line = 1;
        loop {
            let mut batch = String::new();
            let mut count = 0;
            while count < batch_lines && batch.len() < batch_bytes {
                let Some(line) = lines.next() else { break };
                let line =
                    line.with_context(|| format!("reading line {} of {}", first_line + count, file.display()))?;
                batch.push_str(&line);
                batch.push('\n');
                count += 1;
            }
            if count == 0 {
                break;
            }
            let sent = batch.len() as u64;
            let request = self
                .http
                .post(format!("{}{path}", self.url))
                .header(reqwest::header::CONTENT_TYPE, "application/x-ndjson")
                .body(batch);
            match self.send(request) {
                Ok(summary) => totals.add(&summary),
                Err(error) => {
                    progress.abandon();
                    return Err(explain_refusal(error, first_line, &totals));
                }
            }
            first_line += count;
            progress.inc(sent);
            progress.set_message(format!("{} lines", first_line - 1));
        }
        progress.finish_and_clear();
        Ok(totals)
    }
}

/// How `esr import` sends an NDJSON file: batches of at most `lines`
/// lines and about `bytes` bytes, checked only when `dry_run`.
#[derive(Debug, Clone)]
pub struct Batches {
    pub lines: usize,
    pub bytes: usize,
    pub dry_run: bool,
}

/// What `esr import --report` asks of the server.
#[derive(Debug, Clone, Default)]
pub struct ReportRequest {
    pub format: String,
    pub endpoint: Option<String>,
    /// Create `endpoint` when no endpoint has that host name.
    pub create_endpoint: bool,
    /// The scanner the uploader declares, when not the importer's.
    pub scanner: Option<String>,
    pub dry_run: bool,
}

impl AdminClient {
    /// Sends one scanner report (or `-`: standard input) to the reports
    /// route, with a progress spinner; the server's answer.
    pub fn import_report(&self, organization: &str, file: &Path, request: &ReportRequest) -> anyhow::Result<Value> {
        let body = if file.as_os_str() == "-" {
            let mut body = Vec::new();
            std::io::stdin().read_to_end(&mut body).context("reading the report from standard input")?;
            body
        } else {
            std::fs::read(file).with_context(|| format!("reading {}", file.display()))?
        };
        let mut query = form_urlencoded::Serializer::new(String::new());
        query.append_pair("format", &request.format);
        if let Some(endpoint) = &request.endpoint {
            query.append_pair("endpoint", endpoint);
            if request.create_endpoint {
                query.append_pair("createEndpoint", "true");
            }
        }
        if let Some(scanner) = &request.scanner {
            query.append_pair("scanner", scanner);
        }
        query.append_pair("dryRun", if request.dry_run { "true" } else { "false" });
        let url = format!("{}/admin/v1/organizations/{organization}/reports?{}", self.url, query.finish());
        let progress = indicatif::ProgressBar::new_spinner();
        progress.set_message(format!("importing {} ({} bytes)", file.display(), body.len()));
        progress.enable_steady_tick(std::time::Duration::from_millis(120));
        let outcome =
            self.send(self.http.post(url).header(reqwest::header::CONTENT_TYPE, "application/json").body(body));
        progress.finish_and_clear();
        outcome
    }
}

impl AdminClient {
    /// Deletes one record (an endpoint with its findings and targets)
    /// through the admin route; a refusal says why in plain words.
    pub fn delete_record(&self, organization: &str, collection: &str, id: &str) -> anyhow::Result<()> {
        let segment =
            |text: &str| percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string();
        let path = format!("/admin/v1/organizations/{}/{}/{}", segment(organization), segment(collection), segment(id));
        match self.delete(&path) {
            Ok(_) => Ok(()),
            Err(error) => match error.downcast_ref::<AdminRefusal>() {
                Some(refusal) if refusal.status == 404 || refusal.status == 400 => {
                    let detail = refusal.body["detail"].as_str().unwrap_or("no reason given");
                    bail!("nothing was deleted: {detail}")
                }
                _ => Err(error),
            },
        }
    }
}

/// What an import did, summed over its batches.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ImportTotals {
    pub created: u64,
    pub updated: u64,
    pub unchanged: u64,
}

impl ImportTotals {
    fn add(&mut self, summary: &Value) {
        self.created += summary["created"].as_u64().unwrap_or(0);
        self.updated += summary["updated"].as_u64().unwrap_or(0);
        self.unchanged += summary["unchanged"].as_u64().unwrap_or(0);
    }
}

/// A problem+json answer from the admin listener.
#[derive(Debug)]
pub struct AdminRefusal {
    pub status: u16,
    pub body: Value,
}

impl std::fmt::Display for AdminRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let detail = self.body["detail"].as_str().unwrap_or("no reason given");
        write!(f, "the server refused ({}): {detail}", self.status)
    }
}

impl std::error::Error for AdminRefusal {}

/// An import refusal in the file's own line numbers, with what went in before it.
fn explain_refusal(error: anyhow::Error, first_line: usize, totals: &ImportTotals) -> anyhow::Error {
    let Some(refusal) = error.downcast_ref::<AdminRefusal>() else { return error };
    let mut message = String::new();
    if let Some(invalid) = refusal.body["invalid_lines"].as_array() {
        let total = refusal.body["problem_count"].as_u64().unwrap_or(invalid.len() as u64);
        let lines = refusal.body["invalid_line_count"].as_u64().unwrap_or(total);
        message
            .push_str(&format!("{total} problem(s) on {lines} line(s) in the batch starting at line {first_line}:\n"));
        for line in invalid.iter().take(20) {
            let number = line["line"].as_u64().unwrap_or(0) as usize + first_line - 1;
            let field = line["field"].as_str().filter(|field| !field.is_empty());
            let reason = line["reason"].as_str().unwrap_or_default();
            message.push_str(&format!(
                "  line {number}: {}{reason}\n",
                field.map(|f| format!("{f}: ")).unwrap_or_default()
            ));
        }
        if total > 20 {
            message.push_str(&format!("  … and {} more\n", total - 20));
        }
    } else {
        message.push_str(&format!("{refusal}\n"));
    }
    message.push_str(&format!(
        "nothing from line {first_line} on was imported; lines before it were ({} created, {} updated, {} unchanged)",
        totals.created, totals.updated, totals.unchanged
    ));
    anyhow::anyhow!(message)
}
