//! Versioned schema migrations, embedded in the binary.
//!
//! `schema_version` holds one row: the number of the last migration
//! applied. At start the host applies, in one transaction, every migration
//! past it, under an advisory lock so that hosts starting together migrate
//! once; a database whose schema is newer than this binary is refused.

use esr_contract::indexes;
use esr_store::Collection;

use super::columns;
use esr_store::StoreError;

/// The migrations, in order: migration `n` is `MIGRATIONS[n - 1]`. Never
/// edit one that has shipped; add the next.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_initial.sql"),
    include_str!("migrations/0002_write_clocks_and_hosts.sql"),
    include_str!("migrations/0003_change_feed.sql"),
    include_str!("migrations/0004_index_columns.sql"),
    include_str!("migrations/0005_suppression_expiry.sql"),
    include_str!("migrations/0006_admin_token_digest.sql"),
    include_str!("migrations/0007_documents.sql"),
    include_str!("migrations/0008_audit.sql"),
    include_str!("migrations/0009_api_key_last_used.sql"),
    include_str!("migrations/0010_time_indexes_carry_filters.sql"),
];

/// The index columns a migration adds that the host fills from the
/// records' bodies in the migration's transaction: `(migration, collection,
/// index)`.
const FILLED: &[(usize, Collection, &str)] =
    &[(5, Collection::VulnerabilityFindings, indexes::SUPPRESSION_EXPIRY.name)];

/// The schema version this binary writes and reads.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// Any number the hosts of one database agree on: the advisory lock
/// migrations hold.
const MIGRATION_LOCK: i64 = 0x6573_725f_6d69_6772;

/// Brings the schema to [`SCHEMA_VERSION`]; returns the version found.
pub fn migrate(client: &mut postgres::Client) -> Result<i32, StoreError> {
    let mut transaction = client.transaction().map_err(crate::store_error)?;
    transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).map_err(crate::store_error)?;
    transaction
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_version (
             only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
             version integer NOT NULL
         )",
        )
        .map_err(crate::store_error)?;
    let found: i32 = transaction
        .query_opt("SELECT version FROM schema_version", &[])
        .map_err(crate::store_error)?
        .map_or(0, |row| row.get(0));
    if found > SCHEMA_VERSION {
        return Err(StoreError::Unsupported(format!(
            "the database's schema is version {found}, newer than this esr knows ({SCHEMA_VERSION}): run the esr \
             release that wrote it, or a newer one"
        )));
    }
    for (number, sql) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
        let number = number + 1;
        let failed = |error: StoreError| StoreError::Backend(format!("schema migration {number} failed: {error}"));
        transaction.batch_execute(sql).map_err(|error| failed(crate::store_error(error)))?;
        for (_, collection, index) in FILLED.iter().filter(|(migration, ..)| *migration == number) {
            columns::fill(&mut transaction, *collection, index).map_err(failed)?;
        }
    }
    transaction
        .execute(
            "INSERT INTO schema_version (only_row, version) VALUES (true, $1) \
         ON CONFLICT (only_row) DO UPDATE SET version = excluded.version",
            &[&SCHEMA_VERSION],
        )
        .map_err(crate::store_error)?;
    transaction.commit().map_err(crate::store_error)?;
    Ok(found)
}
