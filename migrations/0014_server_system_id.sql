-- The Redfish ComputerSystem a server is, on BMCs that list several in /redfish/v1/Systems (a DPU or a baseboard
-- System beside the host): its Id, the last segment of its URI ("1", "System.Embedded.1", "System_0"). NULL lets
-- racklift choose: the only System, else the only one that could be the host; a deploy is refused when neither
-- exists.
ALTER TABLE servers ADD COLUMN system_id text
    CHECK (system_id IS NULL OR system_id ~ '^[A-Za-z0-9._~-]{1,64}$');
