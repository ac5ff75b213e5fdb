-- TPM attestation (spec §2.3–2.6, §3.4, §4.3): devices and their enrolled keys, attestation
-- policies, single-use nonces, pending AK enrollments, per-workspace TPM vendor roots and the
-- attestation history. Binary TPM structures are stored base64 (TEXT) in both dialects.

CREATE TABLE iot_devices (
    id                BIGSERIAL PRIMARY KEY,
    workspace_id      TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    name              TEXT NOT NULL,
    device_type       TEXT,
    serial            TEXT,
    description       TEXT,
    status            TEXT NOT NULL,        -- registered | enrolled | attested | failed | disabled
    ak_public         TEXT,                 -- TPMT_PUBLIC, base64
    ak_name           TEXT,                 -- hex
    ek_public         TEXT,
    ek_certificate    TEXT,                 -- DER, base64
    ek_chain          TEXT NOT NULL DEFAULT '[]',
    ek_manufacturer   TEXT,
    last_clock        TEXT,                 -- JSON TPMS_CLOCK_INFO of the last passing quote
    enrolled_at       BIGINT,
    last_attested_at  BIGINT,
    metadata          TEXT NOT NULL DEFAULT '{}',
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL
);
CREATE INDEX iot_devices_recent ON iot_devices (workspace_id, id);
CREATE UNIQUE INDEX iot_devices_serial ON iot_devices (workspace_id, serial) WHERE serial IS NOT NULL;

CREATE TABLE attestation_policies (
    id                           BIGSERIAL PRIMARY KEY,
    workspace_id                 TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    name                         TEXT NOT NULL,
    description                  TEXT,
    device_type                  TEXT,
    expected_pcrs                TEXT NOT NULL,
    required_pcr_banks           TEXT NOT NULL,
    required_pcrs                TEXT NOT NULL,
    allowed_ek_manufacturers     TEXT NOT NULL,
    max_attestation_age_seconds  BIGINT NOT NULL,
    require_bound_csr_key        BIGINT NOT NULL,
    require_secure_boot          BIGINT NOT NULL,
    enabled                      BIGINT NOT NULL,
    created_at                   BIGINT NOT NULL,
    updated_at                   BIGINT NOT NULL
);
CREATE INDEX attestation_policies_workspace ON attestation_policies (workspace_id, id);

-- A nonce is consumed by a conditional UPDATE (consumed_at IS NULL), so exactly one of any
-- number of concurrent submissions (on any replica) wins it.
CREATE TABLE attestation_nonces (
    nonce         TEXT PRIMARY KEY,             -- 64 hex characters
    workspace_id  TEXT NOT NULL,
    device_id     BIGINT NOT NULL,
    purpose       TEXT NOT NULL,                -- attestation | ak_enrollment
    issued_at     BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    consumed_at   BIGINT
);
CREATE INDEX attestation_nonces_expiry ON attestation_nonces (expires_at);

-- An AK enrollment waiting for the device to prove it recovered the activation secret.
CREATE TABLE attestation_enrollments (
    device_id        BIGINT PRIMARY KEY,
    workspace_id     TEXT NOT NULL,
    secret_sha256    TEXT NOT NULL,
    ak_public        TEXT NOT NULL,
    ak_name          TEXT NOT NULL,
    ek_public        TEXT NOT NULL,
    ek_certificate   TEXT,
    ek_chain         TEXT NOT NULL,
    ek_manufacturer  TEXT,
    created_at       BIGINT NOT NULL,
    expires_at       BIGINT NOT NULL
);

CREATE TABLE tpm_trust_roots (
    id                  BIGSERIAL PRIMARY KEY,
    workspace_id        TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    name                TEXT NOT NULL,
    certificate_pem     TEXT NOT NULL,
    subject             TEXT NOT NULL,
    manufacturer        TEXT,
    fingerprint_sha256  TEXT NOT NULL,
    not_after           BIGINT NOT NULL,
    created_at          BIGINT NOT NULL
);
CREATE UNIQUE INDEX tpm_trust_roots_unique ON tpm_trust_roots (workspace_id, fingerprint_sha256);

CREATE TABLE attestation_records (
    id               BIGSERIAL PRIMARY KEY,
    workspace_id     TEXT NOT NULL,
    device_id        BIGINT NOT NULL,
    kind             TEXT NOT NULL,             -- provision | tpm | recorded | enrollment
    policy_id        BIGINT,
    passed           BIGINT NOT NULL,
    trust_score      BIGINT NOT NULL,
    failures         TEXT NOT NULL DEFAULT '[]',
    verified_pcrs    TEXT NOT NULL DEFAULT '{}',
    ek_manufacturer  TEXT,
    certificate_id   BIGINT,
    nonce            TEXT,
    claims           TEXT NOT NULL DEFAULT '{}',
    created_at       BIGINT NOT NULL
);
CREATE INDEX attestation_records_device ON attestation_records (workspace_id, device_id, id);
