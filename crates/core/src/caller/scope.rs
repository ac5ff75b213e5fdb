//! Permission scopes. A session user acts with every scope of their membership role;
//! an API key acts only with the scopes it was created with.

use crate::error::{Error, Result};

macro_rules! scopes {
    ($($variant:ident => $name:literal),* $(,)?) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Scope { $($variant),* }

        impl Scope {
            pub const ALL: &'static [Scope] = &[$(Scope::$variant),*];

            pub fn as_str(self) -> &'static str {
                match self { $(Scope::$variant => $name),* }
            }

            pub fn parse(text: &str) -> Option<Scope> {
                match text { $($name => Some(Scope::$variant),)* _ => None }
            }
        }
    };
}

scopes! {
    ApiKeysRead => "api-keys:read",
    ApiKeysWrite => "api-keys:write",
    AttestationRead => "attestation:read",
    AttestationWrite => "attestation:write",
    AttestationManage => "attestation:manage",
    AuditRead => "audit:read",
    CasRead => "cas:read",
    CasWrite => "cas:write",
    CertificatesRead => "certificates:read",
    CertificatesWrite => "certificates:write",
    IntegrationsRead => "integrations:read",
    IntegrationsWrite => "integrations:write",
    MembersRead => "members:read",
    MembersWrite => "members:write",
    PluginsRead => "plugins:read",
    PluginsWrite => "plugins:write",
}

impl Scope {
    /// Whether a key of `kind` may carry this scope: a device's agent key never manages what
    /// devices are trusted (trust roots, attestation policies, devices, their enrollment).
    pub fn allowed_for(self, kind: super::KeyKind) -> bool {
        !(kind == super::KeyKind::Agent && self == Scope::AttestationManage)
    }

    fn is_read(self) -> bool {
        self.as_str().ends_with(":read")
    }
}

/// Parses a scope list, rejecting unknown names and empty lists.
pub fn parse_scopes<S: AsRef<str>>(names: &[S]) -> Result<Vec<Scope>> {
    let mut scopes = Vec::with_capacity(names.len());
    for name in names {
        let name = name.as_ref().trim();
        let scope = Scope::parse(name).ok_or_else(|| {
            Error::validation_with(
                format!("Unknown scope `{name}`"),
                serde_json::json!({
                    "field": "scopes",
                    "allowed": Scope::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
                }),
            )
        })?;
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    if scopes.is_empty() {
        return Err(Error::invalid_field("scopes", "at least one scope is required"));
    }
    scopes.sort();
    Ok(scopes)
}

/// A user's role in a workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Everything in the workspace, including API keys and the audit log.
    Owner,
    /// Reads and writes inventory, CAs, attestation and integrations; sees who the members are;
    /// no key or membership management.
    Member,
    /// Reads inventory, CAs, attestation and integrations.
    Viewer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Member => "member",
            Role::Viewer => "viewer",
        }
    }

    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "owner" => Some(Role::Owner),
            "member" => Some(Role::Member),
            "viewer" => Some(Role::Viewer),
            _ => None,
        }
    }

    pub fn scopes(self) -> Vec<Scope> {
        let keep = |scope: &&Scope| match self {
            Role::Owner => true,
            // Deciding what devices are trusted (trust roots, attestation policies, devices and
            // their enrollment) is an owner's: members do device work only.
            // Who belongs to the workspace, and with what role, is decided by its owners only.
            Role::Member => !matches!(
                scope,
                Scope::ApiKeysWrite | Scope::PluginsWrite | Scope::AttestationManage | Scope::MembersWrite
            ),
            Role::Viewer => scope.is_read() && **scope != Scope::AuditRead,
        };
        Scope::ALL.iter().filter(keep).copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_names_round_trip() {
        for scope in Scope::ALL {
            assert_eq!(Scope::parse(scope.as_str()), Some(*scope));
        }
    }

    #[test]
    fn unknown_and_empty_scope_lists_are_rejected() {
        assert!(parse_scopes(&["certificates:read", "bogus"]).is_err());
        assert!(parse_scopes::<&str>(&[]).is_err());
        assert_eq!(parse_scopes(&["certificates:read", "certificates:read"]).unwrap().len(), 1);
    }

    #[test]
    fn viewers_cannot_write() {
        assert!(Role::Viewer.scopes().iter().all(|s| s.as_str().ends_with(":read")));
        assert!(Role::Owner.scopes().contains(&Scope::ApiKeysWrite));
        assert!(!Role::Member.scopes().contains(&Scope::ApiKeysWrite));
    }

    #[test]
    fn only_owners_manage_members_and_everyone_sees_them() {
        assert!(Role::Owner.scopes().contains(&Scope::MembersWrite));
        assert!(!Role::Member.scopes().contains(&Scope::MembersWrite));
        assert!(!Role::Viewer.scopes().contains(&Scope::MembersWrite));
        for role in [Role::Owner, Role::Member, Role::Viewer] {
            assert!(role.scopes().contains(&Scope::MembersRead));
        }
    }
}
