//! Revocations that wait for approval, as the inventory stores them. The use cases (the
//! template's rule, open, list, approve, reject) span the CA registry, issuance's templates and
//! the inventory, and live above them in `crate::lifecycle::revocation_requests`.

pub use crate::approvals::PENDING;
pub const APPROVED: &str = "approved";
pub const REJECTED: &str = "rejected";
pub const FAILED: &str = "failed";
pub(crate) const STATES: [&str; 4] = [PENDING, APPROVED, REJECTED, FAILED];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevocationRequest {
    pub id: i64,
    pub workspace_id: String,
    pub certificate_id: i64,
    pub reason: String,
    pub status: String,
    pub requested_by: String,
    pub decided_by: Option<String>,
    pub decided_at: Option<i64>,
    pub decision_reason: Option<String>,
    pub error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}
