// `sqlx::migrate!` embeds the migrations at compile time; without this, adding a migration file would not
// rebuild the crate and tests would run against the old schema.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
