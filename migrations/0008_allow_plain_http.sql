-- A BMC reached over plain http:// receives its password in the clear, so it is allowed only where the operator
-- says so, server by server. Existing http:// servers stop at their next BMC call with an error naming
-- bmc_address until the operator sets it (or moves the BMC to https://).
ALTER TABLE servers ADD COLUMN allow_plain_http boolean NOT NULL DEFAULT false;
