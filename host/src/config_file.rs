//! `--config FILE` (or `ESR_CONFIG`): `esr serve`'s flags from a TOML file.
//!
//! Each key is a flag's long name (`rate-limit-burst`, or
//! `rate_limit_burst`). The file's settings become `--key=value` arguments
//! for the flags that neither the command line nor the environment set, and
//! the command line is parsed again: every value goes through its flag's
//! own parser and range checks, and the precedence is flags, then
//! environment, then file. `esr check` and `esr seed` take the same file and
//! use the keys they share with `serve` (the store's).

use std::ffi::OsString;
use std::io::Read;
use std::path::Path;

use clap::parser::ValueSource;
use clap::{ArgAction, Parser};

/// The largest config file read: settings, not data.
const MAX_BYTES: u64 = 1 << 20;

/// The subcommand whose flags are the file's keys.
const KEYS_OF: &str = "serve";

/// The parsed command line, with what to warn the operator of once logging
/// is set up.
pub struct Parsed<C> {
    pub cli: C,
    pub warnings: Vec<String>,
}

/// Why the command line (with its config file) could not be parsed.
#[derive(Debug)]
pub enum Failure {
    /// The command line itself (or `--help`, `--version`): clap's own report.
    Usage(clap::Error),
    /// The config file: what is wrong, naming the file (and the key).
    File(String),
}

impl Failure {
    /// Reports the failure and ends as clap does for a usage error.
    pub fn exit(self) -> std::process::ExitCode {
        match self {
            Failure::Usage(error) => error.exit(),
            Failure::File(message) => {
                eprintln!("esr: {message}");
                std::process::ExitCode::from(2)
            }
        }
    }
}

/// Parses `args`; when the subcommand has a config file (`config_of`), adds
/// its settings where neither a flag nor the environment gave one, and
/// parses again.
pub fn parse<C: Parser>(args: Vec<OsString>, config_of: impl Fn(&C) -> Option<&Path>) -> Result<Parsed<C>, Failure> {
    let mut command = C::command();
    let matches = command.try_get_matches_from_mut(&args).map_err(Failure::Usage)?;
    let cli = C::from_arg_matches(&matches).map_err(|error| Failure::Usage(error.format(&mut command)))?;
    let (Some(path), Some((name, sub_matches))) = (config_of(&cli), matches.subcommand()) else {
        return Ok(Parsed { cli, warnings: Vec::new() });
    };
    let shown = path.display().to_string();
    let fail = |message: String| Failure::File(format!("config file {shown}: {message}"));
    let (text, readable_by_others) = read(path).map_err(fail)?;
    let table = parse_toml(&text).map_err(fail)?;

    let keys = Keys::of(&command, name);
    let mut added: Vec<OsString> = Vec::new();
    // Which file key each added flag came from, to name it in clap's errors.
    let mut origins: Vec<(String, String)> = Vec::new();
    let mut seen: Vec<(String, &str)> = Vec::new();
    let mut secret_keys = Vec::new();
    for (key, value) in &table {
        let long = key.replace('_', "-");
        let Some(flag) = keys.reference.iter().find(|flag| flag.long == long) else {
            return Err(fail(unknown_key(key, &long, &keys.reference)));
        };
        if let Some((_, earlier)) = seen.iter().find(|(seen_long, _)| *seen_long == long) {
            return Err(fail(format!("`{}` and `{}` are the same setting", esc(earlier), esc(key))));
        }
        seen.push((long.clone(), key));
        if long.contains("url") || long.contains("token") || long == "database" {
            secret_keys.push(long.clone());
        }
        let values = flag_values(value, flag).map_err(|message| fail(format!("key `{}`: {message}", esc(key))))?;
        // A serve flag this subcommand does not take (e.g. `listen` for
        // `esr check`): the file is serve's, so it is not an error.
        let Some(own) = keys.own.iter().find(|own| own.long == long) else {
            continue;
        };
        if matches!(sub_matches.value_source(&own.id), Some(ValueSource::CommandLine | ValueSource::EnvVariable)) {
            continue;
        }
        for value in values {
            added.push(match value {
                Some(value) => OsString::from(format!("--{long}={value}")),
                None => OsString::from(format!("--{long}")),
            });
        }
        origins.push((long, key.clone()));
    }

    let mut warnings = Vec::new();
    if let (Some(mode), false) = (readable_by_others, secret_keys.is_empty()) {
        warnings.push(format!(
            "config file {shown} can be read by other users (mode {mode:o}) and sets {}, which may hold a \
             password: chmod 600 {shown}",
            secret_keys.iter().map(|key| format!("`{key}`")).collect::<Vec<_>>().join(", ")
        ));
    }
    if added.is_empty() {
        return Ok(Parsed { cli, warnings });
    }
    // Right after the subcommand's name, where its flags go.
    let at = args.iter().skip(1).position(|arg| arg.to_str() == Some(name)).map_or(args.len(), |at| at + 2);
    let mut args = args;
    args.splice(at..at, added);
    let cli = C::try_parse_from(&args).map_err(|error| fail(from_file_error(&error, &origins)))?;
    Ok(Parsed { cli, warnings })
}

