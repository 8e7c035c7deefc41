//! AccountService: accounts and the predefined roles (AccountService.v1_15_0, ManagerAccount.v1_10_0,
//! Role.v1_3_1). Accounts are created by POST to the collection, changed by PATCH (with `If-Match` honoured
//! and the account's own ETag), and deleted; roles are predefined and read-only.
#![expect(
    clippy::result_large_err,
    reason = "the error is the answer, built once per bad request"
)]

use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::Ctx;
use crate::accounts::{self, CreateError, Privilege, Role};
use crate::etag;
use crate::reply;

pub const ACCOUNT_SERVICE: &str = "/redfish/v1/AccountService";
pub const ACCOUNTS: &str = "/redfish/v1/AccountService/Accounts";
pub const ROLES: &str = "/redfish/v1/AccountService/Roles";

pub fn service(ctx: &Ctx<'_>) -> Response {
    reply::ok(&json!({
        "@odata.id": ctx.uri(ACCOUNT_SERVICE),
        "@odata.type": "#AccountService.v1_15_0.AccountService",
        "@odata.context": "/redfish/v1/$metadata#AccountService.AccountService",
        "Id": "AccountService",
        "Name": "Account Service",
        "ServiceEnabled": true,
        "Status": {"State": "Enabled", "Health": "OK"},
        "MinPasswordLength": accounts::MIN_PASSWORD,
        "MaxPasswordLength": accounts::MAX_PASSWORD,
        "Accounts": ctx.link(ACCOUNTS),
        "Roles": ctx.link(ROLES),
    }))
}

fn account_path(id: u32) -> String {
    format!("{ACCOUNTS}/{id}")
}

fn role_path(role: Role) -> String {
    format!("{ROLES}/{}", role.id())
}

pub fn collection(ctx: &Ctx<'_>) -> Response {
    let members: Vec<String> = ctx.bmc.accounts().ids().into_iter().map(account_path).collect();
    reply::ok(&ctx.collection(
        ACCOUNTS,
        "#ManagerAccountCollection.ManagerAccountCollection",
        "Accounts Collection",
        &members,
    ))
}

pub fn roles(ctx: &Ctx<'_>) -> Response {
    let members: Vec<String> = Role::ALL.into_iter().map(role_path).collect();
    reply::ok(&ctx.collection(
        ROLES,
        "#RoleCollection.RoleCollection",
        "Roles Collection",
        &members,
    ))
}

pub fn role(ctx: &Ctx<'_>, role: Role) -> Response {
    let privileges: Vec<&str> = role.privileges().iter().map(|p| p.name()).collect();
    reply::ok(&json!({
        "@odata.id": ctx.uri(&role_path(role)),
        "@odata.type": "#Role.v1_3_1.Role",
        "@odata.context": "/redfish/v1/$metadata#Role.Role",
        "Id": role.id(),
        "Name": format!("{} Role", role.id()),
        "RoleId": role.id(),
        "IsPredefined": true,
        "AssignedPrivileges": privileges,
    }))
}

/// The account's representation and its tag (from its generation: a password change is a change too).
fn account_body(ctx: &Ctx<'_>, id: u32) -> Option<(Value, String)> {
    let accounts = ctx.bmc.accounts();
    let a = accounts.get(id)?;
    let tag = etag::tag(
        etag::Style::of(ctx.profile().personality),
        format!("account {id} generation {}", a.generation).as_bytes(),
    );
    let body = json!({
        "@odata.id": ctx.uri(&account_path(id)),
        "@odata.type": "#ManagerAccount.v1_10_0.ManagerAccount",
        "@odata.context": "/redfish/v1/$metadata#ManagerAccount.ManagerAccount",
        "Id": id.to_string(),
        "Name": "User Account",
        "UserName": a.user,
        // The password is write-only: a read shows null.
        "Password": null,
        "RoleId": a.role.id(),
        "Enabled": a.enabled,
        "Locked": a.locked,
        "AccountTypes": ["Redfish"],
        "Links": {"Role": ctx.link(&role_path(a.role))},
    });
    Some((body, tag))
}

fn with_etag(mut resp: Response, tag: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(tag) {
        resp.headers_mut().insert(header::ETAG, v);
    }
    resp
}

