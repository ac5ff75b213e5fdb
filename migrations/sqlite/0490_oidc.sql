-- OpenID Connect sign-in (issue 25, items 1-3).
--
-- A person who signs in through the identity provider is keyed by (issuer, subject), never by
-- e-mail: an address can be reassigned at the IdP, a subject cannot.
CREATE TABLE user_identities (
    issuer        TEXT NOT NULL,
    subject       TEXT NOT NULL,
    user_id       TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at    BIGINT NOT NULL,
    last_login_at BIGINT NOT NULL,
    PRIMARY KEY (issuer, subject)
);
CREATE INDEX user_identities_user ON user_identities (user_id);

-- Where a membership came from: `manual` (made in Trellis: CLI, workspace creation, the members
-- API) or `oidc` (made by the group mappings). The sign-in sync adds, changes and removes only
-- `oidc` rows, so a membership someone granted by hand survives the IdP's groups.
ALTER TABLE workspace_members ADD COLUMN source TEXT NOT NULL DEFAULT 'manual';

-- Sign-ins in flight: one row per redirect to the IdP, consumed by the callback exactly once.
-- `state_digest` and `browser_digest` are SHA-256 of the random `state` and of the browser's
-- binding cookie; the PKCE verifier is sealed under the master key bound to the state digest.
CREATE TABLE oidc_login_attempts (
    state_digest   TEXT PRIMARY KEY,
    browser_digest TEXT NOT NULL,
    nonce          TEXT NOT NULL,
    code_verifier  TEXT NOT NULL,
    redirect       TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL
);
CREATE INDEX oidc_login_attempts_expiry ON oidc_login_attempts (expires_at);
