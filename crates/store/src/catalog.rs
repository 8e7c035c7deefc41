//! What a deployment is resolved from: provisioning tokens and their seeds, BIOS profiles, images, settings; and
//! the API's own bearer tokens.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use racklift_deploy::profile_match::MatchRules;

use crate::install_config::InstallConfig;
use crate::{Store, StoreError, sha256_hex};

/// The setting the installation media URL is built from.
pub const PUBLIC_ADDRESS: &str = "public_address";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Operator,
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "viewer" => Some(Role::Viewer),
            "operator" => Some(Role::Operator),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ApiToken {
    pub name: String,
    pub role: Role,
}

/// An API token as listed: everything but its digest, which never leaves the database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiTokenInfo {
    pub name: String,
    pub role: Role,
    pub created_at: DateTime<Utc>,
    /// `None`: valid until revoked.
    pub expires_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct ProvisioningToken {
    pub token: Uuid,
    pub description: String,
    pub uses_remaining: i32,
    pub expires_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    #[serde(default)]
    pub description: String,
    #[schema(minimum = 0)]
    pub uses_remaining: i32,
    /// Must be in the future, and at most 9999-12-31T23:59:59Z.
    #[serde(deserialize_with = "crate::rfc3339::deserialize")]
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Seed {
    pub token: Uuid,
    pub name: String,
    pub public: bool,
    pub install_config: Value,
    pub created_at: DateTime<Utc>,
}

impl Seed {
    /// The server reboots on its own at the end of install stage 1.
    pub fn force_reboot(&self) -> bool {
        self.install_config.get("force_reboot").and_then(Value::as_bool) == Some(true)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSeed {
    #[schema(pattern = r"^[a-z0-9][a-z0-9._-]{0,62}$", example = "rack1-node07")]
    pub name: String,
    #[serde(default)]
    pub public: bool,
    /// What the server's install seed says beyond what racklift fills in (IncusOS's `install.yaml` settings, its
    /// network config and Incus's preseed); `force_reboot` makes the server reboot on its own at the end of
    /// install stage 1.
    #[serde(default)]
    #[schema(value_type = Option<InstallConfig>)]
    pub install_config: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct BiosProfile {
    pub name: String,
    #[schema(value_type = MatchRules)]
    pub match_rules: Value,
    pub priority: i32,
    pub attributes: Value,
    pub deferred_attributes: Value,
    pub secure_boot: Value,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl BiosProfile {
    /// The profile's match rules, typed; an error only for a row written around the API's check (`null` reads as
    /// no rules).
    pub fn rules(&self) -> Result<MatchRules, serde_json::Error> {
        if self.match_rules.is_null() {
            return Ok(MatchRules::default());
        }
        MatchRules::deserialize(&self.match_rules)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewBiosProfile {
    #[schema(pattern = r"^[a-z0-9][a-z0-9._-]{0,62}$", example = "rack1-node07")]
    pub name: String,
    /// Which servers the profile applies to: every key given must hold (no rules: every server). The keys are
    /// the operator's hints (`vendor`, `name_prefix`) and what the BMC reports (`manufacturer`, `model`, `sku`,
    /// `attribute_registry`); an unknown key is refused, naming it.
    #[serde(default)]
    #[schema(value_type = Option<MatchRules>)]
    pub match_rules: Value,
    #[serde(default)]
    pub priority: i32,
    /// BIOS attribute name to a boolean, an integer or a string.
    #[serde(default)]
    #[schema(value_type = Option<HashMap<String, AttributeValue>>)]
    pub attributes: Value,
    /// As `attributes`, applied after the install.
    #[serde(default)]
    #[schema(value_type = Option<HashMap<String, AttributeValue>>)]
    pub deferred_attributes: Value,
    /// Which certificates each UEFI key database allows, on top of the built-in set.
    #[serde(default)]
    #[schema(value_type = Option<SecureBootRules>)]
    pub secure_boot: Value,
}

/// The schema of a BIOS attribute's value (stored as JSON).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum AttributeValue {
    Bool(bool),
    Integer(i64),
    String(String),
}

/// The schema of a BIOS profile's `secure_boot` (stored as JSON): per key database, a list of SHA-256
/// fingerprints to allow, or fingerprints mapped to allow (true), refuse (false) or leave to the built-in set
/// (null).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code, non_snake_case)]
pub struct SecureBootRules {
    #[serde(default)]
    PK: KeyDbRules,
    #[serde(default)]
    KEK: KeyDbRules,
    #[serde(default)]
    db: KeyDbRules,
    #[serde(default)]
    dbx: KeyDbRules,
}

#[derive(Default, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum KeyDbRules {
    #[default]
    #[schema(title = "none")]
    None,
    Allow(Vec<String>),
    Verdicts(std::collections::HashMap<String, Option<bool>>),
}

#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Image {
    pub id: i64,
    #[serde(rename = "type")]
    #[sqlx(rename = "type")]
    pub image_type: String,
    pub architecture: String,
    pub channel: String,
    pub path: String,
    pub size_bytes: i64,
    pub sha256: String,
    /// Byte offset of partition 2, where each deployment's seed is laid over the image; `null` for an image
    /// registered before seeds were (register it again to deploy it).
    pub seed_offset: Option<i64>,
    /// Bytes partition 2 holds.
    pub seed_capacity: Option<i64>,
    /// How a drive must present the image to boot it, from the sector size its partition table was found with.
    #[sqlx(try_from = "String")]
    pub format: ImageFormat,
    pub created_at: DateTime<Utc>,
}

/// The two install media formats IncusOS publishes, told apart by the logical sector size of their GPT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ImageFormat {
    /// 512- or 4096-byte sectors: IncusOS's `.img`, booted from a USB stick (`Usb`).
    Disk,
    /// 2048-byte sectors: IncusOS's `.iso`, booted from a CD/DVD drive (`Cd`).
    Cd,
}

impl ImageFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            ImageFormat::Disk => "disk",
            ImageFormat::Cd => "cd",
        }
    }
}

