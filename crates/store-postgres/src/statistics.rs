//! The planner's statistics, kept up with what imports write.
//!
//! PostgreSQL plans from statistics that autovacuum refreshes at most once
//! a minute, and only after a tenth of a table changed. A table an import
//! grows from nothing is planned as the near-empty table it was: a batch's
//! lookup of its ids (`id = ANY(…)`) then reads every record of the
//! organization through the key's first two columns instead of probing
//! each id, so each batch costs more than the one before
//! (docs/performance.md). The host counts the records it writes and, once
//! they reach what was last analysed (at least [`MIN_ROWS`]: the tables
//! have doubled since), analyses the tables it writes on a thread of its
//! own, so no batch waits. A plan goes wrong when its estimate is off by
//! far more than that; analysing more often took the database's time
//! from the import on this machine's two cores.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::Pool;

/// Records written before the first analysis, and between two at least.
const MIN_ROWS: u64 = 10_000;

/// The tables a write batch fills, analysed together.
const ANALYSE: &str = "ANALYZE records, index_entries, changes, history, counts";

/// What this host wrote since the tables were last analysed.
#[derive(Default)]
pub(super) struct Statistics {
    written: AtomicU64,
    /// The records PostgreSQL counted at the last analysis.
    analysed: AtomicU64,
    running: AtomicBool,
}

impl Statistics {
    /// Counts `records` written; starts an analysis when enough were.
    pub(super) fn wrote(self: &Arc<Self>, records: u64, pool: &Pool) {
        let written = self.written.fetch_add(records, Ordering::Relaxed).saturating_add(records);
        if written < MIN_ROWS.max(self.analysed.load(Ordering::Relaxed)) {
            return;
        }
        if self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        self.written.store(0, Ordering::Relaxed);
        let (statistics, pool) = (Arc::clone(self), pool.clone());
        let started = std::thread::Builder::new().name("esr-analyze".into()).spawn(move || {
            match statistics.analyse(&pool) {
                Ok(records) => statistics.analysed.store(records, Ordering::Relaxed),
                Err(error) => tracing::warn!(%error, "analysing the tables after an import failed"),
            }
            statistics.running.store(false, Ordering::Release);
        });
        if let Err(error) = started {
            tracing::warn!(%error, "cannot start analysing the tables");
            self.running.store(false, Ordering::Release);
        }
    }

    /// Analyses the tables; returns the records PostgreSQL now counts.
    fn analyse(&self, pool: &Pool) -> Result<u64, super::StoreError> {
        let mut connection = pool.get()?;
        connection.client.batch_execute(ANALYSE).map_err(super::store_error)?;
        let row = connection.query_opt("SELECT reltuples::int8 FROM pg_class WHERE oid = 'records'::regclass", &[])?;
        Ok(row.and_then(|row| u64::try_from(row.get::<_, i64>(0)).ok()).unwrap_or(0))
    }
}
