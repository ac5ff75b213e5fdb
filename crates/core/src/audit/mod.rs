//! The audit log: who changed what, when, from which request. Rows are written by
//! the domain services in the same transaction as the change; the table is append-only.

pub mod port;

pub use self::port::{AuditReads, AuditWrites};
use crate::caller::{Caller, Scope};
use crate::error::Result;
use crate::pagination::{Page, PageRequest};
use crate::principal::Principal;

/// Who makes a change, and from which request: what its audit rows record.
#[derive(Debug, Clone)]
pub struct Audit {
    pub principal: Principal,
    pub request_id: Option<String>,
}

impl Audit {
    /// A change no user made: `source` names the operator path (`cli`, `first-start`, `plugin-dir`).
    pub fn system(source: &str) -> Self {
        Audit::by(Principal::system(source), None)
    }

    pub fn by(principal: Principal, request_id: Option<String>) -> Self {
        Audit { principal, request_id }
    }

    pub fn of(caller: &Caller) -> Self {
        // The operator at the command line has no request.
        Audit::by(caller.actor.principal(), (!caller.request_id.is_empty()).then(|| caller.request_id.clone()))
    }
}

#[derive(Debug, Clone)]
pub struct AuditEntry {
    pub id: i64,
    pub workspace_id: Option<String>,
    pub actor_type: String,
    pub actor_id: String,
    pub action: String,
    pub target_type: String,
    pub target_id: Option<String>,
    pub request_id: Option<String>,
    pub details: serde_json::Value,
    pub created_at: i64,
}

/// One row to append (written by [`crate::unit_of_work::UnitOfWork::commit`]).
pub struct NewAuditEntry<'a> {
    pub workspace_id: Option<&'a str>,
    pub actor_type: &'a str,
    pub actor_id: &'a str,
    pub action: &'a str,
    pub target_type: &'a str,
    pub target_id: Option<&'a str>,
    pub request_id: Option<&'a str>,
    pub details: &'a serde_json::Value,
    pub created_at: i64,
}

#[derive(Debug, Default)]
pub struct AuditFilter {
    pub action: Option<String>,
    pub actor_id: Option<String>,
    pub target_type: Option<String>,
    pub target_id: Option<String>,
    pub request_id: Option<String>,
    pub since: Option<i64>,
    pub until: Option<i64>,
}

pub async fn list(
    log: &dyn AuditReads,
    caller: &Caller,
    filter: AuditFilter,
    page: PageRequest,
) -> Result<Page<AuditEntry>> {
    caller.require(Scope::AuditRead)?;
    Ok(log.list_audit(&caller.workspace_id, &filter, page).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caller::{Actor, Role};
    use crate::testing::{context, MemoryStore};
    use crate::unit_of_work::Target;

    fn caller(workspace: &str, role: Role) -> Caller {
        Caller {
            actor: Actor::User { id: "usr_a".into(), email: "a@example.com".into() },
            workspace_id: workspace.into(),
            scopes: role.scopes(),
            instance_admin: false,
            request_id: "req_1".into(),
        }
    }

    /// The log is the caller's workspace's only, newest first, filtered by every member given,
    /// and needs `audit:read` (which viewers lack).
    #[tokio::test]
    async fn the_log_is_the_workspaces_newest_first_and_filtered() {
        let ctx = context(MemoryStore::default(), "2026-11-29T12:00:00Z");
        for (workspace, action, target) in [
            ("ws_1", "ca.created", "1"),
            ("ws_1", "ca.deleted", "1"),
            ("ws_1", "ca.created", "2"),
            ("ws_2", "ca.created", "3"),
        ] {
            let mut change = ctx.change(Audit::system("test"), Some(workspace)).await.expect("change");
            change.audit(action, Target::new("certificate_authority", target), serde_json::json!({}));
            change.commit().await.expect("commit");
        }
        let owner = caller("ws_1", Role::Owner);
        let all = list(ctx.store.as_ref(), &owner, AuditFilter::default(), PageRequest { limit: 50, offset: 0 })
            .await
            .expect("list");
        let seen: Vec<(&str, Option<&str>)> =
            all.items.iter().map(|e| (e.action.as_str(), e.target_id.as_deref())).collect();
        assert_eq!(seen, [("ca.created", Some("2")), ("ca.deleted", Some("1")), ("ca.created", Some("1"))]);
        let filter =
            AuditFilter { action: Some("ca.created".into()), target_id: Some("1".into()), ..AuditFilter::default() };
        let one =
            list(ctx.store.as_ref(), &owner, filter, PageRequest { limit: 50, offset: 0 }).await.expect("filtered");
        assert_eq!(one.items.iter().map(|e| e.id).collect::<Vec<_>>(), [all.items[2].id]);
        let viewer = list(
            ctx.store.as_ref(),
            &caller("ws_1", Role::Viewer),
            AuditFilter::default(),
            PageRequest { limit: 50, offset: 0 },
        )
        .await;
        assert!(matches!(viewer, Err(crate::error::Error::MissingScope(_))), "{viewer:?}");
    }
}
