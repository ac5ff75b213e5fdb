-- An issuance wrote three index entries with random keys: the certificate's fingerprint and, in
-- the CA's ledger, the serial twice, (ca_id, serial_number) and (workspace_id, serial_number).
-- Each costs a B-tree leaf page per issuance in the group commit's WAL (and again at the
-- checkpoint). Revoking an inventory certificate found its ledger row by serial within the
-- workspace through the second; it now goes through the first, for each internal CA of the
-- workspace. `internal_authorities` keeps a CA's row after its record is deleted (migration
-- 0200), so a deleted CA's ledger is still found.
CREATE INDEX internal_authorities_workspace ON internal_authorities (workspace_id);
DROP INDEX internal_issued_by_serial;
