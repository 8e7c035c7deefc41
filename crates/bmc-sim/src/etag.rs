//! ETags as real BMCs send them: in the `ETag` header of a GET and as the body's `@odata.etag`, derived from
//! the representation so they change exactly when the resource does. iLO sends weak tags (`W/"14700DD6"`);
//! XCC, Supermicro and most others strong ones. `If-Match` is compared weakly, as the Redfish specification
//! asks of services, so a client may send back either form.

use crate::config::Personality;

/// How a personality writes its tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// `W/"XXXXXXXX"`: eight hex digits.
    Weak,
    /// `"xxxxxxxxxxxxxxxx"`.
    Strong,
}

impl Style {
    /// iLO's tags are weak; the others' strong.
    pub fn of(personality: Personality) -> Style {
        match personality {
            Personality::Hpe => Style::Weak,
            _ => Style::Strong,
        }
    }
}

/// FNV-1a over the representation: cheap, stable across runs, and it changes with any byte.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The tag of a representation (or of a revision the body does not show, such as an account's password).
pub fn tag(style: Style, representation: &[u8]) -> String {
    let hash = fnv1a(representation);
    match style {
        Style::Weak => format!("W/\"{:08X}\"", (hash >> 32) as u32 ^ hash as u32),
        Style::Strong => format!("\"{hash:016x}\""),
    }
}

/// The opaque part of a tag, for weak comparison: `W/"abc"` and `"abc"` are the same tag.
fn opaque(tag: &str) -> &str {
    let tag = tag.trim();
    tag.strip_prefix("W/").unwrap_or(tag)
}

/// Whether an `If-Match` (or `If-None-Match`) list names the current tag. `*` matches any existing resource.
pub fn matches(list: &str, current: &str) -> bool {
    list.split(',')
        .map(str::trim)
        .any(|t| t == "*" || opaque(t) == opaque(current))
}

/// The body with `"@odata.etag": tag` as its first member. `body` is a serialized JSON object.
pub fn with_property(body: &[u8], tag: &str) -> Option<Vec<u8>> {
    let rest = body.strip_prefix(b"{")?;
    let value = serde_json::to_string(tag).ok()?;
    let mut out = Vec::with_capacity(body.len() + value.len() + 20);
    out.extend_from_slice(b"{\"@odata.etag\":");
    out.extend_from_slice(value.as_bytes());
    let empty = rest.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'}');
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_follow_the_representation() {
        let a = tag(Style::Strong, br#"{"PowerState":"On"}"#);
        assert_eq!(a, tag(Style::Strong, br#"{"PowerState":"On"}"#));
        assert_ne!(a, tag(Style::Strong, br#"{"PowerState":"Off"}"#));
        let weak = tag(Style::Weak, b"{}");
        assert!(weak.starts_with("W/\"") && weak.len() == 12, "{weak}");
    }

    #[test]
    fn if_match_compares_weakly() {
        let cases = [
            ("\"abc\"", "\"abc\"", true),
            ("W/\"abc\"", "\"abc\"", true),
            ("\"abc\"", "W/\"abc\"", true),
            ("\"abd\"", "\"abc\"", false),
            ("\"x\", W/\"abc\"", "\"abc\"", true),
            ("*", "\"abc\"", true),
            ("\"abc\"foobar", "\"abc\"", false),
        ];
        for (list, current, expected) in cases {
            assert_eq!(matches(list, current), expected, "{list} vs {current}");
        }
    }

    #[test]
    fn the_property_goes_first_and_keeps_the_object_valid() {
        for body in [&b"{}"[..], b"{\"Id\":\"1\"}", b"{ }"] {
            let out = with_property(body, "W/\"0A\"").expect("an object");
            let value: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
            assert_eq!(value["@odata.etag"], "W/\"0A\"");
        }
        assert!(with_property(b"[1]", "\"x\"").is_none());
    }
}