pub fn account(ctx: &Ctx<'_>, id: u32) -> Response {
    match account_body(ctx, id) {
        Some((body, tag)) => with_etag(reply::ok(&body), &tag),
        None => reply::not_found(),
    }
}

fn string_field<'b>(body: &'b Value, name: &str) -> Result<Option<&'b str>, Response> {
    match body.get(name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(property_error(
            "PropertyValueTypeError",
            &format!(
                "The value for the property {name} is of a different type than the property can accept."
            ),
            name,
        )),
    }
}

fn property_error(id: &str, message: &str, property: &str) -> Response {
    reply::error(StatusCode::BAD_REQUEST, id, message, &[&format!("#/{property}")])
}

fn password_ok(password: &str) -> Result<(), Response> {
    if (accounts::MIN_PASSWORD..=accounts::MAX_PASSWORD).contains(&password.chars().count()) {
        Ok(())
    } else {
        Err(property_error(
            "PropertyValueFormatError",
            &format!(
                "The value for the property Password does not meet the password policy ({} to {} characters).",
                accounts::MIN_PASSWORD,
                accounts::MAX_PASSWORD
            ),
            "Password",
        ))
    }
}

fn role_field(body: &Value) -> Result<Option<Role>, Response> {
    match string_field(body, "RoleId")? {
        None => Ok(None),
        Some(id) => Role::parse(id).map(Some).ok_or_else(|| {
            property_error(
                "PropertyValueNotInList",
                &format!("The value {id} for the property RoleId is not in the list of acceptable values."),
                "RoleId",
            )
        }),
    }
}

/// `POST Accounts`: needs `ConfigureUsers` (checked before routing).
pub fn create(ctx: &Ctx<'_>) -> Response {
    let body = match ctx.json_body() {
        Ok(b) => b,
        Err(r) => return r,
    };
    let fields = (|| {
        let user = string_field(&body, "UserName")?;
        let password = string_field(&body, "Password")?;
        let role = role_field(&body)?;
        Ok::<_, Response>((user, password, role))
    })();
    let (user, password, role) = match fields {
        Ok(f) => f,
        Err(r) => return r,
    };
    let missing = |name: &str| {
        property_error(
            "CreateFailedMissingReqProperties",
            &format!(
                "The create operation failed because the required property {name} was missing from the request."
            ),
            name,
        )
    };
    let Some(user) = user.filter(|u| !u.is_empty()) else {
        return missing("UserName");
    };
    let Some(password) = password else {
        return missing("Password");
    };
    let Some(role) = role else {
        return missing("RoleId");
    };
    if let Err(r) = password_ok(password) {
        return r;
    }
    let created = ctx.bmc.accounts().create(user, password, role);
    match created {
        Ok(id) => match account_body(ctx, id) {
            Some((body, tag)) => with_etag(reply::created(&ctx.uri(&account_path(id)), &body), &tag),
            None => reply::not_found(),
        },
        Err(CreateError::Exists) => reply::error(
            StatusCode::CONFLICT,
            "ResourceAlreadyExists",
            &format!("The account {user} already exists."),
            &["#/UserName"],
        ),
        Err(CreateError::Full) => reply::error(
            StatusCode::BAD_REQUEST,
            "CreateLimitReachedForResource",
            "The create operation failed because the resource has reached the limit of possible resources.",
            &[],
        ),
    }
}

const WRITABLE: &[&str] = &["UserName", "Password", "RoleId", "Enabled", "Locked"];

