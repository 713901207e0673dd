-- The host's documents: webhook subscriptions, the batch each has in
-- flight and its delivery log. Every host reads and writes them; `version`
-- moves on each write, so a write names the version it read and loses to
-- any other host that wrote first. Small and shared: a Citus reference
-- table, like `settings`.
CREATE TABLE IF NOT EXISTS documents (
    kind text NOT NULL,
    id text NOT NULL,
    version bigint NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (kind, id)
);
