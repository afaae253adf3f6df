-- The sweeper finds in_progress records whose lease ran out, and operators
-- list the unknown ones (`idemproxy records list`, the admin records API),
-- without scanning the whole table.
CREATE INDEX idempotency_records_lease_idx ON idempotency_records (lease_expires_at)
	WHERE state = 'in_progress';
CREATE INDEX idempotency_records_unknown_idx ON idempotency_records (created_at)
	WHERE state = 'unknown';
