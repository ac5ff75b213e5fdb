//! Discovery's port, faked whole over the in-memory store's tables (scans, and the
//! certificates and usage records a scan reads), with the rules the SQL stores keep: a claim
//! takes a pending scan or a stale running one, progress and the end are written only while the
//! scan runs, only pending or running scans cancel.

use async_trait::async_trait;

use super::port::{DiscoveryReads, DiscoveryWrites};
use super::{
    FindingOutcome, KnownCertificate, Scan, ScanFinding, CANCELLED, FINDING_ACTIONS, PENDING, RUNNING, TLS_ENDPOINTS,
};
use crate::certificates::Certificate;
use crate::pagination::{Page, PageRequest};
use crate::store_error::StoreResult;
use crate::testing::kernel::FakeTables;
use crate::testing::{MemoryStore, MemoryTx};

impl MemoryStore {
    /// Adds a scan as it stands (its id is the caller's).
    pub fn put_scan(&self, scan: Scan) {
        self.edit(|tables| tables.scans.push(scan));
    }
}

#[async_trait]
impl DiscoveryReads for MemoryStore {
    async fn find_scan(&self, workspace_id: &str, id: i64) -> StoreResult<Option<Scan>> {
        Ok(self.snapshot().scans.into_iter().find(|s| s.workspace_id == workspace_id && s.id == id))
    }
    async fn list_scans(
        &self,
        workspace_id: &str,
        scan_type: Option<&str>,
        status: Option<&str>,
        page: PageRequest,
    ) -> StoreResult<Page<Scan>> {
        let mut mine: Vec<Scan> = self
            .snapshot()
            .scans
            .into_iter()
            .filter(|s| s.workspace_id == workspace_id)
            .filter(|s| scan_type.is_none_or(|t| s.scan_type == t))
            .filter(|s| status.is_none_or(|t| s.status.as_str() == t))
            .collect();
        mine.sort_by_key(|row| std::cmp::Reverse(row.id));
        let total = mine.len() as i64;
        let items = mine.into_iter().skip(page.offset as usize).take(page.limit as usize).collect();
        Ok(Page { items, total, total_exact: true, request: page })
    }
    async fn known_certificates(
        &self,
        workspace_id: &str,
        fingerprints: &[String],
    ) -> StoreResult<Vec<KnownCertificate>> {
        Ok(self
            .snapshot()
            .certificates
            .into_iter()
            .filter(|c| c.workspace_id == workspace_id && fingerprints.contains(&c.fingerprint_sha256))
            .map(|c| KnownCertificate {
                id: c.id,
                fingerprint_sha256: c.fingerprint_sha256,
                revoked: c.revoked,
                ca_id: c.ca_id,
            })
            .collect())
    }
    async fn scan_findings(
        &self,
        workspace_id: &str,
        scan_id: i64,
        since: i64,
        page: PageRequest,
    ) -> StoreResult<Page<ScanFinding>> {
        let tables = self.snapshot();
        let recorded: std::collections::BTreeMap<i64, FindingOutcome> = tables
            .scan_certificates
            .iter()
            .filter(|(ws, scan, _, _)| ws == workspace_id && *scan == scan_id)
            .map(|(_, _, certificate, outcome)| (*certificate, *outcome))
            .collect();
        if !recorded.is_empty() {
            let found: Vec<ScanFinding> = recorded
                .into_iter()
                .filter_map(|(id, outcome)| {
                    let certificate =
                        tables.certificates.iter().find(|c| c.workspace_id == workspace_id && c.id == id)?.clone();
                    Some(ScanFinding { certificate, outcome })
                })
                .collect();
            let total = found.len() as i64;
            let items = found.into_iter().skip(page.offset as usize).take(page.limit as usize).collect();
            return Ok(Page { items, total, total_exact: true, request: page });
        }
        // A scan from before its record (migration 0580): read from its traces.
        let scan = serde_json::json!(scan_id);
        let mut hits: std::collections::BTreeMap<i64, bool> = std::collections::BTreeMap::new();
        for row in tables.audit.iter().filter(|a| {
            a.workspace_id.as_deref() == Some(workspace_id)
                && a.created_at >= since
                && a.target_type == "certificate"
                && FINDING_ACTIONS.contains(&a.action.as_str())
                && a.details.get("scanId") == Some(&scan)
        }) {
            if let Some(id) = row.target_id.as_deref().and_then(|id| id.parse().ok()) {
                *hits.entry(id).or_default() |= row.action == "certificate.created";
            }
        }
        for usage in tables.usage.iter().filter(|u| {
            u.workspace_id == workspace_id && u.created_at >= since && u.metadata.get("scanId") == Some(&scan)
        }) {
            hits.entry(usage.certificate_id).or_default();
        }
        let found: Vec<ScanFinding> = hits
            .into_iter()
            .filter_map(|(id, new)| {
                let certificate =
                    tables.certificates.iter().find(|c| c.workspace_id == workspace_id && c.id == id)?.clone();
                let outcome = if new { FindingOutcome::New } else { FindingOutcome::Updated };
                Some(ScanFinding { certificate, outcome })
            })
            .collect();
        let total = found.len() as i64;
        let items = found.into_iter().skip(page.offset as usize).take(page.limit as usize).collect();
        Ok(Page { items, total, total_exact: true, request: page })
    }
}

