-- Completed jobs leave the hot table. Completing used to UPDATE the row to state 'completed': a new tuple version
-- in the table the lease scan walks, with new entries in its primary key and retention index, and a dead version
-- left behind for vacuum. Now the same statement deletes the row and appends it here, to a table with no unique
-- index and only a BRIN index on the finish time (rows arrive in that order), which retention deletes from.
-- `jobs` keeps only queued and running jobs, so it stays as small as the work in flight.
CREATE TABLE jobs_completed (
    id              bigint      NOT NULL,
    kind            text        NOT NULL,
    payload         jsonb       NOT NULL,
    priority        smallint    NOT NULL,
    attempts        integer     NOT NULL,
    max_attempts    integer     NOT NULL,
    fence           bigint,
    leased_by       text,
    idempotency_key text,
    resource_key    text,
    errors          jsonb       NOT NULL,
    created_at      timestamptz NOT NULL,
    finished_at     timestamptz NOT NULL
);
CREATE INDEX jobs_completed_finished ON jobs_completed USING brin (finished_at);

INSERT INTO jobs_completed
    SELECT id, kind, payload, priority, attempts, max_attempts, fence, leased_by, idempotency_key, resource_key,
           errors, created_at, coalesce(finished_at, now())
    FROM jobs WHERE state = 'completed';
DELETE FROM jobs WHERE state = 'completed';
DROP INDEX jobs_finished;
ALTER TABLE jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_state_check CHECK (state IN ('queued', 'running'));
