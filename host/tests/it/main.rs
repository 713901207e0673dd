//! The end-to-end tests: the real `esr` binary, its real components,
//! real sled and PostgreSQL, over real HTTP. One test binary, so the
//! dependency graph is linked once; a module per subject.

mod common;

mod admin_token;
mod admission;
mod api;
mod audit;
mod build_settings;
mod changes;
// The checks call the host's store functions as the native baseline does.
#[cfg(feature = "native-baseline")]
mod component_reads;
mod component_slots;
mod config_file;
mod connection_limits;
mod containment;
mod data_at_rest;
mod database_faults;
mod deletions;
mod deploy;
mod documentation;
mod durability;
mod export;
mod fairness;
mod hostile_input;
mod ingest;
mod isolation;
mod keys;
mod lifecycle;
mod lists;
mod migrate;
mod native_baseline;
mod oauth;
mod observability;
mod openapi;
mod plugin_authoring;
mod plugin_loading;
mod postgres_api;
mod postgres_store;
mod rate_limits;
mod reference_page;
mod reload;
mod replicas;
mod report_formats;
mod reports;
mod request_limits;
mod several_hosts;
mod store_contract;
mod summaries;
mod unicode;
mod walk_during_writes;
mod webhooks;
mod writers;
