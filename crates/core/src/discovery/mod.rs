//! Discovery scans. A `ca_certs` scan pages through a CA connector's `list-certificates`; a
//! `tls_endpoints` scan connects to listed endpoints (`host:port`, CIDR ranges of at most 256
//! addresses) and records the chains they serve. Both bring what they find into the inventory
//! (new certificates created, known ones updated when the CA says they are revoked or when they
//! gain a CA link) and match issuers to the workspace's CAs by their `issuerPatterns`. Scans run
//! in the background: the request that starts one returns its id at once; progress is read at
//! `/api/discovery/scans/{id}`.
//!
//! States: `pending` → `running` → `completed` | `failed` (| `cancelled` by a cancel action).
//! A running scan beats a heartbeat; a scan whose heartbeat stopped (its process died) is
//! claimed and rerun from the start by the discovery job of any replica, so no scan stays
//! `running` after its process is gone. Imports are idempotent (fingerprint), so a rerun never
//! duplicates.

pub mod port;
pub mod tls;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod import_tests;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;

use self::port::{DiscoveryStore, DiscoveryTx};
use self::tls::TlsProber;
use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::cas::service::{call_target, connector_for, find};
use crate::cas::CertificateAuthority;
use crate::certificates::inventory::{self, CaRef, Provenance, RevokedBy};
use crate::certificates::port::CertificateWrites;
use crate::certificates::UsageRecord;
use crate::clock::SharedClock;
use crate::crypto::MasterKey;
use crate::discovery::port::DiscoveryWrites;
use crate::error::{Entity, Error, Result};
use crate::events::{Event, NewCertificatesFound, ScanCompleted};
use crate::pagination::{Page, PageRequest};
use crate::plugins::service::PluginService;
use crate::store_error::StoreError;
use crate::unit_of_work::{ChangeTx, Target, UnitOfWork};
use trellis_pki::x509::parse_der;

pub const CA_CERTS: &str = "ca_certs";
pub const TLS_ENDPOINTS: &str = "tls_endpoints";
pub const TYPES: [&str; 2] = [CA_CERTS, TLS_ENDPOINTS];

/// A scan's state; declared in `crate::state` because the `discovery.scan_completed` event
/// carries it too.
pub use crate::state::ScanStatus;

pub const PENDING: ScanStatus = ScanStatus::Pending;
pub const RUNNING: ScanStatus = ScanStatus::Running;
pub const COMPLETED: ScanStatus = ScanStatus::Completed;
pub const FAILED: ScanStatus = ScanStatus::Failed;
pub const CANCELLED: ScanStatus = ScanStatus::Cancelled;
/// Page size asked of the connector.
const PAGE: u32 = 100;
/// Most certificates one scan imports (a CA with more is scanned in several runs).
const MAX_PER_SCAN: i64 = 100_000;
/// Per-target failures kept on a scan (the count goes on).
pub const MAX_FAILURES_KEPT: usize = 100;

/// How scans run (the binary fills it from the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscoverySettings {
    pub tls: tls::TlsScanSettings,
    /// A running scan whose heartbeat is older than this is taken over
    /// (`TRELLIS_DISCOVERY_STALE_SECS`, default 300).
    pub stale_after: Duration,
    /// `tls_endpoints` scans one workspace may have pending or running at once
    /// (`TRELLIS_DISCOVERY_MAX_SCANS_PER_WORKSPACE`, default 2).
    pub max_scans_per_workspace: usize,
    /// Endpoints one workspace's `tls_endpoints` scans may probe in any hour
    /// (`TRELLIS_DISCOVERY_ENDPOINTS_PER_HOUR`, default 4096: one full scan).
    pub endpoints_per_hour: usize,
}

impl Default for DiscoverySettings {
    fn default() -> Self {
        DiscoverySettings {
            tls: tls::TlsScanSettings::default(),
            stale_after: Duration::from_secs(300),
            max_scans_per_workspace: 2,
            endpoints_per_hour: tls::MAX_ENDPOINTS,
        }
    }
}

const HOUR_MS: i64 = 3_600_000;
/// What a refusal for scans at once suggests: scans end within seconds to minutes.
const RETRY_RUNNING_SECS: u64 = 30;

