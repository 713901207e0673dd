//! `make run-postgres`: a local PostgreSQL primary and streaming replica
//! under a directory (created there on first run, kept after), then a
//! command run with `ESR_DATABASE_URL` naming the primary's database `esr`
//! and `ESR_DATABASE_REPLICA_URLS` the replica's (which serves reads);
//! when the command exits (Ctrl-C stops it), both servers stop.
//!
//! Usage: `esr-local-postgres DIR -- COMMAND [ARGS…]`

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use esr_pg_cluster::{Cluster, Durability};

const DATABASE: &str = "esr";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), Some(separator)) = (args.next(), args.next()) else { return usage() };
    let command: Vec<_> = args.collect();
    if separator != "--" || command.is_empty() {
        return usage();
    }
    match run(PathBuf::from(dir), &command) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("esr-local-postgres: {error}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: esr-local-postgres DIR -- COMMAND [ARGS...]");
    ExitCode::from(2)
}

fn run(dir: PathBuf, command: &[std::ffi::OsString]) -> anyhow::Result<ExitCode> {
    let first_run = !dir.join("primary").exists();
    let primary = Cluster::persistent(&dir.join("primary"), Durability::Durable)?;
    if first_run {
        primary.execute(&format!("CREATE DATABASE {DATABASE}"))?;
    }
    let replica = primary.replica(&dir.join("replica"), false)?;
    let url = primary.url(DATABASE);
    println!("PostgreSQL primary: {url}");
    println!("PostgreSQL streaming replica: {}", replica.url(DATABASE));
    // Ctrl-C reaches the whole foreground process group: the command and
    // both servers stop on their own (the servers by a fast shutdown);
    // dropping the clusters below stops whatever is left.
    let status = Command::new(&command[0])
        .args(&command[1..])
        .env("ESR_DATABASE_URL", &url)
        .env("ESR_DATABASE_REPLICA_URLS", replica.url(DATABASE))
        .status()?;
    drop(replica);
    drop(primary);
    Ok(if status.success() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
