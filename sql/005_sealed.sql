-- With body_encryption, response_headers and response_body hold AES-256-GCM
-- sealed blobs and response_sealed names the key that sealed them; NULL: the
-- record is plaintext (written before encryption was turned on, or by an
-- operator's resolve).
ALTER TABLE idempotency_records ADD COLUMN response_sealed text;
