-- idx_idempotency_stats_window serves `idemguard stats --since`, which reads the keys created in
-- its window (created_at >= now - since) and, of each, status, attempt_count, expires_at and
-- completed_at. Without it every run reads the whole table.
--
-- Deliberate choices:
--   * Covering: the index holds every column the stats query reads, so the query is a range read
--     of the index alone ("Using index"), never of the rows with their JSON responses. With the
--     default 24h TTL most of the table is inside a 24h window; a plain index on created_at would
--     then lose to a full scan (MariaDB 10.11 scanned the table for any window over ~10% of 1M
--     rows), while a range of this index is ~10x less to read (49 MB vs 422 MB of rows at 1M
--     rows, measured; docs/SCALING.md).
--   * The cost: one more index entry per claim, and an update of it on each commit (status,
--     expires_at and completed_at change), as idx_idempotency_status_heartbeat already has.
--     Heartbeats do not touch it.
--   * InnoDB builds a secondary index online (ALGORITHM=INPLACE, LOCK=NONE) on MySQL 8 and
--     MariaDB: claims go on while it builds. On Galera the DDL runs in total order isolation and
--     holds writes on every node while it builds; see docs/SCALING.md.

-- +goose Up
CREATE INDEX idx_idempotency_stats_window ON idempotency_keys (created_at, status, attempt_count, expires_at, completed_at);

-- +goose Down
DROP INDEX idx_idempotency_stats_window ON idempotency_keys;
