-- Fill idempotency_records with :n records shaped like real ones (psql -v
-- n=COUNT), in one INSERT ... SELECT, oldest first, so that row i was
-- created i seconds after the first and expires with it:
--   * actor "h:user-N" (100,000 users), four operations, a UUID-shaped key,
--     a 32-byte fingerprint, a generation from the sequence's range;
--   * stored headers of about 300 bytes (Content-Type, Location, ETag,
--     Last-Modified, X-Request-Id, Cache-Control);
--   * a JSON body of about 200 bytes, and for one record in 20 a 4 KiB
--     body of hex digits (stored out of line, in TOAST);
--   * states: 1 in 1,000 in_progress (a live lease), 1 in 1,000 unknown,
--     the rest completed; the oldest tenth of the completed ones past
--     their retention (what the sweeper deletes), the rest valid for a day.
INSERT INTO idempotency_records (actor, operation, idem_key, fingerprint, state,
	lease_owner, lease_expires_at, generation, response_status, response_headers,
	response_body, body_omitted, created_at, completed_at, expires_at)
SELECT 'h:user-' || (i % 100000),
	(ARRAY['orders.create', 'payments.capture', 'items.create', 'refunds.create'])[1 + i % 4],
	substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-4' || substr(h, 14, 3) || '-a' ||
		substr(h, 18, 3) || '-' || substr(h, 21, 12),
	sha256(int8send(i)),
	st,
	CASE WHEN st = 'in_progress' THEN 'host-1:4242:' || (i % 4) END,
	CASE WHEN st = 'in_progress' THEN now() + interval '1 hour' END,
	i,
	CASE WHEN st = 'completed' THEN 201 END,
	CASE WHEN st = 'completed' THEN convert_to(
		E'Content-Type: application/json; charset=utf-8\r\n' ||
		'Location: /api/orders/' || h || E'\r\n' ||
		'ETag: "' || md5(h) || E'"\r\n' ||
		E'Last-Modified: Tue, 01 Dec 2026 10:00:00 GMT\r\n' ||
		'X-Request-Id: ' || md5(h || 'r') || E'\r\n' ||
		E'Cache-Control: no-store, private\r\n' ||
		'X-Trace: 00-' || md5(h || 't') || '-' || substr(md5(h || 's'), 1, 16) || E'-01\r\n',
		'UTF8') END,
	CASE WHEN st <> 'completed' THEN NULL
		WHEN i % 20 = 0 THEN convert_to((SELECT string_agg(md5(h || g), '')
			FROM generate_series(1, 128) g), 'UTF8')
		ELSE convert_to('{"id":"' || h || '","status":"created","amount":' ||
			(i % 100000) || ',"currency":"EUR","customer":"user-' || (i % 100000) ||
			'","items":' || (1 + i % 9) || ',"note":"' || repeat('x', 40 + i % 40) ||
			'"}', 'UTF8') END,
	false,
	t0 + i * interval '1 second',
	CASE WHEN st = 'completed' THEN t0 + i * interval '1 second' END,
	CASE WHEN st <> 'completed' THEN NULL
		WHEN i <= :n / 10 THEN now() - interval '1 minute'
		ELSE now() + interval '1 day' END
FROM (SELECT i, md5(i::text) AS h,
		CASE WHEN i % 1000 = 1 THEN 'in_progress' WHEN i % 1000 = 2 THEN 'unknown'
			ELSE 'completed' END AS st,
		now() - interval '2 days' AS t0
	FROM generate_series(1, :n) AS i) AS s;
SELECT setval('idempotency_records_generation_seq', :n + 1);
