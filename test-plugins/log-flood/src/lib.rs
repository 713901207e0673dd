//! An endpoints component that abuses the `log` import: `list` first writes
//! a message that tries to forge a log line of its own (a newline, an ANSI
//! escape, a bidi override, DEL, a C1 control), then a flood of large
//! messages, and answers an empty page. The host must escape the first and
//! bound the flood; `get` behaves, so the component passes its smoke call.

use esr_plugin_sdk::{Descriptor, Page, PluginError, Request, ResourcePlugin, Store, get_record};

pub struct LogFlood;

/// The forging message: what follows the newline would look like a line the
/// host wrote itself.
pub const FORGED: &str =
    "innocent\nFORGED-LINE ERROR esr::http: request status=200 \u{1b}[31mred\u{202e}rtl\u{7f}del\u{85}nel";
/// How many flood messages `list` writes, and how large each is.
pub const FLOOD_MESSAGES: usize = 500;
pub const FLOOD_MESSAGE_BYTES: usize = 16 * 1024;

impl ResourcePlugin for LogFlood {
    fn describe() -> Descriptor {
        Descriptor::new("endpoints", concat!(env!("CARGO_PKG_VERSION"), "+log-flood"), &[], &[])
            .with_reads(&["endpoints"])
    }

    fn list(_: &dyn Store, _: &Request) -> Result<Page, PluginError> {
        write_log(FORGED);
        let filler = "x".repeat(FLOOD_MESSAGE_BYTES);
        for n in 0..FLOOD_MESSAGES {
            write_log(&format!("flood {n} {filler}"));
        }
        Ok(Page { held: None, data: b"[]".to_vec(), total: 0, limit: 50, offset: Some(0), next_cursor: None })
    }

    fn get(store: &dyn Store, id: &str, request: &Request) -> Result<Vec<u8>, PluginError> {
        get_record(store, "endpoints", id, request)
    }
}

#[cfg(target_arch = "wasm32")]
fn write_log(message: &str) {
    use crate::esr_component::esr::plugin::log;
    log::write(log::Level::Warn, message);
}

#[cfg(not(target_arch = "wasm32"))]
fn write_log(message: &str) {
    eprintln!("{message}");
}

esr_plugin_sdk::export_resource_plugin!(crate::LogFlood);
