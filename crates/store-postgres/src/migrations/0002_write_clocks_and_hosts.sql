-- Each organization's write clock: the write time (Unix nanoseconds, whole
-- microseconds) of its last batch. A batch takes the next one under the
-- organization's lock from the database's clock, strictly later than this,
-- so `updated_at` increases in commit order whichever host writes.
CREATE TABLE write_clocks (
    org_id uuid PRIMARY KEY,
    last_write bigint NOT NULL
);

-- Start past every update already stored.
INSERT INTO write_clocks (org_id, last_write)
SELECT org_id, max(position) FROM index_entries
WHERE index_name = 'updated_at' AND value = '\x'::bytea
GROUP BY org_id;

-- The hosts serving this database, by the name their health gives, and
-- when each last said so: rate limits divide each key's quota among the
-- hosts seen lately. Not a tenant table.
CREATE TABLE hosts (
    name text COLLATE "C" PRIMARY KEY,
    last_seen timestamptz NOT NULL
);
