//! A plugin author outside this repository: each template, copied to a
//! folder of its own, builds against the guest SDK by path (the SDK brings
//! the WIT) and the host accepts the component.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::Path;
use std::process::Command;

use common::workspace;

/// Writes `template` as a standalone crate in `crate_dir`, the way PLUGINS.md
/// tells an author to: placeholders filled, the SDK named by path.
fn copy_template(template: &str, crate_dir: &Path, name: &str, group: &str, sdk: &Path) {
    for file in ["Cargo.toml", "src/lib.rs"] {
        let text = std::fs::read_to_string(workspace().join("templates").join(template).join(file)).unwrap();
        let text =
            text.replace("{{NAME}}", name).replace("{{GROUP}}", group).replace("{{SDK_PATH}}", sdk.to_str().unwrap());
        let path = crate_dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    // The dependency versions this repository builds and tests with.
    std::fs::copy(workspace().join("Cargo.lock"), crate_dir.join("Cargo.lock")).unwrap();
}

#[test]
fn the_templates_build_outside_the_repository_and_the_host_accepts_them() {
    let outside = tempfile::tempdir().unwrap();
    let workspace = workspace().canonicalize().unwrap();
    assert!(!outside.path().starts_with(&workspace), "{} is inside the repository", outside.path().display());
    let sdk = workspace.join("plugins/sdk");
    // Kept between runs, apart from the workspace's own target folder (whose
    // lock the test run may hold).
    let target_dir = workspace.join("target/out-of-tree-plugins");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());

    for (template, crate_name, name, group, artifact, shows) in [
        ("plugin", "my-endpoints", "my-endpoints", "endpoints", "esr_plugin_my_endpoints", "endpoints"),
        ("importer", "import-my-format", "my-format", "endpoints", "esr_plugin_import_my_format", "my-format"),
    ] {
        let crate_dir = outside.path().join(crate_name);
        copy_template(template, &crate_dir, name, group, &sdk);
        let build = Command::new(&cargo)
            .args(["build", "--release", "--target", "wasm32-wasip2"])
            .current_dir(&crate_dir)
            .env("CARGO_TARGET_DIR", &target_dir)
            .output()
            .unwrap();
        assert!(
            build.status.success(),
            "the {template} template does not build outside the repository:\n{}",
            String::from_utf8_lossy(&build.stderr)
        );

        let component = target_dir.join("wasm32-wasip2/release").join(format!("{artifact}.wasm"));
        let check =
            Command::new(env!("CARGO_BIN_EXE_esr")).args(["plugins", "check"]).arg(&component).output().unwrap();
        let report = String::from_utf8_lossy(&check.stdout);
        assert!(
            check.status.success(),
            "esr plugins check refused the {template} template's component:\n{report}\n{}",
            String::from_utf8_lossy(&check.stderr)
        );
        assert!(report.contains(shows), "the check does not name {shows}:\n{report}");
    }
}