/// The file's text, and its mode when users other than its owner can read it.
fn read(path: &Path) -> Result<(String, Option<u32>), String> {
    use std::os::unix::fs::PermissionsExt;

    let file = std::fs::File::open(path).map_err(|error| format!("cannot read it: {error}"))?;
    let metadata = file.metadata().map_err(|error| format!("cannot read it: {error}"))?;
    if !metadata.is_file() {
        return Err("not a file".to_owned());
    }
    let mut bytes = Vec::new();
    file.take(MAX_BYTES + 1).read_to_end(&mut bytes).map_err(|error| format!("cannot read it: {error}"))?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(format!("larger than {} KiB", MAX_BYTES >> 10));
    }
    let text = String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned())?;
    let mode = metadata.permissions().mode() & 0o777;
    Ok((text, (mode & 0o044 != 0).then_some(mode)))
}

/// The file as a TOML table. A syntax error gives its line and column and
/// what was expected, not the line itself: it may hold a password.
fn parse_toml(text: &str) -> Result<toml::Table, String> {
    text.parse::<toml::Table>().map_err(|error| {
        let location = error.span().and_then(|span| text.get(..span.start)).map(|before| {
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |last| last.chars().count()) + 1;
            format!("line {line}, column {column}: ")
        });
        format!("not valid TOML: {}{}", location.unwrap_or_default(), error.message())
    })
}

/// A flag the file may set.
struct Flag {
    long: String,
    id: String,
    /// Repeatable: a TOML array gives it several values.
    repeatable: bool,
    /// A switch without a value (`--native-handlers`): `true` or `false`.
    switch: bool,
}

/// The keys a file may hold (the reference subcommand's flags) and the
/// flags of the subcommand being run.
struct Keys {
    reference: Vec<Flag>,
    own: Vec<Flag>,
}

impl Keys {
    fn of(command: &clap::Command, name: &str) -> Keys {
        let flags = |name: &str| -> Vec<Flag> {
            command
                .find_subcommand(name)
                .into_iter()
                .flat_map(clap::Command::get_arguments)
                .filter_map(|arg| {
                    let long = arg.get_long()?;
                    // Not settings: where the settings are, and what prints and exits.
                    if matches!(long, "config" | "help" | "version") {
                        return None;
                    }
                    Some(Flag {
                        long: long.to_owned(),
                        id: arg.get_id().as_str().to_owned(),
                        repeatable: matches!(arg.get_action(), ArgAction::Append),
                        switch: matches!(arg.get_action(), ArgAction::SetTrue),
                    })
                })
                .collect()
        };
        Keys { reference: flags(KEYS_OF), own: flags(name) }
    }
}

/// What a key that names no flag is told, with the closest key if one is close.
fn unknown_key(key: &str, long: &str, flags: &[Flag]) -> String {
    if matches!(long, "config" | "help" | "version") {
        return format!("`{}` is not a setting a config file can hold", esc(key));
    }
    let closest = flags
        .iter()
        .map(|flag| (edit_distance(long, &flag.long), &flag.long))
        .min()
        .filter(|(distance, _)| *distance <= 3 && *distance < long.chars().count());
    match closest {
        Some((_, suggestion)) => format!("unknown key `{}` (did you mean `{suggestion}`?)", esc(key)),
        None => format!("unknown key `{}`", esc(key)),
    }
}

/// A key as written, with control characters escaped.
fn esc(key: &str) -> String {
    key.escape_debug().to_string()
}

/// Levenshtein distance, for suggestions among some fifty short names.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substituted = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substituted.min(diagonal + 1).min(row[j] + 1);
        }
    }
    row[b.len()]
}

/// The flag's values for a TOML value: `Some(text)` for `--long=text`,
/// `None` for a bare switch; a switch set `false` gives nothing.
fn flag_values(value: &toml::Value, flag: &Flag) -> Result<Vec<Option<String>>, String> {
    if flag.switch {
        return match value {
            toml::Value::Boolean(true) => Ok(vec![None]),
            toml::Value::Boolean(false) => Ok(Vec::new()),
            _ => Err("takes true or false".to_owned()),
        };
    }
    match value {
        toml::Value::Array(items) if flag.repeatable => items.iter().map(|item| scalar(item).map(Some)).collect(),
        toml::Value::Array(_) => Err("takes one value, not an array".to_owned()),
        other => Ok(vec![Some(scalar(other)?)]),
    }
}

/// A string, number or boolean as its flag's text.
fn scalar(value: &toml::Value) -> Result<String, String> {
    match value {
        toml::Value::String(text) => Ok(text.clone()),
        toml::Value::Integer(number) => Ok(number.to_string()),
        toml::Value::Float(number) => Ok(number.to_string()),
        toml::Value::Boolean(flag) => Ok(flag.to_string()),
        toml::Value::Datetime(_) | toml::Value::Array(_) | toml::Value::Table(_) => {
            Err("takes a string, a number or a boolean".to_owned())
        }
    }
}

