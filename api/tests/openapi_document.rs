//! The committed `api/openapi.json` is the document the code derives: a change to a route, a handler's
//! responses or a request or response type shows up as a diff here. `RACKLIFT_BLESS=1 cargo test -p
//! racklift-api --test openapi_document` writes the new document.

use std::path::Path;

#[test]
fn the_committed_document_is_the_derived_one() {
    let derived = serde_json::to_string_pretty(&racklift_api::openapi::document()).expect("serialise") + "\n";
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    if std::env::var_os("RACKLIFT_BLESS").is_some() {
        std::fs::write(&path, &derived).expect("write openapi.json");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == derived,
        "api/openapi.json differs from the document the code derives; review the change and rerun with \
         RACKLIFT_BLESS=1 to write it"
    );
}
