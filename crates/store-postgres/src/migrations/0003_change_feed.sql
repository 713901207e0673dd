-- The change feed and records' histories. Each organization's changes are
-- numbered under its write lock (the organization's row), so sequences
-- follow commit order whichever host writes; `write_clocks.sequence` is the
-- last one given, `pruned_through` the highest deletion event removed.
ALTER TABLE write_clocks
    ADD COLUMN sequence bigint NOT NULL DEFAULT 0,
    ADD COLUMN pruned_through bigint NOT NULL DEFAULT 0;

-- A record's latest change, one per record: a newer change of the record
-- replaces its row. `operation` is 'c' (created), 'u' (updated) or 'd'
-- (deleted); `changed_at` the batch's write time (Unix nanoseconds).
CREATE TABLE changes (
    org_id uuid NOT NULL,
    sequence bigint NOT NULL,
    collection text COLLATE "C" NOT NULL,
    id uuid NOT NULL,
    operation "char" NOT NULL,
    changed_at bigint NOT NULL,
    PRIMARY KEY (org_id, sequence)
);
CREATE UNIQUE INDEX changes_by_record ON changes (org_id, collection, id);
-- The feed of some collections only.
CREATE INDEX changes_by_collection ON changes (org_id, collection, sequence);
-- Pruning finds old deletion events without reading the rest.
CREATE INDEX changes_deletions ON changes (org_id, changed_at) WHERE operation = 'd';

-- Each record's history entries, numbered from 1 in the order written;
-- removed with the record.
CREATE TABLE history (
    org_id uuid NOT NULL,
    collection text COLLATE "C" NOT NULL,
    id uuid NOT NULL,
    n bigint NOT NULL,
    entry bytea NOT NULL,
    PRIMARY KEY (org_id, collection, id, n)
);
