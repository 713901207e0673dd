//! Data at rest is private: the data directory holds the cursor-sealing
//! key, the admin token and every organization's enrollment token, so the
//! server creates it owner-only and refuses one that others can read.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::plugins_dir;

/// `esr serve --demo` on `data_dir`, started under the permissive umask
/// most shells have (022), so only the server itself can make its files private.
fn serve_under_umask_022(data_dir: &Path) -> Command {
    let mut command = Command::new("sh");
    command
        .args(["-c", "umask 022 && exec \"$@\"", "sh"])
        .arg(env!("CARGO_BIN_EXE_esr"))
        .args(["serve", "--demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .arg("--plugins-dir")
        .arg(plugins_dir())
        .env("ESR_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Every directory and file under `root`, `root` included.
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut found = vec![root.to_path_buf()];
    let mut index = 0;
    while index < found.len() {
        let path = found[index].clone();
        if std::fs::symlink_metadata(&path).unwrap().is_dir() {
            found.extend(std::fs::read_dir(&path).unwrap().map(|entry| entry.unwrap().path()));
        }
        index += 1;
    }
    found
}

#[test]
fn a_new_data_directory_is_owner_only_throughout() {
    let parent = tempfile::tempdir().unwrap();
    let data_dir = parent.path().join("data");
    let mut child = serve_under_umask_022(&data_dir).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let listening = esr::server::read_listening_addresses(&mut lines);
    // The demo data, its keys, the admin token and the compiled components
    // are all written before the server announces its addresses.
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    assert!(listening.is_some(), "esr exited before listening: {}", String::from_utf8_lossy(&output.stderr));

    let paths = walk(&data_dir);
    assert!(paths.len() > 5, "the server wrote its data: {paths:?}");
    let mut seen_files = 0;
    for path in paths {
        let metadata = std::fs::symlink_metadata(&path).unwrap();
        let mode = metadata.permissions().mode() & 0o777;
        if metadata.is_dir() {
            assert_eq!(mode, 0o700, "directory {} is {mode:o}", path.display());
        } else {
            seen_files += 1;
            assert_eq!(mode, 0o600, "file {} is {mode:o}", path.display());
        }
    }
    for written in ["admin-token", "demo-keys.json", "conf", "db"] {
        assert!(data_dir.join(written).exists(), "{written} is among the files checked");
    }
    assert!(seen_files >= 4);
}

#[test]
fn a_data_directory_others_can_read_is_refused_with_the_fix() {
    let parent = tempfile::tempdir().unwrap();
    let data_dir = parent.path().join("shared");
    std::fs::create_dir(&data_dir).unwrap();
    std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o755)).unwrap();

    let mut child = serve_under_umask_022(&data_dir).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    if esr::server::read_listening_addresses(&mut lines).is_some() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("esr started on a data directory others can read");
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "esr must refuse to start: {stderr}");
    assert!(stderr.contains(&format!("chmod -R go-rwx {}", data_dir.display())), "says how to fix it: {stderr}");
    assert!(stderr.contains("can be read by other users"), "{stderr}");
    assert_eq!(std::fs::read_dir(&data_dir).unwrap().count(), 0, "nothing was written into it");
}
