//! The certificate inventory's port, faked whole over the in-memory store's tables, with the
//! rules the SQL stores keep: a workspace's fingerprint is unique, lists filter and order as
//! the store does, an expiry is announced once (claims mark the rows they return), deleting a
//! machine identity unlinks its certificates.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::port::{CertificateReads, CertificateWrites};
use super::revocation_requests::RevocationRequest;
use super::{
    Certificate, CertificateFilter, CertificateOrder, CertificateUpdate, MachineIdentity, NewCertificate, Statistics,
    Status, UsageRecord, EXPIRING_WINDOW_MS,
};
use crate::pagination::{Page, PageRequest};
use crate::store_error::{StoreError, StoreResult};
use crate::testing::kernel::FakeTables;
use crate::testing::memory_store::{window, Tables};
use crate::testing::{MemoryStore, MemoryTx};

/// `identity` with its count of linked certificates, as the store reads it.
fn counted(identity: &MachineIdentity, certificates: &[Certificate]) -> MachineIdentity {
    let linked = certificates
        .iter()
        .filter(|c| c.workspace_id == identity.workspace_id && c.machine_identity_id == Some(identity.id))
        .count();
    MachineIdentity { certificate_count: linked as i64, ..identity.clone() }
}

/// Up to `limit` certificates `due` (given their announcements), soonest expiry first.
fn claim(
    tables: &Tables,
    limit: i64,
    due: impl Fn(&Certificate, &(Option<i64>, Option<i64>)) -> bool,
) -> Vec<Certificate> {
    let mut found: Vec<Certificate> = tables
        .certificates
        .iter()
        .filter(|c| due(c, tables.expiry_announced.get(&c.id).unwrap_or(&(None, None))))
        .cloned()
        .collect();
    found.sort_by_key(|c| (c.expires_at, c.id));
    found.truncate(usize::try_from(limit).unwrap_or(0));
    found
}

