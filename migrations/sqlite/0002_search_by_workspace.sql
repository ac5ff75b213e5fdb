-- Substring search stays within the caller's workspace inside the trigram index itself.
--
-- Before, the index held one entry per certificate keyed by its id, for every workspace: a
-- search in a small workspace of a large instance walked the matches of all workspaces until
-- it found a page of its own (a broad term: every certificate of the instance). Now each
-- workspace has a small integer `number`, and a certificate's index rowid is
-- `number * 2^40 + id`: a workspace's entries form one rowid range, which FTS5 seeks to
-- (`rowid BETWEEN`) instead of filtering afterwards. Ids stay below 2^40.
--
-- The index is contentless (content=''): its rowids are no longer the certificates' ids, and
-- it is only ever asked for rowids. Deletes pass the old values, as contentless tables need.

ALTER TABLE workspaces ADD COLUMN number INTEGER;
UPDATE workspaces SET number = (SELECT COUNT(*) FROM workspaces w WHERE w.rowid <= workspaces.rowid);
CREATE UNIQUE INDEX workspaces_number ON workspaces (number);
CREATE TRIGGER workspaces_assign_number AFTER INSERT ON workspaces WHEN new.number IS NULL BEGIN
    UPDATE workspaces SET number = (SELECT COALESCE(MAX(number), 0) + 1 FROM workspaces) WHERE id = new.id;
END;

DROP TRIGGER certificates_search_insert;
DROP TRIGGER certificates_search_delete;
DROP TRIGGER certificates_search_update;
DROP TABLE certificates_search;

CREATE VIRTUAL TABLE certificates_search USING fts5(common_name, issuer, content='', tokenize='trigram');
INSERT INTO certificates_search (rowid, common_name, issuer)
    SELECT w.number * 1099511627776 + c.id, c.common_name, c.issuer
    FROM certificates c JOIN workspaces w ON w.id = c.workspace_id;

CREATE TRIGGER certificates_search_insert AFTER INSERT ON certificates BEGIN
    INSERT INTO certificates_search (rowid, common_name, issuer) VALUES (
        (SELECT number FROM workspaces WHERE id = new.workspace_id) * 1099511627776 + new.id,
        new.common_name, new.issuer);
END;
CREATE TRIGGER certificates_search_delete AFTER DELETE ON certificates BEGIN
    INSERT INTO certificates_search (certificates_search, rowid, common_name, issuer) VALUES ('delete',
        (SELECT number FROM workspaces WHERE id = old.workspace_id) * 1099511627776 + old.id,
        old.common_name, old.issuer);
END;
CREATE TRIGGER certificates_search_update AFTER UPDATE OF common_name, issuer ON certificates BEGIN
    INSERT INTO certificates_search (certificates_search, rowid, common_name, issuer) VALUES ('delete',
        (SELECT number FROM workspaces WHERE id = old.workspace_id) * 1099511627776 + old.id,
        old.common_name, old.issuer);
    INSERT INTO certificates_search (rowid, common_name, issuer) VALUES (
        (SELECT number FROM workspaces WHERE id = new.workspace_id) * 1099511627776 + new.id,
        new.common_name, new.issuer);
END;
