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

/// Every integer of the document carries the range its handler's type takes, so a generator sending 2^63 to an
/// `int64` or 2^31 to an `int32` has broken the document, not found a refusal the document hides.
#[test]
fn every_integer_states_the_range_its_type_takes() {
    let doc = serde_json::to_value(racklift_api::openapi::document()).expect("serialise");
    fn walk(v: &serde_json::Value, at: &str, found: &mut usize) {
        match v {
            serde_json::Value::Object(map) => {
                let range = match map.get("format").and_then(|f| f.as_str()) {
                    Some("int32") => Some((i64::from(i32::MIN), i64::from(i32::MAX))),
                    Some("int64") => Some((i64::MIN, i64::MAX)),
                    _ => None,
                };
                if let Some((min, max)) = range {
                    *found += 1;
                    let (lo, hi) = (map.get("minimum"), map.get("maximum"));
                    let within = |b: Option<&serde_json::Value>| {
                        b.and_then(|b| b.as_i64()).filter(|b| (min..=max).contains(b))
                    };
                    assert!(within(lo).is_some() && within(hi).is_some(), "{at}: {v}");
                    assert!(lo.unwrap().as_i64() <= hi.unwrap().as_i64(), "{at}: {v}");
                }
                for (k, item) in map {
                    walk(item, &format!("{at}/{k}"), found);
                }
            }
            serde_json::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &format!("{at}/{i}"), found);
                }
            }
            _ => {}
        }
    }
    let mut found = 0;
    walk(&doc, "", &mut found);
    assert!(found > 50, "only {found} integers");
}

/// A dead-letter filter's `state` is an enum of the deployment table's states, in the queries and in the bulk
/// retry's body: a name that is none breaks the document instead of drawing a 422 `unknown_state`.
#[test]
fn a_state_filter_names_the_deployment_states() {
    let doc = serde_json::to_value(racklift_api::openapi::document()).expect("serialise");
    let resolve = |s: &serde_json::Value| -> serde_json::Value {
        let s = s
            .get("anyOf")
            .or(s.get("oneOf"))
            .and_then(|a| a.as_array())
            .and_then(|a| a.iter().find(|s| s.get("$ref").is_some()))
            .unwrap_or(s);
        match s["$ref"].as_str() {
            Some(r) => doc.pointer(r.trim_start_matches('#')).cloned().expect("defined"),
            None => s.clone(),
        }
    };
    let states: Vec<&str> = racklift_deploy::State::all().map(|s| s.name()).collect();
    let mut schemas = Vec::new();
    for path in ["/1.0/deadletters", "/1.0/deadletters/groups"] {
        let params = doc["paths"][path]["get"]["parameters"]
            .as_array()
            .expect("parameters");
        let state = params
            .iter()
            .find(|p| p["name"] == "state")
            .expect("a state parameter");
        schemas.push((path, resolve(&state["schema"])));
    }
    let filter = resolve(&doc["components"]["schemas"]["FilterSpec"]["properties"]["state"]);
    schemas.push(("FilterSpec.state", filter));
    for (at, schema) in schemas {
        let names: Vec<&str> = schema["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{at}: {schema}"))
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        assert_eq!(names, states, "{at}");
    }
}

/// `:media`'s body is one of two shapes, as the handler takes it: `insert` with an `image_url`, `eject` without;
/// the document allowed `insert` alone and `eject` with a URL, which the handler refuses 422.
#[test]
fn a_media_action_body_is_documented_in_the_two_shapes_taken() {
    let doc = serde_json::to_value(racklift_api::openapi::document()).expect("serialise");
    let body = &doc["paths"]["/1.0/provisioning/servers/{name}:media"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"];
    let schema = match body["$ref"].as_str() {
        Some(r) => doc.pointer(r.trim_start_matches('#')).expect("defined").clone(),
        None => body.clone(),
    };
    let shapes = schema["oneOf"].as_array().unwrap_or_else(|| panic!("{schema}"));
    let shape = |verb: &str| {
        shapes
            .iter()
            .find(|s| s["properties"]["action"]["enum"] == serde_json::json!([verb]))
            .unwrap_or_else(|| panic!("no {verb} shape in {schema}"))
    };
    let (insert, eject) = (shape("insert"), shape("eject"));
    assert_eq!(
        insert["required"],
        serde_json::json!(["action", "image_url"]),
        "{insert}"
    );
    assert_eq!(insert["properties"]["image_url"]["type"], "string", "{insert}");
    assert!(
        insert["properties"]["image_url"]["pattern"].is_string(),
        "{insert}"
    );
    assert_eq!(eject["required"], serde_json::json!(["action"]), "{eject}");
    assert_eq!(eject["properties"]["image_url"]["type"], "null", "{eject}");
    for s in [insert, eject] {
        assert_eq!(s["additionalProperties"], false, "{s}");
    }
}
