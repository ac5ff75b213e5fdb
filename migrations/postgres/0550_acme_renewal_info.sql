-- ACME Renewal Information (RFC 9773) on Trellis's ACME server.

-- The issued leaf's ARI certID (base64url(AKI keyIdentifier) "." base64url(serial)), computed
-- once when the order gets its certificate, so `GET renewalInfo/{certID}` is one indexed lookup
-- confined to the directory's CA.
ALTER TABLE acme_orders ADD COLUMN cert_id TEXT;
-- The certID a newOrder's `replaces` named (RFC 9773 §5).
ALTER TABLE acme_orders ADD COLUMN replaces TEXT;
CREATE INDEX acme_orders_cert_id ON acme_orders (ca_id, cert_id);
-- A certificate is replaced once: at most one order naming it that is not `invalid` (a failed
-- replacement frees it for the next). Enforced here, so two replicas racing on newOrder cannot
-- both succeed.
CREATE UNIQUE INDEX acme_orders_replaces_once ON acme_orders (ca_id, replaces)
    WHERE replaces IS NOT NULL AND status <> 'invalid';
