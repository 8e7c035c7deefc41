//! Dashboard sessions over HTTP: logout, revocation, expiry, re-keying and role changes end a session; every
//! `/ui` answer carries the security headers, the pages run no inline code, and `/ui/` redirects to `/ui`.

mod common;
#[path = "triage/seed.rs"]
#[allow(dead_code)] // Shared with the triage tests; this file uses part of it.
mod seed;
#[path = "ui/client.rs"]
mod ui_client;

use common::{Api, OPERATOR, VIEWER};
use racklift_deploy::State;
use racklift_store::Role;
use reqwest::Method;
use reqwest::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, LOCATION, REFERRER_POLICY, SET_COOKIE,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use seed::Seed;
use ui_client::{client, csrf, get, login, page, post_form};

/// Whether `cookie` still opens the dashboard: a page answers 200 (not the redirect to the login form) and the
/// live fragment answers 200 (not 401).
async fn session_works(api: &Api, cookie: &str) -> bool {
    let (page_status, _) = page(api, "/ui", cookie).await;
    let (fragment_status, _) = page(api, "/ui/fragments/deadletters", cookie).await;
    assert_eq!(
        page_status == 200,
        fragment_status == 200,
        "page {page_status}, fragment {fragment_status}"
    );
    assert!(matches!(page_status, 200 | 303) && matches!(fragment_status, 200 | 401));
    page_status == 200
}

async fn sessions(api: &Api) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM ui_sessions")
        .fetch_one(&api.db.pool)
        .await
        .expect("count sessions")
}

