//! `esr-componentize <core.wasm> <component.wasm>`: the last step of
//! building a read component without WASI.
//!
//! A component built for `wasm32-wasip2` imports fifteen WASI interfaces
//! from Rust's standard library (stdio, environment, exit, random) that a
//! read never calls, and each import costs every instantiation, one per
//! request (docs/performance.md, "Read components without WASI"). Built for
//! `wasm32-unknown-unknown` the module imports only the `esr:plugin` world;
//! this wraps it, from the component type wit-bindgen embeds, into the
//! component the host loads.

use anyhow::{Context, bail};
use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1).map(PathBuf::from);
    let (Some(input), Some(output), None) = (args.next(), args.next(), args.next()) else {
        bail!("usage: esr-componentize <core module.wasm> <component.wasm>");
    };
    let module = std::fs::read(&input).with_context(|| format!("reading {}", input.display()))?;
    let component = wit_component::ComponentEncoder::default()
        .module(&module)
        .and_then(|encoder| encoder.validate(true).encode())
        .with_context(|| format!("making a component of {}", input.display()))?;
    // Written beside the target and renamed, so a loading host never sees half a file.
    let partial = output.with_extension("wasm.partial");
    std::fs::write(&partial, component).with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, &output).with_context(|| format!("writing {}", output.display()))?;
    Ok(())
}