/// The per-workspace caps of `tls_endpoints` scans, judged at `now` against the workspace's
/// scans that are pending or running or were created within the hour before (`counted`): one
/// more scan of `endpoints` endpoints is refused (429, saying when to retry) when the
/// workspace already runs as many as it may, or when the endpoints of the hour's scans and this
/// one's would pass the hourly cap. A scan counts all its endpoints when it starts, whatever
/// becomes of it (cancelled, failed): they may have been probed.
pub fn check_scan_caps(settings: &DiscoverySettings, counted: &[Scan], endpoints: usize, now: i64) -> Result<()> {
    let active: Vec<String> = counted
        .iter()
        .filter(|s| s.scan_type == TLS_ENDPOINTS && (s.status == PENDING || s.status == RUNNING))
        .map(|s| s.id.to_string())
        .collect();
    if active.len() >= settings.max_scans_per_workspace {
        return Err(Error::QuotaExceeded {
            message: format!(
                "This workspace already has {} tls_endpoints scans pending or running (scans {}); this server runs at \
                 most {} per workspace at once (TRELLIS_DISCOVERY_MAX_SCANS_PER_WORKSPACE). Retry once one of them has \
                 ended (or cancel one), in about {RETRY_RUNNING_SECS} s",
                active.len(),
                active.join(", "),
                settings.max_scans_per_workspace
            ),
            retry_after_secs: RETRY_RUNNING_SECS,
        });
    }
    let mut window: Vec<(i64, usize)> = counted
        .iter()
        .filter(|s| s.scan_type == TLS_ENDPOINTS && s.created_at > now - HOUR_MS)
        .map(|s| (s.created_at, tls::parse_targets(&s.targets).map(|e| e.len()).unwrap_or(0)))
        .collect();
    window.sort_unstable();
    let used: usize = window.iter().map(|(_, n)| n).sum();
    let cap = settings.endpoints_per_hour;
    if used.saturating_add(endpoints) <= cap {
        return Ok(());
    }
    // The scans leave the window oldest first; the retry is due when enough have left.
    let mut left = used;
    let mut retry_at = now + HOUR_MS;
    for (created_at, n) in &window {
        left -= n;
        if left.saturating_add(endpoints) <= cap {
            retry_at = created_at + HOUR_MS;
            break;
        }
    }
    let retry_after_secs = u64::try_from((retry_at - now + 999) / 1000).unwrap_or(1).max(1);
    Err(Error::QuotaExceeded {
        message: format!(
            "This workspace's tls_endpoints scans started within the last hour cover {used} endpoints; {endpoints} more \
             would pass the {cap} per hour this server allows (TRELLIS_DISCOVERY_ENDPOINTS_PER_HOUR). Retry in \
             {retry_after_secs} s, or scan fewer endpoints"
        ),
        retry_after_secs,
    })
}

impl DiscoverySettings {
    fn stale_after_ms(&self) -> i64 {
        i64::try_from(self.stale_after.as_millis()).unwrap_or(i64::MAX)
    }

    /// A running scan beats well within the stale limit.
    fn heartbeat_every(&self) -> Duration {
        (self.stale_after / 4).clamp(Duration::from_millis(200), Duration::from_secs(5))
    }
}

/// One endpoint (or imported certificate) that failed, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetFailure {
    pub target: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    pub id: i64,
    pub workspace_id: String,
    pub scan_type: String,
    pub ca_id: Option<i64>,
    /// `tls_endpoints`: the targets as given.
    pub targets: Vec<String>,
    pub status: ScanStatus,
    pub found: i64,
    pub new_count: i64,
    pub updated_count: i64,
    pub failed_count: i64,
    /// `tls_endpoints`: endpoints to probe (ranges expanded) and probed so far.
    pub total: Option<i64>,
    pub done: i64,
    /// The first [`MAX_FAILURES_KEPT`] failures.
    pub failures: Vec<TargetFailure>,
    pub error: Option<String>,
    pub requested_by: String,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub heartbeat_at: Option<i64>,
}

impl Scan {
    /// Percent done: probed endpoints of a `tls_endpoints` scan; for a `ca_certs` scan only 0
    /// or 100 (a CA does not say how many certificates it holds). `None` while unknown.
    pub fn progress(&self) -> Option<i64> {
        match self.status {
            COMPLETED => Some(100),
            PENDING => Some(0),
            _ => self.total.filter(|t| *t > 0).map(|t| (self.done * 100 / t).clamp(0, 100)),
        }
    }

    fn note_failure(&mut self, target: String, message: String) {
        self.failed_count += 1;
        if self.failures.len() < MAX_FAILURES_KEPT {
            self.failures.push(TargetFailure { target, message });
        }
    }
}

/// A certificate the inventory already holds, as a scan needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownCertificate {
    pub id: i64,
    pub fingerprint_sha256: String,
    pub revoked: bool,
    pub ca_id: Option<i64>,
}

crate::state::state_enum! {
    /// What a scan did with a certificate it came upon, recorded per scan and certificate.
    /// Ordered weakest first: a certificate seen twice by one scan (two endpoints serve it, or
    /// a rerun) keeps the strongest.
    pub enum FindingOutcome {
        /// It was already known and the scan left it as it was.
        Unchanged => "unchanged",
        /// It was already known and the scan changed it (revoked it, linked its CA).
        Updated => "updated",
        /// The scan added it to the inventory.
        New => "new",
    }
}

/// A certificate a scan found, as its page lists it.
#[derive(Debug, Clone)]
pub struct ScanFinding {
    pub certificate: crate::certificates::Certificate,
    pub outcome: FindingOutcome,
}

impl ScanFinding {
    /// The scan added it to the inventory (otherwise it was already known).
    pub fn is_new(&self) -> bool {
        self.outcome == FindingOutcome::New
    }
}

/// The audit actions a scan writes on a certificate, each with the scan's id in its details:
/// `certificate.created` when it adds one, the others when it updates a known one. Scans from
/// before the scan's own record of its certificates (migration 0580) are listed from these.
pub const FINDING_ACTIONS: [&str; 3] = ["certificate.created", "certificate.updated", "certificate.revoked"];

/// What to scan.
#[derive(Debug, Clone)]
pub enum ScanRequest {
    CaCerts { ca_id: i64 },
    TlsEndpoints { targets: Vec<String> },
}

fn new_scan(caller: &Caller, scan_type: &str, ca_id: Option<i64>, targets: Vec<String>, at: i64) -> Scan {
    let actor = Audit::of(caller);
    Scan {
        id: 0,
        workspace_id: caller.workspace_id.to_string(),
        scan_type: scan_type.into(),
        ca_id,
        targets,
        status: PENDING,
        found: 0,
        new_count: 0,
        updated_count: 0,
        failed_count: 0,
        total: None,
        done: 0,
        failures: Vec::new(),
        error: None,
        requested_by: actor.principal.to_string(),
        created_at: at,
        started_at: None,
        finished_at: None,
        heartbeat_at: None,
    }
}

