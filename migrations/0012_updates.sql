-- racklift's client identity and the update catalog IncusOS servers fetch from.

-- One row: the certificate racklift hands to IncusOS at registration (the server adds it to Incus's trusted
-- certificates) and presents to each server's Incus API. Generated once by whichever process asks first
-- (INSERT ... ON CONFLICT DO NOTHING, then read back), so every API and worker instance uses the same identity.
CREATE TABLE client_identity (
    id               boolean     PRIMARY KEY DEFAULT true CHECK (id),
    certificate_pem  text        NOT NULL,
    key_pem          text        NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now()
);

-- A published update: what `GET /1.0/provisioning/updates` lists, newest first.
CREATE TABLE updates (
    uuid          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- IncusOS versions are timestamps (202611010000); compared as text by IncusOS too.
    version       text        NOT NULL UNIQUE CHECK (version ~ '^[A-Za-z0-9._-]{1,64}$'),
    channels      text[]      NOT NULL CHECK (cardinality(channels) > 0),
    published_at  timestamptz NOT NULL DEFAULT now(),
    published_by  text        NOT NULL DEFAULT ''
);

CREATE INDEX updates_newest ON updates (published_at DESC, version DESC);

-- Its files. `path` is the canonical path inside paths.images_dir, checked again at every download.
CREATE TABLE update_files (
    update_uuid   uuid   NOT NULL REFERENCES updates (uuid) ON DELETE CASCADE,
    filename      text   NOT NULL CHECK (filename ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$'),
    size_bytes    bigint NOT NULL CHECK (size_bytes >= 0),
    -- 'os' or an application name ('incus', ...).
    component     text   NOT NULL CHECK (component ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    -- IncusOS's update file types (api/images); '' when undefined.
    type          text   NOT NULL,
    -- 'x86_64', 'aarch64', or '' for any.
    architecture  text   NOT NULL CHECK (architecture IN ('', 'x86_64', 'aarch64')),
    sha256        text   NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    path          text   NOT NULL,
    PRIMARY KEY (update_uuid, filename)
);

-- The fingerprint (lower-case hex SHA-256 of the DER) of the Incus client certificate a registered server
-- presented when it registered: it authenticates that server's later calls (update checks).
ALTER TABLE servers ADD COLUMN client_certificate_sha256 text
    CHECK (client_certificate_sha256 ~ '^[0-9a-f]{64}$');
CREATE UNIQUE INDEX servers_client_certificate ON servers (client_certificate_sha256)
    WHERE client_certificate_sha256 IS NOT NULL;
