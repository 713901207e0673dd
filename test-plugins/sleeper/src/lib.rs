//! An endpoints component that blocks in WASI waits: `list` waits a minute,
//! by `std::thread::sleep` (`?wait=sleep`, the default), by a loop of
//! `wasi:io/poll` `poll` on a clock (`?wait=poll`) or by `pollable.block`
//! (`?wait=block`). The host must cut each off at the call's deadline; `get`
//! behaves, so the component passes its smoke call.

use std::time::Duration;

use esr_plugin_sdk::{Descriptor, Page, PluginError, Request, ResourcePlugin, Store, get_record};

pub struct Sleeper;

/// Far longer than any deadline the host allows a call.
const WAIT: Duration = Duration::from_secs(60);

impl ResourcePlugin for Sleeper {
    fn describe() -> Descriptor {
        Descriptor::new("endpoints", concat!(env!("CARGO_PKG_VERSION"), "+sleeper"), &[], &[])
            .with_reads(&["endpoints"])
    }

    fn list(_: &dyn Store, request: &Request) -> Result<Page, PluginError> {
        let how = request.query.iter().find(|param| param.name == "wait").map_or("sleep", |param| param.value.as_str());
        match how {
            "sleep" => std::thread::sleep(WAIT),
            "poll" => poll_a_clock(),
            "block" => block_on_a_clock(),
            other => return Err(PluginError::Internal(format!("unknown wait {other:?}"))),
        }
        Err(PluginError::Internal("woke up after a minute".into()))
    }

    fn get(store: &dyn Store, id: &str, request: &Request) -> Result<Vec<u8>, PluginError> {
        get_record(store, "endpoints", id, request)
    }
}

/// Polls a clock until the minute is over, as an event loop would.
#[cfg(target_arch = "wasm32")]
fn poll_a_clock() {
    use wasip2::clocks::monotonic_clock;
    let until = monotonic_clock::now() + WAIT.as_nanos() as u64;
    while monotonic_clock::now() < until {
        let clock = monotonic_clock::subscribe_instant(until);
        wasip2::io::poll::poll(&[&clock]);
    }
}

#[cfg(target_arch = "wasm32")]
fn block_on_a_clock() {
    wasip2::clocks::monotonic_clock::subscribe_duration(WAIT.as_nanos() as u64).block();
}

#[cfg(not(target_arch = "wasm32"))]
fn poll_a_clock() {
    std::thread::sleep(WAIT);
}

#[cfg(not(target_arch = "wasm32"))]
fn block_on_a_clock() {
    std::thread::sleep(WAIT);
}

esr_plugin_sdk::export_resource_plugin!(crate::Sleeper);
