//! Issuance's port, all of it, in memory: policies, certificate requests with their poll leases,
//! workspace templates, and the renewal claims, over the shared test store's tables (issuance's
//! use cases also write the inventory, the audit log and the outbox in the same transaction).
//! Every method behaves as `trellis-store`'s does for what the tests here observe; none panics.

use async_trait::async_trait;

use super::policies::IssuancePolicy;
use super::port::{IssuanceReads, IssuanceWrites};
use super::requests::{CertificateRequest, ISSUING};
use super::templates::StoredTemplate;
use crate::certificates::Certificate;
use crate::pagination::{Page, PageRequest};
use crate::store_error::{StoreError, StoreResult};
use crate::testing::kernel::FakeTables;
use crate::testing::memory_store::{renewable, MemoryTx};
use crate::testing::MemoryStore;

impl MemoryStore {
    /// Adds an issuance policy record as it stands (ids are the caller's).
    pub fn put_policy(&self, policy: IssuancePolicy) {
        self.edit(|tables| tables.policies.push(policy));
    }
}

fn ordered(mut policies: Vec<IssuancePolicy>) -> Vec<IssuancePolicy> {
    policies.sort_by_key(|p| (p.position, p.id));
    policies
}

fn template_named<'a>(
    templates: &'a [StoredTemplate],
    workspace_id: &str,
    id_or_name: &str,
) -> Option<&'a StoredTemplate> {
    let id = id_or_name.parse::<i64>().ok();
    templates
        .iter()
        .find(|t| t.workspace_id == workspace_id && (if let Some(id) = id { t.id == id } else { t.name == id_or_name }))
}

