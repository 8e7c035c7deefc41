-- Clusters and their cluster-wide operations (rolling update, rolling reboot).
--
-- A cluster is a set of registered servers that form one Incus cluster (racklift checks that with each member's
-- Incus API when the cluster is created). One cluster-wide operation runs at a time: the partial unique index on
-- live operations enforces it, whichever API instance takes the request. An operation's run (the per-server
-- records of spec 001's `ServerUpdate`, the phase, the health gate) is one JSON document, written by the worker
-- holding the operation's job, fenced on `seq` as a deployment's machine is.
CREATE TABLE clusters (
    name                    text        PRIMARY KEY,
    post_restore_delay_secs bigint      CHECK (post_restore_delay_secs >= 0),
    -- How a member is restored after its reboot: 'default' (Incus moves its instances back and starts them) or
    -- 'skip' (the member comes back Online and its instances stay where the evacuation put them).
    restore_mode            text        NOT NULL DEFAULT 'default' CHECK (restore_mode IN ('default', 'skip')),
    -- The newest fencing token allowed to mutate the cluster's members through Incus; it only moves forward,
    -- and a worker advances it before every Incus mutation, as a server's BMC fence.
    fence                   bigint      NOT NULL DEFAULT 0,
    created_at              timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE cluster_members (
    cluster  text    NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
    -- A server is in one cluster at most, and cannot be removed while it is in one.
    server   text    NOT NULL UNIQUE REFERENCES servers (name),
    position integer NOT NULL,
    PRIMARY KEY (cluster, server)
);

CREATE TABLE cluster_operations (
    id               bigserial   PRIMARY KEY,
    cluster          text        NOT NULL REFERENCES clusters (name),
    -- 'rolling_update' or 'rolling_reboot'.
    operation        text        NOT NULL CHECK (operation IN ('rolling_update', 'rolling_reboot')),
    status           text        NOT NULL DEFAULT 'running'
                                 CHECK (status IN ('running', 'paused', 'completed', 'failed', 'canceled')),
    run              jsonb       NOT NULL,
    seq              bigint      NOT NULL DEFAULT 0,
    -- Why the operation paused, failed or was canceled; the server and step it ended on.
    status_reason    text,
    failed_server    text,
    failed_step      text,
    cancel_requested boolean     NOT NULL DEFAULT false,
    pause_requested  boolean     NOT NULL DEFAULT false,
    idempotency_key  text,
    requested_by     text        NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);
CREATE UNIQUE INDEX cluster_operations_live ON cluster_operations (cluster)
    WHERE status IN ('running', 'paused');
CREATE UNIQUE INDEX cluster_operations_idempotency ON cluster_operations (cluster, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX cluster_operations_by_cluster ON cluster_operations (cluster, id DESC);

-- The SHA-256 of the certificate a server's Incus API presented at first contact, pinned from then on.
ALTER TABLE servers
    ADD COLUMN incus_certificate_sha256 text;
