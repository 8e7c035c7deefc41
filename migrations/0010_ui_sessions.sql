-- Dashboard sessions. Logging in with an API token makes a row here, and the browser's cookie carries only a
-- random 256-bit id, of which this table keeps the SHA-256: neither the cookie nor a leaked table holds a usable
-- API token. A session ends when it expires, when it is logged out (the row is deleted), when its API token is
-- revoked (the cascade), expires or changes role (checked at every lookup), or is re-keyed under its name.
CREATE TABLE ui_sessions (
    id_sha256     bytea       PRIMARY KEY,
    api_token_id  bigint      NOT NULL REFERENCES api_tokens (id) ON DELETE CASCADE,
    -- The token's role at login: a session whose token has since changed role is over.
    role          text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    -- Refreshed at most once a minute, so a dashboard polling every few seconds is not a write per poll.
    last_seen     timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX ui_sessions_api_token ON ui_sessions (api_token_id);
CREATE INDEX ui_sessions_expires ON ui_sessions (expires_at);
