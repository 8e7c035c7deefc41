//! The update catalog (`updates`, `update_files`, migrations 0012 and 0016): what IncusOS servers list and fetch through
//! `/1.0/provisioning/updates`. A file's bytes stay where they were published (inside `paths.images_dir`); the
//! rows hold what IncusOS checks them against (size, SHA-256) and where they are.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::{Store, StoreError};

/// A published update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Update {
    pub uuid: Uuid,
    pub version: String,
    pub channels: Vec<String>,
    pub published_at: DateTime<Utc>,
    pub published_by: String,
}

/// One file of an update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct UpdateFile {
    pub filename: String,
    pub size_bytes: i64,
    /// `os` or an application name.
    pub component: String,
    /// IncusOS's update file type (`update-efi`, `application`, ...).
    #[sqlx(rename = "type")]
    pub file_type: String,
    /// `x86_64`, `aarch64`, or empty for any.
    pub architecture: String,
    pub sha256: String,
    /// The path inside the images directory, opened beneath it at every download.
    pub path: String,
    /// What identified the file's bytes when they were last hashed (`racklift_confined::FileStamp`); `None` has
    /// the next download hash it.
    #[serde(skip)]
    pub file_stamp: Option<String>,
}

/// An update to publish with its files; the API has checked every file against its path.
#[derive(Debug, Clone)]
pub struct NewUpdate {
    pub version: String,
    pub channels: Vec<String>,
    pub published_by: String,
    pub files: Vec<UpdateFile>,
}

const UPDATE_COLUMNS: &str = "uuid, version, channels, published_at, published_by";
const FILE_COLUMNS: &str = "filename, size_bytes, component, type, architecture, sha256, path, file_stamp";

impl Store {
    /// Records an update and its files in one transaction; a version published before is a conflict.
    pub async fn publish_update(&self, new: &NewUpdate) -> Result<Update, StoreError> {
        let mut tx = self.pool.begin().await?;
        let update: Update = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "INSERT INTO updates (version, channels, published_by) VALUES ($1, $2, $3) RETURNING {UPDATE_COLUMNS}"
        )))
        .bind(&new.version)
        .bind(&new.channels)
        .bind(&new.published_by)
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::on_unique("update", &new.version))?;
        for f in &new.files {
            let inserted = sqlx::query(
                "INSERT INTO update_files (update_uuid, filename, size_bytes, component, type, architecture, \
                 sha256, path, file_stamp) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(update.uuid)
            .bind(&f.filename)
            .bind(f.size_bytes)
            .bind(&f.component)
            .bind(&f.file_type)
            .bind(&f.architecture)
            .bind(&f.sha256)
            .bind(&f.path)
            .bind(&f.file_stamp)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::on_unique("update file", &f.filename))?;
            if inserted.rows_affected() != 1 {
                return Err(StoreError::NotFound {
                    what: "update",
                    name: new.version.clone(),
                });
            }
        }
        tx.commit().await?;
        Ok(update)
    }

    /// Every update, highest version first, versions compared byte by byte: Operations Center sorts its listing
    /// by the version string, descending, and IncusOS takes the first update of its channel. A version published
    /// late but lower is therefore never the one offered.
    pub async fn updates(&self) -> Result<Vec<Update>, StoreError> {
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {UPDATE_COLUMNS} FROM updates ORDER BY version COLLATE \"C\" DESC"
        )))
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn update(&self, uuid: Uuid) -> Result<Option<Update>, StoreError> {
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {UPDATE_COLUMNS} FROM updates WHERE uuid = $1"
        )))
        .bind(uuid)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// The files of an update by name; empty when the update does not exist.
    pub async fn update_files(&self, uuid: Uuid) -> Result<Vec<UpdateFile>, StoreError> {
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {FILE_COLUMNS} FROM update_files WHERE update_uuid = $1 ORDER BY filename"
        )))
        .bind(uuid)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Records what identifies an update file's bytes now, after they were hashed again and still matched.
    pub async fn restamp_update_file(
        &self,
        uuid: Uuid,
        filename: &str,
        file_stamp: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE update_files SET file_stamp = $3 WHERE update_uuid = $1 AND filename = $2")
            .bind(uuid)
            .bind(filename)
            .bind(file_stamp)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn update_file(&self, uuid: Uuid, filename: &str) -> Result<Option<UpdateFile>, StoreError> {
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {FILE_COLUMNS} FROM update_files WHERE update_uuid = $1 AND filename = $2"
        )))
        .bind(uuid)
        .bind(filename)
        .fetch_optional(&self.pool)
        .await?)
    }
}
