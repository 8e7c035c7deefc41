//! The audit of one Incus cluster: how many members were out of service for an evacuation at once, what each member
//! was asked to do through the Incus API, and the fencing of those requests.
//!
//! A rolling operation must not take more members out than its budget allows, so the audit keeps the highest number
//! of members at once that were not `Online` because of an evacuation (evacuating, evacuated or restoring), counted
//! from the last reset. A reset starts from the members out at that moment and names them, so a test that
//! evacuates one member by hand before a run can account for it.
//!
//! racklift sends its lease's fencing token in [`FENCE_HEADER`](crate::FENCE_HEADER) on every Incus mutation, as on
//! BMC requests. Per member the audit keeps the highest token seen (whichever member's API received the request); a
//! lower one is a stale mutation, and a mutation without the header is unfenced. Both are still executed.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// What one member was asked through the Incus API.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberCounts {
    /// `POST /1.0/cluster/members/<member>/state` `evacuate` requests accepted.
    pub evacuations: u64,
    /// `restore` requests accepted.
    pub restores: u64,
    /// `POST /os/1.0/system/:reboot` requests on the member's own API.
    pub reboots: u64,
}

/// An Incus mutation older than one already seen for its member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncusStaleMutation {
    /// The member acted on.
    pub member: String,
    pub method: String,
    pub path: String,
    pub token: u64,
    pub highest_seen: u64,
}

/// Snapshot returned by `GET /control/clusters/<cluster>/audit` and [`crate::SimHandle::cluster_audit`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterAuditReport {
    /// Highest number of members at once not `Online` because of an evacuation, since the last reset (including
    /// those already out at the reset).
    pub max_evacuated_at_once: u32,
    /// Members out for an evacuation now.
    pub evacuated_now: Vec<String>,
    /// Members that were out for an evacuation when the audit was last reset (or the cluster formed).
    pub evacuated_at_reset: Vec<String>,
    /// Per member (hostname): what it was asked.
    pub members: BTreeMap<String, MemberCounts>,
    /// Incus mutations (member state, `:check`, `:reboot`, application `:restart`) on the cluster's members.
    pub mutations: u64,
    pub fenced_mutations: u64,
    /// Mutations without (or with an unparsable) fence header.
    pub unfenced_mutations: u64,
    pub stale_mutations: Vec<IncusStaleMutation>,
}

/// The audit state of one cluster (kept under the fleet's cluster lock).
#[derive(Debug, Default)]
pub struct ClusterAudit {
    max_evacuated: u32,
    at_reset: BTreeSet<String>,
    members: BTreeMap<String, MemberCounts>,
    highest: BTreeMap<String, u64>,
    fenced: u64,
    unfenced: u64,
    stale: Vec<IncusStaleMutation>,
}

impl ClusterAudit {
    /// Start over from the members out now.
    pub fn reset(&mut self, out_now: &BTreeSet<String>) {
        *self = ClusterAudit {
            max_evacuated: out_now.len() as u32,
            at_reset: out_now.clone(),
            ..ClusterAudit::default()
        };
    }

    /// The members out for an evacuation now: keeps the highest count.
    pub fn observe(&mut self, out_now: &BTreeSet<String>) {
        self.max_evacuated = self.max_evacuated.max(out_now.len() as u32);
    }

    pub fn counts(&mut self, member: &str) -> &mut MemberCounts {
        self.members.entry(member.to_owned()).or_default()
    }

    /// Record a mutation acting on `member` and its fence header value.
    pub fn mutation(&mut self, member: &str, method: &str, path: &str, fence: Option<&str>) {
        match fence.and_then(|f| f.trim().parse::<u64>().ok()) {
            None => self.unfenced += 1,
            Some(token) => {
                self.fenced += 1;
                match self.highest.get(member).copied() {
                    Some(highest) if token < highest => self.stale.push(IncusStaleMutation {
                        member: member.to_owned(),
                        method: method.to_owned(),
                        path: path.to_owned(),
                        token,
                        highest_seen: highest,
                    }),
                    _ => {
                        self.highest.insert(member.to_owned(), token);
                    }
                }
            }
        }
    }

    pub fn report(&self, out_now: &BTreeSet<String>) -> ClusterAuditReport {
        ClusterAuditReport {
            max_evacuated_at_once: self.max_evacuated.max(out_now.len() as u32),
            evacuated_now: out_now.iter().cloned().collect(),
            evacuated_at_reset: self.at_reset.iter().cloned().collect(),
            members: self.members.clone(),
            mutations: self.fenced + self.unfenced,
            fenced_mutations: self.fenced,
            unfenced_mutations: self.unfenced,
            stale_mutations: self.stale.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lower_token_for_the_same_member_is_stale_and_other_members_have_their_own() {
        let mut audit = ClusterAudit::default();
        audit.mutation("a", "POST", "/x", Some("5"));
        audit.mutation("b", "POST", "/x", Some("2"));
        audit.mutation("a", "POST", "/y", Some("4"));
        audit.mutation("a", "POST", "/z", None);
        let report = audit.report(&BTreeSet::new());
        assert_eq!(report.mutations, 4);
        assert_eq!(report.unfenced_mutations, 1);
        assert_eq!(report.stale_mutations.len(), 1);
        assert_eq!(report.stale_mutations[0].member, "a");
        assert_eq!(report.stale_mutations[0].highest_seen, 5);
    }

    #[test]
    fn a_reset_starts_from_the_members_out_at_that_moment() {
        let mut audit = ClusterAudit::default();
        let out: BTreeSet<String> = ["a".to_owned(), "b".to_owned()].into();
        audit.observe(&out);
        audit.reset(&["b".to_owned()].into());
        let report = audit.report(&BTreeSet::new());
        assert_eq!(report.max_evacuated_at_once, 1);
        assert_eq!(report.evacuated_at_reset, vec!["b".to_owned()]);
    }
}
