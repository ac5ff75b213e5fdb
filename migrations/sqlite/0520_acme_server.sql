-- Trellis as an ACME server (RFC 8555), one directory per CA. Every object of the protocol is
-- here, never only in a replica's memory, so replicas on one database answer the same client.

-- A CA's directory settings (absent row: the directory is off).
CREATE TABLE acme_directories (
    ca_id                       BIGINT PRIMARY KEY,
    workspace_id                TEXT NOT NULL,
    enabled                     BIGINT NOT NULL,
    external_account_required   BIGINT NOT NULL,
    default_template            TEXT,
    profiles                    TEXT NOT NULL,      -- JSON {name: templateId}
    challenge_types             TEXT NOT NULL,      -- JSON ["http-01", ...]
    order_lifetime_seconds      BIGINT NOT NULL,
    updated_at                  BIGINT NOT NULL
);

-- Nonces are consumed by one conditional DELETE: exactly once across replicas.
CREATE TABLE acme_nonces (
    nonce       TEXT PRIMARY KEY,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX acme_nonces_expiry ON acme_nonces (expires_at);

-- External account binding keys; the MAC key is sealed under the master key.
CREATE TABLE acme_eab_keys (
    id              TEXT PRIMARY KEY,
    workspace_id    TEXT NOT NULL,
    ca_id           BIGINT NOT NULL,
    name            TEXT NOT NULL,
    key_id          TEXT NOT NULL UNIQUE,
    hmac_sealed     TEXT NOT NULL,      -- base64 of the sealed key
    account_id      TEXT,
    revoked_at      BIGINT,
    created_at      BIGINT NOT NULL
);
CREATE INDEX acme_eab_keys_workspace ON acme_eab_keys (workspace_id, created_at);

CREATE TABLE acme_accounts (
    id              TEXT PRIMARY KEY,
    workspace_id    TEXT NOT NULL,
    ca_id           BIGINT NOT NULL,
    thumbprint      TEXT NOT NULL,      -- RFC 7638, base64url
    jwk             TEXT NOT NULL,
    status          TEXT NOT NULL,
    contact         TEXT NOT NULL,      -- JSON array
    eab_key_id      TEXT,
    created_at      BIGINT NOT NULL
);
-- One account per key per directory.
CREATE UNIQUE INDEX acme_accounts_key ON acme_accounts (ca_id, thumbprint);
CREATE INDEX acme_accounts_workspace ON acme_accounts (workspace_id, created_at);

CREATE TABLE acme_orders (
    id              TEXT PRIMARY KEY,
    workspace_id    TEXT NOT NULL,
    ca_id           BIGINT NOT NULL,
    account_id      TEXT NOT NULL,
    status          TEXT NOT NULL,
    identifiers     TEXT NOT NULL,      -- JSON [{type, value}]
    authorizations  TEXT NOT NULL,      -- JSON [authz id]
    profile         TEXT,
    not_before      TEXT,
    not_after       TEXT,
    expires_at      BIGINT NOT NULL,
    error           TEXT,               -- JSON problem
    certificate_id  BIGINT,
    certificate_pem TEXT,               -- leaf then chain
    fingerprint     TEXT,               -- SHA-256 of the leaf's DER, hex (revokeCert finds it)
    request_id      TEXT,               -- the certificate request left pending or for approval
    created_at      BIGINT NOT NULL
);
CREATE INDEX acme_orders_account ON acme_orders (account_id, created_at);
CREATE INDEX acme_orders_fingerprint ON acme_orders (ca_id, fingerprint);

CREATE TABLE acme_authorizations (
    id              TEXT PRIMARY KEY,
    ca_id           BIGINT NOT NULL,
    account_id      TEXT NOT NULL,
    identifier_type TEXT NOT NULL,
    identifier      TEXT NOT NULL,
    wildcard        BIGINT NOT NULL,
    status          TEXT NOT NULL,
    expires_at      BIGINT NOT NULL,
    created_at      BIGINT NOT NULL
);
CREATE INDEX acme_authorizations_reuse ON acme_authorizations (account_id, identifier_type, identifier);

CREATE TABLE acme_challenges (
    id              TEXT PRIMARY KEY,
    authz_id        TEXT NOT NULL,
    kind            TEXT NOT NULL,
    token           TEXT NOT NULL,
    status          TEXT NOT NULL,
    validated_at    BIGINT,
    error           TEXT,               -- JSON problem
    updated_at      BIGINT NOT NULL
);
CREATE INDEX acme_challenges_authz ON acme_challenges (authz_id);
CREATE INDEX acme_challenges_status ON acme_challenges (status, updated_at);
