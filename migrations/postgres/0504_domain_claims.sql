-- Domain claims: the names a workspace may have ACME challenge answers presented for. A claim
-- is verified by a TXT record holding its token, or assigned by an instance administrator; a
-- verified domain belongs to one workspace at a time (the partial unique index).
CREATE TABLE domain_claims (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    domain TEXT NOT NULL,
    token TEXT NOT NULL,
    verified_at BIGINT,
    method TEXT,
    created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX domain_claims_workspace_domain ON domain_claims (workspace_id, domain);
CREATE UNIQUE INDEX domain_claims_verified_domain ON domain_claims (domain) WHERE verified_at IS NOT NULL;
