//! How the operator commands print: aligned tables by default, the API's JSON with `--json`. One home so every
//! command shows nulls, long details and ages the same way.

use serde_json::Value;

/// Prints the API's JSON as is (pretty), for scripts.
pub fn print_json(v: &Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// A JSON value for display: strings without quotes, null as `-`.
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) if s.is_empty() => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Keeps a table row on one line; the full text is in `show`.
pub fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Seconds as the two largest units an operator reads at a glance: `45s`, `3m12s`, `5h02m`, `2d07h`.
pub fn age(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// `key: value` lines with the values aligned.
pub fn key_values(lines: &[(&str, String)]) -> String {
    let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    lines
        .iter()
        .map(|(key, value)| format!("{:width$} {value}\n", format!("{key}:")))
        .collect()
}

/// Left-aligned columns two spaces apart, padded by characters (not bytes) so non-ASCII details line up.
pub fn table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; N]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        out.push_str(padded.join("  ").trim_end());
        out.push('\n');
    };
    line(header);
    for row in rows {
        line(row.each_ref().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn table_pads_columns_and_trims_line_ends() {
        let rows = [["server-0".to_owned(), "deploying".to_owned(), "-".to_owned()]];
        assert_eq!(
            table(["NAME", "STATUS", "STATE"], &rows),
            "NAME      STATUS     STATE\nserver-0  deploying  -\n"
        );
    }

    #[test]
    fn text_shows_null_and_empty_as_dash() {
        assert_eq!(text(&Value::Null), "-");
        assert_eq!(text(&json!("")), "-");
        assert_eq!(text(&json!("x")), "x");
        assert_eq!(text(&json!(3)), "3");
    }

    #[test]
    fn ages_use_the_two_largest_units() {
        for (secs, shown) in [
            (-3, "0s"),
            (0, "0s"),
            (59, "59s"),
            (60, "1m00s"),
            (192, "3m12s"),
            (3600, "1h00m"),
            (18120, "5h02m"),
            (86400, "1d00h"),
            (198000, "2d07h"),
        ] {
            assert_eq!(age(secs), shown, "{secs} s");
        }
    }

    #[test]
    fn truncate_keeps_short_text_and_marks_cuts() {
        assert_eq!(truncate("abc", 3), "abc");
        assert_eq!(truncate("abcd", 3), "ab…");
    }

    #[test]
    fn key_values_align_values() {
        assert_eq!(
            key_values(&[("id", "1".into()), ("state", "Failed".into())]),
            "id:    1\nstate: Failed\n"
        );
    }
}
