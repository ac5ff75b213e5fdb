-- Issuance that continues in the background (issue 9): a CA that answers "pending" leaves a
-- certificate request in state `issuing` that the poller drives to `issued` or `failed`.
ALTER TABLE certificate_requests ADD COLUMN status_message TEXT;       -- what the CA waits for
ALTER TABLE certificate_requests ADD COLUMN poll_at BIGINT;            -- when to poll next (or the lease's end)
ALTER TABLE certificate_requests ADD COLUMN poll_attempts BIGINT NOT NULL DEFAULT 0;
ALTER TABLE certificate_requests ADD COLUMN issuing_since BIGINT;      -- when the CA accepted the order
ALTER TABLE certificate_requests ADD COLUMN lease_owner TEXT;          -- the poller holding it
-- The CA's reference, the exact issue request, a generated private key: sealed (master key).
ALTER TABLE certificate_requests ADD COLUMN order_sealed TEXT;
ALTER TABLE certificate_requests ADD COLUMN renews_certificate_id BIGINT;
CREATE INDEX certificate_requests_due ON certificate_requests (poll_at) WHERE status = 'issuing';
CREATE INDEX certificate_requests_renewing ON certificate_requests (renews_certificate_id) WHERE status = 'issuing';