#[async_trait]
impl CertificateReads for MemoryStore {
    async fn find_certificate(&self, workspace_id: &str, id: i64) -> StoreResult<Option<Certificate>> {
        Ok(self.snapshot().certificates.into_iter().find(|c| c.workspace_id == workspace_id && c.id == id))
    }
    /// As the store: every set filter member must match (search: a case-insensitive substring
    /// of the common name or the issuer), in the filter's total order.
    async fn list_certificates(
        &self,
        workspace_id: &str,
        filter: &CertificateFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Certificate>> {
        let equal = |wanted: &Option<String>, value: &str| wanted.as_deref().is_none_or(|w| w == value);
        let search = filter.search.as_deref().map(str::to_lowercase);
        let mut mine: Vec<Certificate> = self
            .snapshot()
            .certificates
            .into_iter()
            .filter(|c| c.workspace_id == workspace_id)
            .filter(|c| filter.status.is_none_or(|s| Status::at(c.revoked, c.expires_at, filter.now) == s))
            .filter(|c| {
                search.as_deref().is_none_or(|term| {
                    c.common_name.to_lowercase().contains(term) || c.issuer.to_lowercase().contains(term)
                })
            })
            .filter(|c| equal(&filter.signature_algorithm, &c.signature_algorithm))
            .filter(|c| equal(&filter.key_algorithm, &c.key_algorithm))
            .filter(|c| equal(&filter.usage_category, &c.usage_category))
            .filter(|c| filter.issuance_source.is_none_or(|s| s == c.issuance_source))
            .filter(|c| filter.ca_id.is_none_or(|id| c.ca_id == Some(id)))
            .collect();
        match filter.order {
            CertificateOrder::Newest => mine.sort_by_key(|c| std::cmp::Reverse(c.id)),
            CertificateOrder::ExpiresSoonest => mine.sort_by_key(|c| (c.expires_at, c.id)),
            CertificateOrder::ExpiresLatest => mine.sort_by_key(|c| std::cmp::Reverse((c.expires_at, c.id))),
        }
        Ok(window(mine, page))
    }
    /// As the store's tallies: live certificates by status at `now`, those expiring within
    /// seven days, and facets over every row (revoked ones too), each sorted by its value.
    async fn certificate_statistics(&self, workspace_id: &str, now: i64) -> StoreResult<Statistics> {
        let mine: Vec<Certificate> =
            self.snapshot().certificates.into_iter().filter(|c| c.workspace_id == workspace_id).collect();
        let count = |status: Status| mine.iter().filter(|c| Status::at(c.revoked, c.expires_at, now) == status).count();
        let week = now.saturating_add(7 * 24 * 3600 * 1000);
        let facet = |value: &dyn Fn(&Certificate) -> String| {
            let mut counts = BTreeMap::new();
            for certificate in &mine {
                *counts.entry(value(certificate)).or_insert(0_i64) += 1;
            }
            counts.into_iter().collect::<Vec<_>>()
        };
        Ok(Statistics {
            total: mine.len() as i64,
            by_status: Status::ALL.iter().map(|&status| (status, count(status) as i64)).collect(),
            expiring_within_7_days: mine
                .iter()
                .filter(|c| !c.revoked && c.expires_at > now && c.expires_at <= week)
                .count() as i64,
            auto_renewal_enabled: mine.iter().filter(|c| c.auto_renewal).count() as i64,
            by_usage_category: facet(&|c| c.usage_category.clone()),
            by_issuance_source: facet(&|c| c.issuance_source.as_str().to_owned()),
            by_key_algorithm: facet(&|c| c.key_algorithm.clone()),
        })
    }
    async fn expiry_histogram(
        &self,
        workspace_id: &str,
        now: i64,
        bucket_ms: i64,
        buckets: i64,
    ) -> StoreResult<Vec<(i64, i64)>> {
        let bucket_ms = bucket_ms.max(1);
        let mut counts = BTreeMap::new();
        for c in self.snapshot().certificates {
            if c.workspace_id != workspace_id || c.revoked || c.expires_at <= now {
                continue;
            }
            // Bucket i holds (now + i·bucket_ms, now + (i + 1)·bucket_ms].
            let bucket = (c.expires_at - now - 1) / bucket_ms;
            if bucket < buckets {
                *counts.entry(bucket).or_insert(0_i64) += 1;
            }
        }
        Ok(counts.into_iter().collect())
    }
    async fn list_usage(
        &self,
        workspace_id: &str,
        certificate_id: Option<i64>,
        page: PageRequest,
    ) -> StoreResult<Page<UsageRecord>> {
        let mut mine: Vec<UsageRecord> = self
            .snapshot()
            .usage
            .into_iter()
            .filter(|u| u.workspace_id == workspace_id && certificate_id.is_none_or(|id| u.certificate_id == id))
            .collect();
        mine.sort_by_key(|u| std::cmp::Reverse((u.created_at, u.id)));
        Ok(window(mine, page))
    }
    async fn list_identities(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<MachineIdentity>> {
        let tables = self.snapshot();
        let mut mine: Vec<MachineIdentity> = tables
            .identities
            .iter()
            .filter(|m| m.workspace_id == workspace_id)
            .map(|m| counted(m, &tables.certificates))
            .collect();
        mine.sort_by_key(|m| std::cmp::Reverse((m.created_at, m.id)));
        Ok(window(mine, page))
    }
    async fn find_identity(&self, workspace_id: &str, id: i64) -> StoreResult<Option<MachineIdentity>> {
        let tables = self.snapshot();
        let found = tables.identities.iter().find(|m| m.workspace_id == workspace_id && m.id == id);
        Ok(found.map(|m| counted(m, &tables.certificates)))
    }
    async fn list_revocation_requests(
        &self,
        workspace_id: &str,
        status: Option<&str>,
        page: PageRequest,
    ) -> StoreResult<Page<RevocationRequest>> {
        let mut items: Vec<_> = self
            .snapshot()
            .revocation_requests
            .into_iter()
            .filter(|r| r.workspace_id == workspace_id && status.is_none_or(|s| r.status.as_str() == s))
            .collect();
        items.reverse();
        Ok(Page { total: items.len() as i64, items, total_exact: true, request: page })
    }
}

#[async_trait]
impl CertificateWrites for MemoryTx {
    async fn insert_certificate(&mut self, new: &NewCertificate<'_>) -> StoreResult<Certificate> {
        let parsed = new.parsed;
        let duplicate = self
            .working
            .certificates
            .iter()
            .any(|c| c.workspace_id == new.workspace_id && c.fingerprint_sha256 == parsed.fingerprint_sha256);
        if duplicate {
            return Err(StoreError::Unique("certificates.workspace_id, fingerprint_sha256".into()));
        }
        let certificate = new.inserted(self.working.next_id());
        if let Some(sealed) = new.private_key_sealed {
            self.working.private_keys.insert(certificate.id, sealed.to_owned());
        }
        if new.expiry_announced {
            self.working.expiry_announced.insert(certificate.id, (Some(new.created_at), Some(new.created_at)));
        }
        self.working.certificates.push(certificate.clone());
        Ok(certificate)
    }
    async fn find_certificate(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<Certificate>> {
        Ok(self.working.certificates.iter().find(|c| c.workspace_id == workspace_id && c.id == id).cloned())
    }
    async fn find_private_key(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<String>> {
        let mine = self.working.certificates.iter().any(|c| c.workspace_id == workspace_id && c.id == id);
        Ok(if mine { self.working.private_keys.get(&id).cloned() } else { None })
    }
    async fn update_certificate(
        &mut self,
        workspace_id: &str,
        id: i64,
        update: &CertificateUpdate<'_>,
        now: i64,
    ) -> StoreResult<Option<Certificate>> {
        let Some(c) = self.working.certificates.iter_mut().find(|c| c.workspace_id == workspace_id && c.id == id)
        else {
            return Ok(None);
        };
        if let Some(auto_renewal) = update.auto_renewal {
            c.auto_renewal = auto_renewal;
        }
        if let Some(location) = update.location {
            c.location = location.map(str::to_owned);
        }
        if let Some(metadata) = update.metadata {
            c.metadata = metadata.clone();
        }
        if let Some(source) = update.issuance_source {
            c.issuance_source = source;
        }
        if let Some(identity) = update.machine_identity_id {
            c.machine_identity_id = Some(identity);
        }
        if let Some((at, reason)) = update.revoke {
            c.revoked = true;
            c.revoked_at = Some(at);
            c.revocation_reason = Some(reason.to_owned());
        }
        c.updated_at = now;
        Ok(Some(c.clone()))
    }
    async fn delete_certificate(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool> {
        let before = self.working.certificates.len();
        self.working.certificates.retain(|c| !(c.workspace_id == workspace_id && c.id == id));
        Ok(self.working.certificates.len() < before)
    }
    async fn insert_usage(&mut self, record: &UsageRecord) -> StoreResult<UsageRecord> {
        let record = UsageRecord { id: self.working.next_id(), ..record.clone() };
        self.working.usage.push(record.clone());
        Ok(record)
    }
    async fn insert_identity(&mut self, identity: &MachineIdentity) -> StoreResult<MachineIdentity> {
        let row = MachineIdentity {
            id: self.working.next_id(),
            updated_at: identity.created_at,
            certificate_count: 0,
            ..identity.clone()
        };
        self.working.identities.push(row.clone());
        Ok(row)
    }
    /// Its certificates stay, unlinked.
    async fn delete_identity(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool> {
        for c in self.working.certificates.iter_mut() {
            if c.workspace_id == workspace_id && c.machine_identity_id == Some(id) {
                c.machine_identity_id = None;
            }
        }
        let before = self.working.identities.len();
        self.working.identities.retain(|m| !(m.workspace_id == workspace_id && m.id == id));
        Ok(self.working.identities.len() < before)
    }
    /// As the store: unrevoked, unannounced and past expiry, soonest first; announcing the
    /// expiry also counts as announcing the window.
    async fn claim_expired(&mut self, now: i64, limit: i64) -> StoreResult<Vec<Certificate>> {
        let tables = &mut self.working;
        let due = |c: &Certificate, announced: &(Option<i64>, Option<i64>)| {
            !c.revoked && announced.1.is_none() && c.expires_at <= now
        };
        let claimed = claim(tables, limit, due);
        for certificate in &claimed {
            let announced = tables.expiry_announced.entry(certificate.id).or_default();
            *announced = (announced.0.or(Some(now)), Some(now));
        }
        Ok(claimed)
    }
    /// As the store: unrevoked, unannounced, inside the window and not yet expired.
    async fn claim_expiring(&mut self, now: i64, limit: i64) -> StoreResult<Vec<Certificate>> {
        let tables = &mut self.working;
        let window_end = now.saturating_add(EXPIRING_WINDOW_MS);
        let due = |c: &Certificate, announced: &(Option<i64>, Option<i64>)| {
            !c.revoked
                && announced.0.is_none()
                && announced.1.is_none()
                && c.expires_at > now
                && c.expires_at <= window_end
        };
        let claimed = claim(tables, limit, due);
        for certificate in &claimed {
            tables.expiry_announced.entry(certificate.id).or_default().0 = Some(now);
        }
        Ok(claimed)
    }
    async fn insert_revocation_request(&mut self, request: &RevocationRequest) -> StoreResult<RevocationRequest> {
        // As the database's partial unique index: one pending request per certificate.
        let pending =
            |r: &&RevocationRequest| r.certificate_id == request.certificate_id && r.status.as_str() == "pending";
        if self.working.revocation_requests.iter().any(|r| pending(&r)) {
            return Err(StoreError::Unique("revocation_requests.certificate_id".into()));
        }
        let id = self.working.next_id();
        let row = RevocationRequest { id, ..request.clone() };
        self.working.revocation_requests.push(row.clone());
        Ok(row)
    }
    async fn find_revocation_request(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<RevocationRequest>> {
        Ok(self.working.revocation_requests.iter().find(|r| r.workspace_id == workspace_id && r.id == id).cloned())
    }
    async fn update_revocation_request(
        &mut self,
        request: &RevocationRequest,
        from: crate::certificates::revocation_requests::RevocationStatus,
    ) -> StoreResult<Option<RevocationRequest>> {
        let Some(row) = self
            .working
            .revocation_requests
            .iter_mut()
            .find(|r| r.workspace_id == request.workspace_id && r.id == request.id && r.status == from)
        else {
            return Ok(None);
        };
        *row = RevocationRequest { created_at: row.created_at, ..request.clone() };
        Ok(Some(row.clone()))
    }
}
