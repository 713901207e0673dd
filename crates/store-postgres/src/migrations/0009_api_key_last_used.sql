-- When each API key last authenticated a request (RFC 3339 text, as the
-- key's other times): NULL until its first use. Each host notes a key's
-- use at most once a minute, off the request path. Written to run again on
-- a schema that has it (as 0007 and 0008 are), for a database whose
-- recorded version was set back.
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS last_used_at text;
