//! The four-eyes rule shared by approval-gated issuance and revocation: a request waits as
//! `pending` until a principal other than its requester decides it.

use crate::audit::Audit;
use crate::error::{Error, Result};

/// The state every approval request starts in.
pub const PENDING: &str = "pending";

/// How a request records a principal: `<actor type>:<actor id>` (a user and an API key it made
/// are different principals).
pub fn principal(actor: &Audit) -> String {
    format!("{}:{}", actor.actor_type, actor.actor_id)
}

/// Whether `actor` may decide request `id` (`what` names it in messages): it must be pending and
/// not the actor's own.
pub fn check_decidable(what: &str, id: i64, status: &str, requested_by: &str, actor: &Audit) -> Result<()> {
    if status != PENDING {
        return Err(Error::Conflict(format!("{what} {id} is {status}, not pending")));
    }
    if requested_by == principal(actor) {
        return Err(Error::Forbidden("A requester cannot approve or reject their own request".into()));
    }
    Ok(())
}
