//! Import throughput into PostgreSQL through the admin listener, beside
//! what PostgreSQL alone takes to store the same findings.

use std::time::{Duration, Instant};

use esr_pg_cluster::Cluster;

use crate::Args;
use crate::import::{import_generated, write_ceiling_batches};
use crate::postgres::postmaster_pid;
use crate::server::start_server_in_mode;
use crate::system::{cpu_seconds, parent_pid, resident_mib};

/// The validated, durable import into PostgreSQL (a fresh database of the
/// cluster, through the admin listener, as into sled), beside what
/// PostgreSQL alone takes to store the same findings' bytes in the same
/// batches: binary `COPY` into a table with only its primary key, one
/// committed transaction per batch.
pub(crate) fn bench_import_postgres(args: &Args, cluster: &Cluster) -> anyhow::Result<String> {
    const IMPORT_DATABASE: &str = "bench_import";
    const CEILING_DATABASE: &str = "bench_ceiling";
    for database in [IMPORT_DATABASE, CEILING_DATABASE] {
        cluster.execute(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))?;
        cluster.execute(&format!("CREATE DATABASE {database}"))?;
    }
    let data_dir = args.out.join("postgres-import-host");
    if data_dir.exists() {
        std::fs::remove_dir_all(&data_dir)?;
    }
    let url = cluster.url(IMPORT_DATABASE);
    let (server, admin) = start_server_in_mode(&data_dir, &args.plugins_dir, &["--database", &url])?;
    let postmaster = postmaster_pid(cluster)?;
    let of_cluster = |pid: u32| pid == postmaster || parent_pid(pid) == Some(postmaster);
    let cpu_before = (cpu_seconds(|pid| pid == server.child.id()), cpu_seconds(of_cluster));
    let imported = import_generated(args, &data_dir, &admin)?;
    let host_cpu = cpu_seconds(|pid| pid == server.child.id()) - cpu_before.0;
    let postgres_cpu = cpu_seconds(of_cluster) - cpu_before.1;
    let host_rss = resident_mib(server.child.id());
    drop(server);
    std::fs::remove_dir_all(&data_dir)?;
    let mut database = cluster.config(IMPORT_DATABASE).connect(postgres::NoTls)?;
    let size: i64 = database.query_one("SELECT pg_database_size(current_database())", &[])?.get(0);
    let (schema_count, schema_time) =
        write_imported_rows_again(&mut database, imported.organization, args.import_batch)?;
    drop(database);

    let mut ceiling = cluster.config(CEILING_DATABASE).connect(postgres::NoTls)?;
    ceiling.batch_execute(
        "CREATE TABLE ceiling (org_id uuid NOT NULL, collection text COLLATE \"C\" NOT NULL, id uuid NOT NULL, \
         body bytea NOT NULL, PRIMARY KEY (org_id, collection, id))",
    )?;
    let organization = imported.organization;
    let (ceiling_count, ceiling_time) = write_ceiling_batches(args, imported.spec, imported.finding_count, |batch| {
        use postgres::types::Type;
        let mut transaction = ceiling.transaction()?;
        let sink = transaction.copy_in("COPY ceiling (org_id, collection, id, body) FROM STDIN BINARY")?;
        let mut writer =
            postgres::binary_copy::BinaryCopyInWriter::new(sink, &[Type::UUID, Type::TEXT, Type::UUID, Type::BYTEA]);
        for (id, body) in &batch {
            writer.write(&[&organization, &"vulnerability-findings", id, body])?;
        }
        writer.finish()?;
        transaction.commit()?;
        Ok(())
    })?;
    drop(ceiling);
    for database in [IMPORT_DATABASE, CEILING_DATABASE] {
        cluster.execute(&format!("DROP DATABASE {database} WITH (FORCE)"))?;
    }
    let rate = |count: usize, time: Duration| count as f64 / time.as_secs_f64().max(1e-9);
    let (import_rate, ceiling_rate, schema_rate) = (
        rate(imported.finding_count, imported.finding_time),
        rate(ceiling_count, ceiling_time),
        rate(schema_count, schema_time),
    );
    Ok(format!(
        "\nimport into PostgreSQL (validated, durable, through the admin listener; batches of {} lines, {} in flight; fsync on):\n\
         {:<52} {:>9.0} records/s  ({} in {:.1} s of sending)\n\
         {:<52} {:>9.0} records/s  ({} in {:.1} s of sending)  target ≥ 20,000/s\n\
         {:<52} {:>9.0} records/s  ({} in {:.1} s)\n\
         {:<52} {:>9.0} records/s  ({} in {:.1} s)\n\
         import ÷ PostgreSQL alone: {:.2} (pk only), {:.2} (the host's tables); database size after the import \
         {:.0} MiB; host RSS after it {:.0} MiB\n\
         CPU during the import (endpoints, findings and the generation between batches): host {:.0} s, \
         PostgreSQL's processes {:.0} s, wall {:.0} s; host CPU per finding {:.0} µs\n",
        args.import_batch,
        args.import_in_flight,
        "endpoints",
        rate(imported.endpoint_count, imported.endpoint_time),
        imported.endpoint_count,
        imported.endpoint_time.as_secs_f64(),
        "vulnerability findings",
        import_rate,
        imported.finding_count,
        imported.finding_time.as_secs_f64(),
        "PostgreSQL alone: the same bytes, binary COPY, pk only",
        ceiling_rate,
        ceiling_count,
        ceiling_time.as_secs_f64(),
        "PostgreSQL alone: the imported rows, the host's tables",
        schema_rate,
        schema_count,
        schema_time.as_secs_f64(),
        import_rate / ceiling_rate.max(1e-9),
        import_rate / schema_rate.max(1e-9),
        size as f64 / (1 << 20) as f64,
        host_rss,
        host_cpu,
        postgres_cpu,
        imported.wall.as_secs_f64(),
        host_cpu * 1e6 / imported.finding_count.max(1) as f64,
    ))
}

