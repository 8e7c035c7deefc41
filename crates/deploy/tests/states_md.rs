//! The committed diagram must be the one the tables generate.

use std::path::PathBuf;

#[test]
fn committed_states_md_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("STATES.md");
    let want = racklift_deploy::mermaid::states_markdown();
    if std::env::var_os("UPDATE_STATES_MD").is_some() {
        std::fs::write(&path, &want).expect("write STATES.md");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "crates/deploy/STATES.md is stale; regenerate it with \
         `UPDATE_STATES_MD=1 cargo test -p racklift-deploy --test states_md`"
    );
}
