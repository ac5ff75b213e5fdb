//! The four-eyes rule shared by approval-gated issuance and revocation: a request waits as
//! `pending` until a person other than its requester decides it.
//!
//! An API key acts for the user who made it, so "other" is decided between the people behind
//! the principals (a user and a key they made are one person), and every doubt refuses.

use crate::auth::port::AuthReads;
use crate::caller::{Actor, Caller};
use crate::error::{Error, Result};
use crate::principal::{Principal, PrincipalKind};

/// The state every approval request starts in.
pub const PENDING: &str = "pending";

/// Who answers for what `caller` does: the user, or the user who made the API key (a key the
/// operator made at the command line answers for itself).
fn accountable_caller(caller: &Caller) -> Principal {
    match &caller.actor {
        Actor::ApiKey { owner: Some(owner), .. } => Principal::user(owner.as_str()),
        other => other.principal(),
    }
}

/// Who answers for a stored requester principal. A key that no longer exists cannot be traced
/// to a person, so the request cannot be approved (it can still be rejected).
async fn accountable_requester(
    keys: &dyn AuthReads,
    workspace_id: &str,
    requested_by: &str,
) -> Result<Option<Principal>> {
    let Some(requester) = Principal::parse(requested_by) else { return Ok(None) };
    if requester.kind != PrincipalKind::ApiKey {
        return Ok(Some(requester));
    }
    let keys = keys.list_api_keys(workspace_id).await?;
    Ok(keys.into_iter().find(|key| key.id.as_str() == requester.id).map(|key| match key.created_by {
        Some(user) => Principal::user(user),
        None => requester,
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
    keys: &dyn AuthReads,
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
    let own = || {
        Error::Forbidden(
            "A requester cannot approve or reject their own request, nor through an API key they made".into(),
        )
    };
    if Principal::parse(requested_by).as_ref() == Some(&caller.actor.principal()) {
        return Err(own());
    }
    match accountable_requester(keys, &caller.workspace_id, requested_by).await? {
        Some(requester) if requester == deciding => Err(own()),
        Some(_) => Ok(()),
        None if decision == Decision::Reject => Ok(()),
        None => Err(Error::Forbidden(format!(
            "{what} {id} was made with an API key that has since been deleted, so who asked cannot be \
             established; reject it and have the request made again"
        ))),
    }
}
