//! The plugin runtime: loading, validating and calling components.
//!
//! Every component in the plugins directory is compiled once, checked
//! (world, WIT package version, the group its `describe()` claims and what
//! its store may read, no two claiming one group) and pre-instantiated.
//! Each call then gets a fresh `Store` and instance from the pooling
//! allocator, with the caller's organization and the component's reads
//! bound into the store, an epoch deadline (which also ends any wait in
//! WASI), a memory cap and bounded logging, so no state
//! survives a request and a misbehaving guest fails only its own request.
//!
//! `engine` compiles and caches components and makes each call's store;
//! `call` is one call's state and the host functions a component calls;
//! `registry` loads and checks a set of components and calls them;
//! `documents` keeps what each says of itself; `feed` reads the change
//! feed as clients see it; `importers` runs scanner
//! report importers; `reads` is what a component's store may read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use sha2::{Digest, Sha256};
use uuid::Uuid;
use wasmtime::component::{
    Component, ComponentExportIndex, HasSelf, InstancePre, Linker, Resource, ResourceTable, TypedFunc,
};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, StoreLimits, StoreLimitsBuilder,
};
use wasmtime_wasi::p2::bindings::sync::io::poll as wasi_poll;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_io::bindings::wasi::io::poll as async_wasi_poll;
use wasmtime_wasi_io::poll::DynPollable;

use esr_store::{
    Collection, GroupCount, IndexCondition, IndexPosition, IndexRange, IndexWalk, IndexedRecord, Matching, RecordWalk,
    StoreError, StoreReader,
};

mod call;
mod documents;
mod engine;
pub mod feed;
mod importers;
mod reads;
mod registry;

pub use call::*;
pub use documents::*;
pub use engine::*;
pub use importers::*;
pub use reads::{READABLE, Reads};
pub use registry::*;

mod bindings {
    pub mod resource {
        wasmtime::component::bindgen!({
            path: "../../plugins/sdk/wit",
            world: "esr:plugin/resource-plugin",
            imports: { default: trappable },
        });
    }
    pub mod document {
        wasmtime::component::bindgen!({
            path: "../../plugins/sdk/wit",
            world: "esr:plugin/document-plugin",
            imports: { default: trappable },
            with: {
                "esr:plugin/types": super::resource::esr::plugin::types,
                "esr:plugin/store": super::resource::esr::plugin::store,
                "esr:plugin/log": super::resource::esr::plugin::log,
            },
        });
    }
    pub mod importer {
        wasmtime::component::bindgen!({
            path: "../../plugins/sdk/wit",
            world: "esr:plugin/report-importer",
            imports: { default: trappable },
            with: {
                "esr:plugin/log": super::resource::esr::plugin::log,
            },
        });
    }
}

use bindings::document::{DocumentPlugin, DocumentPluginPre};
use bindings::importer::{ReportImporter, ReportImporterPre};
use bindings::resource::ResourcePlugin;
use bindings::resource::esr::plugin::{log, store as wit_store, types};
use bindings::resource::exports::esr::plugin::{bulk_export, handler, held_lists, summaries};

pub use bindings::document::exports::esr::plugin::document::Rendered;
pub use bindings::importer::exports::esr::plugin::importer::{Confidence, ReportError as ImporterError};
pub use bindings::resource::exports::esr::plugin::bulk_export::Chunk as ExportChunk;
pub use bindings::resource::exports::esr::plugin::handler::Page;
pub use bindings::resource::exports::esr::plugin::summaries::SummaryAnswer as Summary;
pub use types::{Descriptor, Error as PluginError, InvalidParam, QueryParam, Request};

/// The WIT package components are built against.
pub const WIT_PACKAGE: &str = "esr:plugin";
/// The package versions this host loads: `0.3.x` (for `0.y`, a minor
/// version is a breaking one under semver).
pub const ACCEPTED_VERSIONS: &str = "0.3.x";
/// The package version this host is built against.
const WIT_VERSION: &str = "0.3.6";
const ACCEPTED_MAJOR_MINOR: (u64, u64) = (0, 3);

/// The resource groups served by the `handler` world, as the API names them.
pub const RESOURCE_GROUPS: [&str; 4] = esr_contract::Collection::NAMES;
/// The group served by the `document` world.
pub const AGENT_GROUP: &str = "agent";

/// Per-call limits on a guest.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Guest linear memory, in bytes.
    pub memory_bytes: usize,
    /// Time per call: guest code, and its waits in WASI.
    pub deadline: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { memory_bytes: 64 << 20, deadline: Duration::from_secs(2) }
    }
}

impl Limits {
    /// What a report importer gets by default: a report of 10,000
    /// vulnerabilities is tens of MiB of JSON, parsed and answered again.
    pub fn importer_default() -> Limits {
        Limits { memory_bytes: 512 << 20, deadline: Duration::from_secs(20) }
    }
}

/// Memory and table bytes per instance slot reset in place rather than
/// released: the stack, data and the SDK's 8 MiB arena.
const KEEP_RESIDENT_BYTES: usize = 16 << 20;
const EPOCH_TICK: Duration = Duration::from_millis(10);
/// How often a host that resets component memory in place checks that
/// swap is still off for it (and says so in the log when it is not).
const SWAP_CHECK_EVERY: Duration = Duration::from_secs(60);
/// Captured guest stderr per call (a panic message is what matters).
const STDERR_CAPACITY: usize = 16 * 1024;
/// `log` messages kept per call; the rest are counted in one line.
const LOG_MESSAGES_PER_CALL: u32 = 100;
/// Bytes of one `log` message kept (escaped); the rest is cut and marked.
pub const LOG_MESSAGE_BYTES: usize = 4 * 1024;

#[cfg(test)]
mod tests {
    use super::loggable_guest_text;

    #[test]
    fn guest_text_cannot_start_a_line_or_steer_a_terminal() {
        let forged = "a\nb\r\tc\u{1b}[31m\u{7f}\u{85}\u{202e}d\u{2028}é";
        assert_eq!(loggable_guest_text(forged, 1024), r"a\nb\r\tc\u{1b}[31m\u{7f}\u{85}\u{202e}d\u{2028}é");
    }

    #[test]
    fn guest_text_is_cut_at_a_character_boundary_and_marked() {
        let long = "é".repeat(3000);
        let kept = loggable_guest_text(&long, 4096);
        assert!(kept.starts_with(&"é".repeat(2048)));
        assert!(kept.ends_with("… [truncated, 6000 bytes in all]"), "{kept}");
        assert_eq!(loggable_guest_text("short", 4096), "short");
    }
}
