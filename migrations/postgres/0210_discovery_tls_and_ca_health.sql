-- tls_endpoints discovery scans: the targets as given (JSON array), progress over the expanded
-- endpoints, and the first per-target failures (JSON array of {target, message}).
ALTER TABLE discovery_scans ADD COLUMN targets TEXT NOT NULL DEFAULT '[]';
ALTER TABLE discovery_scans ADD COLUMN total_targets BIGINT;
ALTER TABLE discovery_scans ADD COLUMN done_targets BIGINT NOT NULL DEFAULT 0;
ALTER TABLE discovery_scans ADD COLUMN failures TEXT NOT NULL DEFAULT '[]';
CREATE INDEX discovery_scans_by_type ON discovery_scans (workspace_id, scan_type, id);

-- The periodic CA health check: when a replica last claimed each CA (a lease per interval, so
-- two replicas never probe one CA in the same interval).
ALTER TABLE certificate_authorities ADD COLUMN health_checked_at BIGINT;
CREATE INDEX certificate_authorities_health_due ON certificate_authorities (health_checked_at);
