//! Files only esr's own user may read or change: the admin token, the demo
//! and seed keys, the compiled components' cache.

use std::io::Write;
use std::path::Path;

use anyhow::Context;

/// Writes a file only its owner can read.
pub fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).with_context(|| format!("creating {}", path.display()))?;
    file.write_all(bytes).with_context(|| format!("writing {}", path.display()))?;
    file.sync_all().with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Creates `dir` (owner-only) when missing; an existing one must belong to
/// the user esr runs as and be writable by no one else.
pub fn private_directory(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| format!("cannot create it: {e}"))?;
    let metadata = std::fs::metadata(dir).map_err(|e| format!("cannot read it: {e}"))?;
    if metadata.uid() != rustix::process::geteuid().as_raw() {
        return Err(format!("it belongs to user {}, not to the user esr runs as", metadata.uid()));
    }
    if metadata.mode() & 0o022 != 0 {
        return Err(format!("others may write to it (mode {:o})", metadata.mode() & 0o777));
    }
    Ok(())
}

/// Writes `path` in `dir` whole or not at all (a staged file renamed over
/// it), readable by its owner only.
pub fn write_private_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let staged = path.with_extension(format!("tmp{}", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&staged)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&staged, path)
}
