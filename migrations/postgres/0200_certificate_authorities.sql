-- Certificate authorities of a workspace (spec §2.1). Each is served by the connector plugin
-- bound to its type; secret members of `config` are sealed under the master key.
CREATE TABLE certificate_authorities (
    id               BIGSERIAL PRIMARY KEY,
    workspace_id     TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    ca_type          TEXT NOT NULL,
    description      TEXT,
    url              TEXT,
    status           TEXT NOT NULL,
    health_status    TEXT NOT NULL,
    issuer_patterns  TEXT NOT NULL DEFAULT '[]',
    config           TEXT NOT NULL DEFAULT '{}',   -- secret members replaced by {"$sealed": "..."}
    last_sync        BIGINT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);
CREATE INDEX certificate_authorities_recent ON certificate_authorities (workspace_id, id);
CREATE INDEX certificates_by_ca ON certificates (workspace_id, ca_id);

-- The issuing chain stored with certificates the service issued (intermediates, PEM).
ALTER TABLE certificates ADD COLUMN chain_pem TEXT;

-- Internal CAs (host pki-core): certificate and sealed PKCS#8 key. The key never leaves the
-- host and is never returned. No foreign key on purpose: deleting the CA record stops its
-- issuance, but its CRL and OCSP keep answering for what it issued (CA ids are never reused).
CREATE TABLE internal_authorities (
    ca_id            BIGINT PRIMARY KEY,
    workspace_id     TEXT NOT NULL,
    certificate_pem  TEXT NOT NULL,
    key_sealed       TEXT NOT NULL,
    key_algorithm    TEXT,
    parent_ca_id     BIGINT,
    created_at       BIGINT NOT NULL
);

-- Every certificate an internal CA signed, kept for CRL, OCSP and discovery even when the
-- inventory record or the CA record is deleted. Times in seconds.
CREATE TABLE internal_issued (
    id               BIGSERIAL PRIMARY KEY,
    ca_id            BIGINT NOT NULL,
    workspace_id     TEXT NOT NULL,
    serial_number    TEXT NOT NULL,
    certificate_pem  TEXT NOT NULL,
    not_after        BIGINT NOT NULL,
    issued_at        BIGINT NOT NULL,
    revoked_at       BIGINT,
    revocation_reason TEXT
);
CREATE UNIQUE INDEX internal_issued_serial ON internal_issued (ca_id, serial_number);
CREATE INDEX internal_issued_revoked ON internal_issued (ca_id, revoked_at) WHERE revoked_at IS NOT NULL;
CREATE INDEX internal_issued_workspace_revoked ON internal_issued (workspace_id, id) WHERE revoked_at IS NOT NULL;

-- Issuance policies of a workspace: each names a policy type (served by an issuance-policy
-- plugin) and its configuration; every issuance runs the enabled ones in position order.
CREATE TABLE issuance_policies (
    id               BIGSERIAL PRIMARY KEY,
    workspace_id     TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    policy_type      TEXT NOT NULL,
    config           TEXT NOT NULL DEFAULT '{}',
    position         BIGINT NOT NULL DEFAULT 0,
    enabled          BIGINT NOT NULL DEFAULT 1,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);
CREATE INDEX issuance_policies_order ON issuance_policies (workspace_id, position, id);

-- What renewal needs of a certificate issued here: its template, its CSR (renewing a
-- caller-held key reuses it), its renewal window, and the renewal's bookkeeping (a claim lease so one replica
-- renews, the successor, the last failure).
ALTER TABLE certificates ADD COLUMN issuance_template TEXT;
ALTER TABLE certificates ADD COLUMN csr_pem TEXT;
ALTER TABLE certificates ADD COLUMN renewed_by_id BIGINT;
ALTER TABLE certificates ADD COLUMN renewal_claimed_at BIGINT;
ALTER TABLE certificates ADD COLUMN renewal_error TEXT;
-- How long before expiry renewal starts (the template's window when issued), milliseconds.
ALTER TABLE certificates ADD COLUMN renew_before_ms BIGINT;
CREATE INDEX certificates_renewal_due ON certificates (expires_at) WHERE auto_renewal = 1 AND revoked = 0 AND ca_id IS NOT NULL AND renewed_by_id IS NULL;

-- Approval-gated issuance: the request as submitted, its state, who decided.
CREATE TABLE certificate_requests (
    id               BIGSERIAL PRIMARY KEY,
    workspace_id     TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    ca_id            BIGINT NOT NULL,
    status           TEXT NOT NULL,              -- pending, approved, issued, rejected, failed
    request          TEXT NOT NULL,              -- the issue body (JSON), CSR included
    common_name      TEXT,
    reasons          TEXT NOT NULL DEFAULT '[]', -- why approval is needed (policy reasons)
    requested_by     TEXT NOT NULL,
    decided_by       TEXT,
    decided_at       BIGINT,
    decision_reason  TEXT,
    certificate_id   BIGINT,
    error            TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);
CREATE INDEX certificate_requests_recent ON certificate_requests (workspace_id, id);

-- Custom certificate templates of a workspace (the built-ins are in code).
CREATE TABLE certificate_templates (
    id               BIGSERIAL PRIMARY KEY,
    workspace_id     TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    body             TEXT NOT NULL,              -- the template's settings (JSON)
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);
CREATE UNIQUE INDEX certificate_templates_name ON certificate_templates (workspace_id, name);

-- Discovery scans (ca_certs here; tls_endpoints with the connectors). A running scan beats
-- its heartbeat; one whose heartbeat stops (the process died) is taken over and rerun.
CREATE TABLE discovery_scans (
    id               BIGSERIAL PRIMARY KEY,
    workspace_id     TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    scan_type        TEXT NOT NULL,
    ca_id            BIGINT,
    status           TEXT NOT NULL,              -- pending, running, completed, failed, cancelled
    found            BIGINT NOT NULL DEFAULT 0,
    new_count        BIGINT NOT NULL DEFAULT 0,
    updated_count    BIGINT NOT NULL DEFAULT 0,
    failed_count     BIGINT NOT NULL DEFAULT 0,
    error            TEXT,
    requested_by     TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    started_at       BIGINT,
    finished_at      BIGINT,
    heartbeat_at     BIGINT
);
CREATE INDEX discovery_scans_recent ON discovery_scans (workspace_id, id);
CREATE INDEX discovery_scans_open ON discovery_scans (status, heartbeat_at) WHERE status IN ('pending', 'running');

-- Revocations waiting for approval (certificates whose template requires it).
CREATE TABLE revocation_requests (
    id               BIGSERIAL PRIMARY KEY,
    workspace_id     TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    certificate_id   BIGINT NOT NULL REFERENCES certificates(id) ON DELETE CASCADE,
    reason           TEXT NOT NULL,
    status           TEXT NOT NULL,              -- pending, approved, rejected, failed
    requested_by     TEXT NOT NULL,
    decided_by       TEXT,
    decided_at       BIGINT,
    decision_reason  TEXT,
    error            TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);
CREATE INDEX revocation_requests_recent ON revocation_requests (workspace_id, id);
CREATE UNIQUE INDEX revocation_requests_one_pending ON revocation_requests (certificate_id) WHERE status = 'pending';