impl TryFrom<String> for ImageFormat {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        match s.as_str() {
            "disk" => Ok(ImageFormat::Disk),
            "cd" => Ok(ImageFormat::Cd),
            _ => Err(format!("image format {s:?}")),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewImage {
    #[serde(rename = "type")]
    #[schema(pattern = r"^[^\s\u0085]([\s\S]*[^\s\u0085])?$", example = "iso")]
    pub image_type: String,
    #[schema(pattern = r"^[^\s\u0085]([\s\S]*[^\s\u0085])?$", example = "x86_64")]
    pub architecture: String,
    #[schema(pattern = r"^[^\s\u0085]([\s\S]*[^\s\u0085])?$", example = "stable")]
    pub channel: String,
    /// A regular file inside the images directory, absolute or relative to it (422 `outside_images_dir`
    /// otherwise).
    #[schema(
        pattern = r"^[^\s\u0085]([\s\S]*[^\s\u0085])?$",
        example = "incusos-stable.img"
    )]
    pub path: String,
    #[schema(minimum = 0)]
    pub size_bytes: i64,
    /// The file's SHA-256 as its publisher states it, checked against the one racklift computes (422
    /// `sha256_mismatch` naming `sha256` when they differ); racklift's own is recorded either way.
    #[serde(default)]
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub sha256: Option<String>,
}

/// What racklift measured of an image's file when registering it: the digest of the bytes that will be served,
/// what identified them then, and where partition 2 lies.
#[derive(Debug, Clone)]
pub struct ImageFile {
    pub sha256: String,
    /// `racklift_confined::FileStamp` as text; `None` has the first request hash the file.
    pub file_stamp: Option<String>,
    pub format: ImageFormat,
    pub seed_offset: i64,
    pub seed_capacity: i64,
}

fn or_empty(v: &Value) -> Value {
    if v.is_null() {
        Value::Object(Default::default())
    } else {
        v.clone()
    }
}

impl Store {
    // --- API tokens -------------------------------------------------------------------------------------------

