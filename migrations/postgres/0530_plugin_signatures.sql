-- Signed plugins: the instance's trust store of publisher keys (ed25519, wasmsign2 format) and
-- the key that signed each installed version.

CREATE TABLE plugin_signing_keys (
    key_id          TEXT PRIMARY KEY,        -- wasmsign2 default key id, lowercase hex
    name            TEXT NOT NULL,
    public_key_pem  TEXT NOT NULL,
    id_prefixes     TEXT NOT NULL,           -- JSON array of plugin id prefixes
    kinds           TEXT NOT NULL,           -- JSON array of plugin kinds; empty: every kind
    created_at      BIGINT NOT NULL,
    created_by      TEXT NOT NULL,
    revoked_at      BIGINT
);

ALTER TABLE plugin_versions ADD COLUMN signer_key_id TEXT;
CREATE INDEX plugin_versions_signer ON plugin_versions (signer_key_id);