/// What scans use, and nothing else of the service: the area's storage port, the plugin runtime
/// and the master key (a `ca_certs` scan calls the CA's connector), the TLS prober, the
/// operator's discovery settings and the clock. Cheap to clone: a started scan runs on a clone.
/// `Context::discovery_deps` hands it out.
#[derive(Clone)]
pub struct DiscoveryDeps {
    pub store: Arc<dyn DiscoveryStore>,
    pub plugins: PluginService,
    pub master_key: MasterKey,
    pub tls_prober: Arc<dyn TlsProber>,
    pub settings: DiscoverySettings,
    pub clock: SharedClock,
}

impl DiscoveryDeps {
    fn now_millis(&self) -> i64 {
        crate::clock::now_millis(self.clock.as_ref())
    }

    /// Opens a unit of work for a change made by `actor` in `workspace_id` (now).
    async fn change(&self, actor: Audit, workspace_id: Option<&str>) -> Result<UnitOfWork<'static, dyn DiscoveryTx>> {
        let tx = self.store.begin_discovery().await?;
        Ok(UnitOfWork::owning(tx, actor, workspace_id, self.now_millis()))
    }
}

/// Creates a pending scan and starts it in the background.
pub async fn start(ctx: &DiscoveryDeps, caller: &Caller, request: ScanRequest) -> Result<Scan> {
    match request {
        ScanRequest::CaCerts { ca_id } => start_ca_scan(ctx, caller, ca_id).await,
        ScanRequest::TlsEndpoints { targets } => start_tls_scan(ctx, caller, targets).await,
    }
}

/// Creates a pending `ca_certs` scan of CA `ca_id` and starts it in the background.
pub async fn start_ca_scan(ctx: &DiscoveryDeps, caller: &Caller, ca_id: i64) -> Result<Scan> {
    caller.require(Scope::CasWrite)?;
    let ca = find(ctx.store.as_ref(), &caller.workspace_id, ca_id).await?;
    let info = connector_for(ctx.plugins.host(), &ca.workspace_id, &ca.ca_type)?;
    if !info.capabilities.discover {
        return Err(Error::UnsupportedCa(format!("CA type `{}` cannot list its certificates", ca.ca_type)));
    }
    let details = json!({ "type": CA_CERTS, "caId": ca_id });
    insert_and_spawn(ctx, caller, CA_CERTS, Some(ca_id), Vec::new(), details, None).await
}

/// Creates a pending `tls_endpoints` scan of `targets` (checked and expanded here: every bad
/// entry is named in one 400) and starts it in the background.
pub async fn start_tls_scan(ctx: &DiscoveryDeps, caller: &Caller, targets: Vec<String>) -> Result<Scan> {
    caller.require(Scope::CasWrite)?;
    let endpoints = tls::parse_targets(&targets)?;
    let cap = ctx.settings.endpoints_per_hour;
    if endpoints.len() > cap {
        // Never within the hourly cap, however long the caller waits: not a 429.
        return Err(Error::invalid_field(
            "targets",
            format!(
                "{} endpoints after expanding ranges; this server lets a workspace probe at most {cap} per hour \
                 (TRELLIS_DISCOVERY_ENDPOINTS_PER_HOUR)",
                endpoints.len()
            ),
        ));
    }
    let targets: Vec<String> = targets.into_iter().map(|t| t.trim().to_owned()).collect();
    let details = json!({ "type": TLS_ENDPOINTS, "targets": targets, "endpoints": endpoints.len() });
    insert_and_spawn(ctx, caller, TLS_ENDPOINTS, None, targets, details, Some(endpoints.len())).await
}

async fn insert_and_spawn(
    ctx: &DiscoveryDeps,
    caller: &Caller,
    scan_type: &str,
    ca_id: Option<i64>,
    targets: Vec<String>,
    details: serde_json::Value,
    tls_endpoints: Option<usize>,
) -> Result<Scan> {
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    if let Some(endpoints) = tls_endpoints {
        // Judged in the transaction that inserts the scan, so concurrent starts cannot both
        // slip under a cap.
        let now = change.at();
        let counted = change.tx().tls_scans_counted(&caller.workspace_id, now - HOUR_MS).await?;
        check_scan_caps(&ctx.settings, &counted, endpoints, now)?;
    }
    let row = new_scan(caller, scan_type, ca_id, targets, change.at());
    let scan = change.tx().insert_scan(&row).await?;
    change.audit("discovery.scan_started", Target::new("discovery_scan", scan.id), details);
    change.commit().await?;
    let (ctx, id) = (ctx.clone(), scan.id);
    tokio::spawn(async move {
        if let Err(err) = claim_and_run(&ctx, Some(id)).await {
            tracing::warn!(scan = id, error = %err, "discovery scan failed to run");
        }
    });
    Ok(scan)
}

/// Claims one runnable scan (`only`, else any pending one or a stale running one) and runs it.
/// Returns whether one ran.
pub async fn claim_and_run(ctx: &DiscoveryDeps, only: Option<i64>) -> Result<bool> {
    let now = ctx.now_millis();
    let stale_before = now - ctx.settings.stale_after_ms();
    let mut change = ctx.change(Audit::system("discovery"), None).await?;
    let claimed = change.tx().claim_scan(only, now, stale_before).await?;
    change.commit().await?;
    let Some(scan) = claimed else { return Ok(false) };
    if scan.started_at.is_some_and(|at| at < now) {
        tracing::info!(scan = scan.id, "taking over a discovery scan whose process stopped");
    }
    run(ctx, scan).await?;
    Ok(true)
}

