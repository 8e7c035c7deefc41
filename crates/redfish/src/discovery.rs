//! Which ComputerSystem a client manages. Most BMCs list one System, the server; some list more: NVIDIA GH200 and
//! GB200 baseboards add a baseboard System, servers with a DPU list the DPU (`SystemType: DPU`) beside the host.
//! Taking the first member there could power-cycle the DPU instead of the server, so the choice is explicit
//! (a configured Id) or unambiguous (the only member that could be the host), and otherwise an error that names
//! the candidates.

use serde::Deserialize;

use crate::client::BmcClient;
use crate::error::{Error, Result};
use crate::model::{Collection, ServiceRoot};

/// The URI of the System `client` manages: the member `hint` names (by URI or Id), else the only member of
/// `Systems`, else the only one that could be the host. Members are read only when the collection alone cannot
/// tell, so a single-System BMC costs the two GETs it always did.
pub(crate) async fn resolve(client: &BmcClient, hint: Option<&str>) -> Result<String> {
    let root: ServiceRoot = client.get_json("/redfish/v1/").await?;
    let systems = root.systems.ok_or_else(|| Error::Unsupported {
        what: "Systems collection".into(),
    })?;
    let collection: Collection = client.get_json(&systems.odata_id).await?;
    let paths: Vec<String> = collection.members.into_iter().map(|l| l.odata_id).collect();
    if paths.is_empty() {
        return Err(Error::Unsupported {
            what: format!("ComputerSystem (empty collection {})", systems.odata_id),
        });
    }
    match hint {
        Some(hint) => {
            if let Some(path) = by_path(&paths, hint) {
                return Ok(path.clone());
            }
        }
        None if paths.len() == 1 => return Ok(paths[0].clone()),
        None => {}
    }
    let mut members = Vec::with_capacity(paths.len());
    for path in paths {
        let identity: SystemIdentity = client.get_json(&path).await?;
        members.push(Member::new(path, identity));
    }
    let chosen = match hint {
        Some(hint) => by_id(&members, hint)?,
        None => by_default(&members)?,
    };
    tracing::debug!(server = %client.server(), system = %chosen.path, members = members.len(),
        "chose the managed ComputerSystem");
    Ok(chosen.path.clone())
}

/// One member of `Systems`, as far as choosing among them needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Member {
    /// The member's URI, as the collection lists it.
    pub path: String,
    /// Its `Id` (the last URI segment when the resource has none).
    pub id: String,
    /// Its `SystemType`, when it reports one.
    pub system_type: Option<String>,
}

/// The properties of a ComputerSystem that the choice reads.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct SystemIdentity {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub system_type: Option<String>,
}

impl Member {
    pub(crate) fn new(path: String, identity: SystemIdentity) -> Member {
        let id = identity
            .id
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| last_segment(&path).to_owned());
        Member {
            path,
            id,
            system_type: identity.system_type,
        }
    }

    /// Whether this System could be the server itself. ComputerSystem's `SystemType` defaults to `Physical`;
    /// the other values (`DPU`, `OS`, `Virtual`, the partitions, `Composed`) name something that runs on or
    /// beside the server.
    fn could_be_host(&self) -> bool {
        self.system_type.as_deref().is_none_or(|t| t == "Physical")
    }
}

/// The last segment of a URI, trailing `/` ignored (iLO writes `/redfish/v1/Systems/1/`).
pub(crate) fn last_segment(path: &str) -> &str {
    let path = path.trim_end_matches('/');
    path.rsplit('/').next().unwrap_or(path)
}

/// The member a configured hint names without reading the members: by URI, else by the URI's last segment
/// (which is the `Id` on every BMC racklift knows). A URI hint is matched by its last segment too, so it holds
/// behind a path prefix (a proxy, the simulator's `/bmc/<name>`).
pub(crate) fn by_path<'a>(paths: &'a [String], hint: &str) -> Option<&'a String> {
    let trimmed = hint.trim_end_matches('/');
    paths
        .iter()
        .find(|p| p.trim_end_matches('/') == trimmed)
        .or_else(|| paths.iter().find(|p| last_segment(p) == last_segment(hint)))
}

/// The member whose `Id` is `hint`, else [`Error::SystemNotFound`] listing the Ids there are.
pub(crate) fn by_id<'a>(members: &'a [Member], hint: &str) -> Result<&'a Member> {
    members
        .iter()
        .find(|m| m.id == hint)
        .ok_or_else(|| Error::SystemNotFound {
            id: hint.to_owned(),
            available: members.iter().map(|m| m.id.clone()).collect(),
        })
}

