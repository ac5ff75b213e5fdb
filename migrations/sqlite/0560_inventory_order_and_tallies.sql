-- The console's inventory sorted by expiry and its dashboard at a million rows (issue 26).

-- Sorting by expiry, soonest or latest first, without a status filter: a walk of this index
-- (its entries end on the rowid, the certificate's id, which breaks ties) that stops after one
-- page. With a status filter, `certificates_status` (workspace_id, revoked, expires_at) already
-- yields that order.
CREATE INDEX certificates_expiry_order ON certificates (workspace_id, expires_at);

-- The dashboard's statistics used to read every row of the workspace (a million rows: about a
-- second on SQLite). These tallies are kept by triggers in the transaction that changes a
-- certificate, so they are never stale: counts per expiry day (UTC, floor of expires_at /
-- 86,400,000) and revocation, and counts per facet. A count up to an instant sums the whole
-- days before it here and counts the rest of its day in `certificates_status`.
CREATE TABLE certificate_expiry_tally (
    workspace_id TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    revoked      INTEGER NOT NULL,
    expiry_day   BIGINT NOT NULL,
    n            BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, revoked, expiry_day)
);
CREATE TABLE certificate_facet_tally (
    workspace_id    TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    auto_renewal    INTEGER NOT NULL,
    usage_category  TEXT NOT NULL,
    issuance_source TEXT NOT NULL,
    key_algorithm   TEXT NOT NULL,
    n               BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, auto_renewal, usage_category, issuance_source, key_algorithm)
);

INSERT INTO certificate_expiry_tally (workspace_id, revoked, expiry_day, n)
    SELECT workspace_id, revoked, (expires_at - (((expires_at % 86400000) + 86400000) % 86400000)) / 86400000, COUNT(*)
    FROM certificates GROUP BY 1, 2, 3;
INSERT INTO certificate_facet_tally (workspace_id, auto_renewal, usage_category, issuance_source, key_algorithm, n)
    SELECT workspace_id, auto_renewal, usage_category, issuance_source, key_algorithm, COUNT(*)
    FROM certificates GROUP BY 1, 2, 3, 4, 5;

CREATE TRIGGER certificates_tally_insert AFTER INSERT ON certificates BEGIN
    INSERT INTO certificate_expiry_tally (workspace_id, revoked, expiry_day, n)
        VALUES (new.workspace_id, new.revoked,
                (new.expires_at - (((new.expires_at % 86400000) + 86400000) % 86400000)) / 86400000, 1)
        ON CONFLICT (workspace_id, revoked, expiry_day) DO UPDATE SET n = n + 1;
    INSERT INTO certificate_facet_tally (workspace_id, auto_renewal, usage_category, issuance_source, key_algorithm, n)
        VALUES (new.workspace_id, new.auto_renewal, new.usage_category, new.issuance_source, new.key_algorithm, 1)
        ON CONFLICT (workspace_id, auto_renewal, usage_category, issuance_source, key_algorithm) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER certificates_tally_delete AFTER DELETE ON certificates BEGIN
    UPDATE certificate_expiry_tally SET n = n - 1
        WHERE workspace_id = old.workspace_id AND revoked = old.revoked
          AND expiry_day = (old.expires_at - (((old.expires_at % 86400000) + 86400000) % 86400000)) / 86400000;
    UPDATE certificate_facet_tally SET n = n - 1
        WHERE workspace_id = old.workspace_id AND auto_renewal = old.auto_renewal AND usage_category = old.usage_category
          AND issuance_source = old.issuance_source AND key_algorithm = old.key_algorithm;
END;
CREATE TRIGGER certificates_tally_update_expiry AFTER UPDATE OF workspace_id, revoked, expires_at ON certificates
WHEN old.workspace_id IS NOT new.workspace_id OR old.revoked IS NOT new.revoked OR old.expires_at IS NOT new.expires_at
BEGIN
    UPDATE certificate_expiry_tally SET n = n - 1
        WHERE workspace_id = old.workspace_id AND revoked = old.revoked
          AND expiry_day = (old.expires_at - (((old.expires_at % 86400000) + 86400000) % 86400000)) / 86400000;
    INSERT INTO certificate_expiry_tally (workspace_id, revoked, expiry_day, n)
        VALUES (new.workspace_id, new.revoked,
                (new.expires_at - (((new.expires_at % 86400000) + 86400000) % 86400000)) / 86400000, 1)
        ON CONFLICT (workspace_id, revoked, expiry_day) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER certificates_tally_update_facets
AFTER UPDATE OF workspace_id, auto_renewal, usage_category, issuance_source, key_algorithm ON certificates
WHEN old.workspace_id IS NOT new.workspace_id OR old.auto_renewal IS NOT new.auto_renewal
  OR old.usage_category IS NOT new.usage_category OR old.issuance_source IS NOT new.issuance_source
  OR old.key_algorithm IS NOT new.key_algorithm
BEGIN
    UPDATE certificate_facet_tally SET n = n - 1
        WHERE workspace_id = old.workspace_id AND auto_renewal = old.auto_renewal AND usage_category = old.usage_category
          AND issuance_source = old.issuance_source AND key_algorithm = old.key_algorithm;
    INSERT INTO certificate_facet_tally (workspace_id, auto_renewal, usage_category, issuance_source, key_algorithm, n)
        VALUES (new.workspace_id, new.auto_renewal, new.usage_category, new.issuance_source, new.key_algorithm, 1)
        ON CONFLICT (workspace_id, auto_renewal, usage_category, issuance_source, key_algorithm) DO UPDATE SET n = n + 1;
END;
