-- SQLite's trigram index moves to per-workspace rowid ranges in this version (see
-- migrations/sqlite/0002_search_by_workspace.sql). PostgreSQL's pg_trgm indexes are combined
-- with the workspace condition by the planner already: nothing to change.
SELECT 1;
