-- Dead-letter triage: the facts operators filter and group dead letters by, the indexes that keep those queries
-- fast with many rows, and the record of who did what to a dead letter and why.

-- The filter keys, extracted once when a row is written. Stored generated columns rather than expressions over
-- `context` because `context` carries the last observed facts and is often large enough to be TOASTed: every
-- `context->>'…'` in a scan or a GROUP BY would de-TOAST the row, while these columns sit in the heap tuple and in
-- the indexes below (so the group counts are an index-only scan). The queue keeps writing `context` and never
-- names them.
--
-- operation: what kind of work died ('deployment', 'bmc_action', later 'rolling_reboot' / 'rolling_update').
--   Jobs dead-lettered by the rescuer carry no context, so the job kind stands in for it.
-- server: the server the work was for; the resource key 'server/<name>' stands in where the context has none.
-- failed_state: the deployment state the work failed in.
-- message_id: the Redfish MessageId of the last BMC error.
ALTER TABLE dead_letters
    ADD COLUMN operation text GENERATED ALWAYS AS (
        coalesce(context ->> 'operation',
                 CASE kind WHEN 'deployment.step' THEN 'deployment' WHEN 'bmc.action' THEN 'bmc_action' END)
    ) STORED,
    ADD COLUMN server text GENERATED ALWAYS AS (
        coalesce(context ->> 'server', payload ->> 'server',
                 CASE WHEN resource_key LIKE 'server/%' THEN substr(resource_key, 8) END)
    ) STORED,
    ADD COLUMN failed_state text GENERATED ALWAYS AS (context ->> 'state') STORED,
    ADD COLUMN message_id text GENERATED ALWAYS AS (context -> 'last_error' ->> 'message_id') STORED;

-- A dead letter may also end canceled: its deployment was canceled from the triage view.
ALTER TABLE dead_letters DROP CONSTRAINT dead_letters_triage_status_check;
ALTER TABLE dead_letters ADD CONSTRAINT dead_letters_triage_status_check
    CHECK (triage_status IN ('open', 'retried', 'discarded', 'resolved', 'canceled'));

-- The list is keyset-paginated on (dead_at DESC, id DESC); `id` breaks ties between rows dead in the same
-- microsecond. Open rows are what operators look at, so each filter gets a partial index on them that is already
-- in list order: a filtered page is a short index range scan, not a scan and sort of every open row.
CREATE INDEX dead_letters_open_page ON dead_letters (dead_at DESC, id DESC) WHERE triage_status = 'open';
CREATE INDEX dead_letters_open_operation ON dead_letters (operation, dead_at DESC, id DESC)
    WHERE triage_status = 'open';
CREATE INDEX dead_letters_open_class ON dead_letters (error_class, dead_at DESC, id DESC)
    WHERE triage_status = 'open';
CREATE INDEX dead_letters_open_message ON dead_letters (message_id, dead_at DESC, id DESC)
    WHERE triage_status = 'open';
CREATE INDEX dead_letters_open_state ON dead_letters (failed_state, dead_at DESC, id DESC)
    WHERE triage_status = 'open';
-- Also answers the vendor filter (servers of a vendor, then their dead letters) and the per-server look-ups.
CREATE INDEX dead_letters_open_server ON dead_letters (server, dead_at DESC, id DESC)
    WHERE triage_status = 'open';
-- Triaged rows are listed far less often; one index keeps their pages ordered.
CREATE INDEX dead_letters_status_page ON dead_letters (triage_status, dead_at DESC, id DESC);
-- The group counts: every grouping key (the vendor comes from `server`) plus `dead_at` for the age filter, so
-- counting the open rows reads this index alone, already sorted by the group keys.
CREATE INDEX dead_letters_open_groups ON dead_letters (operation, error_class, message_id, failed_state, server)
    INCLUDE (dead_at) WHERE triage_status = 'open';
-- Superseded by dead_letters_open_page, which also orders ties.
DROP INDEX dead_letters_open;

-- Every triage action, kept after the dead letter is triaged (and after it is purged): who (the API token's name
-- and role), what, why, and what it led to. A bulk retry writes one 'bulk_retry' row and one 'retry' row per item
-- pointing at it.
CREATE TABLE triage_actions (
    id              bigserial   PRIMARY KEY,
    dead_letter_id  bigint,
    action          text        NOT NULL CHECK (action IN ('retry', 'discard', 'cancel', 'bulk_retry')),
    actor           text        NOT NULL,
    actor_role      text        NOT NULL,
    reason          text        NOT NULL CHECK (reason <> ''),
    -- From state, job enqueued, deployment, the bulk filter and its counts.
    detail          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    bulk_id         bigint      REFERENCES triage_actions (id),
    at              timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX triage_actions_dead_letter ON triage_actions (dead_letter_id, id) WHERE dead_letter_id IS NOT NULL;
