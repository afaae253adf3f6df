-- The request that claimed the record (the owner, or the one that took it
-- over): its X-Request-Id and the trace id of its traceparent, NULL when it
-- had none (or was claimed before these columns). A replay's log line names
-- them, so a log line, a record and a trace can be joined.
ALTER TABLE idempotency_records ADD COLUMN request_id text, ADD COLUMN trace_id text;