#[tokio::test]
async fn logout_revocation_and_expiry_end_a_session() {
    let api = Api::start().await;

    // Logging out deletes the session: the cookie, even if a browser kept it, opens nothing any more.
    let cookie = login(&api, OPERATOR).await;
    assert!(session_works(&api, &cookie).await);
    let (_, html) = page(&api, "/ui", &cookie).await;
    let resp = post_form(&api, "/ui/logout", Some(&cookie), &[("csrf", &csrf(&html))]).await;
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers()[LOCATION], "/ui/login");
    let cleared = resp.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    assert!(
        cleared.starts_with("racklift_session=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
    assert!(!session_works(&api, &cookie).await);
    assert_eq!(sessions(&api).await, 0);

    // Two sessions of one token are distinct, and so are their CSRF tokens; one's token is refused in the other.
    let (a, b) = (login(&api, OPERATOR).await, login(&api, OPERATOR).await);
    assert_ne!(a, b);
    let (_, page_a) = page(&api, "/ui", &a).await;
    let (_, page_b) = page(&api, "/ui", &b).await;
    assert_ne!(csrf(&page_a), csrf(&page_b));
    let resp = post_form(&api, "/ui/logout", Some(&b), &[("csrf", &csrf(&page_a))]).await;
    assert_eq!(resp.status(), 403);
    assert!(session_works(&api, &a).await && session_works(&api, &b).await);

    // Revoking the token ends every session made with it (the rows go with the token).
    let viewer = login(&api, VIEWER).await;
    assert!(session_works(&api, &viewer).await);
    assert!(api.store.revoke_api_token("operator").await.expect("revoke"));
    assert!(!session_works(&api, &a).await && !session_works(&api, &b).await);
    assert!(
        session_works(&api, &viewer).await,
        "another token's session is untouched"
    );
    assert_eq!(sessions(&api).await, 1);

    // A session past its expiry is over, by the database's clock.
    sqlx::query("UPDATE ui_sessions SET expires_at = now() - interval '1 second'")
        .execute(&api.db.pool)
        .await
        .expect("expire the session");
    assert!(!session_works(&api, &viewer).await);

    // So is one whose token expired after the login.
    let viewer = login(&api, VIEWER).await;
    sqlx::query("UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE name = 'viewer'")
        .execute(&api.db.pool)
        .await
        .expect("expire the token");
    assert!(!session_works(&api, &viewer).await);
    api.stop().await;
}

#[tokio::test]
async fn a_token_rekeyed_or_given_another_role_ends_its_sessions_and_expiry_caps_them() {
    let api = Api::start().await;
    // Re-creating a token under its name (as `racklift up` does on every start) ends the old one's sessions.
    let cookie = login(&api, OPERATOR).await;
    api.store
        .put_api_token("operator", OPERATOR, Role::Operator)
        .await
        .expect("same secret, same role");
    assert!(
        session_works(&api, &cookie).await,
        "an unchanged token keeps its sessions"
    );
    api.store
        .put_api_token("operator", "operator-secret-2", Role::Operator)
        .await
        .expect("rekey");
    assert!(!session_works(&api, &cookie).await);
    // A role taken away takes the sessions opened with the old role.
    let cookie = login(&api, "operator-secret-2").await;
    api.store
        .put_api_token("operator", "operator-secret-2", Role::Viewer)
        .await
        .expect("demote");
    assert!(!session_works(&api, &cookie).await);

    // A session never outlives its token: one made from a token expiring in an hour expires with it.
    let soon = chrono::Utc::now() + chrono::Duration::hours(1);
    let secret = api
        .store
        .create_api_token("short", Role::Viewer, Some(soon))
        .await
        .expect("token");
    let cookie = login(&api, &secret).await;
    assert!(session_works(&api, &cookie).await);
    let capped: bool = sqlx::query_scalar(
        "SELECT s.expires_at = t.expires_at FROM ui_sessions s JOIN api_tokens t ON t.id = s.api_token_id \
         WHERE t.name = 'short'",
    )
    .fetch_one(&api.db.pool)
    .await
    .expect("the session");
    assert!(capped);
    // An expired token opens no session at all.
    sqlx::query("UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE name = 'short'")
        .execute(&api.db.pool)
        .await
        .expect("expire");
    let resp = post_form(&api, "/ui/login", None, &[("token", &secret)]).await;
    assert_eq!(resp.status(), 401);
    api.stop().await;
}

#[tokio::test]
async fn every_dashboard_answer_carries_the_security_headers_and_the_pages_no_inline_code() {
    let api = Api::start().await;
    let seed = Seed::new(&api).await;
    seed.server(&api, "node1", "dell").await;
    let failed = seed
        .failed_deployment(
            &api,
            "node1",
            State::AttachMedia,
            "rejected_value",
            "Base.1.8.PropertyValueNotInList",
        )
        .await;
    let cookie = login(&api, OPERATOR).await;
    let detail = format!("/ui/deadletters/{}", failed.dead_letter_id);
    let mut answers = Vec::new();
    for (path, cookie, status) in [
        ("/ui/login", "", 200),
        ("/ui", "", 303),
        ("/ui", cookie.as_str(), 200),
        ("/ui/fragments/deadletters", "", 401),
        ("/ui/fragments/deadletters", cookie.as_str(), 200),
        (detail.as_str(), cookie.as_str(), 200),
        ("/ui/deadletters/999999", cookie.as_str(), 404),
        ("/ui/stats", cookie.as_str(), 200),
        ("/ui/no-such-page", cookie.as_str(), 404),
        ("/ui/", "", 308),
    ] {
        let resp = get(&api, path, cookie).await;
        assert_eq!(resp.status().as_u16(), status, "{path}");
        answers.push((path.to_owned(), resp));
    }
    answers.push((
        "POST /ui/login".to_owned(),
        post_form(&api, "/ui/login", None, &[("token", "nope")]).await,
    ));
    for (what, resp) in answers {
        let h = resp.headers();
        let csp = h[CONTENT_SECURITY_POLICY].to_str().unwrap();
        for directive in [
            "default-src 'self'",
            "frame-ancestors 'none'",
            "form-action 'self'",
            "base-uri 'none'",
        ] {
            assert!(csp.split("; ").any(|d| d == directive), "{what}: {csp}");
        }
        assert!(!csp.contains("unsafe-inline"), "{what}: {csp}");
        assert_eq!(h[X_FRAME_OPTIONS], "DENY", "{what}");
        assert_eq!(h[X_CONTENT_TYPE_OPTIONS], "nosniff", "{what}");
        assert_eq!(h[REFERRER_POLICY], "no-referrer", "{what}");
        assert_eq!(h[CACHE_CONTROL], "no-store", "{what}");
        let html = resp.text().await.unwrap();
        // Under that policy an inline script or style would not run: the pages must have none.
        assert!(
            !html.contains("<style") && !html.contains(" style="),
            "{what}: inline style"
        );
        for script in html.split("<script").skip(1) {
            assert!(script.starts_with(" src=\"/ui/assets/"), "{what}: inline script");
        }
    }

    // The stylesheet and the live-refresh script the pages load: served from this origin, cacheable briefly.
    for (path, kind) in [
        ("/ui/assets/ui.css", "text/css"),
        ("/ui/assets/live.js", "text/javascript"),
    ] {
        let resp = get(&api, path, "").await;
        assert_eq!(resp.status(), 200, "{path}");
        assert!(
            resp.headers()[CONTENT_TYPE].to_str().unwrap().starts_with(kind),
            "{path}"
        );
        assert_eq!(resp.headers()[CACHE_CONTROL], "public, max-age=300");
        assert_eq!(resp.headers()[X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert!(resp.headers().contains_key(CONTENT_SECURITY_POLICY));
    }
    let (_, html) = page(&api, "/ui", &cookie).await;
    assert!(
        html.contains(r#"<link rel="stylesheet" href="/ui/assets/ui.css">"#),
        "{html}"
    );
    assert!(
        html.contains(r#"<script src="/ui/assets/live.js"></script>"#),
        "{html}"
    );
    api.stop().await;
}

#[tokio::test]
async fn the_trailing_slash_redirects_to_the_dashboard() {
    let api = Api::start().await;
    for (from, to) in [
        ("/ui/", "/ui"),
        ("/ui/?server=node1&status=open", "/ui?server=node1&status=open"),
    ] {
        let resp = get(&api, from, "").await;
        assert_eq!(resp.status(), 308, "{from}");
        assert_eq!(resp.headers()[LOCATION], to, "{from}");
    }
    // A HEAD is redirected alike, and a POST is not a page: nothing there.
    let resp = client()
        .request(Method::HEAD, format!("{}/ui/", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 308);
    let resp = post_form(&api, "/ui/", None, &[]).await;
    assert_eq!(resp.status(), 405);
    api.stop().await;
}

/// Login CSRF: a login form posted from another site (by its `Origin` or the browser's `Sec-Fetch-Site`) is
/// refused 403 with the reason and opens no session, while the dashboard's own origin, a navigation the user typed
/// and a client sending neither header (curl, scripts) log in.
#[tokio::test]
async fn a_login_posted_from_another_site_is_refused() {
    let api = Api::start().await;
    let own = api.base.trim_end_matches('/').to_owned();
    let post = |headers: Vec<(&'static str, String)>| {
        let api = &api;
        async move {
            let mut r = client()
                .post(format!("{}/ui/login", api.base))
                .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(ui_client::urlencode(&[("token", OPERATOR)]));
            for (k, v) in headers {
                r = r.header(k, v);
            }
            r.send().await.expect("POST")
        }
    };
    for (headers, reason) in [
        (vec![("origin", "https://evil.example".to_owned())], "Origin"),
        (vec![("origin", "null".to_owned())], "Origin"),
        (
            vec![("sec-fetch-site", "cross-site".to_owned())],
            "Sec-Fetch-Site",
        ),
        (
            vec![
                ("origin", own.clone()),
                ("sec-fetch-site", "same-site".to_owned()),
            ],
            "Sec-Fetch-Site",
        ),
    ] {
        let resp = post(headers.clone()).await;
        assert_eq!(resp.status(), 403, "{headers:?}");
        assert!(resp.headers().get(SET_COOKIE).is_none(), "{headers:?}");
        let html = resp.text().await.unwrap();
        assert!(
            html.contains("cross-site") && html.contains(reason),
            "{headers:?}: {html}"
        );
    }
    assert_eq!(sessions(&api).await, 0);
    for headers in [
        vec![
            ("origin", own.clone()),
            ("sec-fetch-site", "same-origin".to_owned()),
        ],
        vec![("sec-fetch-site", "none".to_owned())],
        // What a browser sends for the dashboard's own form under `Referrer-Policy: no-referrer`.
        vec![
            ("origin", "null".to_owned()),
            ("sec-fetch-site", "same-origin".to_owned()),
        ],
        vec![],
    ] {
        let resp = post(headers.clone()).await;
        assert_eq!(resp.status(), 303, "{headers:?}");
    }
    assert_eq!(sessions(&api).await, 4);
}