/// Why a run stopped early because the scan was cancelled (not a failure).
struct Cancelled;

async fn run(ctx: &DiscoveryDeps, mut scan: Scan) -> Result<()> {
    let outcome = match scan.scan_type.as_str() {
        CA_CERTS => import_from_ca(ctx, &mut scan).await,
        TLS_ENDPOINTS => import_from_endpoints(ctx, &mut scan).await,
        other => Err(Error::Internal(format!("unknown scan type `{other}`"))),
    };
    let now = ctx.now_millis();
    let (status, error) = match &outcome {
        Ok(Ok(())) => (COMPLETED, None),
        // Already `cancelled` in the store: `finish_scan` below changes nothing.
        Ok(Err(Cancelled)) => (CANCELLED, None),
        Err(err) => (FAILED, Some(err.to_string())),
    };
    scan.status = status;
    scan.error = error;
    scan.finished_at = Some(now);
    let mut change = ctx.change(Audit::system("discovery"), Some(&scan.workspace_id)).await?;
    if change.tx().finish_scan(&scan).await? {
        let completed = ScanCompleted {
            scan_id: scan.id,
            scan_type: scan.scan_type.clone(),
            ca_id: scan.ca_id,
            status: scan.status,
            found: scan.found,
            new: scan.new_count,
            updated: scan.updated_count,
            failed: scan.failed_count,
            error: Some(scan.error.clone()),
        };
        change.audit(
            if status == COMPLETED { "discovery.scan_completed" } else { "discovery.scan_failed" },
            Target::new("discovery_scan", scan.id),
            json!({ "found": scan.found, "new": scan.new_count, "updated": scan.updated_count,
                "failed": scan.failed_count, "error": scan.error }),
        );
        change.emit(Event::DiscoveryScanCompleted(completed));
        if scan.new_count > 0 {
            change.emit(Event::DiscoveryNewCertificatesFound(NewCertificatesFound {
                scan_id: scan.id,
                scan_type: scan.scan_type.clone(),
                ca_id: scan.ca_id,
                count: scan.new_count,
            }));
        }
    }
    change.commit().await
}

/// Writes counts and heartbeat; `Err(Cancelled)` when the scan was cancelled meanwhile.
async fn beat(ctx: &DiscoveryDeps, scan: &mut Scan) -> Result<std::result::Result<(), Cancelled>> {
    scan.heartbeat_at = Some(ctx.now_millis());
    let mut change = ctx.change(Audit::system("discovery"), Some(&scan.workspace_id)).await?;
    let still_running = change.tx().update_scan_progress(scan).await?;
    change.commit().await?;
    Ok(if still_running { Ok(()) } else { Err(Cancelled) })
}

fn reset_counts(scan: &mut Scan) {
    scan.found = 0;
    scan.new_count = 0;
    scan.updated_count = 0;
    scan.failed_count = 0;
    scan.done = 0;
    scan.failures.clear();
}

fn count(scan: &mut Scan, label: String, imported: Result<FindingOutcome>) {
    match imported {
        Ok(FindingOutcome::New) => scan.new_count += 1,
        Ok(FindingOutcome::Updated) => scan.updated_count += 1,
        Ok(FindingOutcome::Unchanged) => {}
        Err(err) => {
            tracing::info!(scan = scan.id, target = %label, error = %err, "a discovered certificate could not be imported");
            scan.note_failure(label, format!("cannot import the certificate: {err}"));
        }
    }
}

async fn import_from_ca(ctx: &DiscoveryDeps, scan: &mut Scan) -> Result<std::result::Result<(), Cancelled>> {
    let ca_id = scan.ca_id.ok_or_else(|| Error::Internal("a ca_certs scan without a CA".into()))?;
    let ca = find(ctx.store.as_ref(), &scan.workspace_id, ca_id).await?;
    let info = connector_for(ctx.plugins.host(), &ca.workspace_id, &ca.ca_type)?;
    let target = call_target(&ctx.master_key, &ca, &info)?;
    let cas = workspace_cas(ctx, &scan.workspace_id).await?;
    let (mut cursor, mut seen) = (None, 0i64);
    reset_counts(scan);
    loop {
        let page = ctx.plugins.host().ca_list_certificates(&target, cursor.take(), PAGE).await?;
        // What the page's certificates are known as, in one query: a rescan then costs a read
        // per page rather than a transaction per certificate.
        let fingerprints: Vec<String> = page.items.iter().map(|item| fingerprint(&item.certificate_der)).collect();
        let known: std::collections::HashMap<String, KnownCertificate> = ctx
            .store
            .known_certificates(&scan.workspace_id, &fingerprints)
            .await?
            .into_iter()
            .map(|k| (k.fingerprint_sha256.clone(), k))
            .collect();
        let mut batch = Vec::new();
        // Known certificates with nothing to change: not imported, only recorded as found.
        let mut unchanged: Vec<i64> = Vec::new();
        for (item, fingerprint) in page.items.iter().zip(&fingerprints) {
            seen += 1;
            scan.found += 1;
            let nothing_to_change =
                known.get(fingerprint).filter(|k| (k.revoked || item.revocation.is_none()) && k.ca_id.is_some());
            if let Some(k) = nothing_to_change {
                // A CA listing one certificate twice on a page: one record.
                if !unchanged.contains(&k.id) {
                    unchanged.push(k.id);
                }
                continue;
            }
            let found = Found {
                der: &item.certificate_der,
                chain: &item.chain_der,
                revoked: item.revocation.map(|r| (r.revoked_at.unwrap_or_default() * 1000, r.reason.as_str())),
                scanned_ca: Some(&ca),
                endpoint: None,
            };
            let label = item.ca_reference.clone().unwrap_or_else(|| format!("certificate {seen}"));
            batch.push((label, found));
        }
        import_page(ctx, scan, &cas, batch, &unchanged).await;
        if let Err(cancelled) = beat(ctx, scan).await? {
            return Ok(Err(cancelled));
        }
        match page.next_cursor {
            Some(next) if seen < MAX_PER_SCAN && !page.items.is_empty() => cursor = Some(next),
            _ => return Ok(Ok(())),
        }
    }
}

