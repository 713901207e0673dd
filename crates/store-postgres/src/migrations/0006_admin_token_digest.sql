-- The admin token is kept as its SHA-256 only: the hosts compare digests,
-- and a replica's user, a backup or a Citus worker (`settings` is a
-- reference table there) must not yield the token itself. The hosts used
-- the token copied from a sled deployment (`esr migrate`, as text) when
-- there was one, else `esradm_` and the hex of the 32 random bytes the
-- first host stored; the hosts' copies in `<data-dir>/admin-token` keep
-- working.
INSERT INTO settings (name, value)
SELECT 'secret/admin-token-sha256', sha256(value)
FROM settings WHERE name = 'secret/admin-token-text'
ON CONFLICT (name) DO NOTHING;

INSERT INTO settings (name, value)
SELECT 'secret/admin-token-sha256', sha256(convert_to('esradm_' || encode(value, 'hex'), 'UTF8'))
FROM settings WHERE name = 'secret/admin-token'
ON CONFLICT (name) DO NOTHING;

DELETE FROM settings WHERE name IN ('secret/admin-token', 'secret/admin-token-text');
