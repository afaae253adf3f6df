-- Load completed records into idempotency_records, one INSERT ... SELECT
-- (psql -v n=COUNT). Sizes follow what a real record holds: a 36-character
-- UUID-shaped key, a 32-byte fingerprint, the stored headers and a JSON body
-- of a few hundred bytes; actors spread over 10,000 users and keys over four
-- operations. The records are valid for 24 h, so none is swept or taken over
-- during the benchmark, and none collides with the benchmark's own keys.
INSERT INTO idempotency_records (actor, operation, idem_key, fingerprint, state,
	generation, response_status, response_headers, response_body, body_omitted,
	created_at, completed_at, expires_at)
SELECT 'user-' || (i % 10000),
	(ARRAY['orders.create', 'payments.capture', 'items.create', 'refunds.create'])[1 + i % 4],
	substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-' || substr(h, 13, 4) || '-' ||
		substr(h, 17, 4) || '-' || substr(h, 21, 12),
	sha256(int8send(i)),
	'completed', 1, 201,
	convert_to(E'Content-Type: application/json\r\nLocation: /api/items/' || i || E'\r\n', 'UTF8'),
	convert_to('{"id":"' || h || '","status":"created","amount":' || (i % 100000) ||
		',"currency":"EUR","customer":"user-' || (i % 10000) ||
		'","description":"' || repeat('x', 120 + (i % 200)) || '"}', 'UTF8'),
	false,
	now() - interval '1 hour', now() - interval '1 hour', now() + interval '24 hours'
FROM (SELECT i, md5(i::text) AS h FROM generate_series(1, :n) AS i) AS s;
