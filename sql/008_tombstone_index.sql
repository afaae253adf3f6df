-- idemproxy: no transaction
-- The sweeper deletes tombstones past the end of their window (expires_at)
-- without scanning the table. Built concurrently, like 003's indexes.
CREATE INDEX CONCURRENTLY IF NOT EXISTS idempotency_records_tombstone_idx
	ON idempotency_records (expires_at) WHERE state = 'expired';
