//! Who acted, said one way. Every record that names an actor (audit rows, the requester and
//! decider of approval and revocation requests, scans, the requester a policy sees) names a
//! [`Principal`]: a kind and an id, kept as `kind:id` where a record stores it as text.
//!
//! A leaf: the authenticated `auth::Actor` and the audit's `Audit` both reduce to it, so neither
//! parses the other's strings.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PrincipalKind {
    User,
    ApiKey,
    /// A client of the ACME server, by its account id.
    AcmeAccount,
    Agent,
    /// The operator or the service itself; the id names the path (`cli`, `first-start`, a job).
    System,
}

impl PrincipalKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PrincipalKind::User => "user",
            PrincipalKind::ApiKey => "api_key",
            PrincipalKind::AcmeAccount => "acme_account",
            PrincipalKind::Agent => "agent",
            PrincipalKind::System => "system",
        }
    }

    pub fn parse(text: &str) -> Option<PrincipalKind> {
        [
            PrincipalKind::User,
            PrincipalKind::ApiKey,
            PrincipalKind::AcmeAccount,
            PrincipalKind::Agent,
            PrincipalKind::System,
        ]
        .into_iter()
        .find(|kind| kind.as_str() == text)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    pub kind: PrincipalKind,
    pub id: String,
}

impl Principal {
    pub fn new(kind: PrincipalKind, id: impl Into<String>) -> Principal {
        Principal { kind, id: id.into() }
    }

    pub fn user(id: impl Into<String>) -> Principal {
        Principal::new(PrincipalKind::User, id)
    }

    pub fn api_key(id: impl Into<String>) -> Principal {
        Principal::new(PrincipalKind::ApiKey, id)
    }

    pub fn acme_account(id: impl Into<String>) -> Principal {
        Principal::new(PrincipalKind::AcmeAccount, id)
    }

    /// A change no person made: `source` names the operator path or the job.
    pub fn system(source: impl Into<String>) -> Principal {
        Principal::new(PrincipalKind::System, source)
    }

    /// Reads `kind:id` as records keep it; `None` for text in no known kind.
    pub fn parse(text: &str) -> Option<Principal> {
        let (kind, id) = text.split_once(':')?;
        Some(Principal::new(PrincipalKind::parse(kind)?, id))
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.as_str(), self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_reads_back_what_it_writes_and_nothing_else() {
        for principal in [
            Principal::user("usr_1"),
            Principal::api_key("key_1"),
            Principal::acme_account("acct:with:colons"),
            Principal::new(PrincipalKind::Agent, "agent-7"),
            Principal::system("cli"),
        ] {
            assert_eq!(Principal::parse(&principal.to_string()), Some(principal));
        }
        assert_eq!(Principal::parse("user:usr_1").map(|p| p.kind), Some(PrincipalKind::User));
        for unknown in ["", "usr_1", "robot:1", ":x"] {
            assert_eq!(Principal::parse(unknown), None, "{unknown}");
        }
    }
}
