-- The worker pool sleeps until the earliest queued job of its kinds is due, rather than a blind poll interval, so
-- a snoozed wait step runs when its condition is next worth checking and not up to a poll period later. This index
-- answers "earliest run_at" by walking from the front.
CREATE INDEX jobs_next_due ON jobs (run_at) WHERE state = 'queued';
