-- Plugin platform: content-addressed component bytes, installed versions, the active version
-- per plugin, operator grants, per-workspace bindings and per-plugin-per-workspace state.
-- Every replica loads the same bytes from here; compiled code is cached per replica on disk.

CREATE TABLE plugin_components (
    sha256      TEXT PRIMARY KEY,            -- lowercase hex of the bytes
    bytes       BLOB NOT NULL,
    size_bytes  BIGINT NOT NULL,
    created_at  BIGINT NOT NULL
);

CREATE TABLE plugins (
    plugin_id          TEXT PRIMARY KEY,
    kind               TEXT NOT NULL,        -- ca-connector | integration | attestation-verifier
    active_version     TEXT,
    previous_versions  TEXT NOT NULL DEFAULT '[]',  -- JSON array, most recent last (rollback)
    granted_hosts      TEXT NOT NULL DEFAULT '[]',  -- JSON array of host[:port] / *.domain
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL
);

CREATE TABLE plugin_versions (
    plugin_id     TEXT NOT NULL REFERENCES plugins(plugin_id) ON DELETE CASCADE,
    version       TEXT NOT NULL,
    sha256        TEXT NOT NULL REFERENCES plugin_components(sha256),
    wit_version   TEXT NOT NULL,
    info          TEXT NOT NULL,             -- describe() as JSON
    installed_by  TEXT NOT NULL,
    installed_at  BIGINT NOT NULL,
    PRIMARY KEY (plugin_id, version)
);

CREATE TABLE plugin_bindings (
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    kind          TEXT NOT NULL,
    service_type  TEXT NOT NULL,             -- CA type, integration type or attestation check
    plugin_id     TEXT NOT NULL REFERENCES plugins(plugin_id) ON DELETE CASCADE,
    updated_at    BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, kind, service_type)
);

CREATE TABLE plugin_state (
    plugin_id     TEXT NOT NULL,
    workspace_id  TEXT NOT NULL,
    state_key     TEXT NOT NULL,
    value         BLOB NOT NULL,
    updated_at    BIGINT NOT NULL,
    PRIMARY KEY (plugin_id, workspace_id, state_key)
);
