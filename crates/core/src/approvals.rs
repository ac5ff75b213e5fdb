//! The four-eyes rule shared by approval-gated issuance and revocation: a request waits as
//! `pending` until a person other than its requester decides it.
//!
//! An API key acts for the user who made it, so "other" is decided between the people behind
//! the principals (a user and a key they made are one person), and every doubt refuses.

use crate::audit::Audit;
use crate::auth::{Actor, Caller};
use crate::context::Context;
use crate::error::{Error, Result};

/// The state every approval request starts in.
pub const PENDING: &str = "pending";

/// How a request records a principal: `<actor type>:<actor id>`.
pub fn principal(actor: &Audit) -> String {
    format!("{}:{}", actor.actor_type, actor.actor_id)
}

/// Who answers for what `caller` does: the user, or the user who made the API key (a key the
/// operator made at the command line answers for itself).
fn accountable_caller(caller: &Caller) -> String {
    match &caller.actor {
        Actor::ApiKey { owner: Some(owner), .. } => format!("user:{owner}"),
        _ => principal(&Audit::of(caller)),
    }
}

/// Who answers for a stored requester principal. A key that no longer exists cannot be traced
/// to a person, so the request cannot be approved (it can still be rejected).
async fn accountable_requester(ctx: &Context, workspace_id: &str, requested_by: &str) -> Result<Option<String>> {
    let Some(key_id) = requested_by.strip_prefix("api_key:") else { return Ok(Some(requested_by.to_owned())) };
    let keys = ctx.store.list_api_keys(workspace_id).await?;
    Ok(keys.into_iter().find(|key| *key.id == *key_id).map(|key| match key.created_by {
        Some(user) => format!("user:{user}"),
        None => requested_by.to_owned(),
    }))
}

/// What a decision is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Reject,
}

/// Whether `caller` may decide request `id` (`what` names it in messages): it must be pending
/// and not the caller's own, directly or through a key either side made.
pub async fn check_decidable(
    ctx: &Context,
    caller: &Caller,
    decision: Decision,
    what: &str,
    id: i64,
    status: &str,
    requested_by: &str,
) -> Result<()> {
    if status != PENDING {
        return Err(Error::Conflict(format!("{what} {id} is {status}, not pending")));
    }
    let deciding = accountable_caller(caller);
    let own = || Error::Forbidden("A requester cannot approve or reject their own request, nor through an API key they made".into());
    if requested_by == principal(&Audit::of(caller)) {
        return Err(own());
    }
    match accountable_requester(ctx, &caller.workspace_id, requested_by).await? {
        Some(requester) if requester == deciding => Err(own()),
        Some(_) => Ok(()),
        None if decision == Decision::Reject => Ok(()),
        None => Err(Error::Forbidden(format!(
            "{what} {id} was made with an API key that has since been deleted, so who asked cannot be \
             established; reject it and have the request made again"
        ))),
    }
}
