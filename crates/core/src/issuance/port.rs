//! What issuance needs from storage: its policy records, certificate requests (approval and
//! pending orders), workspace templates, and the renewal and poll claims. `trellis-store`
//! implements it; `crate::ports` re-exports it into the `Store`/`Tx` composites.

use async_trait::async_trait;

use super::policies::IssuancePolicy;
use super::requests::CertificateRequest;
use super::templates::StoredTemplate;
use crate::auth::port::AuthReads;
use crate::cas::port::CaReads;
use crate::certificates::port::{CertificateReads, CertificateWrites};
use crate::certificates::Certificate;
use crate::pagination::{Page, PageRequest};
use crate::store_error::StoreResult;
use crate::unit_of_work::{ChangeTx, GroupCommit};

#[async_trait]
pub trait IssuanceReads: Send + Sync {
    /// The workspace's issuance policies in evaluation order (position, then id).
    async fn list_issuance_policies(&self, workspace_id: &str) -> StoreResult<Vec<IssuancePolicy>>;
    async fn find_request(&self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateRequest>>;
    async fn list_requests(
        &self,
        workspace_id: &str,
        status: Option<&str>,
        page: PageRequest,
    ) -> StoreResult<Page<CertificateRequest>>;
    async fn list_templates(&self, workspace_id: &str) -> StoreResult<Vec<StoredTemplate>>;
    async fn find_template(&self, workspace_id: &str, id_or_name: &str) -> StoreResult<Option<StoredTemplate>>;
    /// Requests `issuing` in every workspace, and when the oldest of their orders was accepted.
    async fn issuing_backlog(&self) -> StoreResult<(i64, Option<i64>)>;
}

#[async_trait]
pub trait IssuanceWrites: Send {
    async fn insert_issuance_policy(&mut self, policy: &IssuancePolicy) -> StoreResult<IssuancePolicy>;
    async fn delete_issuance_policy(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool>;
    /// Replaces a policy's configuration (its secrets are sealed once its id is known).
    async fn set_issuance_policy_config(
        &mut self,
        workspace_id: &str,
        id: i64,
        config: &serde_json::Value,
    ) -> StoreResult<bool>;
    async fn insert_request(&mut self, request: &CertificateRequest) -> StoreResult<CertificateRequest>;
    async fn find_request(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateRequest>>;
    /// Moves a request from `from` to its new state; `None` when it was not in `from` (a
    /// concurrent decision won).
    async fn update_request(
        &mut self,
        request: &CertificateRequest,
        from: crate::issuance::requests::RequestStatus,
    ) -> StoreResult<Option<CertificateRequest>>;
    async fn insert_template(&mut self, template: &StoredTemplate) -> StoreResult<StoredTemplate>;
    async fn update_template(&mut self, template: &StoredTemplate) -> StoreResult<Option<StoredTemplate>>;
    async fn delete_template(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool>;
    /// Claims up to `limit` auto-renewing certificates (of every workspace) due at `now` (their
    /// CA's suggested `renew_at` when stored, else inside their renewal window: their own, else
    /// `default_window_ms` before expiry) and not claimed since
    /// `claimed_before`; claimed rows are stamped `now`, so replicas never renew one at once.
    async fn claim_renewals(
        &mut self,
        now: i64,
        default_window_ms: i64,
        claimed_before: i64,
        limit: i64,
    ) -> StoreResult<Vec<Certificate>>;
    /// Claims up to `limit` auto-renewing certificates (of every workspace) whose CA renewal
    /// information (RFC 9773) is due to be asked at `now`, moving their next check to
    /// `next_check` (the claim: replicas skip them until then).
    async fn claim_renewal_info_checks(
        &mut self,
        now: i64,
        next_check: i64,
        limit: i64,
    ) -> StoreResult<Vec<Certificate>>;
    /// Stores when to renew as the CA suggests (`None`: the expiry-minus-window rule) and when
    /// to ask again. A stored time already inside `window` (start, end) stays: asking again
    /// does not pick a new time in the same window.
    async fn record_renewal_info(
        &mut self,
        workspace_id: &str,
        id: i64,
        renew_at: Option<i64>,
        window: Option<(i64, i64)>,
        next_check: i64,
    ) -> StoreResult<()>;
    /// Links a renewed certificate to its successor and moves auto-renewal to it.
    async fn record_renewal(&mut self, workspace_id: &str, old_id: i64, new_id: i64) -> StoreResult<()>;
    async fn record_renewal_failure(&mut self, workspace_id: &str, id: i64, error: &str) -> StoreResult<()>;
    /// Leases up to `limit` `issuing` requests (of every workspace) whose poll is due at `now`:
    /// their `poll_at` moves to `lease_until`, their attempts grow by one and `lease_owner`
    /// holds them, so replicas never poll one at once.
    async fn claim_issuing(
        &mut self,
        now: i64,
        lease_owner: &str,
        lease_until: i64,
        limit: i64,
    ) -> StoreResult<Vec<CertificateRequest>>;
    /// Writes a polled request if it is still `issuing` under `lease_owner`'s lease (and
    /// releases it); `None` when the lease was lost.
    async fn finish_poll(
        &mut self,
        request: &CertificateRequest,
        lease_owner: &str,
    ) -> StoreResult<Option<CertificateRequest>>;
}

/// A transaction issuance writes through: its requests and renewal records, the inventory (an
/// issued certificate enters it through `certificates::inventory`), and (as a [`ChangeTx`]) a
/// unit of work's rows and the commit. The full transaction is one.
pub trait IssuanceTx: ChangeTx + IssuanceWrites + CertificateWrites {}

impl<T: ?Sized + ChangeTx + IssuanceWrites + CertificateWrites> IssuanceTx for T {}

/// What issuance needs of storage: its reads, the CA records it issues through, the members who
/// decide approvals, the certificates it renews, transactions, and group commit (an issued
/// certificate is stored in a group-commit job). The full store is one (`crate::ports`).
#[async_trait]
pub trait IssuanceStore:
    IssuanceReads + CaReads + AuthReads + CertificateReads + GroupCommit<dyn IssuanceTx> + Send + Sync
{
    async fn begin_issuance(&self) -> StoreResult<Box<dyn IssuanceTx>>;
}
