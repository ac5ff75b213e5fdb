-- The trigram index takes a transaction's new certificates at its commit, not one by one.
--
-- FTS5 writes its pending terms out as a new segment at every savepoint, and the group-commit
-- writer opens one per job: a batch of 32 issuances wrote 32 one-row segments and merged them.
-- Now inserting a certificate only notes its id in `certificates_search_pending`; the store
-- indexes every noted row with one statement before the transaction commits (`Tx::commit_tx`,
-- `SEARCH_PENDING_FLUSH` in crates/store/src/certificates.rs), so other connections never see
-- a committed certificate missing from the index.
--
-- A noted row is not in the index yet: deleting it only forgets the note, and changing its
-- names needs nothing (the flush reads the row as it is then). Passing a contentless index
-- the old values of a row it does not hold would corrupt it.

CREATE TABLE certificates_search_pending (id INTEGER PRIMARY KEY);

DROP TRIGGER certificates_search_insert;
DROP TRIGGER certificates_search_delete;
DROP TRIGGER certificates_search_update;

CREATE TRIGGER certificates_search_insert AFTER INSERT ON certificates BEGIN
    INSERT INTO certificates_search_pending (id) VALUES (new.id);
END;
CREATE TRIGGER certificates_search_delete AFTER DELETE ON certificates BEGIN
    INSERT INTO certificates_search (certificates_search, rowid, common_name, issuer)
        SELECT 'delete', (SELECT number FROM workspaces WHERE id = old.workspace_id) * 1099511627776 + old.id,
               old.common_name, old.issuer
        WHERE NOT EXISTS (SELECT 1 FROM certificates_search_pending WHERE id = old.id);
    DELETE FROM certificates_search_pending WHERE id = old.id;
END;
CREATE TRIGGER certificates_search_update AFTER UPDATE OF common_name, issuer ON certificates
WHEN NOT EXISTS (SELECT 1 FROM certificates_search_pending WHERE id = old.id) BEGIN
    INSERT INTO certificates_search (certificates_search, rowid, common_name, issuer) VALUES ('delete',
        (SELECT number FROM workspaces WHERE id = old.workspace_id) * 1099511627776 + old.id,
        old.common_name, old.issuer);
    INSERT INTO certificates_search (rowid, common_name, issuer) VALUES (
        (SELECT number FROM workspaces WHERE id = new.workspace_id) * 1099511627776 + new.id,
        new.common_name, new.issuer);
END;
