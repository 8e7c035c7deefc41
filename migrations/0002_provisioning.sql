-- Provisioning: servers and their BMCs, the catalog a deployment is resolved from (tokens, seeds, BIOS profiles,
-- images, settings), deployments with their event log and media read progress, and the API's bearer tokens.

CREATE TABLE api_tokens (
    id             bigserial   PRIMARY KEY,
    name           text        NOT NULL UNIQUE,
    -- Only the digest is kept: a leaked table does not leak usable tokens.
    secret_sha256  bytea       NOT NULL UNIQUE,
    role           text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE settings (
    key         text        PRIMARY KEY,
    value       jsonb       NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE servers (
    name              text        PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    bmc_address       text        NOT NULL DEFAULT '',
    bmc_username      text        NOT NULL DEFAULT '',
    -- Credentials by reference ('env:NAME' or 'file:PATH'): the database never holds a BMC password.
    bmc_password_ref  text,
    -- SHA-256 pin of the BMC's certificate or SPKI, for the self-signed certificates BMCs ship with.
    bmc_cert_pin      text,
    -- Explicit opt-out of TLS verification; logged at every use.
    bmc_insecure      boolean     NOT NULL DEFAULT false,
    vendor_hint       text,
    status            text        NOT NULL DEFAULT 'unregistered'
                                  CHECK (status IN ('unregistered', 'deploying', 'registered', 'failed')),
    status_detail     text        NOT NULL DEFAULT '',
    -- The newest fencing token allowed to mutate this server's BMC (ARCHITECTURE invariant 3).
    fence             bigint      NOT NULL DEFAULT 0,
    registered_at     timestamptz,
    registration      jsonb,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE provisioning_tokens (
    token           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    description     text        NOT NULL DEFAULT '',
    uses_remaining  integer     NOT NULL CHECK (uses_remaining >= 0),
    expires_at      timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE token_seeds (
    token           uuid        NOT NULL REFERENCES provisioning_tokens (token) ON DELETE CASCADE,
    name            text        NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    public          boolean     NOT NULL DEFAULT false,
    -- {"force_reboot": bool, ...}: what the installation media is generated with.
    install_config  jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (token, name)
);

CREATE TABLE bios_profiles (
    name                 text        PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    -- Which servers it applies to: {"vendor": "dell", "name_prefix": "rack1-"}; empty matches every server.
    match_rules          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- Later (higher) priorities override earlier ones attribute by attribute.
    priority             integer     NOT NULL DEFAULT 0,
    attributes           jsonb       NOT NULL DEFAULT '{}'::jsonb,
    deferred_attributes  jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- Secure-boot allow lists: {"db": ["<sha256>", ...], "dbx": [...]}.
    secure_boot          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE images (
    id            bigserial   PRIMARY KEY,
    type          text        NOT NULL,
    architecture  text        NOT NULL,
    channel       text        NOT NULL,
    path          text        NOT NULL,
    size_bytes    bigint      NOT NULL CHECK (size_bytes >= 0),
    sha256        text        NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (type, architecture, channel)
);

CREATE TABLE deployments (
    id               bigserial   PRIMARY KEY,
    server           text        NOT NULL REFERENCES servers (name) ON DELETE CASCADE,
    -- The unguessable part of the media URL.
    media_secret     text        NOT NULL UNIQUE,
    image_id         bigint      NOT NULL REFERENCES images (id),
    token            uuid        NOT NULL,
    seed             text        NOT NULL,
    -- racklift_deploy::Plan, snapshotted at request time (BIOS profiles included), plus the selected media slot.
    plan             jsonb       NOT NULL,
    media_slot       jsonb,
    -- racklift_deploy::Machine; `state` and `seq` mirror it for indexes and fenced updates.
    machine          jsonb       NOT NULL,
    state            text        NOT NULL,
    seq              bigint      NOT NULL DEFAULT 0,
    cancel           jsonb,
    idempotency_key  text,
    last_facts       jsonb,
    last_error       jsonb,
    requested_by     text        NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);

-- One running deployment per server.
CREATE UNIQUE INDEX deployments_live ON deployments (server) WHERE finished_at IS NULL;
CREATE UNIQUE INDEX deployments_idempotency ON deployments (server, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX deployments_server ON deployments (server, id DESC);

CREATE TABLE server_events (
    id             bigserial   PRIMARY KEY,
    server         text        NOT NULL,
    deployment_id  bigint,
    at             timestamptz NOT NULL DEFAULT now(),
    -- 'requested', 'transition', 'bmc_call', 'observation', 'registered', 'cancel_requested', 'failed', ...
    kind           text        NOT NULL,
    fence          bigint,
    detail         jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX server_events_server ON server_events (server, id);
CREATE INDEX server_events_deployment ON server_events (deployment_id, id) WHERE deployment_id IS NOT NULL;

-- Distinct byte ranges of a deployment's image served to one source address, merged; any API instance adds to it.
CREATE TABLE media_reads (
    deployment_id  bigint      NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
    source         text        NOT NULL,
    ranges         jsonb       NOT NULL DEFAULT '[]'::jsonb,
    bytes_read     bigint      NOT NULL DEFAULT 0,
    last_read_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (deployment_id, source)
);
