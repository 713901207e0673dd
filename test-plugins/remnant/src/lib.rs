//! An endpoints component that looks for what an earlier call left in its
//! memory. `list?write=<text>&hold-ms=<n>` writes the text into a page of
//! the module's zero-initialized memory, then waits that long (so that a
//! test can have the kernel swap the page out) before it answers;
//! `list?read` answers what that page holds. Every call must start from
//! the module's own memory: a read finds nothing but zeros.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use esr_plugin_sdk::{Descriptor, Page, PluginError, Request, ResourcePlugin, Store, get_record};
use serde_json::json;

pub struct Remnant;

/// A page of zero-initialized memory, on a page of its own.
#[repr(C, align(65536))]
struct Scratch([AtomicU8; 4096]);

static SCRATCH: Scratch = Scratch([const { AtomicU8::new(0) }; 4096]);

fn param<'a>(request: &'a Request, name: &str) -> Option<&'a str> {
    request.query.iter().find(|param| param.name == name).map(|param| param.value.as_str())
}

impl ResourcePlugin for Remnant {
    fn describe() -> Descriptor {
        Descriptor::new("endpoints", concat!(env!("CARGO_PKG_VERSION"), "+remnant"), &[], &[])
            .with_reads(&["endpoints"])
    }

    fn list(_: &dyn Store, request: &Request) -> Result<Page, PluginError> {
        let report = if let Some(text) = param(request, "write") {
            for (cell, byte) in SCRATCH.0.iter().zip(text.bytes()) {
                cell.store(byte, Ordering::Relaxed);
            }
            let hold = param(request, "hold-ms").and_then(|ms| ms.parse().ok()).unwrap_or(0);
            std::thread::sleep(Duration::from_millis(hold));
            json!([{"wrote": text}])
        } else {
            let bytes: Vec<u8> = SCRATCH.0.iter().map(|cell| cell.load(Ordering::Relaxed)).collect();
            let written = bytes.iter().filter(|byte| **byte != 0).count();
            let text = String::from_utf8_lossy(&bytes).trim_end_matches('\0').to_owned();
            json!([{"nonzero_bytes": written, "found": text}])
        };
        Ok(Page {
            held: None,
            data: report.to_string().into_bytes(),
            total: 1,
            limit: 1,
            offset: Some(0),
            next_cursor: None,
        })
    }

    fn get(store: &dyn Store, id: &str, request: &Request) -> Result<Vec<u8>, PluginError> {
        get_record(store, "endpoints", id, request)
    }
}

esr_plugin_sdk::export_resource_plugin!(crate::Remnant);
