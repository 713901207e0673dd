//! The README is what a newcomer reads: its flag table lists every flag
//! `esr serve --help` shows, with the flag's environment variable.

use std::process::Command;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).expect("README.md")
}

/// `esr serve --help`'s flags, each with its environment variable.
fn serve_flags() -> Vec<(String, Option<String>)> {
    let help = Command::new(env!("CARGO_BIN_EXE_esr")).args(["serve", "--help"]).output().expect("esr serve --help");
    assert!(help.status.success());
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let mut flags: Vec<(String, Option<String>)> = Vec::new();
    for line in help.lines() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("--") {
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            if name != "help" {
                flags.push((format!("--{name}"), None));
            }
        }
        // Clap puts `[env: NAME=]` at the end of the flag's description.
        if let (Some(start), Some(last)) = (line.find("[env: "), flags.last_mut()) {
            let name: String = line[start + 6..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            last.1.get_or_insert(name);
        }
    }
    flags
}

#[test]
fn the_flag_table_lists_every_serve_flag_with_its_environment_variable() {
    let readme = readme();
    let rows: Vec<&str> = readme.lines().filter(|line| line.starts_with("| `--")).collect();
    let flags = serve_flags();
    assert!(flags.len() >= 30, "{flags:?}");
    let mut missing = Vec::new();
    for (flag, env) in &flags {
        // A `…-burst` row shares the line of its `…-per-minute` flag.
        // The flags a row is about are in its first cell.
        let first_cell = |row: &&&str| row.split('|').nth(1).unwrap_or_default().to_owned();
        let row = rows.iter().find(|row| first_cell(row).contains(&format!("`{flag}`"))).or_else(|| {
            let per_minute = flag.strip_suffix("-burst").map(|stem| format!("`{stem}-per-minute`"))?;
            rows.iter().find(|row| first_cell(row).contains(&per_minute) && first_cell(row).contains("`…-burst`"))
        });
        let Some(row) = row else {
            missing.push(format!("{flag}: no row"));
            continue;
        };
        if let Some(env) = env {
            let abbreviated = env.rsplit_once('_').map(|(_, last)| format!("`…_{last}`")).unwrap_or_default();
            if !row.contains(env.as_str()) && !row.contains(&abbreviated) {
                missing.push(format!("{flag}: row without {env}"));
            }
        }
    }
    assert!(missing.is_empty(), "README's flag table misses: {missing:#?}");
    // And no row names a flag serve does not have.
    for row in rows {
        let named = row.split('`').nth(1).unwrap_or_default();
        assert!(flags.iter().any(|(flag, _)| flag == named), "README lists {named}, which esr serve does not take");
    }
}

/// Every per-format mapping document is linked from `docs/scanner-reports.md`,
/// and every link there leads to a file.
#[test]
fn the_scanner_report_guide_links_each_format_mapping() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let guide = std::fs::read_to_string(docs.join("scanner-reports.md")).expect("docs/scanner-reports.md");
    let mappings: Vec<String> = std::fs::read_dir(docs.join("scanner-report-mapping"))
        .expect("docs/scanner-report-mapping")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!mappings.is_empty());
    for mapping in &mappings {
        assert!(guide.contains(&format!("(scanner-report-mapping/{mapping})")), "{mapping} is not linked");
    }
    for link in guide.split("](").skip(1).filter_map(|rest| rest.split(')').next()) {
        if link.starts_with('#') || link.starts_with("http") {
            continue;
        }
        assert!(docs.join(link).exists(), "docs/scanner-reports.md links {link}, which does not exist");
    }
}
