-- Foundation: tenancy, authentication, certificate inventory, audit log, event outbox.
-- Timestamps are BIGINT milliseconds since the Unix epoch; booleans are INTEGER 0/1.

CREATE TABLE workspaces (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    created_by  TEXT,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);

CREATE TABLE users (
    id                   TEXT PRIMARY KEY,
    email                TEXT NOT NULL UNIQUE,
    password_hash        TEXT NOT NULL,
    first_name           TEXT NOT NULL DEFAULT '',
    is_admin             INTEGER NOT NULL DEFAULT 0,
    current_workspace_id TEXT REFERENCES workspaces(id) ON DELETE SET NULL,
    created_at           BIGINT NOT NULL,
    updated_at           BIGINT NOT NULL
);

CREATE TABLE workspace_members (
    workspace_id TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    user_id      TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    role         TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, user_id)
);
CREATE INDEX workspace_members_user ON workspace_members (user_id);

CREATE TABLE sessions (
    token_hash TEXT PRIMARY KEY,
    user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_user ON sessions (user_id);

CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    kind         TEXT NOT NULL,
    key_prefix   TEXT NOT NULL,
    key_hash     TEXT NOT NULL UNIQUE,
    scopes       TEXT NOT NULL,
    created_by   TEXT,
    created_at   BIGINT NOT NULL,
    last_used_at BIGINT
);
CREATE INDEX api_keys_workspace ON api_keys (workspace_id, created_at);

CREATE TABLE machine_identities (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace_id TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    kind         TEXT NOT NULL,
    description  TEXT,
    metadata     TEXT NOT NULL DEFAULT '{}',
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL
);
CREATE INDEX machine_identities_workspace ON machine_identities (workspace_id, created_at);

CREATE TABLE certificates (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace_id         TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    common_name          TEXT NOT NULL,
    issuer               TEXT NOT NULL,
    subject              TEXT NOT NULL,
    serial_number        TEXT NOT NULL,
    not_before           BIGINT NOT NULL,
    expires_at           BIGINT NOT NULL,
    signature_algorithm  TEXT NOT NULL,
    signature_hash       TEXT,
    key_algorithm        TEXT NOT NULL,
    key_size             BIGINT,
    fingerprint_sha256   TEXT NOT NULL,
    usage_category       TEXT NOT NULL,
    subject_alt_names    TEXT NOT NULL DEFAULT '[]',
    is_ca                INTEGER NOT NULL DEFAULT 0,
    issuance_source      TEXT NOT NULL,
    auto_renewal         INTEGER NOT NULL DEFAULT 0,
    location             TEXT,
    metadata             TEXT NOT NULL DEFAULT '{}',
    ca_id                BIGINT,
    machine_identity_id  BIGINT REFERENCES machine_identities(id) ON DELETE SET NULL,
    revoked              INTEGER NOT NULL DEFAULT 0,
    revoked_at           BIGINT,
    revocation_reason    TEXT,
    certificate_pem      TEXT NOT NULL,
    private_key_sealed   TEXT,
    -- When the expiry scanner emitted certificate.expiring / certificate.expired (once each).
    expiring_notified_at BIGINT,
    expired_notified_at  BIGINT,
    created_at           BIGINT NOT NULL,
    updated_at           BIGINT NOT NULL
);
CREATE UNIQUE INDEX certificates_fingerprint ON certificates (workspace_id, fingerprint_sha256);
-- Lists are newest first by id (creation order); the status columns let a filtered page skip
-- rows without reading them.
CREATE INDEX certificates_recent ON certificates (workspace_id, id, revoked, expires_at);
CREATE INDEX certificates_status ON certificates (workspace_id, revoked, expires_at);
-- Certificates whose expiry events are still due: small, and what the expiry scanner reads.
CREATE INDEX certificates_expiry_due ON certificates (expires_at) WHERE revoked = 0 AND expired_notified_at IS NULL;

-- Substring search on commonName and issuer. The trigram tokenizer turns
-- `LIKE '%term%'`-style search into an index lookup for terms of 3+ characters.
CREATE VIRTUAL TABLE certificates_search USING fts5(
    common_name, issuer, content='certificates', content_rowid='id', tokenize='trigram'
);
CREATE TRIGGER certificates_search_insert AFTER INSERT ON certificates BEGIN
    INSERT INTO certificates_search (rowid, common_name, issuer) VALUES (new.id, new.common_name, new.issuer);
END;
CREATE TRIGGER certificates_search_delete AFTER DELETE ON certificates BEGIN
    INSERT INTO certificates_search (certificates_search, rowid, common_name, issuer)
        VALUES ('delete', old.id, old.common_name, old.issuer);
END;
CREATE TRIGGER certificates_search_update AFTER UPDATE OF common_name, issuer ON certificates BEGIN
    INSERT INTO certificates_search (certificates_search, rowid, common_name, issuer)
        VALUES ('delete', old.id, old.common_name, old.issuer);
    INSERT INTO certificates_search (rowid, common_name, issuer) VALUES (new.id, new.common_name, new.issuer);
END;

CREATE TABLE certificate_usage (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace_id   TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    certificate_id BIGINT NOT NULL REFERENCES certificates(id) ON DELETE CASCADE,
    host           TEXT NOT NULL,
    port           BIGINT,
    service        TEXT,
    location       TEXT,
    metadata       TEXT NOT NULL DEFAULT '{}',
    created_at     BIGINT NOT NULL
);
CREATE INDEX certificate_usage_certificate ON certificate_usage (workspace_id, certificate_id, created_at);

-- Append-only: the store has no UPDATE or DELETE statement for this table.
CREATE TABLE audit_logs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace_id TEXT,
    actor_type   TEXT NOT NULL,
    actor_id     TEXT NOT NULL,
    action       TEXT NOT NULL,
    target_type  TEXT NOT NULL,
    target_id    TEXT,
    request_id   TEXT,
    details      TEXT NOT NULL DEFAULT '{}',
    created_at   BIGINT NOT NULL
);
CREATE INDEX audit_logs_workspace ON audit_logs (workspace_id, created_at DESC, id DESC);

-- Events are written here in the same transaction as the change they describe;
-- workers claim rows with a lease (claimed_by / claimed_until) and mark them processed.
CREATE TABLE event_outbox (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace_id  TEXT NOT NULL,
    event_type    TEXT NOT NULL,
    payload       TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    claimed_by    TEXT,
    claimed_until BIGINT,
    processed_at  BIGINT
);
CREATE INDEX event_outbox_pending ON event_outbox (processed_at, id);
