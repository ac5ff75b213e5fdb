//! Who calls, and what they may do: the [`Caller`] every use case takes (an [`Actor`] bound to
//! one workspace with its [`Scope`]s). A leaf of core, so that every area can name the caller
//! without depending on `auth`, the area that authenticates it.

pub mod scope;

pub use self::scope::{parse_scopes, Role, Scope};

use crate::error::{Error, Result};
use crate::ids::{ApiKeyId, UserId, WorkspaceId};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// Server-to-server client key, `ck_…`.
    Client,
    /// Field agent key, `ak_…`.
    Agent,
}

impl KeyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyKind::Client => "client",
            KeyKind::Agent => "agent",
        }
    }

    pub fn parse(text: &str) -> Option<KeyKind> {
        match text {
            "client" => Some(KeyKind::Client),
            "agent" => Some(KeyKind::Agent),
            _ => None,
        }
    }

    pub fn prefix(self) -> &'static str {
        match self {
            KeyKind::Client => "ck_",
            KeyKind::Agent => "ak_",
        }
    }
}

/// Who is acting.
#[derive(Debug, Clone)]
pub enum Actor {
    User {
        id: UserId,
        email: String,
    },
    ApiKey {
        id: ApiKeyId,
        kind: KeyKind,
        /// The user who made the key, for whom it acts (none for a key the operator made at
        /// the command line).
        owner: Option<UserId>,
    },
    /// The operator at the command line.
    System,
}

impl Actor {
    /// The principal records name for this actor (the operator at the command line is
    /// `system:cli`).
    pub fn principal(&self) -> crate::principal::Principal {
        use crate::principal::Principal;
        match self {
            Actor::User { id, .. } => Principal::user(id.as_str()),
            Actor::ApiKey { id, .. } => Principal::api_key(id.as_str()),
            Actor::System => Principal::system("cli"),
        }
    }
}

/// An authenticated principal bound to one workspace.
#[derive(Debug, Clone)]
pub struct Caller {
    pub actor: Actor,
    pub workspace_id: WorkspaceId,
    pub scopes: Vec<Scope>,
    pub instance_admin: bool,
    /// Correlates audit rows with logs and the `X-Request-Id` response header.
    pub request_id: String,
}

impl Caller {
    pub fn require(&self, scope: Scope) -> Result<()> {
        if self.scopes.contains(&scope) {
            Ok(())
        } else {
            Err(Error::MissingScope(scope.as_str()))
        }
    }

    pub fn user_id(&self) -> Option<&UserId> {
        match &self.actor {
            Actor::User { id, .. } => Some(id),
            _ => None,
        }
    }

    pub fn require_instance_admin(&self) -> Result<()> {
        if self.instance_admin {
            Ok(())
        } else {
            Err(Error::Forbidden("Only instance administrators may do this".into()))
        }
    }
}
