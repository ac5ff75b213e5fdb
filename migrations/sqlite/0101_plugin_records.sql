-- Contract 0.2 scopes plugin state and keystore keys to (plugin, workspace, record).
-- Rows written by 0.1 plugins keep an empty record id: their scope stays workspace-wide.
ALTER TABLE plugin_state RENAME TO plugin_state_v1;

CREATE TABLE plugin_state (
    plugin_id     TEXT NOT NULL,
    workspace_id  TEXT NOT NULL,
    record_id     TEXT NOT NULL DEFAULT '',
    state_key     TEXT NOT NULL,
    value         BLOB NOT NULL,             -- sealed under the master key, bound to the row's scope and key
    updated_at    BIGINT NOT NULL,
    PRIMARY KEY (plugin_id, workspace_id, record_id, state_key)
);

INSERT INTO plugin_state (plugin_id, workspace_id, record_id, state_key, value, updated_at)
    SELECT plugin_id, workspace_id, '', state_key, value, updated_at FROM plugin_state_v1;
DROP TABLE plugin_state_v1;

-- Private keys the host holds for plugins (trellis:plugin/keystore); never readable by them.
CREATE TABLE plugin_keys (
    plugin_id     TEXT NOT NULL,
    workspace_id  TEXT NOT NULL,
    record_id     TEXT NOT NULL,
    label         TEXT NOT NULL,
    algorithm     TEXT NOT NULL,
    sealed        TEXT NOT NULL,             -- PKCS#8, sealed under the master key bound to scope and label
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (plugin_id, workspace_id, record_id, label)
);

-- ACME HTTP-01 answers connectors present (trellis:plugin/challenge-solver), served by every
-- replica's challenge listener; removed by the plugin or after an hour.
CREATE TABLE acme_http01_answers (
    token              TEXT PRIMARY KEY,
    key_authorization  TEXT NOT NULL,
    domain             TEXT NOT NULL,
    plugin_id          TEXT NOT NULL,
    workspace_id       TEXT NOT NULL,
    record_id          TEXT NOT NULL,
    presented_at       BIGINT NOT NULL
);
CREATE INDEX acme_http01_answers_scope ON acme_http01_answers (plugin_id, workspace_id, record_id);
