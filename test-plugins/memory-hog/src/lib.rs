//! A misbehaving endpoints component: `list` allocates without bound. The
//! host's memory cap must fail the call; `get` behaves, to show that the
//! next request gets a fresh, working instance.

use esr_plugin_sdk::{Descriptor, Page, PluginError, Request, ResourcePlugin, Store, get_record};

pub struct MemoryHog;

impl ResourcePlugin for MemoryHog {
    fn describe() -> Descriptor {
        Descriptor::new("endpoints", concat!(env!("CARGO_PKG_VERSION"), "+memory-hog"), &[], &[])
            .with_reads(&["endpoints"])
    }

    fn list(_: &dyn Store, _: &Request) -> Result<Page, PluginError> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&hoard);
        }
    }

    fn get(store: &dyn Store, id: &str, request: &Request) -> Result<Vec<u8>, PluginError> {
        get_record(store, "endpoints", id, request)
    }
}

esr_plugin_sdk::export_resource_plugin!(crate::MemoryHog);
