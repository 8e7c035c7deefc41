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

/// Every `$ref` of the document names something it defines: a client generator (or schemathesis) given a
/// dangling one fails on the whole document, not on one operation.
#[test]
fn every_reference_resolves() {
    let doc = serde_json::to_value(racklift_api::openapi::document()).expect("serialise");
    fn walk<'a>(v: &'a serde_json::Value, at: String, refs: &mut Vec<(String, &'a str)>) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, item) in map {
                    match (k.as_str(), item) {
                        ("$ref", serde_json::Value::String(target)) => refs.push((at.clone(), target)),
                        _ => walk(item, format!("{at}/{k}"), refs),
                    }
                }
            }
            serde_json::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, format!("{at}/{i}"), refs);
                }
            }
            _ => {}
        }
    }
    let mut refs = Vec::new();
    walk(&doc, String::new(), &mut refs);
    assert!(refs.len() > 50, "the walk found only {} references", refs.len());
    let dangling: Vec<_> = refs
        .iter()
        .filter(|(_, target)| {
            // A JSON pointer into this document: `#/a/b`, `~1` for `/` and `~0` for `~`.
            let Some(pointer) = target.strip_prefix('#') else {
                return true;
            };
            doc.pointer(pointer).is_none()
        })
        .collect();
    assert!(dangling.is_empty(), "references to nothing: {dangling:?}");
}
