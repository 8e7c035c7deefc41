//! What the dashboard tests send as a browser would: forms, pages and the session cookie, without following
//! redirects so the 303s and their cookies can be checked.

use reqwest::Response;
use reqwest::header::{CONTENT_TYPE, COOKIE, SET_COOKIE};

use crate::common::Api;

/// A client that shows redirects instead of following them, so 303s and their cookies can be checked.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

pub fn urlencode(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| -> String {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

pub async fn post_form(api: &Api, path: &str, cookie: Option<&str>, pairs: &[(&str, &str)]) -> Response {
    let mut r = client()
        .post(format!("{}{path}", api.base))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(urlencode(pairs));
    if let Some(c) = cookie {
        r = r.header(COOKIE, c);
    }
    r.send().await.expect("POST")
}

/// Logs in with `secret` and returns the `Cookie` header value the browser would send back.
pub async fn login(api: &Api, secret: &str) -> String {
    let resp = post_form(api, "/ui/login", None, &[("token", secret)]).await;
    assert_eq!(resp.status(), 303);
    let set = resp
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("racklift_session="))
        .expect("a session cookie")
        .to_owned();
    set.split(';').next().unwrap().to_owned()
}

pub async fn page(api: &Api, path: &str, cookie: &str) -> (u16, String) {
    let resp = client()
        .get(format!("{}{path}", api.base))
        .header(COOKIE, cookie)
        .send()
        .await
        .expect("GET");
    (resp.status().as_u16(), resp.text().await.expect("body"))
}

/// The CSRF token a page embeds in its forms.
pub fn csrf(html: &str) -> String {
    let at = html.find(r#"name="csrf" value=""#).expect("a CSRF field") + r#"name="csrf" value=""#.len();
    html[at..at + 64].to_owned()
}

/// GETs `path` with `cookie`, keeping the whole response (headers included).
pub async fn get(api: &Api, path: &str, cookie: &str) -> Response {
    client()
        .get(format!("{}{path}", api.base))
        .header(COOKIE, cookie)
        .send()
        .await
        .expect("GET")
}
