-- newOrder counts an account's pending, unexpired authorizations (the pending-authorization
-- limit). The only index by account was (account_id, identifier_type, identifier), so the count
-- read every authorization the account ever had: linear in its history. This one answers it
-- from the index alone.
CREATE INDEX acme_authorizations_pending ON acme_authorizations (account_id, status, expires_at);
