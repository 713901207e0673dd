//! A misbehaving endpoints component: `list` never returns. The host's
//! epoch deadline must end the call; `get` behaves, to show that the next
//! request gets a fresh, working instance.

use esr_plugin_sdk::{Descriptor, Page, PluginError, Request, ResourcePlugin, Store, get_record};

pub struct EndlessLoop;

impl ResourcePlugin for EndlessLoop {
    fn describe() -> Descriptor {
        Descriptor::new("endpoints", concat!(env!("CARGO_PKG_VERSION"), "+endless-loop"), &[], &[])
            .with_reads(&["endpoints"])
    }

    fn list(_: &dyn Store, _: &Request) -> Result<Page, PluginError> {
        let mut spins: u64 = 0;
        loop {
            spins = std::hint::black_box(spins.wrapping_add(1));
        }
    }

    fn get(store: &dyn Store, id: &str, request: &Request) -> Result<Vec<u8>, PluginError> {
        get_record(store, "endpoints", id, request)
    }
}

esr_plugin_sdk::export_resource_plugin!(crate::EndlessLoop);
