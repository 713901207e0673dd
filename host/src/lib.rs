//! esr: the public read API of the endpoint security remediation service.
//!
//! The host owns HTTP, authentication and tenancy, storage and the plugin
//! lifecycle; each resource group's read logic is a WebAssembly component
//! (see `ARCHITECTURE.md`).

pub mod admin_client;
pub mod migrate;
#[cfg(feature = "native-baseline")]
pub mod native;

pub mod server;
pub mod store;
