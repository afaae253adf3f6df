-- Lease generations come from one sequence, so a scope never sees the same
-- generation twice, even after its record was deleted (released, swept)
-- and claimed anew: a late write of an earlier owner can never match a
-- later claim of the same scope.
CREATE SEQUENCE idempotency_records_generation_seq;
SELECT setval('idempotency_records_generation_seq',
	coalesce((SELECT max(generation) FROM idempotency_records), 0) + 1);
ALTER TABLE idempotency_records
	ALTER COLUMN generation SET DEFAULT nextval('idempotency_records_generation_seq');
