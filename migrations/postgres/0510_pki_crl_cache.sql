-- The public /pki endpoints' cache of each internal CA's signed CRL, and the marker that says
-- when it is stale: `revocations` is bumped in the transaction of every revocation recorded in
-- the CA's ledger, so any replica sharing the database sees a change with one primary-key read.
-- The CRL is kept with the `revocations` value it reflects; its number only ever grows (a new CRL
-- replaces the stored one only with a higher number). No foreign key, like `internal_issued`: a
-- deleted CA record's CRL keeps being served.
CREATE TABLE internal_crls (
    ca_id            BIGINT PRIMARY KEY,
    revocations      BIGINT NOT NULL DEFAULT 0,
    crl_revision     BIGINT,
    crl_number       BIGINT,
    crl_der          TEXT,           -- base64
    this_update      BIGINT,
    next_update      BIGINT
);

-- Revoking an inventory certificate finds the ledger row of the internal CA that signed it by
-- serial within the workspace, even after the CA record (and the certificate's link to it) is gone.
CREATE INDEX internal_issued_by_serial ON internal_issued (workspace_id, serial_number);
