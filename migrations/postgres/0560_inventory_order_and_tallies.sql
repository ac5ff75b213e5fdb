-- The console's inventory sorted by expiry and its dashboard at a million rows (issue 26).

-- Sorting by expiry, soonest or latest first (ties by id), walks this index and stops after
-- one page.
CREATE INDEX certificates_expiry_order ON certificates (workspace_id, expires_at, id);

-- The dashboard's statistics used to read every row of the workspace. These tallies are kept
-- by a trigger in the transaction that changes a certificate, so they are never stale: counts
-- per expiry day (UTC, floor of expires_at / 86,400,000) and revocation, and counts per facet.
-- A count up to an instant sums the whole days before it here and counts the rest of its day
-- in `certificates_status`.
CREATE TABLE certificate_expiry_tally (
    workspace_id TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    revoked      BIGINT NOT NULL,
    expiry_day   BIGINT NOT NULL,
    n            BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, revoked, expiry_day)
);
CREATE TABLE certificate_facet_tally (
    workspace_id    TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    auto_renewal    BIGINT NOT NULL,
    usage_category  TEXT NOT NULL,
    issuance_source TEXT NOT NULL,
    key_algorithm   TEXT NOT NULL,
    n               BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, auto_renewal, usage_category, issuance_source, key_algorithm)
);

INSERT INTO certificate_expiry_tally (workspace_id, revoked, expiry_day, n)
    SELECT workspace_id, revoked, floor(expires_at / 86400000.0)::BIGINT, COUNT(*)
    FROM certificates GROUP BY 1, 2, 3;
INSERT INTO certificate_facet_tally (workspace_id, auto_renewal, usage_category, issuance_source, key_algorithm, n)
    SELECT workspace_id, auto_renewal, usage_category, issuance_source, key_algorithm, COUNT(*)
    FROM certificates GROUP BY 1, 2, 3, 4, 5;

-- PostgreSQL has concurrent writers: two transactions that each change certificates of
-- several expiry days could lock tally rows in opposite orders and deadlock. A transaction
-- therefore takes its workspace's tally lock (transaction-scoped advisory lock) before it
-- touches any tally row of that workspace; certificate writes of one workspace serialize from
-- their first certificate change to their commit.
CREATE FUNCTION certificates_tally() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('certificate_tally:' || OLD.workspace_id, 0));
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('certificate_tally:' || NEW.workspace_id, 0));
    END IF;
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND (OLD.workspace_id, OLD.revoked, OLD.expires_at)
                                                IS DISTINCT FROM (NEW.workspace_id, NEW.revoked, NEW.expires_at)) THEN
        UPDATE certificate_expiry_tally SET n = n - 1
            WHERE workspace_id = OLD.workspace_id AND revoked = OLD.revoked
              AND expiry_day = floor(OLD.expires_at / 86400000.0)::BIGINT;
    END IF;
    IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND (OLD.workspace_id, OLD.revoked, OLD.expires_at)
                                                IS DISTINCT FROM (NEW.workspace_id, NEW.revoked, NEW.expires_at)) THEN
        INSERT INTO certificate_expiry_tally (workspace_id, revoked, expiry_day, n)
            VALUES (NEW.workspace_id, NEW.revoked, floor(NEW.expires_at / 86400000.0)::BIGINT, 1)
            ON CONFLICT (workspace_id, revoked, expiry_day) DO UPDATE SET n = certificate_expiry_tally.n + 1;
    END IF;
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND
        (OLD.workspace_id, OLD.auto_renewal, OLD.usage_category, OLD.issuance_source, OLD.key_algorithm)
        IS DISTINCT FROM (NEW.workspace_id, NEW.auto_renewal, NEW.usage_category, NEW.issuance_source, NEW.key_algorithm)) THEN
        UPDATE certificate_facet_tally SET n = n - 1
            WHERE workspace_id = OLD.workspace_id AND auto_renewal = OLD.auto_renewal
              AND usage_category = OLD.usage_category AND issuance_source = OLD.issuance_source
              AND key_algorithm = OLD.key_algorithm;
    END IF;
    IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND
        (OLD.workspace_id, OLD.auto_renewal, OLD.usage_category, OLD.issuance_source, OLD.key_algorithm)
        IS DISTINCT FROM (NEW.workspace_id, NEW.auto_renewal, NEW.usage_category, NEW.issuance_source, NEW.key_algorithm)) THEN
        INSERT INTO certificate_facet_tally (workspace_id, auto_renewal, usage_category, issuance_source, key_algorithm, n)
            VALUES (NEW.workspace_id, NEW.auto_renewal, NEW.usage_category, NEW.issuance_source, NEW.key_algorithm, 1)
            ON CONFLICT (workspace_id, auto_renewal, usage_category, issuance_source, key_algorithm)
            DO UPDATE SET n = certificate_facet_tally.n + 1;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER certificates_tally AFTER INSERT OR DELETE OR UPDATE OF workspace_id, revoked, expires_at,
    auto_renewal, usage_category, issuance_source, key_algorithm ON certificates
    FOR EACH ROW EXECUTE FUNCTION certificates_tally();
