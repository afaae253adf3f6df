-- `expired_keys refuse DURATION`: when a completed record's retention has
-- passed, the sweeper keeps a tombstone of it (state 'expired': scope,
-- fingerprint, status and completed_at; no headers, no body) for
-- tombstone_ms more, so that a retry of its key is refused rather than run
-- again. tombstone_ms is the route's window, written with the response;
-- NULL or 0: the record is deleted at its retention (`expired_keys run`).
-- A tombstone's expires_at is the end of its window.
ALTER TABLE idempotency_records ADD COLUMN tombstone_ms bigint;
ALTER TABLE idempotency_records
	DROP CONSTRAINT idempotency_records_state_check,
	ADD CONSTRAINT idempotency_records_state_check
		CHECK (state IN ('in_progress', 'completed', 'unknown', 'expired'));
