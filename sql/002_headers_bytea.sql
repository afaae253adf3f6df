-- Response headers are stored as bytes: an HTTP header value may hold
-- obs-text (bytes 0x80-0xFF) that is not valid UTF-8.
ALTER TABLE idempotency_records
	ALTER COLUMN response_headers TYPE bytea USING convert_to(response_headers, 'UTF8');