fn running(scan: &Scan) -> bool {
    scan.status == RUNNING
}

#[async_trait]
impl DiscoveryWrites for MemoryTx {
    async fn insert_scan(&mut self, scan: &Scan) -> StoreResult<Scan> {
        let scan = Scan { id: self.working.next_id(), ..scan.clone() };
        self.working.scans.push(scan.clone());
        Ok(scan)
    }
    async fn tls_scans_counted(&mut self, workspace_id: &str, since: i64) -> StoreResult<Vec<Scan>> {
        Ok(self
            .working
            .scans
            .iter()
            .filter(|s| s.workspace_id == workspace_id && s.scan_type == TLS_ENDPOINTS)
            .filter(|s| s.status == PENDING || running(s) || s.created_at > since)
            .cloned()
            .collect())
    }
    async fn claim_scan(&mut self, only: Option<i64>, now: i64, stale_before: i64) -> StoreResult<Option<Scan>> {
        let claimable = |s: &Scan| match only {
            Some(id) => s.id == id && s.status == PENDING,
            None => s.status == PENDING || (running(s) && s.heartbeat_at.is_some_and(|at| at < stale_before)),
        };
        let mut scans: Vec<&mut Scan> = self.working.scans.iter_mut().filter(|s| claimable(s)).collect();
        scans.sort_by_key(|s| s.id);
        let Some(scan) = scans.into_iter().next() else { return Ok(None) };
        scan.status = RUNNING;
        scan.started_at = scan.started_at.or(Some(now));
        scan.heartbeat_at = Some(now);
        Ok(Some(scan.clone()))
    }
    async fn update_scan_progress(&mut self, scan: &Scan) -> StoreResult<bool> {
        let Some(stored) = self.working.scans.iter_mut().find(|s| s.id == scan.id && running(s)) else {
            return Ok(false);
        };
        *stored = Scan { status: stored.status, ..scan.clone() };
        Ok(true)
    }
    async fn finish_scan(&mut self, scan: &Scan) -> StoreResult<bool> {
        let Some(stored) = self.working.scans.iter_mut().find(|s| s.id == scan.id && running(s)) else {
            return Ok(false);
        };
        *stored = scan.clone();
        Ok(true)
    }
    async fn cancel_scan(&mut self, workspace_id: &str, id: i64, at: i64) -> StoreResult<Option<Scan>> {
        let Some(stored) = self
            .working
            .scans
            .iter_mut()
            .find(|s| s.workspace_id == workspace_id && s.id == id && (s.status == PENDING || running(s)))
        else {
            return Ok(None);
        };
        stored.status = CANCELLED;
        stored.finished_at = Some(at);
        Ok(Some(stored.clone()))
    }
    async fn find_certificate_by_fingerprint(
        &mut self,
        workspace_id: &str,
        fingerprint_sha256: &str,
    ) -> StoreResult<Option<Certificate>> {
        Ok(self
            .working
            .certificates
            .iter()
            .find(|c| c.workspace_id == workspace_id && c.fingerprint_sha256 == fingerprint_sha256)
            .cloned())
    }
    async fn link_certificate_ca(&mut self, workspace_id: &str, id: i64, ca_id: i64, at: i64) -> StoreResult<bool> {
        let Some(certificate) = self
            .working
            .certificates
            .iter_mut()
            .find(|c| c.workspace_id == workspace_id && c.id == id && c.ca_id.is_none())
        else {
            return Ok(false);
        };
        certificate.ca_id = Some(ca_id);
        certificate.updated_at = at;
        Ok(true)
    }
    async fn record_scan_certificates(
        &mut self,
        workspace_id: &str,
        scan_id: i64,
        found: &[(i64, FindingOutcome)],
        _at: i64,
    ) -> StoreResult<()> {
        let rows = &mut self.working.scan_certificates;
        for &(certificate_id, outcome) in found {
            match rows.iter_mut().find(|(_, scan, certificate, _)| *scan == scan_id && *certificate == certificate_id) {
                Some(row) => row.3 = strongest(row.3, outcome),
                None => rows.push((workspace_id.to_owned(), scan_id, certificate_id, outcome)),
            }
        }
        Ok(())
    }
    async fn has_usage(
        &mut self,
        workspace_id: &str,
        certificate_id: i64,
        host: &str,
        port: Option<i64>,
    ) -> StoreResult<bool> {
        Ok(self.working.usage.iter().any(|u| {
            u.workspace_id == workspace_id && u.certificate_id == certificate_id && u.host == host && u.port == port
        }))
    }
}

/// The variants are declared weakest first, so the stronger is the later in `ALL`.
fn strongest(a: FindingOutcome, b: FindingOutcome) -> FindingOutcome {
    let rank = |o: FindingOutcome| FindingOutcome::ALL.iter().position(|x| *x == o).unwrap_or(0);
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}
