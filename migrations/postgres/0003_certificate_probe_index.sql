-- SQLite-only probe index (see migrations/sqlite/0003_certificate_probe_index.sql); PostgreSQL
-- plans its searches through pg_trgm and needs nothing here.
SELECT 1;
