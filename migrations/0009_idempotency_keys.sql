-- Idempotency keys of API requests, remembered for a retention window rather than while their job lives. The
-- jobs' own key (`jobs_idempotency_live`) is unique among queued and running jobs only, so a client retrying
-- after its job had finished made a second one; and a job that finished while concurrent requests raced on its
-- key let a later one through. A request claims its key here, in the transaction that inserts its job: the
-- primary key makes concurrent claimers wait for the first one's commit and then find its job.
CREATE TABLE idempotency_keys (
    -- Whose keys may collide: a key is unique within its scope only (e.g. `bmc-action/<server>`).
    scope        text        NOT NULL,
    key          text        NOT NULL,
    -- A digest of what was asked (server, action, parameters): the same key with another request is refused.
    fingerprint  text        NOT NULL,
    -- The job the request made. NULL only inside the claiming transaction, between the claim and the insert.
    job_id       bigint,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- Until then a retry answers with `job_id`; afterwards the key is free again and the workers prune the row.
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
