//! The database schema: every migration under the top-level `migrations/` folder, embedded at build time.
//!
//! It is its own crate so that the queue (which must not know about servers), the store and the tests can all
//! migrate a database without depending on each other.

/// All migrations, in order. Forward-only: a shipped migration is never edited, a new one is added.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Applies every pending migration. Safe to run concurrently from several processes: sqlx takes an advisory lock.
pub async fn migrate(pool: &sqlx::PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(pool).await
}

/// As [`migrate`], on one connection (a caller that sets the session up for migrations first).
pub async fn migrate_on(conn: &mut sqlx::PgConnection) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(conn).await
}