async fn import_from_endpoints(ctx: &DiscoveryDeps, scan: &mut Scan) -> Result<std::result::Result<(), Cancelled>> {
    let endpoints = tls::parse_targets(&scan.targets)?;
    let cas = workspace_cas(ctx, &scan.workspace_id).await?;
    let settings = ctx.settings;
    reset_counts(scan);
    scan.total = Some(i64::try_from(endpoints.len()).unwrap_or(i64::MAX));
    if let Err(cancelled) = beat(ctx, scan).await? {
        return Ok(Err(cancelled));
    }
    let timeout = settings.tls.timeout;
    let mut waiting = endpoints.into_iter();
    // Dropping the set (a cancel, an error) aborts the probes still running.
    let mut running = tokio::task::JoinSet::new();
    let spawn = |running: &mut tokio::task::JoinSet<_>, target: tls::TlsTarget| {
        let prober = ctx.tls_prober.clone();
        running.spawn(async move {
            let served = prober.served_chain(&target, timeout).await;
            (target, served)
        });
    };
    for target in waiting.by_ref().take(settings.tls.concurrency.max(1)) {
        spawn(&mut running, target);
    }
    let mut ticker = tokio::time::interval(settings.heartbeat_every());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        tokio::select! {
            joined = running.join_next() => {
                let Some(joined) = joined else { break };
                let (target, served) = joined.map_err(|err| Error::Internal(format!("a TLS probe task failed: {err}")))?;
                if let Some(next) = waiting.next() {
                    spawn(&mut running, next);
                }
                scan.done += 1;
                let label = target.label();
                match served {
                    Ok(chain) => {
                        let Some((leaf, rest)) = chain.certificates.split_first() else {
                            scan.note_failure(label, "the endpoint completed the handshake without a certificate".into());
                            continue;
                        };
                        scan.found += 1;
                        let found = Found { der: leaf, chain: rest, revoked: None, scanned_ca: None, endpoint: Some(&target) };
                        let imported = import(ctx, scan, &cas, &found).await;
                        count(scan, label, imported);
                    }
                    Err(err) => scan.note_failure(label, err.to_string()),
                }
            }
            _ = ticker.tick() => {
                if let Err(cancelled) = beat(ctx, scan).await? {
                    return Ok(Err(cancelled));
                }
            }
        }
    }
    Ok(Ok(()))
}

/// Lowercase hex SHA-256 of a DER certificate (the inventory's fingerprint).
fn fingerprint(der: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(der))
}

/// Every CA of the workspace (for issuer matching).
async fn workspace_cas(ctx: &DiscoveryDeps, workspace_id: &str) -> Result<Vec<CertificateAuthority>> {
    let mut cas = Vec::new();
    let mut offset = 0;
    loop {
        let page = ctx.store.list_cas(workspace_id, PageRequest { limit: 100, offset }).await?;
        let n = page.items.len() as i64;
        cas.extend(page.items);
        if n < 100 {
            return Ok(cas);
        }
        offset += n;
    }
}

/// Whether `issuer` contains `pattern`, case-insensitively; `*` in a pattern stands for any
/// text (`*Fixture CA*`). A pattern of only `*` claims nothing.
pub fn pattern_matches(issuer: &str, pattern: &str) -> bool {
    let issuer = issuer.to_lowercase();
    let pattern = pattern.to_lowercase();
    let pieces: Vec<&str> = pattern.split('*').filter(|p| !p.is_empty()).collect();
    if pieces.is_empty() {
        return false;
    }
    let mut rest = issuer.as_str();
    for piece in pieces {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

/// How strongly `ca` claims `issuer`: the longest of its matching patterns (0: none).
fn claim_strength(ca: &CertificateAuthority, issuer: &str) -> usize {
    ca.issuer_patterns
        .iter()
        .filter(|p| pattern_matches(issuer, p))
        .map(|p| p.chars().filter(|c| *c != '*').count())
        .max()
        .unwrap_or(0)
}

/// The CA whose `issuerPatterns` claim `issuer` most specifically (longest matching pattern;
/// the oldest CA on a tie).
pub fn match_issuer<'a>(issuer: &str, cas: &'a [CertificateAuthority]) -> Option<&'a CertificateAuthority> {
    cas.iter()
        .map(|ca| (claim_strength(ca, issuer), ca))
        .filter(|(strength, _)| *strength > 0)
        .max_by(|(a, x), (b, y)| a.cmp(b).then(y.id.cmp(&x.id)))
        .map(|(_, ca)| ca)
}

