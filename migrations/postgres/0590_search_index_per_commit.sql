-- SQLite-only (see migrations/sqlite/0590_search_index_per_commit.sql): PostgreSQL's pg_trgm
-- index is updated with each row and needs nothing here.
SELECT 1;
