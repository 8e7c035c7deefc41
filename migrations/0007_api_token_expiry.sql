-- API tokens made from the CLI may expire: a token handed out for a maintenance window or a script stops working
-- on its own. NULL keeps the tokens made so far valid until they are revoked.
ALTER TABLE api_tokens ADD COLUMN expires_at timestamptz;
