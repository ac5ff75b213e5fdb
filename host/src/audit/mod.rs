//! The audit log: who changed what, when, from which request. Rows are written by
//! the domain services in the same transaction as the change; the table is append-only.

use crate::auth::{Caller, Scope};
use crate::context::Context;
use crate::error::Result;
use crate::pagination::{Page, PageRequest};
use crate::store::{AuditFilter, NewAuditEntry, StoreResult, Tx};

/// The acting principal as recorded in audit rows.
#[derive(Debug, Clone)]
pub struct Audit {
    pub actor_type: &'static str,
    pub actor_id: String,
    pub request_id: Option<String>,
}

impl Audit {
    /// A change no user made: `source` names the operator path (`cli`, `first-start`, `plugin-dir`).
    pub fn system(source: &str) -> Self {
        Audit { actor_type: "system", actor_id: source.to_owned(), request_id: None }
    }

    pub fn of(caller: &Caller) -> Self {
        Audit {
            actor_type: caller.actor.kind(),
            actor_id: caller.actor.id().to_string(),
            request_id: Some(caller.request_id.clone()),
        }
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

/// Appends one audit row inside `tx`.
#[allow(clippy::too_many_arguments, reason = "an audit row has this many facts; a builder would only hide them")]
pub async fn record(
    tx: &mut Tx,
    actor: &Audit,
    workspace_id: Option<&str>,
    action: &str,
    target_type: &str,
    target_id: Option<&str>,
    details: serde_json::Value,
    at: i64,
) -> StoreResult<()> {
    tx.insert_audit(&NewAuditEntry {
        workspace_id,
        actor_type: actor.actor_type,
        actor_id: &actor.actor_id,
        action,
        target_type,
        target_id,
        request_id: actor.request_id.as_deref(),
        details: &details,
        created_at: at,
    })
    .await
}

pub async fn list(ctx: &Context, caller: &Caller, filter: AuditFilter, page: PageRequest) -> Result<Page<AuditEntry>> {
    caller.require(Scope::AuditRead)?;
    Ok(ctx.store.list_audit(&caller.workspace_id, &filter, page).await?)
}
