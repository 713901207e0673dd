//! The host scanners' and Snyk's reports through the real host, one
//! module per format; the shared helpers are in `reports.rs`.

mod hosts;
mod nessus;
mod nexpose;
mod openvas;
mod qualys;
mod snyk;
