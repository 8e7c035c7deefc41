//! Timestamps as the API takes them: an RFC 3339 `date-time` (OpenAPI's `format: date-time`) whose instant, in UTC,
//! falls in years 0000 to 9999. chrono's own `Deserialize` also takes signed years of five digits and more
//! (`+262142-01-01T00:00:00Z`) and a space for the `T`; such a value would be stored, and every answer that shows
//! it would break the document's `date-time`, since RFC 3339 writes a year in four digits. Use with
//! `#[serde(deserialize_with = "racklift_store::rfc3339::deserialize")]` (or `rfc3339::option::deserialize` with
//! `#[serde(default)]`).

use chrono::{DateTime, Datelike, Utc};
use serde::Deserialize;
use serde::de::{Deserializer, Error};

/// The earliest and latest instant taken: the range whose UTC form RFC 3339 can write.
pub const RANGE: &str = "0000-01-01T00:00:00Z to 9999-12-31T23:59:59Z";

/// Parses `s` as RFC 3339 with a four-digit year and a `T` between date and time, its instant in [`RANGE`].
pub fn parse(s: &str) -> Result<DateTime<Utc>, String> {
    let shaped = s.len() >= 20
        && s.as_bytes()[..4].iter().all(u8::is_ascii_digit)
        && matches!(s.as_bytes()[10], b'T' | b't');
    let parsed = shaped
        .then(|| DateTime::parse_from_rfc3339(s).ok())
        .flatten()
        .ok_or_else(|| format!("{s:?} is not an RFC 3339 date-time such as 2026-12-24T22:00:00Z"))?;
    let utc = parsed.with_timezone(&Utc);
    if (0..=9999).contains(&utc.year()) {
        Ok(utc)
    } else {
        Err(format!("{s:?} is out of range: a time from {RANGE} is taken"))
    }
}

/// A required timestamp.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
    let s = String::deserialize(d)?;
    parse(&s).map_err(D::Error::custom)
}

/// An optional timestamp (`null` or absent is `None`).
pub mod option {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(s) => parse(&s).map(Some).map_err(D::Error::custom),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_four_digit_years_whose_instant_rfc3339_can_write_are_taken() {
        for ok in [
            "2026-12-24T22:00:00Z",
            "2026-12-24t22:00:00.123456z",
            "1970-01-01T00:00:00+02:00",
            "0001-01-01T00:00:00+01:00",
            "9999-12-31T23:59:59Z",
        ] {
            assert!(parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "+262142-01-01T00:00:00Z",
            "-0001-01-01T00:00:00Z",
            "10000-01-01T00:00:00Z",
            "9999-12-31T23:59:59-01:00",
            "0000-01-01T00:00:00+01:00",
            "2026-12-24 22:00:00Z",
            "2026-12-24T22:00:00",
            "2026-12-24",
            "",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
