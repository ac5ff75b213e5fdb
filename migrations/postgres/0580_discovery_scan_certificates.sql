-- What each discovery scan found, one row per certificate: written by the import in the
-- transaction that creates or updates the certificate, so a known certificate a scan saw again
-- without changing it is listed too (audit rows and usage records only exist for changes).
-- outcome: new (the scan added it), updated (it changed a known one: revoked, linked a CA),
-- unchanged (it saw a known one again as it was). A scan seeing one certificate twice keeps the
-- strongest outcome (new > updated > unchanged).
-- Rows go with their scan (scans go only with their workspace) and with their certificate
-- (deleting a certificate deletes it outright): a deleted certificate is no longer listed.
CREATE TABLE discovery_scan_certificates (
    workspace_id   TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    scan_id        BIGINT NOT NULL REFERENCES discovery_scans(id) ON DELETE CASCADE,
    certificate_id BIGINT NOT NULL REFERENCES certificates(id) ON DELETE CASCADE,
    outcome        TEXT NOT NULL CHECK (outcome IN ('new', 'updated', 'unchanged')),
    created_at     BIGINT NOT NULL,
    -- Also the paged listing's index: a scan's rows by certificate id.
    PRIMARY KEY (scan_id, certificate_id)
);
-- Deleting a certificate finds its rows here rather than scanning the table.
CREATE INDEX discovery_scan_certificates_certificate ON discovery_scan_certificates (certificate_id);
