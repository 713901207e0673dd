//! esr: the public read API of the endpoint security remediation service.
//!
//! The host owns HTTP, authentication and tenancy, storage and the plugin
//! lifecycle; each resource group's read logic is a WebAssembly component
//! (see `ARCHITECTURE.md`).

pub mod admin_client;
pub mod admin_token;
pub mod auth;
pub mod change_retention;
pub mod clock;
pub mod connections;
pub mod deletions;
pub mod demo;
mod demo_history;
pub mod http;
pub mod ingest;
pub mod metrics;
pub mod migrate;
#[cfg(feature = "native-baseline")]
pub mod native;
pub mod natural_keys;
pub mod pairing;
mod parallel;
pub mod plugins;
pub mod private_files;
pub mod reports;
pub mod seed;
pub mod server;
pub mod store;
pub mod suppression_expiry;
