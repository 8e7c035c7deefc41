//! AccountService as the Redfish specification requires it: the three predefined roles, read-only; accounts
//! created, changed and deleted by an administrator; privileges enforced per role; ETags on accounts honoured
//! with `If-Match`, and one winner among writers holding the same tag.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::common::{Client, start};

const ACCOUNTS: &str = "/redfish/v1/AccountService/Accounts";

async fn create(c: &Client, user: &str, role: &str) -> String {
    let (status, headers, body) = c
        .post(
            ACCOUNTS,
            json!({"UserName": user, "Password": "Secret-pw1", "RoleId": role}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["RoleId"], role);
    assert!(
        body["Password"].is_null(),
        "a password is never read back: {body}"
    );
    headers["location"].to_str().expect("location").to_owned()
}

#[tokio::test]
async fn predefined_roles_are_listed_and_cannot_be_changed() {
    let sim = start(1, "generic").await;
    let c = Client::new(&sim);
    let root = c.get("/redfish/v1").await;
    let service = c
        .get(root["AccountService"]["@odata.id"].as_str().expect("link"))
        .await;
    let roles = c
        .get(service["Roles"]["@odata.id"].as_str().expect("Roles"))
        .await;
    let mut ids = Vec::new();
    for member in roles["Members"].as_array().expect("members") {
        let role = c.get(member["@odata.id"].as_str().expect("id")).await;
        assert_eq!(role["IsPredefined"], true);
        ids.push(role["Id"].as_str().expect("Id").to_owned());
    }
    assert_eq!(ids, ["Administrator", "Operator", "ReadOnly"]);
    let (status, headers, _) = c
        .patch(
            "/redfish/v1/AccountService/Roles/ReadOnly",
            json!({"AssignedPrivileges": ["Login", "ConfigureUsers"]}),
        )
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(headers["allow"], "GET, HEAD");
}

#[tokio::test]
async fn each_role_does_what_its_privileges_allow() {
    let sim = start(1, "generic").await;
    let admin = Client::new(&sim);
    let reader_uri = create(&admin, "reader", "ReadOnly").await;
    let operator_uri = create(&admin, "operator", "Operator").await;
    let reader = admin.as_user("reader", "Secret-pw1");
    let operator = admin.as_user("operator", "Secret-pw1");
    let system = admin.system(&sim.bmc_url(0)).await;
    let system_uri = system["@odata.id"].as_str().expect("system").to_owned();
    let boot = json!({"Boot": {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"}});
    let new_user = json!({"UserName": "x", "Password": "Secret-pw1", "RoleId": "ReadOnly"});
    // (who, method, resource, body, expected status)
    let cases: Vec<(&Client, Method, &str, Option<Value>, StatusCode)> = vec![
        (&reader, Method::GET, system_uri.as_str(), None, StatusCode::OK),
        (
            &reader,
            Method::PATCH,
            system_uri.as_str(),
            Some(boot.clone()),
            StatusCode::FORBIDDEN,
        ),
        (
            &operator,
            Method::PATCH,
            system_uri.as_str(),
            Some(boot.clone()),
            StatusCode::NO_CONTENT,
        ),
        (
            &operator,
            Method::POST,
            ACCOUNTS,
            Some(new_user.clone()),
            StatusCode::FORBIDDEN,
        ),
        // Another user's account needs ConfigureUsers; one's own password only ConfigureSelf.
        (
            &reader,
            Method::PATCH,
            operator_uri.as_str(),
            Some(json!({"Password": "Other-pw12"})),
            StatusCode::FORBIDDEN,
        ),
        (
            &reader,
            Method::PATCH,
            reader_uri.as_str(),
            Some(json!({"RoleId": "Administrator"})),
            StatusCode::FORBIDDEN,
        ),
        (
            &reader,
            Method::PATCH,
            reader_uri.as_str(),
            Some(json!({"Password": "Changed-pw1"})),
            StatusCode::OK,
        ),
    ];
    for (who, method, uri, body, expected) in cases {
        let (status, _, answer) = who.send(method.clone(), uri, body.clone(), None).await;
        assert_eq!(status, expected, "{method} {uri} {body:?}: {answer}");
    }
    // The changed password is the one that works now.
    let (status, _, _) = reader.send(Method::GET, &system_uri, None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let reader = admin.as_user("reader", "Changed-pw1");
    let (status, _, _) = reader.send(Method::GET, &system_uri, None, None).await;
    assert_eq!(status, StatusCode::OK);
    // A deleted account can no longer log in.
    let (status, _, _) = admin.send(Method::DELETE, &reader_uri, None, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _, _) = reader.send(Method::GET, &system_uri, None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn account_patches_report_unknown_properties_and_bad_values() {
    let sim = start(1, "generic").await;
    let c = Client::new(&sim);
    let uri = create(&c, "ops", "Operator").await;
    let (status, _, body) = c.patch(&uri, json!({"BogusProp": "foo"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.to_string().contains("BogusProp"), "{body}");
    let (status, _, body) = c
        .patch(&uri, json!({"Password": "Mixed-pw12", "BogusProp": "foo"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["@Message.ExtendedInfo"][0]["MessageArgs"][0], "BogusProp");
    let (status, _, body) = c.patch(&uri, json!({"@odata.id": uri.clone()})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.to_string().contains("NoOperation"), "{body}");
    let (status, _, body) = c.patch(&uri, json!({"RoleId": "Superuser"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.to_string().contains("PropertyValueNotInList"), "{body}");
    let (status, _, _) = c.patch(&uri, json!({"Password": "short"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _, _) = c
        .post(
            ACCOUNTS,
            json!({"UserName": "ops", "Password": "Secret-pw1", "RoleId": "ReadOnly"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "a taken user name");
}

async fn tagged(c: &Client, uri: &str) -> (String, Value) {
    let (status, headers, body) = c.send(Method::GET, uri, None, None).await;
    assert_eq!(status, StatusCode::OK);
    let header = headers["etag"].to_str().expect("ETag").to_owned();
    assert_eq!(
        body["@odata.etag"],
        header.as_str(),
        "the header and the property agree"
    );
    (header, body)
}

#[tokio::test]
async fn account_writes_honour_if_match_and_only_one_of_two_racing_writers_wins() {
    let sim = start(1, "hpe").await;
    let c = Client::new(&sim);
    let uri = create(&c, "ops", "Operator").await;
    let (tag, _) = tagged(&c, &uri).await;
    assert!(tag.starts_with("W/\""), "iLO's tags are weak: {tag}");
    let (again, _) = tagged(&c, &uri).await;
    assert_eq!(tag, again, "stable without a write");

    let conditional = |tag: String, role: &'static str| {
        let c = &c;
        let uri = uri.clone();
        async move { c.http_with_if_match(&uri, &tag, json!({"RoleId": role})).await }
    };
    // A tag the BMC never issued changes nothing.
    assert_eq!(
        conditional(format!("{tag}foobar"), "ReadOnly").await,
        StatusCode::PRECONDITION_FAILED
    );
    assert_eq!(tagged(&c, &uri).await.1["RoleId"], "Operator");
    // Two writers holding the same tag: one applies, the other is told the resource moved on.
    let (a, b) = tokio::join!(
        conditional(tag.clone(), "ReadOnly"),
        conditional(tag.clone(), "ReadOnly")
    );
    let mut statuses = [a, b];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::PRECONDITION_FAILED]);
    let (rotated, body) = tagged(&c, &uri).await;
    assert_eq!(body["RoleId"], "ReadOnly");
    assert_ne!(rotated, tag, "a write rotates the tag");
    // The old tag is refused now; a strong form of the current weak tag matches (weak comparison).
    assert_eq!(
        conditional(tag, "Operator").await,
        StatusCode::PRECONDITION_FAILED
    );
    assert_eq!(
        conditional(rotated.trim_start_matches("W/").to_owned(), "Operator").await,
        StatusCode::OK
    );
}
