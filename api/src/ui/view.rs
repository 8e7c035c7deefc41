//! What the pages show, precomputed as strings: the templates stay free of logic, and every value passes through
//! askama's HTML escaping on the way out. Filters are parsed here with the JSON API's rules, except that empty
//! fields (an HTML form sends every input) mean "no filter" and a bad value is reported on the page.

use std::collections::BTreeMap;

use racklift_store::{
    Cursor, DeadLetterFilter, DeadLetterGroup, DeadLetterSummary, StuckDeployment, TriageStatus,
};
use serde_json::Value;

/// Operations whose dead letters can be listed (the JSON API's list).
pub const OPERATIONS: &[&str] = &["deployment", "bmc_action", "rolling_reboot", "rolling_update"];
/// The filter keys, in the order the form shows them.
pub const FILTER_KEYS: &[&str] = &[
    "operation",
    "error_class",
    "message_id",
    "vendor",
    "state",
    "server",
    "min_age_secs",
];
pub const PAGE_SIZE: i64 = 50;

/// A parsed list query: the filter, the page position, and the non-empty parameters to carry into links.
pub struct ListQuery {
    pub filter: DeadLetterFilter,
    pub cursor: Option<Cursor>,
    /// The cursor as given, when valid: the live refresh stays on the page it was opened on.
    pub cursor_raw: Option<String>,
    /// Filter and status parameters as given (without the cursor), for links and hidden form fields.
    pub params: Vec<(String, String)>,
    pub errors: Vec<String>,
}

impl ListQuery {
    pub fn parse(mut q: BTreeMap<String, String>) -> ListQuery {
        q.retain(|_, v| !v.trim().is_empty());
        let mut errors = Vec::new();
        let mut f = DeadLetterFilter::default();
        let mut params = Vec::new();
        for key in FILTER_KEYS {
            let Some(v) = q.remove(*key).map(|v| v.trim().to_owned()) else {
                continue;
            };
            let ok = match *key {
                "operation" => OPERATIONS.contains(&v.as_str()),
                "state" => v.parse::<racklift_deploy::State>().is_ok(),
                "min_age_secs" => v.parse::<i64>().is_ok_and(|s| s >= 0),
                _ => v.len() <= 200,
            };
            if !ok {
                errors.push(format!("{key}: {v:?} is not a valid value; ignored"));
                continue;
            }
            match *key {
                "operation" => f.operation = Some(v.clone()),
                "error_class" => f.error_class = Some(v.clone()),
                "message_id" => f.message_id = Some(v.clone()),
                "vendor" => f.vendor = Some(v.clone()),
                "state" => f.state = Some(v.clone()),
                "server" => f.server = Some(v.clone()),
                _ => f.min_age_secs = v.parse().ok(),
            }
            params.push((key.to_string(), v));
        }
        if let Some(s) = q.remove("status") {
            match TriageStatus::parse(&s) {
                Some(status) => {
                    f.status = status;
                    params.push(("status".into(), s));
                }
                None => errors.push(format!("status: {s:?} is not a triage status; ignored")),
            }
        }
        let raw = q.remove("cursor");
        let cursor = raw.as_deref().and_then(Cursor::decode);
        if raw.is_some() && cursor.is_none() {
            errors.push("cursor: not one this list handed out; showing the first page".into());
        }
        for unknown in q.keys() {
            errors.push(format!("{unknown}: unknown parameter; ignored"));
        }
        ListQuery {
            filter: f,
            cursor_raw: cursor.and(raw),
            cursor,
            params,
            errors,
        }
    }

    pub fn value(&self, key: &str) -> String {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

    /// Whether a grouping key is set: bulk retry needs one, so it can never retry everything.
    pub fn has_group_key(&self) -> bool {
        let f = &self.filter;
        [
            &f.operation,
            &f.error_class,
            &f.message_id,
            &f.vendor,
            &f.state,
            &f.server,
        ]
        .iter()
        .any(|v| v.is_some())
    }

    /// The query string of these parameters plus `extra`, with a leading `?` (or empty).
    pub fn query(&self, extra: &[(&str, &str)]) -> String {
        let pairs = self
            .params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(extra.iter().copied());
        query_string(pairs)
    }
}

pub fn query_string<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let joined: Vec<String> = pairs
        .map(|(k, v)| format!("{}={}", percent(k), percent(v)))
        .collect();
    if joined.is_empty() {
        String::new()
    } else {
        format!("?{}", joined.join("&"))
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `42s`, `3m 05s`, `2h 03m`, `3d 04h`: how long something has been dead or stuck, at a glance.
pub fn human_secs(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {:02}h", s / 86400, (s % 86400) / 3600),
    }
}

pub fn dash(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "—".into())
}

/// The first line of an error, cut to `max` characters: the list shows the gist, the detail page the whole.
pub fn short(text: &Option<String>, max: usize) -> String {
    let Some(t) = text else {
        return "—".into();
    };
    let line = t.lines().next().unwrap_or_default();
    if line.chars().count() > max {
        format!("{}…", line.chars().take(max).collect::<String>())
    } else {
        line.to_owned()
    }
}

/// Redaction on top of [`racklift_store::redact`] (passwords, media secrets): the dashboard also drops keys
/// naming a token, a session or credentials, and `token=` query values, since BMC facts and URLs carry them.
pub fn redact(v: &mut Value) {
    racklift_store::redact(v);
    redact_more(v);
}

fn redact_more(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, _| {
                let k = k.to_ascii_lowercase();
                !(k.contains("token")
                    || k.contains("authorization")
                    || k.contains("cookie")
                    || k == "session")
            });
            map.values_mut().for_each(redact_more);
        }
        Value::Array(items) => items.iter_mut().for_each(redact_more),
        Value::String(s) => *s = redact_string(s),
        _ => {}
    }
}

