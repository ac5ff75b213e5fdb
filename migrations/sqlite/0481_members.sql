-- Members API (issue 25): invitations of e-mail addresses that have no user yet, redeemed when
-- a user with that address is created or signs in. Numbered 0481: 0480 is approval_snapshots.

CREATE TABLE workspace_invitations (
    id           TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    email        TEXT NOT NULL,
    role         TEXT NOT NULL,
    invited_by   TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    -- Inviting an address again replaces its invitation.
    UNIQUE (workspace_id, email)
);
-- Redemption looks invitations up by address across workspaces.
CREATE INDEX workspace_invitations_email ON workspace_invitations (email);

-- Removing a member deletes the API keys they made in the workspace.
CREATE INDEX api_keys_created_by ON api_keys (workspace_id, created_by);
