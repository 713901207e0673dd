//! The build settings measurements depend on.

use std::path::Path;

use crate::common::workspace;

fn manifest(folder: &Path) -> toml::Table {
    let path = folder.join("Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.parse().unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `[profile.dev.package."*"]` covers dependencies only, not the
/// workspace's own crates: a host crate without an entry of its own would
/// build unoptimized, and `make run`, `esr seed` and `make bench` use this
/// build.
#[test]
fn every_host_crate_is_optimized_in_the_dev_build() {
    let workspace = workspace();
    let profiles = manifest(&workspace)["profile"]["dev"]["package"].as_table().cloned().unwrap_or_default();
    let mut folders = vec![workspace.join("host")];
    for parent in ["crates", "dev-tools"] {
        for entry in std::fs::read_dir(workspace.join(parent)).expect("the workspace's folders") {
            let folder = entry.expect("a folder entry").path();
            if folder.join("Cargo.toml").exists() {
                folders.push(folder);
            }
        }
    }
    assert!(folders.len() > 5, "{folders:?}");
    for folder in folders {
        let package = manifest(&folder);
        let name = package["package"]["name"].as_str().expect("a package name").to_owned();
        let opt_level = profiles.get(&name).and_then(|profile| profile.get("opt-level")).and_then(|v| v.as_integer());
        assert_eq!(
            opt_level,
            Some(2),
            "{name} ({}) needs `[profile.dev.package.{name}]` with `opt-level = 2` in the workspace's Cargo.toml",
            folder.display()
        );
    }
}
