-- Seeded installation media and registration bound to its deployment.
--
-- IncusOS reads its install seed from a tar archive at the start of the image's partition 2. The media server
-- lays each deployment's archive over that spot of the catalog image as it serves it, so an image records where
-- partition 2 starts and how much it holds (read from its partition table when it is registered; an image
-- without room for a seed is refused then). Images registered before have neither and cannot be deployed until
-- registered again.
ALTER TABLE images
    ADD COLUMN seed_offset   bigint,
    ADD COLUMN seed_capacity bigint;

-- The deployment's seed archive, built once when the deployment is created (the same bytes, and so the same
-- ETag, for every range any API instance serves); the token in its provider.yaml that registers this deployment
-- and no other; the hostname IncusOS will register with when the seed names one (its network config), or the
-- BMC's system UUID, which IncusOS uses otherwise; and when the registration came.
ALTER TABLE deployments
    ADD COLUMN seed_archive       bytea,
    ADD COLUMN registration_token text,
    ADD COLUMN expected_hostname  text,
    ADD COLUMN registered_at      timestamptz;
CREATE UNIQUE INDEX deployments_registration_token ON deployments (registration_token)
    WHERE registration_token IS NOT NULL;

-- Where racklift reaches the registered server's Incus API (what IncusOS sends as `connection_url`).
ALTER TABLE servers
    ADD COLUMN connection_url text;