/// Without a hint: the only member that could be the host, else [`Error::AmbiguousSystem`] naming the
/// candidates (every member when none could be the host).
pub(crate) fn by_default(members: &[Member]) -> Result<&Member> {
    if let [only] = members {
        return Ok(only);
    }
    let hosts: Vec<&Member> = members.iter().filter(|m| m.could_be_host()).collect();
    match hosts.as_slice() {
        [host] => Ok(host),
        [] => Err(Error::AmbiguousSystem {
            candidates: members.iter().map(|m| m.id.clone()).collect(),
        }),
        several => Err(Error::AmbiguousSystem {
            candidates: several.iter().map(|m| m.id.clone()).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, system_type: Option<&str>) -> Member {
        Member {
            path: format!("/redfish/v1/Systems/{id}"),
            id: id.to_owned(),
            system_type: system_type.map(str::to_owned),
        }
    }

    #[test]
    fn the_default_is_the_only_member_or_the_only_possible_host() {
        let dpu = member("Bluefield_0", Some("DPU"));
        let host = member("System_0", Some("Physical"));
        let untyped = member("1", None);
        let baseboard = member("HGX_Baseboard_0", Some("Physical"));
        let os = member("OS", Some("OS"));
        // (what, members, the chosen Id or the candidates named)
        type Case<'a> = (&'a str, Vec<Member>, Result<&'a str, Vec<&'a str>>);
        let cases: [Case; 7] = [
            ("one member, whatever it is", vec![dpu.clone()], Ok("Bluefield_0")),
            ("host and DPU", vec![dpu.clone(), host.clone()], Ok("System_0")),
            (
                "untyped host and DPU",
                vec![untyped.clone(), dpu.clone()],
                Ok("1"),
            ),
            (
                "host, OS and DPU",
                vec![host.clone(), os.clone(), dpu.clone()],
                Ok("System_0"),
            ),
            (
                "two physical",
                vec![host.clone(), dpu.clone(), baseboard.clone()],
                Err(vec!["System_0", "HGX_Baseboard_0"]),
            ),
            (
                "untyped and physical",
                vec![untyped, host],
                Err(vec!["1", "System_0"]),
            ),
            ("no possible host", vec![dpu, os], Err(vec!["Bluefield_0", "OS"])),
        ];
        for (what, members, want) in cases {
            let got = by_default(&members).map(|m| m.id.as_str());
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{what}"),
                (Err(Error::AmbiguousSystem { candidates }), Err(want)) => {
                    assert_eq!(candidates, want, "{what}")
                }
                (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_hint_names_a_member_by_uri_segment_or_id() {
        let paths = vec![
            "/redfish/v1/Systems/1/".to_owned(),
            "/redfish/v1/Systems/Bluefield_0".to_owned(),
        ];
        let cases = [
            ("1", Some(0)),
            ("/redfish/v1/Systems/1", Some(0)),
            ("/redfish/v1/Systems/1/", Some(0)),
            ("/bmc/a/redfish/v1/Systems/Bluefield_0", Some(1)),
            ("Bluefield_0", Some(1)),
            ("Bluefield", None),
            ("Systems", None),
            ("2", None),
        ];
        for (hint, want) in cases {
            assert_eq!(by_path(&paths, hint), want.map(|i| &paths[i]), "{hint}");
        }
        let members = vec![Member {
            path: "/redfish/v1/Systems/abc".into(),
            id: "System.Embedded.1".into(),
            system_type: None,
        }];
        assert_eq!(
            by_id(&members, "System.Embedded.1").expect("by Id").path,
            "/redfish/v1/Systems/abc"
        );
        let err = by_id(&members, "System_0").expect_err("no such Id");
        assert!(matches!(&err, Error::SystemNotFound { id, available }
            if id == "System_0" && available == &["System.Embedded.1"]));
        assert_eq!(
            err.to_string(),
            "the BMC has no ComputerSystem \"System_0\"; its Systems are \"System.Embedded.1\""
        );
        assert!(!err.is_retryable());
    }

    #[test]
    fn a_member_without_an_id_is_known_by_its_uri() {
        let identity = |id: Option<&str>| SystemIdentity {
            id: id.map(str::to_owned),
            system_type: None,
        };
        assert_eq!(
            Member::new("/redfish/v1/Systems/7/".into(), identity(None)).id,
            "7"
        );
        assert_eq!(
            Member::new("/redfish/v1/Systems/7".into(), identity(Some(""))).id,
            "7"
        );
        assert_eq!(
            Member::new("/redfish/v1/Systems/7".into(), identity(Some("Seven"))).id,
            "Seven"
        );
    }
}