/// What PostgreSQL alone takes to store again the rows an import of
/// findings into `organization` wrote: its records (with every index of
/// the records table), change events and history entries, inserted into
/// tables made like the host's in the import's batches, one committed
/// transaction each. The engine's ceiling for the host's schema, with none
/// of the host's work (parsing, validation, encoding, round trips); the
/// copies are dropped afterwards. Returns the records stored and the time.
fn write_imported_rows_again(
    database: &mut postgres::Client,
    organization: uuid::Uuid,
    batch: usize,
) -> anyhow::Result<(usize, Duration)> {
    const TABLES: [&str; 3] = ["records", "changes", "history"];
    let batch = i64::try_from(batch)?;
    // Each table's rows numbered into the import's batches, in the order
    // imported, outside the time measured.
    database.execute(
        "CREATE TEMP TABLE records_source AS SELECT r.*, (row_number() OVER (ORDER BY created_position, id) - 1) / $2 \
         AS batch FROM records r WHERE org_id = $1 AND collection = 'vulnerability-findings'",
        &[&organization, &batch],
    )?;
    for table in &TABLES[1..] {
        database.batch_execute(&format!(
            "CREATE TEMP TABLE {table}_source AS SELECT t.*, s.batch FROM {table} t JOIN records_source s \
             USING (org_id, collection, id)"
        ))?;
    }
    let mut columns = Vec::new();
    for table in TABLES {
        database.batch_execute(&format!(
            "CREATE INDEX ON {table}_source (batch); ANALYZE {table}_source; \
             CREATE TABLE {table}_again (LIKE {table} INCLUDING ALL)"
        ))?;
        let listed: String = database
            .query_one(
                "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute \
                 WHERE attrelid = $1::text::regclass AND attnum > 0 AND NOT attisdropped",
                &[&table],
            )?
            .get(0);
        columns.push(listed);
    }
    let batches: i64 = database.query_one("SELECT coalesce(max(batch) + 1, 0) FROM records_source", &[])?.get(0);
    let started = Instant::now();
    for number in 0..batches {
        let mut transaction = database.transaction()?;
        for (table, listed) in TABLES.iter().zip(&columns) {
            transaction.execute(
                &format!("INSERT INTO {table}_again ({listed}) SELECT {listed} FROM {table}_source WHERE batch = $1"),
                &[&number],
            )?;
        }
        transaction.commit()?;
    }
    let elapsed = started.elapsed();
    let count: i64 = database.query_one("SELECT count(*) FROM records_again", &[])?.get(0);
    for table in TABLES {
        database.batch_execute(&format!("DROP TABLE {table}_again; DROP TABLE {table}_source"))?;
    }
    Ok((usize::try_from(count)?, elapsed))
}