/// The CA a discovered certificate belongs to. A `ca_certs` scan's CA listed it, so it keeps it
/// unless its own patterns do not claim the issuer and another CA's do; a TLS endpoint's
/// certificate goes to the CA whose patterns claim its issuer, if any.
fn owner<'a>(
    issuer: &str,
    scanned: Option<&'a CertificateAuthority>,
    cas: &'a [CertificateAuthority],
) -> Option<&'a CertificateAuthority> {
    let matched = match_issuer(issuer, cas);
    match scanned {
        Some(scanned) if claim_strength(scanned, issuer) > 0 => Some(scanned),
        Some(scanned) => matched.or(Some(scanned)),
        None => matched,
    }
}

/// One certificate a scan came upon.
struct Found<'a> {
    der: &'a [u8],
    chain: &'a [Vec<u8>],
    /// Revocation time (ms) and reason, when the CA says so.
    revoked: Option<(i64, &'a str)>,
    scanned_ca: Option<&'a CertificateAuthority>,
    /// The endpoint that served it (`tls_endpoints`).
    endpoint: Option<&'a tls::TlsTarget>,
}

/// Imports a page of a CA's certificates in one transaction: a commit per page rather than per
/// certificate (on PostgreSQL the commits were most of the cost). The page's known
/// certificates with nothing to change (`unchanged`, ids) are recorded as found in the same
/// transaction. When any import fails, the page is rolled back and imported again one
/// certificate at a time, so each failure is named and the others still land.
async fn import_page(
    ctx: &DiscoveryDeps,
    scan: &mut Scan,
    cas: &[CertificateAuthority],
    batch: Vec<(String, Found<'_>)>,
    unchanged: &[i64],
) {
    if batch.is_empty() && unchanged.is_empty() {
        return;
    }
    let unchanged: Vec<(i64, FindingOutcome)> = unchanged.iter().map(|id| (*id, FindingOutcome::Unchanged)).collect();
    let together = async {
        let now = ctx.now_millis();
        let mut change = UnitOfWork::owning(
            ctx.store.begin_discovery().await?,
            Audit::system("discovery"),
            Some(&scan.workspace_id),
            now,
        );
        change.tx().record_scan_certificates(&scan.workspace_id, scan.id, &unchanged, now).await?;
        let mut outcomes = Vec::with_capacity(batch.len());
        for (_, found) in &batch {
            outcomes.push(import_into(&mut change, scan, cas, found, now).await?);
        }
        change.commit().await?;
        Ok::<_, Error>(outcomes)
    };
    match together.await {
        Ok(outcomes) => {
            for ((label, _), outcome) in batch.into_iter().zip(outcomes) {
                count(scan, label, Ok(outcome));
            }
        }
        Err(err) => {
            tracing::debug!(scan = scan.id, error = %err, "a page did not import as one; importing it certificate by certificate");
            if !unchanged.is_empty() {
                if let Err(err) = record_found(ctx, scan, &unchanged).await {
                    // They stay counted in `found`; only the scan's list misses them.
                    tracing::warn!(scan = scan.id, error = %err, "could not record the known certificates a scan found");
                }
            }
            for (label, found) in batch {
                let imported = import(ctx, scan, cas, &found).await;
                count(scan, label, imported);
            }
        }
    }
}

/// Records certificates a scan found in their own transaction.
async fn record_found(ctx: &DiscoveryDeps, scan: &Scan, found: &[(i64, FindingOutcome)]) -> Result<()> {
    let now = ctx.now_millis();
    let mut change = UnitOfWork::owning(
        ctx.store.begin_discovery().await?,
        Audit::system("discovery"),
        Some(&scan.workspace_id),
        now,
    );
    change.tx().record_scan_certificates(&scan.workspace_id, scan.id, found, now).await?;
    change.commit().await?;
    Ok(())
}

/// Imports one certificate in its own transaction.
async fn import(
    ctx: &DiscoveryDeps,
    scan: &Scan,
    cas: &[CertificateAuthority],
    found: &Found<'_>,
) -> Result<FindingOutcome> {
    let now = ctx.now_millis();
    let mut change = UnitOfWork::owning(
        ctx.store.begin_discovery().await?,
        Audit::system("discovery"),
        Some(&scan.workspace_id),
        now,
    );
    match import_into(&mut change, scan, cas, found, now).await {
        Ok(imported) => {
            change.commit().await?;
            Ok(imported)
        }
        // Imported concurrently (a rerun of the same scan): already there.
        Err(Error::Conflict(_) | Error::Store(StoreError::Unique(_))) => Ok(FindingOutcome::Unchanged),
        Err(err) => Err(err),
    }
}

/// Imports one certificate inside `change`, which the caller commits. A certificate inserted
/// concurrently is a conflict (`inventory::add`'s 409): on PostgreSQL it ends the transaction.
async fn import_into<T: ?Sized + ChangeTx + CertificateWrites + DiscoveryWrites>(
    change: &mut UnitOfWork<'_, T>,
    scan: &Scan,
    cas: &[CertificateAuthority],
    found: &Found<'_>,
    now: i64,
) -> Result<FindingOutcome> {
    let parsed = parse_der(found.der)?;
    let owner = owner(&parsed.issuer, found.scanned_ca, cas);
    let workspace_id = scan.workspace_id.clone();
    let location = found.endpoint.map(tls::TlsTarget::label);
    let usage = found.endpoint.map(|endpoint| UsageRecord {
        id: 0,
        workspace_id: workspace_id.clone(),
        certificate_id: 0,
        host: endpoint.host.clone(),
        port: Some(i64::from(endpoint.port)),
        service: Some("tls".into()),
        location: None,
        metadata: json!({ "source": "discovery", "scanId": scan.id }),
        created_at: now,
    });
    if let Some(existing) =
        change.tx().find_certificate_by_fingerprint(&workspace_id, &parsed.fingerprint_sha256).await?
    {
        let mut outcome = FindingOutcome::Unchanged;
        if let Some((at, reason)) = found.revoked.filter(|_| !existing.revoked) {
            let by = RevokedBy::Scan { scan_id: scan.id };
            inventory::mark_revoked(change, &workspace_id, existing.id, at, reason, by).await?;
            outcome = FindingOutcome::Updated;
        }
        if let Some(ca) = owner.filter(|_| existing.ca_id.is_none()) {
            if change.tx().link_certificate_ca(&workspace_id, existing.id, ca.id, now).await? {
                change.audit(
                    "certificate.updated",
                    Target::new("certificate", existing.id),
                    json!({ "caId": ca.id, "source": "discovery", "scanId": scan.id }),
                );
                outcome = FindingOutcome::Updated;
            }
        }
        if let Some(mut usage) = usage {
            if !change.tx().has_usage(&workspace_id, existing.id, &usage.host, usage.port).await? {
                usage.certificate_id = existing.id;
                change.tx().insert_usage(&usage).await?;
            }
        }
        // Recorded even when unchanged: the scan's page lists every certificate it saw.
        change.tx().record_scan_certificates(&workspace_id, scan.id, &[(existing.id, outcome)], now).await?;
        return Ok(outcome);
    }
    let chain: String = found.chain.iter().map(|der| trellis_pki::x509::to_pem(der)).collect();
    let metadata = match &location {
        Some(endpoint) => json!({ "discoveredBy": scan.id, "discoveredAt": endpoint }),
        None => json!({ "discoveredBy": scan.id }),
    };
    let entry = inventory::Entry {
        location: location.as_deref(),
        chain_pem: (!chain.is_empty()).then_some(chain.as_str()),
        ..inventory::Entry::new(&workspace_id, &parsed, &metadata)
    };
    let provenance = Provenance::Discovered {
        scan_id: scan.id,
        owner: owner.map(|ca| CaRef { id: ca.id, ca_type: &ca.ca_type }),
        endpoint: location.as_deref(),
        revoked: found.revoked,
    };
    let certificate = inventory::add(change, entry, provenance).await?;
    if let Some(mut usage) = usage {
        usage.certificate_id = certificate.id;
        change.tx().insert_usage(&usage).await?;
    }
    change.tx().record_scan_certificates(&workspace_id, scan.id, &[(certificate.id, FindingOutcome::New)], now).await?;
    Ok(FindingOutcome::New)
}

pub async fn list(
    ctx: &DiscoveryDeps,
    caller: &Caller,
    scan_type: Option<&str>,
    status: Option<&str>,
    page: PageRequest,
) -> Result<Page<Scan>> {
    caller.require(Scope::CasRead)?;
    let scan_type = scan_type.map(str::trim).filter(|t| !t.is_empty());
    if let Some(t) = scan_type.filter(|t| !TYPES.contains(t)) {
        return Err(Error::invalid_field("type", format!("`{t}` is not one of {}", TYPES.join(", "))));
    }
    let status = status.map(str::trim).filter(|t| !t.is_empty());
    if let Some(s) = status.filter(|s| ScanStatus::parse(s).is_none()) {
        return Err(Error::invalid_field("status", format!("`{s}` is not one of {}", ScanStatus::names())));
    }
    Ok(ctx.store.list_scans(&caller.workspace_id, scan_type, status, page).await?)
}

pub async fn get(ctx: &DiscoveryDeps, caller: &Caller, id: i64) -> Result<Scan> {
    caller.require(Scope::CasRead)?;
    ctx.store.find_scan(&caller.workspace_id, id).await?.ok_or(Error::NotFound(Entity::DiscoveryScan))
}

/// The certificates a scan found that are still in the inventory, by id: new ones, known ones
/// it updated and known ones it saw again unchanged (the import records each in the
/// transaction that writes the certificate). A scan from before that record (migration 0580)
/// lists what its audit rows and usage records show: the certificates it added or changed and
/// the known ones it first saw at an endpoint.
pub async fn findings(ctx: &DiscoveryDeps, caller: &Caller, id: i64, page: PageRequest) -> Result<Page<ScanFinding>> {
    caller.require(Scope::CertificatesRead)?;
    let scan = get(ctx, caller, id).await?;
    Ok(ctx.store.scan_findings(&caller.workspace_id, scan.id, scan.created_at, page).await?)
}

/// Cancels a pending or running scan; what it imported stays. The run notices at its next
/// heartbeat and stops (its probes in flight are abandoned).
pub async fn cancel(ctx: &DiscoveryDeps, caller: &Caller, id: i64) -> Result<Scan> {
    caller.require(Scope::CasWrite)?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let at = change.at();
    let scan = change.tx().cancel_scan(&caller.workspace_id, id, at).await?;
    let scan = match scan {
        Some(scan) => scan,
        None => {
            let current =
                ctx.store.find_scan(&caller.workspace_id, id).await?.ok_or(Error::NotFound(Entity::DiscoveryScan))?;
            return Err(Error::Conflict(format!(
                "scan {id} is {}; only pending or running scans can be cancelled",
                current.status
            )));
        }
    };
    change.audit("discovery.scan_cancelled", Target::new("discovery_scan", id), json!({}));
    change.emit(Event::DiscoveryScanCompleted(ScanCompleted {
        scan_id: id,
        scan_type: scan.scan_type.clone(),
        ca_id: scan.ca_id,
        status: CANCELLED,
        found: scan.found,
        new: scan.new_count,
        updated: scan.updated_count,
        failed: scan.failed_count,
        error: None,
    }));
    change.commit().await?;
    Ok(scan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca(id: i64, patterns: &[&str]) -> CertificateAuthority {
        CertificateAuthority {
            id,
            workspace_id: "ws".into(),
            name: format!("CA {id}"),
            ca_type: "fixture".into(),
            description: None,
            url: None,
            status: crate::cas::CaStatus::Active,
            health_status: crate::cas::HealthStatus::Unknown,
            issuer_patterns: patterns.iter().map(|p| (*p).to_owned()).collect(),
            config: json!({}),
            last_sync: None,
            created_at: 0,
            updated_at: 0,
        }
    }

    #[test]
    fn patterns_are_case_insensitive_substrings_with_stars() {
        assert!(pattern_matches("CN=R11, O=Let's Encrypt, C=US", "let's encrypt"));
        assert!(pattern_matches("CN=Fixture CA Leaf", "*Fixture CA*"));
        assert!(pattern_matches("CN=DigiCert Global G2 TLS RSA SHA256 2020 CA1", "digicert*tls"));
        assert!(!pattern_matches("CN=Sectigo", "DigiCert"));
        assert!(!pattern_matches("CN=anything", "*"));
    }

    #[test]
    fn the_most_specific_pattern_wins_and_a_scanned_ca_keeps_what_it_claims() {
        let cas = [ca(1, &["Example"]), ca(2, &["Example Issuing CA"]), ca(3, &["Other"])];
        assert_eq!(match_issuer("CN=Example Issuing CA 1", &cas).map(|c| c.id), Some(2));
        assert_eq!(match_issuer("CN=Example Root", &cas).map(|c| c.id), Some(1));
        assert_eq!(match_issuer("CN=Nobody", &cas).map(|c| c.id), None);
        assert_eq!(owner("CN=Example Root", Some(&cas[2]), &cas).map(|c| c.id), Some(1));
        assert_eq!(owner("CN=Nobody", Some(&cas[2]), &cas).map(|c| c.id), Some(3));
        assert_eq!(owner("CN=Other Example Issuing CA", Some(&cas[2]), &cas).map(|c| c.id), Some(3));
    }

    fn tls_scan(id: i64, status: ScanStatus, created_at: i64, targets: &[&str]) -> Scan {
        Scan {
            id,
            workspace_id: "ws".into(),
            scan_type: TLS_ENDPOINTS.into(),
            ca_id: None,
            targets: targets.iter().map(|t| (*t).to_owned()).collect(),
            status,
            found: 0,
            new_count: 0,
            updated_count: 0,
            failed_count: 0,
            total: None,
            done: 0,
            failures: Vec::new(),
            error: None,
            requested_by: "user:1".into(),
            created_at,
            started_at: None,
            finished_at: None,
            heartbeat_at: None,
        }
    }

    fn retry_after(result: Result<()>) -> u64 {
        match result {
            Err(Error::QuotaExceeded { retry_after_secs, .. }) => retry_after_secs,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn scans_at_once_are_capped_per_workspace() {
        let settings = DiscoverySettings { max_scans_per_workspace: 2, ..DiscoverySettings::default() };
        let now = 10 * HOUR_MS;
        let one = [tls_scan(1, RUNNING, now - 5_000, &["a.example:443"])];
        assert!(check_scan_caps(&settings, &one, 1, now).is_ok());
        let two = [one[0].clone(), tls_scan(2, PENDING, now - 1_000, &["b.example:443"])];
        let err = check_scan_caps(&settings, &two, 1, now).unwrap_err();
        assert_eq!(err.code(), "RATE_LIMITED");
        assert!(err.to_string().contains("TRELLIS_DISCOVERY_MAX_SCANS_PER_WORKSPACE"), "{err}");
        // Ended scans do not count against scans at once.
        let ended = [tls_scan(1, COMPLETED, now - 5_000, &["a.example:443"]), tls_scan(2, CANCELLED, now, &["b:1"])];
        assert!(check_scan_caps(&settings, &ended, 1, now).is_ok());
    }

    /// The hourly window follows the (injected) clock: the retry is due when enough of the
    /// hour's endpoints have left it, oldest scan first.
    #[test]
    fn endpoints_per_hour_are_capped_with_the_time_to_retry() {
        let settings = DiscoverySettings { endpoints_per_hour: 300, max_scans_per_workspace: 9, ..Default::default() };
        let now = 10 * HOUR_MS;
        let hour = [
            tls_scan(1, COMPLETED, now - HOUR_MS, &["10.0.0.0/24:443"]), // left the window just now
            tls_scan(2, COMPLETED, now - 40 * 60_000, &["10.0.1.0/24:443"]), // 254, leaves in 20 min
            tls_scan(3, CANCELLED, now - 10 * 60_000, &["a.example:443", "b.example:443"]), // 2, in 50 min
        ];
        assert!(check_scan_caps(&settings, &hour, 44, now).is_ok(), "254 + 2 + 44 = 300");
        let err = check_scan_caps(&settings, &hour, 45, now).unwrap_err();
        assert!(err.to_string().contains("TRELLIS_DISCOVERY_ENDPOINTS_PER_HOUR"), "{err}");
        assert_eq!(retry_after(Err(err)), 20 * 60, "when scan 2 leaves the hour");
        assert_eq!(retry_after(check_scan_caps(&settings, &hour, 299, now)), 50 * 60, "both must leave");
        // Twenty minutes later the same scan fits.
        assert!(check_scan_caps(&settings, &hour, 45, now + 20 * 60_000).is_ok());
    }
}
