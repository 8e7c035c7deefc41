-- What a registering IncusOS says about itself and proves with its TLS session, and the certificates racklift
-- trusts when it calls servers afterwards.
--
-- IncusOS sends Operations Center's whole `ServerPost`: besides its name and address, the SMBIOS product UUID
-- and the machine-id it read (empty when it could not). Both are kept on the server (and in `registration`),
-- as the identity Operations Center matches a returning server by. The client certificate of the registration
-- (Incus' own `server.crt`) is kept whole: it authenticates the server's later `PUT :self` calls, and it is the
-- certificate a standalone server's Incus API serves, so racklift pins exactly it.
ALTER TABLE servers
    ADD COLUMN system_uuid                text,
    ADD COLUMN machine_id                 text,
    ADD COLUMN client_certificate_der     bytea,
    -- Set by an operator's repin: the next connection records the certificate the server then serves.
    ADD COLUMN incus_repin_requested_at   timestamptz;

-- The system UUID the BMC reported when the deployment was requested, kept apart from a hostname the seed
-- names: IncusOS registers under its hostname, else that UUID, else its machine-id.
ALTER TABLE deployments
    ADD COLUMN bmc_system_uuid text;

-- The certificate every member of a clustered Incus serves (its `cluster.crt`), pinned for calls to members.
ALTER TABLE clusters
    ADD COLUMN certificate_sha256 text;
