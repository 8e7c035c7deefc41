-- Update files named as IncusOS's publisher names them: relative paths whose first segment is often the
-- architecture (`x86_64/incus.raw.gz`, `aarch64/IncusOS_<version>.efi.gz`), fetched by IncusOS with the slashes
-- in the URL. Each segment starts with a letter or digit, so no `..`, no leading `/`, no empty segment.
ALTER TABLE update_files DROP CONSTRAINT update_files_filename_check;
ALTER TABLE update_files ADD CONSTRAINT update_files_filename_check CHECK (
    length(filename) <= 255
    AND filename ~ '^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$'
);

-- The catalog is listed newest version first, versions compared byte by byte as Operations Center's Go sort
-- compares them (IncusOS takes the first update of its channel), no longer by publication time.
DROP INDEX updates_newest;
CREATE INDEX updates_by_version ON updates ((version COLLATE "C") DESC);
