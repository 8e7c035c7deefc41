//! A JSON body read into a [`serde_json::Value`] that refuses a key repeated in one object, at any depth.
//! `serde_json` keeps the last of two equal keys, so `{"role": "viewer", "role": "admin"}` would mean whatever the
//! reader after it picks (RFC 8259 §4 leaves it open); a proxy or an audit log reading the first would see another
//! request than the one carried out. The body is read once, through this visitor, before the typed
//! deserialisation, so the check costs one set of keys per object and no second parse.

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Why a body was refused: serde_json's error and the dotted path of the object or value it is about (`.` for
/// the whole body).
#[derive(Debug)]
pub struct Refused {
    pub path: String,
    pub error: serde_json::Error,
}

/// Parses `bytes` as JSON; an object holding a key twice fails with ``duplicate field `KEY` ``, its path the
/// enclosing object's.
pub fn parse(bytes: &[u8]) -> Result<Value, Refused> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de)
        .map(|UniqueKeys(v)| v)
        .map_err(|e| Refused {
            path: e.path().to_string(),
            error: e.into_inner(),
        })?;
    de.end().map_err(|error| Refused {
        path: ".".to_owned(),
        error,
    })?;
    Ok(value)
}

/// A JSON value whose objects hold each key once.
struct UniqueKeys(Value);

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor).map(UniqueKeys)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: Error>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(UniqueKeys(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(A::Error::custom(format_args!("duplicate field `{key}`")));
            }
            let UniqueKeys(value) = map.next_value_seed(Seed)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// [`UniqueKeys`] as a seed, so a map's values go through the same visitor.
struct Seed;

impl<'de> DeserializeSeed<'de> for Seed {
    type Value = UniqueKeys;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<UniqueKeys, D::Error> {
        serde::Deserialize::deserialize(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_is_refused_at_any_depth_and_the_rest_reads_as_serde_json_does() {
        let refused = |body: &str| {
            let e = parse(body.as_bytes()).expect_err(body);
            (e.path, e.error.to_string())
        };
        let (path, message) = refused(r#"{"a": 1, "a": 2}"#);
        assert_eq!(path, ".");
        assert!(message.starts_with("duplicate field `a`"), "{message}");
        let (path, message) = refused(r#"{"f": {"x": [{"k": 1, "k": 1}]}}"#);
        assert_eq!(path, "f.x[0]");
        assert!(message.starts_with("duplicate field `k`"), "{message}");
        assert!(parse(br#"{"a": 1} x"#).is_err());
        for body in [
            r#"{"a": {"a": 1}, "b": [1, 1, {"a": null}], "c": -1.5e3, "d": 18446744073709551615, "e": "é"}"#,
            "[]",
            "null",
        ] {
            let expected: Value = serde_json::from_str(body).unwrap();
            assert_eq!(parse(body.as_bytes()).unwrap(), expected, "{body}");
        }
    }
}
