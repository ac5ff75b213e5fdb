-- ACME Renewal Information (RFC 9773, issue 9): when a certificate's CA suggests a renewal
-- window, the renewal worker renews at a time picked inside it (`renew_at`, replacing the
-- expiry-minus-window rule) and asks the CA again at `renewal_info_next_check`.
ALTER TABLE certificates ADD COLUMN renew_at BIGINT;
ALTER TABLE certificates ADD COLUMN renewal_info_next_check BIGINT;