/// `PATCH` one account. Any property but the password of one's own account needs `ConfigureUsers`; unknown
/// properties are reported next to the applied ones, or refused when nothing else was asked.
pub fn patch(ctx: &Ctx<'_>, id: u32) -> Response {
    let body = match ctx.json_body() {
        Ok(Value::Object(b)) => b,
        Ok(_) => return reply::bad_json(),
        Err(r) => return r,
    };
    if ctx.bmc.accounts().get(id).is_none() {
        return reply::not_found();
    }
    let (known, unknown): (Map<String, Value>, Map<String, Value>) = body
        .into_iter()
        .filter(|(k, _)| !k.starts_with("@odata."))
        .partition(|(k, _)| WRITABLE.contains(&k.as_str()));
    let own_password_only = id == ctx.principal.account && known.keys().all(|k| k == "Password");
    let may = ctx.principal.role.has(Privilege::ConfigureUsers)
        || (own_password_only && ctx.principal.role.has(Privilege::ConfigureSelf));
    if !may {
        return reply::forbidden(Privilege::ConfigureUsers.name());
    }
    let unknown_messages: Vec<Value> = unknown
        .keys()
        .map(|name| {
            json!({
                "@odata.type": "#Message.v1_1_1.Message",
                "MessageId": format!("{}.PropertyUnknown", reply::BASE),
                "Message": format!("The property {name} is not in the list of valid properties for the resource."),
                "MessageArgs": [name],
                "Severity": "Warning",
                "Resolution": "Remove the unknown property from the request body and resubmit the request if the operation failed.",
                "RelatedProperties": [format!("#/{name}")],
            })
        })
        .collect();
    if known.is_empty() {
        return match unknown.keys().next() {
            Some(name) => property_error(
                "PropertyUnknown",
                &format!("The property {name} is not in the list of valid properties for the resource."),
                name,
            ),
            None => reply::error(
                StatusCode::BAD_REQUEST,
                "NoOperation",
                "The request body submitted contain no data to act upon and no changes to the resource took place.",
                &[],
            ),
        };
    }
    let known = Value::Object(known);
    let checked = (|| {
        let user = string_field(&known, "UserName")?;
        let password = string_field(&known, "Password")?;
        if let Some(p) = password {
            password_ok(p)?;
        }
        let role = role_field(&known)?;
        let flag = |name: &str| match known.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(property_error(
                "PropertyValueTypeError",
                &format!(
                    "The value for the property {name} is of a different type than the property can accept."
                ),
                name,
            )),
        };
        Ok::<_, Response>((user, password, role, flag("Enabled")?, flag("Locked")?))
    })();
    let (user, password, role, enabled, locked) = match checked {
        Ok(c) => c,
        Err(r) => return r,
    };
    {
        let mut all = ctx.bmc.accounts();
        if let Some(u) = user
            && all
                .ids()
                .into_iter()
                .any(|other| other != id && all.get(other).is_some_and(|a| a.user == u))
        {
            return reply::error(
                StatusCode::CONFLICT,
                "ResourceAlreadyExists",
                &format!("The account {u} already exists."),
                &["#/UserName"],
            );
        }
        let Some(a) = all.write(id) else {
            return reply::not_found();
        };
        if let Some(u) = user {
            a.user = u.to_owned();
        }
        if let Some(p) = password {
            a.password = p.to_owned();
        }
        if let Some(r) = role {
            a.role = r;
        }
        if let Some(e) = enabled {
            a.enabled = e;
        }
        if let Some(l) = locked {
            a.locked = l;
        }
    }
    let Some((mut body, tag)) = account_body(ctx, id) else {
        return reply::not_found();
    };
    if !unknown_messages.is_empty() {
        body["@Message.ExtendedInfo"] = Value::Array(unknown_messages);
    }
    with_etag(reply::ok(&body), &tag)
}

/// `DELETE` one account (never the last administrator: the BMC would be locked out).
pub fn delete(ctx: &Ctx<'_>, id: u32) -> Response {
    let mut all = ctx.bmc.accounts();
    let Some(account) = all.get(id) else {
        return reply::not_found();
    };
    if account.role == Role::Administrator
        && all
            .ids()
            .into_iter()
            .filter(|other| all.get(*other).is_some_and(|a| a.role == Role::Administrator))
            .count()
            == 1
    {
        return reply::error(
            StatusCode::CONFLICT,
            "ResourceInUse",
            "The last Administrator account cannot be deleted.",
            &[],
        );
    }
    all.remove(id);
    reply::no_content()
}

/// Whether a method on an account needs more than `Login` before its handler looks at the body.
pub fn needs(method: &Method) -> Option<Privilege> {
    match *method {
        Method::POST | Method::DELETE => Some(Privilege::ConfigureUsers),
        _ => None,
    }
}