/// clap's report of a value from the file, naming the key it came from.
fn from_file_error(error: &clap::Error, origins: &[(String, String)]) -> String {
    let rendered = error.render().to_string();
    let rendered = rendered.trim_start_matches("error: ");
    // Its first paragraph: the rest is usage and `--help` hints for a command line.
    let message = rendered.split("\n\n").next().unwrap_or(rendered).trim_end();
    let key = match error.get(clap::error::ContextKind::InvalidArg) {
        Some(clap::error::ContextValue::String(arg)) => {
            let long = arg.trim_start_matches("--").split([' ', '=']).next().unwrap_or_default();
            origins.iter().find(|(origin, _)| origin == long).map(|(_, key)| key)
        }
        _ => None,
    };
    match key {
        Some(key) => format!("key `{}`: {message}", esc(key)),
        None => message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::ffi::OsString;
    use std::io::Write;
    use std::path::Path;

    use super::{Failure, Parsed, edit_distance, parse};
    use crate::{Cli, Command};

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        file
    }

    fn run(file: &Path, args: &[&str]) -> Result<Parsed<Cli>, Failure> {
        let mut all: Vec<OsString> = ["esr", args[0], "--config"].into_iter().map(OsString::from).collect();
        all.push(file.as_os_str().to_owned());
        all.extend(args[1..].iter().map(OsString::from));
        parse::<Cli>(all, |cli| cli.command.config_file())
    }

    fn failure(file: &Path, args: &[&str]) -> String {
        match run(file, args) {
            Err(Failure::File(message)) => message,
            Err(Failure::Usage(error)) => panic!("a usage error: {error}"),
            Ok(_) => panic!("parsed"),
        }
    }

    #[test]
    fn the_file_sets_what_the_command_line_does_not() {
        let config = file(
            "rate_limit_burst = 7\nplugin-deadline-ms = 500\nlisten = \"127.0.0.1:0\"\n\
             demo = true\ndatabase-replica-url = [\"postgres://a/x\", \"postgres://b/x\"]\n",
        );
        let parsed = run(config.path(), &["serve", "--plugin-deadline-ms", "900"]).unwrap();
        let Command::Serve(args) = parsed.cli.command else { panic!("not serve") };
        assert_eq!(args.rate_limit_burst, 7);
        assert_eq!(args.plugin_deadline_ms, 900, "the flag wins");
        assert_eq!(args.listen.port(), 0);
        assert!(args.demo);
        assert_eq!(args.database.replica_urls, ["postgres://a/x", "postgres://b/x"]);
    }

    #[test]
    fn keys_that_are_no_flag_are_refused_by_name() {
        let config = file("rate-limit-bust = 7\n");
        let message = failure(config.path(), &["serve"]);
        assert!(message.contains("unknown key `rate-limit-bust` (did you mean `rate-limit-burst`?)"), "{message}");
        assert!(message.contains(&config.path().display().to_string()), "{message}");
        for key in ["config = \"other.toml\"", "help = true"] {
            let config = file(key);
            assert!(failure(config.path(), &["serve"]).contains("not a setting"), "{key}");
        }
        let config = file("rate-limit-burst = 7\nrate_limit_burst = 8\n");
        assert!(failure(config.path(), &["serve"]).contains("the same setting"));
    }

    #[test]
    fn values_go_through_their_flags_parsers() {
        let config = file("plugin-deadline-ms = 1\n");
        let message = failure(config.path(), &["serve"]);
        assert!(message.contains("key `plugin-deadline-ms`: invalid value '1'"), "{message}");
        let config = file("listen = [\"127.0.0.1:0\"]\n");
        assert!(failure(config.path(), &["serve"]).contains("key `listen`: takes one value"));
        let config = file("native-handlers = \"yes\"\n");
        assert!(failure(config.path(), &["serve"]).contains("takes true or false"));
    }

    #[test]
    fn a_syntax_error_names_its_line_but_not_its_text() {
        let config = file("listen = \"127.0.0.1:0\"\n\ndatabase = postgres://user:secret@db/esr\n");
        let message = failure(config.path(), &["serve"]);
        assert!(message.contains("line 3, column 12"), "{message}");
        assert!(!message.contains("secret"), "{message}");
    }

    #[test]
    fn check_takes_the_store_keys_and_leaves_serves_own() {
        let config = file("data-dir = \"/srv/esr\"\nlisten = \"127.0.0.1:0\"\n");
        let parsed = run(config.path(), &["check"]).unwrap();
        let Command::Check { data_dir, .. } = parsed.cli.command else { panic!("not check") };
        assert_eq!(data_dir, Path::new("/srv/esr"));
    }

    #[test]
    fn a_suggestion_is_only_for_a_near_name() {
        assert_eq!(edit_distance("rate-limit-bust", "rate-limit-burst"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
