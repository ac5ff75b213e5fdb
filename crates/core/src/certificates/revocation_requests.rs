//! Revocations that wait for approval, as the inventory stores them. The use cases (the
//! template's rule, open, list, approve, reject) span the CA registry, issuance's templates and
//! the inventory, and live above them in `crate::lifecycle::revocation_requests`.

crate::state::state_enum! {
    /// Where a revocation request is: `pending` until decided; an approved one that could not
    /// revoke ends `failed`.
    pub enum RevocationStatus {
        Pending => "pending",
        Approved => "approved",
        Rejected => "rejected",
        Failed => "failed",
    }
}

pub const PENDING: RevocationStatus = RevocationStatus::Pending;
pub const APPROVED: RevocationStatus = RevocationStatus::Approved;
pub const REJECTED: RevocationStatus = RevocationStatus::Rejected;
pub const FAILED: RevocationStatus = RevocationStatus::Failed;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevocationRequest {
    pub id: i64,
    pub workspace_id: String,
    pub certificate_id: i64,
    pub reason: String,
    pub status: RevocationStatus,
    pub requested_by: String,
    pub decided_by: Option<String>,
    pub decided_at: Option<i64>,
    pub decision_reason: Option<String>,
    pub error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}
