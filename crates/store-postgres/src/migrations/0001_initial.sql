-- The first schema. Every tenant table's primary key begins with org_id,
-- the column a distributed deployment shards by; values of index entries
-- and counts are bytea (a counted pair's value holds a NUL byte, and bytes
-- compare like the sled layout's keys).

-- Shared secrets (the cursor key, the admin token) and markers.
CREATE TABLE settings (
    name text COLLATE "C" PRIMARY KEY,
    value bytea NOT NULL
);

CREATE TABLE organizations (
    org_id uuid PRIMARY KEY,
    name text NOT NULL,
    enrollment_token text NOT NULL,
    created_at text NOT NULL
);

-- API keys by the SHA-256 of the key.
CREATE TABLE api_keys (
    key_hash bytea PRIMARY KEY,
    id uuid NOT NULL UNIQUE,
    org_id uuid NOT NULL,
    name text NOT NULL,
    scopes text[] NOT NULL,
    prefix text NOT NULL,
    created_at text NOT NULL,
    expires_at text,
    revoked_at text
);
CREATE INDEX api_keys_by_organization ON api_keys (org_id, id);

-- Records as the bytes the API serves (byte-exact ETags).
CREATE TABLE records (
    org_id uuid NOT NULL,
    collection text COLLATE "C" NOT NULL,
    id uuid NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (org_id, collection, id)
);

-- One row per index entry: a record holding `value` in `index_name`, at
-- `position` (created_at, updated_at or the sort value).
CREATE TABLE index_entries (
    org_id uuid NOT NULL,
    collection text COLLATE "C" NOT NULL,
    index_name text COLLATE "C" NOT NULL,
    value bytea NOT NULL,
    position bigint NOT NULL,
    id uuid NOT NULL,
    PRIMARY KEY (org_id, collection, index_name, value, position, id)
);

-- How many records hold each index value, counted pair and update hour,
-- kept in the write transaction; rows at zero are removed.
CREATE TABLE counts (
    org_id uuid NOT NULL,
    collection text COLLATE "C" NOT NULL,
    name text COLLATE "C" NOT NULL,
    value bytea NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (org_id, collection, name, value)
);
