//! A misbehaving endpoints component: `list` panics. The host must turn
//! the trap into a `500` and log the panic message; `get` behaves, to show
//! that the next request gets a fresh, working instance.

use esr_plugin_sdk::{Descriptor, Page, PluginError, Request, ResourcePlugin, Store, get_record};

pub struct Panics;

/// What the host's log must show when `list` is called.
pub const PANIC_MESSAGE: &str = "the panics test component panicked on purpose";

impl ResourcePlugin for Panics {
    fn describe() -> Descriptor {
        Descriptor::new("endpoints", concat!(env!("CARGO_PKG_VERSION"), "+panics"), &[], &[]).with_reads(&["endpoints"])
    }

    fn list(_: &dyn Store, request: &Request) -> Result<Page, PluginError> {
        panic!("{PANIC_MESSAGE} (path {})", request.path);
    }

    fn get(store: &dyn Store, id: &str, request: &Request) -> Result<Vec<u8>, PluginError> {
        get_record(store, "endpoints", id, request)
    }
}

esr_plugin_sdk::export_resource_plugin!(crate::Panics);
