-- Events out (spec §2.7–2.9, §3.3, §6): webhook endpoints, external integrations and the
-- delivery log both feed from the event outbox.

-- A webhook endpoint. `events` is a JSON array of event types (["*"] = all). The signing
-- secret is sealed under the master key; during a rotation's grace period the previous one
-- signs too.
CREATE TABLE webhook_endpoints (
    id                      TEXT PRIMARY KEY,
    workspace_id            TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    url                     TEXT NOT NULL,
    description             TEXT,
    events                  TEXT NOT NULL,
    secret_sealed           TEXT NOT NULL,
    previous_secret_sealed  TEXT,
    previous_secret_until   BIGINT,
    enabled                 BIGINT NOT NULL DEFAULT 1,
    disabled_reason         TEXT,
    -- The first failed attempt since the last success (auto-disable after days of failure).
    failing_since           BIGINT,
    created_at              BIGINT NOT NULL,
    updated_at              BIGINT NOT NULL
);
CREATE INDEX webhook_endpoints_workspace ON webhook_endpoints (workspace_id, created_at);

-- An external integration (Slack, PagerDuty, …) served by the integration plugin bound to
-- its type; secret members of `config` are sealed like a CA's.
CREATE TABLE external_integrations (
    id                TEXT PRIMARY KEY,
    workspace_id      TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    name              TEXT NOT NULL,
    integration_type  TEXT NOT NULL,
    events            TEXT NOT NULL,
    config            TEXT NOT NULL DEFAULT '{}',
    enabled           BIGINT NOT NULL DEFAULT 1,
    disabled_reason   TEXT,
    failing_since     BIGINT,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL
);
CREATE INDEX external_integrations_workspace ON external_integrations (workspace_id, created_at);

-- One event to one target (webhook endpoint or integration): the exact payload, the state
-- machine of §3.3 and what each attempt learned. A worker holds a delivery through a lease
-- (lease_owner, lease_until) that it renews while the attempt runs; an expired lease is
-- taken over by any replica.
CREATE TABLE webhook_deliveries (
    id                TEXT PRIMARY KEY,
    workspace_id      TEXT NOT NULL,
    target_kind       TEXT NOT NULL,          -- webhook | integration
    target_id         TEXT NOT NULL,
    event_id          TEXT NOT NULL,
    event_type        TEXT NOT NULL,
    payload           TEXT NOT NULL,
    status            TEXT NOT NULL,          -- pending | success | failed
    attempts          BIGINT NOT NULL DEFAULT 0,
    next_attempt_at   BIGINT NOT NULL,
    lease_owner       TEXT,
    lease_until       BIGINT,
    http_status       BIGINT,
    latency_ms        BIGINT,
    error             TEXT,
    reference         TEXT,
    redelivery_of     TEXT,
    created_at        BIGINT NOT NULL,
    first_attempt_at  BIGINT,
    last_attempt_at   BIGINT,
    completed_at      BIGINT,
    duration_ms       BIGINT
);
-- Fan-out is idempotent: one original delivery per (event, target).
CREATE UNIQUE INDEX webhook_deliveries_once ON webhook_deliveries (event_id, target_kind, target_id) WHERE redelivery_of IS NULL;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_recent ON webhook_deliveries (workspace_id, created_at, id);
CREATE INDEX webhook_deliveries_by_target ON webhook_deliveries (target_id, created_at);
