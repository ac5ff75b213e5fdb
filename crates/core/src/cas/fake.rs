//! The CA registry's port, faked whole over the in-memory store's tables, with the rules the
//! SQL stores keep: records confined to their workspace and listed newest first; an update
//! leaves the health the checks set; a health check claimed at most once per interval, never
//! for a disconnected CA; a deleted CA's certificates kept and unlinked.

use async_trait::async_trait;

use super::port::{CaReads, CaWrites};
use super::{CaFields, CaStats, CaStatus, CertificateAuthority, HealthStatus};
use crate::pagination::{Page, PageRequest};
use crate::store_error::StoreResult;
use crate::testing::kernel::FakeTables;
use crate::testing::memory_store::window;
use crate::testing::{MemoryStore, MemoryTx};

fn in_workspace<'a>(
    cas: &'a mut [CertificateAuthority],
    workspace_id: &'a str,
    id: i64,
) -> Option<&'a mut CertificateAuthority> {
    cas.iter_mut().find(|ca| ca.workspace_id == workspace_id && ca.id == id)
}

#[async_trait]
impl CaReads for MemoryStore {
    async fn find_ca(&self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateAuthority>> {
        Ok(self.snapshot().cas.into_iter().find(|ca| ca.workspace_id == workspace_id && ca.id == id))
    }
    async fn list_cas(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<CertificateAuthority>> {
        let mut mine: Vec<CertificateAuthority> =
            self.snapshot().cas.into_iter().filter(|ca| ca.workspace_id == workspace_id).collect();
        mine.sort_by_key(|ca| std::cmp::Reverse(ca.id));
        Ok(window(mine, page))
    }
    async fn ca_stats(&self, workspace_id: &str) -> StoreResult<CaStats> {
        let tables = self.snapshot();
        let mine: Vec<&CertificateAuthority> = tables.cas.iter().filter(|ca| ca.workspace_id == workspace_id).collect();
        let count = |keep: &dyn Fn(&CertificateAuthority) -> bool| mine.iter().filter(|ca| keep(ca)).count() as i64;
        let issued = tables.certificates.iter().filter(|c| c.workspace_id == workspace_id && c.ca_id.is_some());
        Ok(CaStats {
            total: mine.len() as i64,
            connected: count(&|ca| ca.status == CaStatus::Active),
            disconnected: count(&|ca| ca.status != CaStatus::Active),
            healthy: count(&|ca| ca.health_status == HealthStatus::Healthy),
            certificates_issued: issued.count() as i64,
        })
    }
}

#[async_trait]
impl CaWrites for MemoryTx {
    async fn insert_ca(&mut self, workspace_id: &str, fields: &CaFields, at: i64) -> StoreResult<CertificateAuthority> {
        let ca = CertificateAuthority {
            id: self.working.next_id(),
            workspace_id: workspace_id.to_string(),
            name: fields.name.clone(),
            ca_type: fields.ca_type.clone(),
            description: fields.description.clone(),
            url: fields.url.clone(),
            status: fields.status,
            health_status: fields.health_status,
            issuer_patterns: fields.issuer_patterns.clone(),
            config: fields.config.clone(),
            last_sync: None,
            created_at: at,
            updated_at: at,
        };
        self.working.cas.push(ca.clone());
        Ok(ca)
    }
    async fn find_ca(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateAuthority>> {
        Ok(in_workspace(&mut self.working.cas, workspace_id, id).map(|ca| ca.clone()))
    }
    async fn update_ca(
        &mut self,
        workspace_id: &str,
        id: i64,
        fields: &CaFields,
        at: i64,
    ) -> StoreResult<Option<CertificateAuthority>> {
        let Some(ca) = in_workspace(&mut self.working.cas, workspace_id, id) else { return Ok(None) };
        // The health is the checks' to set (`set_ca_health`), not an edit's.
        ca.name = fields.name.clone();
        ca.ca_type = fields.ca_type.clone();
        ca.description = fields.description.clone();
        ca.url = fields.url.clone();
        ca.status = fields.status;
        ca.issuer_patterns = fields.issuer_patterns.clone();
        ca.config = fields.config.clone();
        ca.updated_at = at;
        Ok(Some(ca.clone()))
    }
    async fn set_ca_health(
        &mut self,
        workspace_id: &str,
        id: i64,
        status: CaStatus,
        health: HealthStatus,
        at: i64,
    ) -> StoreResult<()> {
        if let Some(ca) = in_workspace(&mut self.working.cas, workspace_id, id) {
            ca.status = status;
            ca.health_status = health;
            ca.updated_at = at;
        }
        Ok(())
    }
    async fn touch_ca_sync(
        &mut self,
        workspace_id: &str,
        id: i64,
        at: i64,
    ) -> StoreResult<Option<CertificateAuthority>> {
        let Some(ca) = in_workspace(&mut self.working.cas, workspace_id, id) else { return Ok(None) };
        ca.last_sync = Some(at);
        Ok(Some(ca.clone()))
    }
    async fn delete_ca(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool> {
        for certificate in self.working.certificates.iter_mut() {
            if certificate.workspace_id == workspace_id && certificate.ca_id == Some(id) {
                certificate.ca_id = None;
            }
        }
        let before = self.working.cas.len();
        self.working.cas.retain(|ca| !(ca.workspace_id == workspace_id && ca.id == id));
        Ok(self.working.cas.len() < before)
    }
    async fn claim_ca_health_checks(
        &mut self,
        now: i64,
        due_before: i64,
        limit: i64,
    ) -> StoreResult<Vec<CertificateAuthority>> {
        let checked = &self.working.ca_health_checked_at;
        let mut due: Vec<CertificateAuthority> = self
            .working
            .cas
            .iter()
            .filter(|ca| ca.status != CaStatus::Disconnected)
            .filter(|ca| checked.get(&ca.id).is_none_or(|at| *at < due_before))
            .cloned()
            .collect();
        due.sort_by_key(|ca| ca.id);
        due.truncate(limit.max(0) as usize);
        for ca in &due {
            self.working.ca_health_checked_at.insert(ca.id, now);
        }
        Ok(due)
    }
}
