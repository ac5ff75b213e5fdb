//! The issuance policy's vocabulary (contract 0.2 `issuance-policy` world): what is about to be
//! issued, and the policy's decision. How decisions combine (any deny denies, then any
//! require-approval holds, the shortest allowed validity wins, a failing policy denies) is the
//! issuance use case's rule; [`combine`] states it once.

use serde::Serialize;
use trellis_pki::{Subject, SubjectAltName, SubjectKey};

/// Where an issuance comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IssuanceSource {
    Api,
    RequestWorkflow,
    Attestation,
    Renewal,
}

/// What kind of principal asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequesterKind {
    User,
    ApiKey,
    Agent,
    System,
}

/// Who asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requester {
    pub kind: RequesterKind,
    pub id: String,
    pub display_name: Option<String>,
}

/// What is about to be issued.
#[derive(Debug, Clone, PartialEq)]
pub struct EvaluationRequest {
    pub ca_type: String,
    pub ca_id: String,
    pub template: Option<String>,
    pub subject: Subject,
    pub subject_alt_names: Vec<SubjectAltName>,
    pub key: SubjectKey,
    pub validity_days: u32,
    pub requester: Requester,
    pub source: IssuanceSource,
}

/// One machine-readable reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyReason {
    pub code: String,
    pub message: String,
}

/// A policy's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead, optionally with validity shortened to this many days.
    Allow {
        max_validity_days: Option<u32>,
    },
    Deny(Vec<PolicyReason>),
    RequireApproval(Vec<PolicyReason>),
}

impl Decision {
    /// What a policy that could not decide (an error, trap or timeout) counts as: policies fail
    /// closed.
    pub fn failed(policy: &str, error: &dyn std::fmt::Display) -> Decision {
        Decision::Deny(vec![PolicyReason {
            code: "policy-failed".into(),
            message: format!("policy {policy} could not decide: {error}"),
        }])
    }
}

/// The decisions of every policy bound to the workspace, combined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Combined {
    /// Proceed with this validity (the request's, or the shortest any policy allowed).
    Proceed {
        validity_days: u32,
    },
    Denied(Vec<PolicyReason>),
    NeedsApproval(Vec<PolicyReason>),
}

/// Combines decisions for a request asking `requested_days`: any deny denies (with the reasons
/// of every denying policy), then any require-approval holds, else the shortest allowed
/// validity applies (never longer than requested).
pub fn combine(requested_days: u32, decisions: impl IntoIterator<Item = Decision>) -> Combined {
    let mut denied = Vec::new();
    let mut approval = Vec::new();
    let mut validity_days = requested_days;
    let mut any_denied = false;
    let mut any_approval = false;
    for decision in decisions {
        match decision {
            Decision::Deny(reasons) => {
                any_denied = true;
                denied.extend(reasons);
            }
            Decision::RequireApproval(reasons) => {
                any_approval = true;
                approval.extend(reasons);
            }
            Decision::Allow { max_validity_days: Some(days) } => validity_days = validity_days.min(days.max(1)),
            Decision::Allow { max_validity_days: None } => {}
        }
    }
    if any_denied {
        Combined::Denied(denied)
    } else if any_approval {
        Combined::NeedsApproval(approval)
    } else {
        Combined::Proceed { validity_days }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(code: &str) -> PolicyReason {
        PolicyReason { code: code.into(), message: code.into() }
    }

    #[test]
    fn any_deny_wins_then_approval_then_the_shortest_validity() {
        let allow = |days| Decision::Allow { max_validity_days: days };
        assert_eq!(
            combine(90, [allow(None), allow(Some(30)), allow(Some(60))]),
            Combined::Proceed { validity_days: 30 }
        );
        assert_eq!(combine(10, [allow(Some(30))]), Combined::Proceed { validity_days: 10 }, "never lengthened");
        assert_eq!(
            combine(90, [Decision::RequireApproval(vec![reason("a")]), Decision::Deny(vec![reason("d")])]),
            Combined::Denied(vec![reason("d")])
        );
        assert_eq!(
            combine(90, [allow(None), Decision::RequireApproval(vec![reason("a")])]),
            Combined::NeedsApproval(vec![reason("a")])
        );
        assert_eq!(combine(90, []), Combined::Proceed { validity_days: 90 });
    }
}