    /// Stores the digest of `secret` under `name`; replaces an existing token of that name (and clears its
    /// expiry). For `racklift up`, which re-creates its admin token on every start. A new secret ends the
    /// dashboard sessions made with the old one: that token is gone, whatever its name.
    pub async fn put_api_token(&self, name: &str, secret: &str, role: Role) -> Result<(), StoreError> {
        sqlx::query(
            "WITH rekeyed AS ( \
                 DELETE FROM ui_sessions s USING api_tokens t \
                 WHERE s.api_token_id = t.id AND t.name = $1 AND t.secret_sha256 <> decode($2, 'hex') \
             ) \
             INSERT INTO api_tokens (name, secret_sha256, role) VALUES ($1, decode($2, 'hex'), $3) \
             ON CONFLICT (name) DO UPDATE SET secret_sha256 = excluded.secret_sha256, role = excluded.role, \
             expires_at = NULL",
        )
        .bind(name)
        .bind(sha256_hex(secret.as_bytes()))
        .bind(role.as_str())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Makes a token with a fresh secret and returns the secret: only its digest is stored, so this is the one
    /// time it can be shown. An existing `name` is a `Conflict`, never replaced, so a typo cannot lock out the
    /// holder of the old token. `expires_at` is not checked against the clock: a past one makes a dead token.
    pub async fn create_api_token(
        &self,
        name: &str,
        role: Role,
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<String, StoreError> {
        let secret = crate::new_secret();
        sqlx::query(
            "INSERT INTO api_tokens (name, secret_sha256, role, expires_at) VALUES ($1, decode($2, 'hex'), $3, $4)",
        )
        .bind(name)
        .bind(sha256_hex(secret.as_bytes()))
        .bind(role.as_str())
        .bind(expires_at)
        .execute(&self.pool)
        .await
        .map_err(StoreError::on_unique("api token", name))?;
        Ok(secret)
    }

    /// Every API token, oldest first, expired ones included (they stay until revoked, so an operator sees why a
    /// script stopped working).
    pub async fn list_api_tokens(&self) -> Result<Vec<ApiTokenInfo>, StoreError> {
        #[derive(sqlx::FromRow)]
        struct Row {
            name: String,
            role: String,
            created_at: DateTime<Utc>,
            expires_at: Option<DateTime<Utc>>,
        }
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT name, role, created_at, expires_at FROM api_tokens ORDER BY created_at, name",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                let role =
                    serde_json::from_value(Value::String(r.role)).map_err(|source| StoreError::Corrupt {
                        what: "api token role",
                        source,
                    })?;
                Ok(ApiTokenInfo {
                    name: r.name,
                    role,
                    created_at: r.created_at,
                    expires_at: r.expires_at,
                })
            })
            .collect()
    }

    /// Deletes the token called `name`; `false` when there is none. The API looks tokens up per request, so the
    /// next request with it is refused, and its dashboard sessions go with it (`ON DELETE CASCADE`).
    pub async fn revoke_api_token(&self, name: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM api_tokens WHERE name = $1")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// The token whose secret is `secret`, unless it has expired by the database's clock: one clock for every
    /// API instance, so a token does not work on one and fail on another.
    pub async fn api_token(&self, secret: &str) -> Result<Option<ApiToken>, StoreError> {
        let row: Option<(String, String)> = sqlx::query_as(
            "SELECT name, role FROM api_tokens WHERE secret_sha256 = decode($1, 'hex') \
             AND (expires_at IS NULL OR expires_at > now())",
        )
        .bind(sha256_hex(secret.as_bytes()))
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.and_then(|(name, role)| Role::parse(&role).map(|role| ApiToken { name, role })))
    }

    // --- settings ---------------------------------------------------------------------------------------------

    pub async fn setting(&self, key: &str) -> Result<Option<Value>, StoreError> {
        Ok(sqlx::query_scalar("SELECT value FROM settings WHERE key = $1")
            .bind(key)
            .fetch_optional(&self.pool)
            .await?)
    }

