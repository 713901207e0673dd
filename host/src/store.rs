//! The store the host opens: the seam (`esr-store`) and its backends
//! (`esr-store-sled`, `esr-store-postgres`), chosen by the database URL.

use std::path::Path;
use std::sync::Arc;

pub use esr_store::*;
pub use esr_store_postgres as postgres;
pub use esr_store_sled as sled;

/// Opens the sled store of an existing deployment in `data_dir`, creating
/// nothing: a directory that holds no sled store is
/// [`StoreError::NotADeployment`].
pub fn open_existing_sled(data_dir: &Path) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(sled::SledStore::open_existing(data_dir)?))
}

/// Where the store is and how to reach it: sled in `data_dir` unless
/// `database_url` names PostgreSQL.
#[derive(Debug, Clone)]
pub struct StoreOptions<'a> {
    pub database_url: Option<&'a str>,
    pub data_dir: &'a Path,
    /// Connections to a database server at most (default [`postgres::DEFAULT_POOL_SIZE`]).
    pub pool_size: Option<u32>,
    /// How long a store call waits for a connection (default
    /// [`postgres::DEFAULT_CONNECTION_WAIT`]).
    pub connection_wait: Option<std::time::Duration>,
    /// Streaming replicas of the database that serve public reads (PostgreSQL only).
    pub replicas: postgres::Replicas,
}

impl<'a> StoreOptions<'a> {
    /// The store at `database_url` (sled in `data_dir` when `None`), every
    /// other option at its default.
    pub fn at(database_url: Option<&'a str>, data_dir: &'a Path) -> StoreOptions<'a> {
        StoreOptions {
            database_url,
            data_dir,
            pool_size: None,
            connection_wait: None,
            replicas: postgres::Replicas::default(),
        }
    }
}

/// Opens the store: sled in `data_dir` unless `database_url` names another
/// backend, with every other option at its default.
pub fn open(database_url: Option<&str>, data_dir: &Path) -> Result<Arc<dyn Store>, StoreError> {
    open_with(&StoreOptions::at(database_url, data_dir))
}

/// Opens the store `options` describe.
pub fn open_with(options: &StoreOptions) -> Result<Arc<dyn Store>, StoreError> {
    let StoreOptions { database_url, data_dir, pool_size, connection_wait, replicas } = options;
    if database_url.is_none() && !replicas.urls.is_empty() {
        return Err(StoreError::Unsupported(
            "--database-replica-url needs --database: replicas are PostgreSQL standbys of that database".into(),
        ));
    }
    match *database_url {
        None => Ok(Arc::new(sled::SledStore::open(data_dir)?)),
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            // The data directory still holds the compile cache and key files.
            if !data_dir.exists() {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new().recursive(true).mode(0o700).create(data_dir)?;
            }
            let store = postgres::PgStore::open_with_replicas(
                url,
                pool_size.unwrap_or(postgres::DEFAULT_POOL_SIZE),
                connection_wait.unwrap_or(postgres::DEFAULT_CONNECTION_WAIT),
                replicas,
            )?;
            if postgres::on_this_machine(url) {
                esr_store::parallel::leave_cores(1);
            }
            Ok(Arc::new(store))
        }
        Some(url) => Err(StoreError::Unsupported(format!(
            "unknown database URL scheme in {:?}: use postgres:// or postgresql://, or no URL for sled in the data directory",
            url.split_once("://").map_or(url, |(scheme, _)| scheme)
        ))),
    }
}
