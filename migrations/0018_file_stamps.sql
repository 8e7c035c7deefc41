-- What identified a catalog image's and an update file's bytes when racklift took their SHA-256: device, inode,
-- size, modification and change times (`racklift_confined::FileStamp`, as text). A file whose stamp differs when it
-- is served is hashed again first and served only if it still matches; the stamp is then brought up to date.
-- Null for rows registered before: their first request hashes them.
ALTER TABLE images ADD COLUMN file_stamp text;
ALTER TABLE update_files ADD COLUMN file_stamp text;