#[async_trait]
impl IssuanceReads for MemoryStore {
    async fn list_issuance_policies(&self, workspace_id: &str) -> StoreResult<Vec<IssuancePolicy>> {
        Ok(ordered(self.snapshot().policies.into_iter().filter(|p| p.workspace_id == workspace_id).collect()))
    }
    async fn find_request(&self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateRequest>> {
        Ok(self.snapshot().requests.into_iter().find(|r| r.workspace_id == workspace_id && r.id == id))
    }
    async fn list_requests(
        &self,
        workspace_id: &str,
        status: Option<&str>,
        page: PageRequest,
    ) -> StoreResult<Page<CertificateRequest>> {
        let mut items: Vec<_> = self
            .snapshot()
            .requests
            .into_iter()
            .filter(|r| r.workspace_id == workspace_id && status.is_none_or(|s| r.status.as_str() == s))
            .collect();
        items.reverse();
        Ok(Page { total: items.len() as i64, items, total_exact: true, request: page })
    }
    async fn list_templates(&self, workspace_id: &str) -> StoreResult<Vec<StoredTemplate>> {
        Ok(self.snapshot().templates.into_iter().filter(|t| t.workspace_id == workspace_id).collect())
    }
    async fn find_template(&self, workspace_id: &str, id_or_name: &str) -> StoreResult<Option<StoredTemplate>> {
        Ok(template_named(&self.snapshot().templates, workspace_id, id_or_name).cloned())
    }
    async fn issuing_backlog(&self) -> StoreResult<(i64, Option<i64>)> {
        let tables = self.snapshot();
        let issuing: Vec<_> = tables.requests.iter().filter(|r| r.status == ISSUING).collect();
        Ok((issuing.len() as i64, issuing.iter().filter_map(|r| r.issuing_since).min()))
    }
}

#[async_trait]
impl IssuanceWrites for MemoryTx {
    async fn insert_issuance_policy(&mut self, policy: &IssuancePolicy) -> StoreResult<IssuancePolicy> {
        let id = self.working.next_id();
        let row = IssuancePolicy { id, ..policy.clone() };
        self.working.policies.push(row.clone());
        Ok(row)
    }
    async fn delete_issuance_policy(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool> {
        let before = self.working.policies.len();
        self.working.policies.retain(|p| !(p.workspace_id == workspace_id && p.id == id));
        Ok(self.working.policies.len() < before)
    }
    async fn set_issuance_policy_config(
        &mut self,
        workspace_id: &str,
        id: i64,
        config: &serde_json::Value,
    ) -> StoreResult<bool> {
        let policy = self.working.policies.iter_mut().find(|p| p.workspace_id == workspace_id && p.id == id);
        Ok(policy.map(|p| p.config = config.clone()).is_some())
    }
    async fn insert_request(&mut self, request: &CertificateRequest) -> StoreResult<CertificateRequest> {
        let id = self.working.next_id();
        let row = CertificateRequest { id, updated_at: request.created_at, ..request.clone() };
        self.working.requests.push(row.clone());
        Ok(row)
    }
    async fn find_request(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateRequest>> {
        Ok(self.working.requests.iter().find(|r| r.workspace_id == workspace_id && r.id == id).cloned())
    }
    async fn update_request(
        &mut self,
        request: &CertificateRequest,
        from: crate::issuance::requests::RequestStatus,
    ) -> StoreResult<Option<CertificateRequest>> {
        let working = &mut self.working;
        let Some(row) = working
            .requests
            .iter_mut()
            .find(|r| r.workspace_id == request.workspace_id && r.id == request.id && r.status == from)
        else {
            return Ok(None);
        };
        *row = CertificateRequest { created_at: row.created_at, ..request.clone() };
        working.request_leases.remove(&request.id);
        Ok(Some(row.clone()))
    }
    async fn insert_template(&mut self, template: &StoredTemplate) -> StoreResult<StoredTemplate> {
        if template_named(&self.working.templates, &template.workspace_id, &template.name).is_some() {
            return Err(StoreError::Unique(format!("certificate_templates.name {}", template.name)));
        }
        let id = self.working.next_id();
        let row = StoredTemplate { id, ..template.clone() };
        self.working.templates.push(row.clone());
        Ok(row)
    }
    async fn update_template(&mut self, template: &StoredTemplate) -> StoreResult<Option<StoredTemplate>> {
        let Some(row) =
            self.working.templates.iter_mut().find(|t| t.workspace_id == template.workspace_id && t.id == template.id)
        else {
            return Ok(None);
        };
        *row = StoredTemplate { created_at: row.created_at, ..template.clone() };
        Ok(Some(row.clone()))
    }
    async fn delete_template(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool> {
        let before = self.working.templates.len();
        self.working.templates.retain(|t| !(t.workspace_id == workspace_id && t.id == id));
        Ok(self.working.templates.len() < before)
    }
    async fn claim_renewals(
        &mut self,
        now: i64,
        default_window_ms: i64,
        claimed_before: i64,
        limit: i64,
    ) -> StoreResult<Vec<Certificate>> {
        let tables = &mut self.working;
        let mut due: Vec<Certificate> = tables
            .certificates
            .iter()
            .filter(|c| renewable(c) && c.expires_at > now)
            .filter(|c| match tables.renewal_info.get(&c.id).and_then(|info| info.0) {
                Some(renew_at) => renew_at <= now,
                // The inventory record does not carry its template window: the default applies.
                None => c.expires_at - default_window_ms < now,
            })
            .filter(|c| tables.renewal_claims.get(&c.id).is_none_or(|at| *at < claimed_before))
            .filter(|c| !tables.requests.iter().any(|r| r.renews_certificate_id == Some(c.id) && r.status == ISSUING))
            .cloned()
            .collect();
        due.sort_by_key(|c| c.expires_at);
        due.truncate(usize::try_from(limit).unwrap_or(0));
        for c in &due {
            tables.renewal_claims.insert(c.id, now);
        }
        Ok(due)
    }
    async fn claim_renewal_info_checks(
        &mut self,
        now: i64,
        next_check: i64,
        limit: i64,
    ) -> StoreResult<Vec<Certificate>> {
        let tables = &mut self.working;
        let next = |c: &Certificate| tables.renewal_info.get(&c.id).and_then(|info| info.1);
        let mut due: Vec<Certificate> = tables
            .certificates
            .iter()
            .filter(|c| renewable(c) && c.expires_at > now && next(c).is_none_or(|at| at <= now))
            .cloned()
            .collect();
        due.sort_by_key(|c| (next(c).unwrap_or(0), c.id));
        due.truncate(usize::try_from(limit).unwrap_or(0));
        for c in &due {
            tables.renewal_info.entry(c.id).or_default().1 = Some(next_check);
        }
        Ok(due)
    }
    async fn record_renewal_info(
        &mut self,
        _: &str,
        id: i64,
        renew_at: Option<i64>,
        window: Option<(i64, i64)>,
        next_check: i64,
    ) -> StoreResult<()> {
        let info = self.working.renewal_info.entry(id).or_default();
        let kept = info.0.filter(|at| window.is_some_and(|(start, end)| (start..=end).contains(at)));
        *info = (kept.or(renew_at), Some(next_check));
        Ok(())
    }
    async fn record_renewal(&mut self, workspace_id: &str, old_id: i64, new_id: i64) -> StoreResult<()> {
        if let Some(c) = self.working.certificates.iter_mut().find(|c| c.workspace_id == workspace_id && c.id == old_id)
        {
            c.renewed_by_id = Some(new_id);
            c.auto_renewal = false;
            c.renewal_error = None;
        }
        Ok(())
    }
    async fn record_renewal_failure(&mut self, workspace_id: &str, id: i64, error: &str) -> StoreResult<()> {
        if let Some(c) = self.working.certificates.iter_mut().find(|c| c.workspace_id == workspace_id && c.id == id) {
            c.renewal_error = Some(error.to_owned());
        }
        Ok(())
    }
    async fn claim_issuing(
        &mut self,
        now: i64,
        lease_owner: &str,
        lease_until: i64,
        limit: i64,
    ) -> StoreResult<Vec<CertificateRequest>> {
        let working = &mut self.working;
        let mut claimed = Vec::new();
        for row in working.requests.iter_mut() {
            if claimed.len() as i64 >= limit {
                break;
            }
            if row.status == ISSUING && row.poll_at.is_some_and(|at| at <= now) {
                row.poll_at = Some(lease_until);
                row.poll_attempts += 1;
                working.request_leases.insert(row.id, lease_owner.to_owned());
                claimed.push(row.clone());
            }
        }
        Ok(claimed)
    }
    async fn finish_poll(
        &mut self,
        request: &CertificateRequest,
        lease_owner: &str,
    ) -> StoreResult<Option<CertificateRequest>> {
        if self.working.request_leases.get(&request.id).map(String::as_str) != Some(lease_owner) {
            return Ok(None);
        }
        self.update_request(request, ISSUING).await
    }
}
