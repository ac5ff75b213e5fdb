//! The audit log: who changed what, when, from which request. Rows are written by
//! the domain services in the same transaction as the change; the table is append-only.

use crate::auth::{Caller, Scope};
use crate::context::Context;
use crate::error::Result;
use crate::pagination::{Page, PageRequest};

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
            // The operator at the command line has no request.
            request_id: (!caller.request_id.is_empty()).then(|| caller.request_id.clone()),
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

pub async fn list(ctx: &Context, caller: &Caller, filter: AuditFilter, page: PageRequest) -> Result<Page<AuditEntry>> {
    caller.require(Scope::AuditRead)?;
    Ok(ctx.store.list_audit(&caller.workspace_id, &filter, page).await?)
}