/// Media secrets and `token=` query values out of a free text.
pub fn redact_string(s: &str) -> String {
    let s = racklift_store::redact_text(s);
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(at) = rest.find("token=") {
        let (head, tail) = rest.split_at(at + "token=".len());
        out.push_str(head);
        let end = tail.find(['&', ' ', '"', '\'', '#']).unwrap_or(tail.len());
        out.push_str("REDACTED");
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// One dead letter as a row of the list.
pub struct Row {
    pub id: i64,
    pub age: String,
    pub dead_at: String,
    pub server: String,
    pub operation: String,
    pub state: String,
    pub error_class: String,
    pub message_id: String,
    pub last_error: String,
    pub attempts: String,
    pub triage: String,
}

impl Row {
    pub fn new(d: &DeadLetterSummary) -> Row {
        Row {
            id: d.id,
            age: human_secs(d.age_secs),
            dead_at: d.dead_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
            server: dash(&d.server),
            operation: d.operation.clone().unwrap_or_else(|| d.kind.clone()),
            state: dash(&d.state),
            error_class: dash(&d.error_class),
            message_id: dash(&d.message_id),
            last_error: redact_string(&short(&d.last_error, 120)),
            attempts: format!("{}/{}", d.attempts, d.max_attempts),
            triage: match &d.triaged_by {
                Some(by) => format!("{} by {by}", d.triage_status),
                None => d.triage_status.clone(),
            },
        }
    }
}

/// One group count, with the link that filters the list to it.
pub struct GroupRow {
    pub operation: String,
    pub error_class: String,
    pub message_id: String,
    pub vendor: String,
    pub state: String,
    pub count: i64,
    pub oldest: String,
    pub href: String,
}

impl GroupRow {
    pub fn new(g: &DeadLetterGroup, now: chrono::DateTime<chrono::Utc>) -> GroupRow {
        let keys = [
            ("operation", &g.operation),
            ("error_class", &g.error_class),
            ("message_id", &g.message_id),
            ("vendor", &g.vendor),
            ("state", &g.state),
        ];
        let href = format!(
            "/ui{}",
            query_string(keys.iter().filter_map(|(k, v)| v.as_deref().map(|v| (*k, v))))
        );
        GroupRow {
            operation: dash(&g.operation),
            error_class: dash(&g.error_class),
            message_id: dash(&g.message_id),
            vendor: dash(&g.vendor),
            state: dash(&g.state),
            count: g.count,
            oldest: human_secs((now - g.oldest_dead_at).num_seconds()),
            href,
        }
    }
}

/// A live deployment that is not advancing, measured against its budgets.
pub struct StuckRow {
    pub deployment_id: i64,
    pub server: String,
    pub vendor: String,
    pub state: String,
    pub in_state: String,
    pub budget: String,
    pub attempts: String,
    pub elapsed: String,
    pub reasons: String,
    pub job: String,
}

impl StuckRow {
    pub fn new(s: &StuckDeployment) -> StuckRow {
        let p = &s.progress;
        let budget = match p.state_timeout_secs {
            Some(t) => format!(
                "{} (timeout {})",
                human_secs(p.state_budget_secs as i64),
                human_secs(t as i64)
            ),
            None => human_secs(p.state_budget_secs as i64),
        };
        let job = match &s.job {
            Some(j) => format!(
                "job {} {} {}/{}{}",
                j.id,
                j.state,
                j.attempts,
                j.max_attempts,
                j.leased_by
                    .as_deref()
                    .map(|h| format!(", held by {h}"))
                    .unwrap_or_default()
            ),
            None => "no live job".into(),
        };
        let mut reasons = s.reasons.join(", ");
        if s.cancel_requested {
            reasons.push_str(" (cancel requested)");
        }
        StuckRow {
            deployment_id: s.deployment_id,
            server: s.server.clone(),
            vendor: dash(&s.vendor),
            state: format!("{} ({})", p.state.name(), format!("{:?}", p.kind).to_lowercase()),
            in_state: human_secs(p.time_in_state_secs),
            budget,
            attempts: format!(
                "{}/{} retries, {}/{} BIOS fallbacks",
                p.retries, p.retry_budget, p.bios_fallbacks, p.bios_fallback_budget
            ),
            elapsed: format!(
                "{} of {}",
                human_secs(p.elapsed_secs),
                human_secs(p.deadline_secs as i64)
            ),
            reasons,
            job,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn filters_skip_empty_fields_and_report_bad_ones() {
        let q: BTreeMap<String, String> = [("operation", "deployment"), ("vendor", ""), ("state", "Nope")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let l = ListQuery::parse(q);
        assert_eq!(l.filter.operation.as_deref(), Some("deployment"));
        assert_eq!(l.filter.vendor, None);
        assert_eq!(l.errors.len(), 1);
        assert!(l.has_group_key());
        assert_eq!(l.query(&[("cursor", "1.2")]), "?operation=deployment&cursor=1.2");
    }

    #[test]
    fn redaction_drops_tokens_and_passwords() {
        let mut v = json!({ "X-Auth-Token": "t", "password": "p", "image": "http://a/media/s3cr3t/x.img?token=abc&y=1",
                            "nested": [{ "session_token": "x", "keep": "k" }] });
        redact(&mut v);
        assert_eq!(
            v,
            json!({ "image": "http://a/media/REDACTED/x.img?token=REDACTED&y=1", "nested": [{ "keep": "k" }] })
        );
        assert_eq!(human_secs(3725), "1h 02m");
        assert_eq!(short(&Some("abcdef\nsecond".into()), 3), "abc…");
    }
}
