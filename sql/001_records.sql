-- One row per scope (actor, operation, key): the claim, its lease and
-- fencing generation, and the stored response once completed.
CREATE TABLE idempotency_records (
	actor text NOT NULL,
	operation text NOT NULL,
	idem_key text NOT NULL,
	fingerprint bytea NOT NULL,
	state text NOT NULL CHECK (state IN ('in_progress', 'completed', 'unknown')),
	lease_owner text,
	lease_expires_at timestamptz,
	generation bigint NOT NULL DEFAULT 1,
	response_status integer,
	response_headers text,
	response_body bytea,
	body_omitted boolean NOT NULL DEFAULT false,
	created_at timestamptz NOT NULL DEFAULT now(),
	completed_at timestamptz,
	expires_at timestamptz,
	PRIMARY KEY (actor, operation, idem_key)
);

-- The sweeper deletes completed records past expires_at.
CREATE INDEX idempotency_records_expires_idx ON idempotency_records (expires_at)
	WHERE state = 'completed';
