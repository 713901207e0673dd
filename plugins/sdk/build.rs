//! Puts the WIT this crate implements (`wit/plugin.wit`) into the macro the
//! export macros call, so a component's bindings come from the SDK's own
//! copy wherever the component is built, in this repository or outside it.

use std::path::Path;
use std::{env, fs};

fn main() {
    let wit_path = Path::new("wit/plugin.wit");
    println!("cargo::rerun-if-changed={}", wit_path.display());
    let wit = fs::read_to_string(wit_path).expect("wit/plugin.wit is readable");
    let package = wit
        .lines()
        .find_map(|line| line.trim().strip_prefix("package ")?.strip_suffix(';'))
        .expect("wit/plugin.wit declares its package");
    // A raw string whose delimiter the WIT cannot close early.
    let mut hashes = String::from("#");
    while wit.contains(&format!("\"{hashes}")) {
        hashes.push('#');
    }
    let generated = format!(
        "/// The WIT package this SDK implements, `{package}`.\n\
         pub const WIT_PACKAGE: &str = \"{package}\";\n\n\
         /// The bindings of one world of [`WIT_PACKAGE`], generated in the crate\n\
         /// that expands it (the export macros call this).\n\
         #[doc(hidden)]\n\
         #[macro_export]\n\
         macro_rules! __esr_bindings {{\n    ($world:literal) => {{\n        \
         $crate::__wit_bindgen::generate!({{\n            inline: r{hashes}\"{wit}\"{hashes},\n            \
         world: $world,\n            runtime_path: \"esr_plugin_sdk::__wit_bindgen::rt\",\n        }});\n    }};\n}}\n"
    );
    let out = Path::new(&env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("wit_bindings.rs");
    fs::write(out, generated).expect("OUT_DIR is writable");
}
