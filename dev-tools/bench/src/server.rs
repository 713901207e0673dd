//! The server under test: `esr serve` started as a child process on a
//! data directory, and stopped on drop.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::anyhow;

/// The server under test; stopped on drop.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn esr_binary() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    Ok(me.with_file_name(if cfg!(windows) { "esr.exe" } else { "esr" }))
}

/// Starts `esr serve` on the data directory; returns it with its admin URL.
pub(crate) fn start_server(data_dir: &Path, plugins_dir: &Path) -> anyhow::Result<Server> {
    Ok(start_server_with_admin(data_dir, plugins_dir)?.0)
}

pub(crate) fn start_server_with_admin(data_dir: &Path, plugins_dir: &Path) -> anyhow::Result<(Server, String)> {
    start_server_in_mode(data_dir, plugins_dir, &[])
}

/// Starts `esr serve` with extra flags (e.g. `--native-handlers`).
pub(crate) fn start_server_in_mode(
    data_dir: &Path,
    plugins_dir: &Path,
    extra: &[&str],
) -> anyhow::Result<(Server, String)> {
    let mut child = Command::new(esr_binary()?)
        .args(["serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(extra)
        // The benchmark measures the service, not its rate limits.
        .args(["--rate-limit-per-minute=100000000", "--rate-limit-burst=10000000"])
        .args(["--agent-config-rate-limit-per-minute=100000000", "--agent-config-rate-limit-burst=10000000"])
        // Health, asked every round, counts against the address's buckets.
        .args(["--address-rate-limit-per-minute=100000000", "--address-rate-limit-burst=10000000"])
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--plugins-dir")
        .arg(plugins_dir)
        .env("ESR_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let (base, admin) = esr::server::read_listening_addresses(&mut lines)
        .ok_or_else(|| anyhow!("esr serve exited before listening"))?;
    std::thread::spawn(move || lines.for_each(drop));
    settle_writes(data_dir)?;
    Ok((Server { child, base }, admin))
}

/// Waits until what the server wrote while opening the store is on disk.
/// sled overwrites every free segment of its log with zeros when it opens
/// (690 MB for the million-finding set); left to the kernel, that
/// write-back would run inside the first seconds of a measurement.
fn settle_writes(data_dir: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(data_dir)? {
        let path = entry?.path();
        if path.is_file() {
            std::fs::File::open(&path)?.sync_data()?;
        }
    }
    Ok(())
}
