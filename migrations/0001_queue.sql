-- The durable job queue (crates/queue) and its dead-letter table.
--
-- Fencing tokens come from one sequence so they only grow: a newer lease always carries a larger token than any
-- older one, for every job and every server (ARCHITECTURE invariants 2 and 3).
CREATE SEQUENCE job_fence_seq AS bigint;

CREATE TABLE jobs (
    id               bigserial   PRIMARY KEY,
    kind             text        NOT NULL,
    payload          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    state            text        NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'running', 'completed')),
    priority         smallint    NOT NULL DEFAULT 0,
    run_at           timestamptz NOT NULL DEFAULT now(),
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 10 CHECK (max_attempts > 0),
    -- The token of the current (or last) lease; every write by a lease holder is conditional on it.
    fence            bigint,
    lease_expires_at timestamptz,
    leased_by        text,
    idempotency_key  text,
    resource_key     text,
    -- Error history, oldest first: [{"attempt", "at", "error", "class"}].
    errors           jsonb       NOT NULL DEFAULT '[]'::jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);

-- While a job is live, enqueueing the same idempotency key returns it instead of adding another.
CREATE UNIQUE INDEX jobs_idempotency_live ON jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state IN ('queued', 'running');
-- At most one live job per resource (a server, a cluster): enforced here, not by a lock in a process.
CREATE UNIQUE INDEX jobs_resource_live ON jobs (resource_key)
    WHERE resource_key IS NOT NULL AND state IN ('queued', 'running');
-- The lease scan: due jobs by priority, then age.
CREATE INDEX jobs_due ON jobs (priority DESC, run_at, id) WHERE state = 'queued';
-- The rescuer's scan for leases whose holder went away.
CREATE INDEX jobs_lease_expiry ON jobs (lease_expires_at) WHERE state = 'running';
-- Retention of completed rows.
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE state = 'completed';

CREATE TABLE dead_letters (
    id               bigserial   PRIMARY KEY,
    job_id           bigint      NOT NULL,
    kind             text        NOT NULL,
    payload          jsonb       NOT NULL,
    priority         smallint    NOT NULL,
    idempotency_key  text,
    resource_key     text,
    attempts         integer     NOT NULL,
    max_attempts     integer     NOT NULL,
    fence            bigint,
    -- Why it died: 'exhausted' (attempts spent), 'fatal' (non-retryable), 'lease_expired' (rescuer) or a caller's word.
    reason           text        NOT NULL,
    error_class      text,
    first_error      text,
    last_error       text,
    errors           jsonb       NOT NULL DEFAULT '[]'::jsonb,
    -- Domain context supplied by the caller: server, state, Redfish message id, last observed facts.
    context          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    job_created_at   timestamptz NOT NULL,
    dead_at          timestamptz NOT NULL DEFAULT now(),
    triage_status    text        NOT NULL DEFAULT 'open'
                                 CHECK (triage_status IN ('open', 'retried', 'discarded', 'resolved')),
    triaged_by       text,
    triage_note      text,
    triaged_at       timestamptz
);

CREATE INDEX dead_letters_open ON dead_letters (dead_at DESC) WHERE triage_status = 'open';
CREATE INDEX dead_letters_kind ON dead_letters (kind, dead_at DESC);
