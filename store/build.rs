//! Rebuilds the store when a migration is added or changed: `sqlx::migrate!` embeds
//! `migrations/` at compile time but does not tell cargo to watch the directory, so without
//! this an incremental build keeps serving the migrations it saw last.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
