-- Since 0005 a finished job leaves `jobs` in the statement that finishes it (to `jobs_completed` or
-- `dead_letters`, which keep their own finish times), so nothing writes `jobs.finished_at` any more.
ALTER TABLE jobs DROP COLUMN finished_at;
