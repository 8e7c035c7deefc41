//! Which certificate a cluster's members are trusted by, learned from the members themselves.
//!
//! Operations Center records the cluster certificate from the bootstrap operation it runs and pins it for every
//! clustered server (`server_model.go:60-70` `GetCertificate`; `cluster_service.go:373-385`). racklift does not
//! bootstrap clusters: an operator forms them and registers them, so racklift reads each member once, noting the
//! certificate it serves on the wire without trusting it for anything else, and what its Incus says it serves
//! (`GET /1.0` → `environment.certificate`). [`decide`] accepts a certificate only when every member agrees.

/// One member as that read found it. Certificates are SHA-256 fingerprints (64 hex digits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberCertificate {
    pub server: String,
    /// The certificate the member registered with (or a repin recorded), if any.
    pub registered: Option<String>,
    /// The certificate presented at the TLS handshake.
    pub served: String,
    /// The fingerprint of `environment.certificate`; `None` when the member reported none or an unreadable one.
    pub reported: Option<String>,
    /// `environment.server_clustered`.
    pub clustered: bool,
}

/// What the members' certificates allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateDecision {
    /// Every member is clustered and serves this certificate: it is the cluster's, and the one to pin.
    Cluster(String),
    /// Not every member is clustered yet; the standalone ones still serve their registration certificate, which
    /// stays their pin.
    KeepRegistration,
}

/// Why no certificate can be trusted for the members: a sentence naming the server and what it served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CertificateRefusal(pub String);

/// The rule: a member whose Incus reports a certificate other than the one it serves is refused; a standalone
/// member must serve its registration certificate; clustered members must all serve the same certificate. Only
/// when every member is clustered and they agree is that certificate the cluster's.
pub fn decide(members: &[MemberCertificate]) -> Result<CertificateDecision, CertificateRefusal> {
    let mut cluster: Option<&MemberCertificate> = None;
    let mut all_clustered = !members.is_empty();
    for m in members {
        if m.reported.as_deref() != Some(m.served.as_str()) {
            return Err(CertificateRefusal(format!(
                "server {} serves certificate {} but its Incus reports {}",
                m.server,
                m.served,
                m.reported.as_deref().unwrap_or("none")
            )));
        }
        if !m.clustered {
            all_clustered = false;
            if m.registered.as_deref() != Some(m.served.as_str()) {
                return Err(CertificateRefusal(format!(
                    "server {} is not clustered and serves certificate {}, not the one it registered with ({})",
                    m.server,
                    m.served,
                    m.registered.as_deref().unwrap_or("none")
                )));
            }
            continue;
        }
        match cluster {
            None => cluster = Some(m),
            Some(first) if first.served == m.served => {}
            Some(first) => {
                return Err(CertificateRefusal(format!(
                    "server {} serves certificate {}, server {} serves {}: the members do not agree on a cluster \
                     certificate",
                    m.server, m.served, first.server, first.served
                )));
            }
        }
    }
    match cluster {
        Some(first) if all_clustered => Ok(CertificateDecision::Cluster(first.served.clone())),
        _ => Ok(CertificateDecision::KeepRegistration),
    }
}

#[cfg(test)]
mod tests {
    use super::{CertificateDecision, MemberCertificate, decide};

    fn member(
        server: &str,
        registered: &str,
        served: &str,
        reported: &str,
        clustered: bool,
    ) -> MemberCertificate {
        MemberCertificate {
            server: server.into(),
            registered: (!registered.is_empty()).then(|| registered.into()),
            served: served.into(),
            reported: (!reported.is_empty()).then(|| reported.into()),
            clustered,
        }
    }

    #[test]
    fn a_certificate_is_the_clusters_only_when_every_member_is_clustered_and_serves_it() {
        use CertificateDecision::{Cluster, KeepRegistration};
        let cluster = |s: &str| Ok::<_, String>(Cluster(s.into()));
        let keep = Ok::<_, String>(KeepRegistration);
        let refused = |s: &str| Err::<CertificateDecision, String>(s.into());
        #[rustfmt::skip]
        let cases = [
            ("all clustered, one certificate",
             vec![member("a", "ra", "c", "c", true), member("b", "rb", "c", "c", true)], cluster("c")),
            ("the cluster certificate may be the bootstrap member's own",
             vec![member("a", "c", "c", "c", true), member("b", "rb", "c", "c", true)], cluster("c")),
            ("all standalone, each on its registration certificate",
             vec![member("a", "ra", "ra", "ra", false), member("b", "rb", "rb", "rb", false)], keep.clone()),
            ("one clustered, one standalone on its registration certificate",
             vec![member("a", "ra", "c", "c", true), member("b", "rb", "rb", "rb", false)], keep.clone()),
            ("members disagree",
             vec![member("a", "ra", "c", "c", true), member("b", "rb", "d", "d", true)],
             refused("server b serves certificate d, server a serves c: the members do not agree on a cluster certificate")),
            ("standalone member on a certificate it did not register",
             vec![member("a", "ra", "x", "x", false)],
             refused("server a is not clustered and serves certificate x, not the one it registered with (ra)")),
            ("standalone member that registered none",
             vec![member("a", "", "x", "x", false)],
             refused("server a is not clustered and serves certificate x, not the one it registered with (none)")),
            ("wire and reported certificate differ",
             vec![member("a", "ra", "c", "c", true), member("b", "rb", "c", "e", true)],
             refused("server b serves certificate c but its Incus reports e")),
            ("no reported certificate",
             vec![member("a", "ra", "c", "", true)],
             refused("server a serves certificate c but its Incus reports none")),
            ("no members", vec![], keep.clone()),
        ];
        for (label, members, want) in cases {
            let got = decide(&members).map_err(|e| e.0);
            assert_eq!(got, want, "{label}");
        }
    }
}
