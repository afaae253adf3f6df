-- idemproxy: no transaction
-- The sweeper finds in_progress records whose lease ran out, and operators
-- list the unknown ones (`idemproxy records list`, the admin records API),
-- without scanning the whole table. Built concurrently: a live table keeps
-- taking writes while they are built.
CREATE INDEX CONCURRENTLY IF NOT EXISTS idempotency_records_lease_idx
	ON idempotency_records (lease_expires_at) WHERE state = 'in_progress';
CREATE INDEX CONCURRENTLY IF NOT EXISTS idempotency_records_unknown_idx
	ON idempotency_records (created_at) WHERE state = 'unknown';