    pub async fn put_setting(&self, key: &str, value: &Value) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO settings (key, value) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = now()",
        )
        .bind(key)
        .bind(value)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    // --- provisioning tokens and seeds ------------------------------------------------------------------------

    pub async fn create_token(&self, new: &NewToken) -> Result<ProvisioningToken, StoreError> {
        Ok(sqlx::query_as(
            "INSERT INTO provisioning_tokens (description, uses_remaining, expires_at) VALUES ($1, $2, $3) \
             RETURNING token, description, uses_remaining, expires_at, created_at",
        )
        .bind(&new.description)
        .bind(new.uses_remaining)
        .bind(new.expires_at)
        .fetch_one(&self.pool)
        .await?)
    }

    pub async fn list_tokens(&self) -> Result<Vec<ProvisioningToken>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT token, description, uses_remaining, expires_at, created_at FROM provisioning_tokens \
             ORDER BY created_at",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn token(&self, token: Uuid) -> Result<ProvisioningToken, StoreError> {
        let row: Option<ProvisioningToken> = sqlx::query_as(
            "SELECT token, description, uses_remaining, expires_at, created_at FROM provisioning_tokens \
             WHERE token = $1",
        )
        .bind(token)
        .fetch_optional(&self.pool)
        .await?;
        row.ok_or_else(|| StoreError::NotFound {
            what: "token",
            name: token.to_string(),
        })
    }

    pub async fn delete_token(&self, token: Uuid) -> Result<(), StoreError> {
        let done = sqlx::query("DELETE FROM provisioning_tokens WHERE token = $1")
            .bind(token)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound {
                what: "token",
                name: token.to_string(),
            });
        }
        Ok(())
    }

    pub async fn create_seed(&self, token: Uuid, new: &NewSeed) -> Result<Seed, StoreError> {
        self.token(token).await?;
        sqlx::query_as(
            "INSERT INTO token_seeds (token, name, public, install_config) VALUES ($1, $2, $3, $4) \
             RETURNING token, name, public, install_config, created_at",
        )
        .bind(token)
        .bind(&new.name)
        .bind(new.public)
        .bind(or_empty(&new.install_config))
        .fetch_one(&self.pool)
        .await
        .map_err(StoreError::on_unique("seed", &new.name))
    }

    pub async fn seeds(&self, token: Uuid) -> Result<Vec<Seed>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT token, name, public, install_config, created_at FROM token_seeds WHERE token = $1 ORDER BY name",
        )
        .bind(token)
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn seed(&self, token: Uuid, name: &str) -> Result<Seed, StoreError> {
        let row: Option<Seed> = sqlx::query_as(
            "SELECT token, name, public, install_config, created_at FROM token_seeds WHERE token = $1 AND name = $2",
        )
        .bind(token)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.ok_or_else(|| StoreError::NotFound {
            what: "seed",
            name: name.to_owned(),
        })
    }

    // --- BIOS profiles ----------------------------------------------------------------------------------------

    /// Creates or replaces a profile.
    pub async fn put_bios_profile(&self, p: &NewBiosProfile) -> Result<BiosProfile, StoreError> {
        Ok(sqlx::query_as(
            "INSERT INTO bios_profiles (name, match_rules, priority, attributes, deferred_attributes, secure_boot) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (name) DO UPDATE SET match_rules = excluded.match_rules, priority = excluded.priority, \
             attributes = excluded.attributes, deferred_attributes = excluded.deferred_attributes, \
             secure_boot = excluded.secure_boot, updated_at = now() \
             RETURNING name, match_rules, priority, attributes, deferred_attributes, secure_boot, created_at, updated_at",
        )
        .bind(&p.name)
        .bind(or_empty(&p.match_rules))
        .bind(p.priority)
        .bind(or_empty(&p.attributes))
        .bind(or_empty(&p.deferred_attributes))
        .bind(or_empty(&p.secure_boot))
        .fetch_one(&self.pool)
        .await?)
    }

    pub async fn bios_profiles(&self) -> Result<Vec<BiosProfile>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT name, match_rules, priority, attributes, deferred_attributes, secure_boot, created_at, updated_at \
             FROM bios_profiles ORDER BY priority, name",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn delete_bios_profile(&self, name: &str) -> Result<(), StoreError> {
        let done = sqlx::query("DELETE FROM bios_profiles WHERE name = $1")
            .bind(name)
            .execute(&self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound {
                what: "BIOS profile",
                name: name.to_owned(),
            });
        }
        Ok(())
    }

    // --- images -----------------------------------------------------------------------------------------------

    /// Registers an image as the caller measured its file (`file`: digest, stamp, format, where partition 2
    /// starts and how much it holds).
    pub async fn create_image(&self, i: &NewImage, file: &ImageFile) -> Result<Image, StoreError> {
        let name = format!("{}/{}/{}", i.image_type, i.architecture, i.channel);
        sqlx::query_as(
            "INSERT INTO images (type, architecture, channel, path, size_bytes, sha256, seed_offset, seed_capacity, \
             format, file_stamp) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             RETURNING id, type, architecture, channel, path, size_bytes, sha256, seed_offset, seed_capacity, format, created_at",
        )
        .bind(&i.image_type)
        .bind(&i.architecture)
        .bind(&i.channel)
        .bind(&i.path)
        .bind(i.size_bytes)
        .bind(&file.sha256)
        .bind(file.seed_offset)
        .bind(file.seed_capacity)
        .bind(file.format.as_str())
        .bind(&file.file_stamp)
        .fetch_one(&self.pool)
        .await
        .map_err(StoreError::on_unique("image", &name))
    }

    /// Records what identifies image `id`'s bytes now, after they were hashed again and still matched.
    pub async fn restamp_image(&self, id: i64, file_stamp: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE images SET file_stamp = $2 WHERE id = $1")
            .bind(id)
            .bind(file_stamp)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn images(&self) -> Result<Vec<Image>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT id, type, architecture, channel, path, size_bytes, sha256, seed_offset, seed_capacity, format, created_at FROM images ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn image(&self, id: i64) -> Result<Image, StoreError> {
        let row: Option<Image> = sqlx::query_as(
            "SELECT id, type, architecture, channel, path, size_bytes, sha256, seed_offset, seed_capacity, format, created_at FROM images WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.ok_or_else(|| StoreError::NotFound {
            what: "image",
            name: id.to_string(),
        })
    }
}
