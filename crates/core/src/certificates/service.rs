//! Use cases of the inventory. Every function takes the caller, checks its scope and
//! scopes every read and write to the caller's workspace. Every mutation writes its
//! audit row and its outbox event in the same transaction.

use std::sync::Arc;

use serde_json::{json, Value};

use super::port::{CertificateStore, CertificateTx};
use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::certificates::inventory::{self, Provenance, RevokedBy};
use crate::certificates::port::CertificateWrites;
use crate::certificates::{
    parse_pem, Certificate, IssuanceSource, MachineIdentity, Statistics, Status, UsageCategory, UsageRecord,
};
use crate::certificates::{CertificateFilter, CertificateOrder, CertificateUpdate};
use crate::clock::SharedClock;
use crate::crypto::MasterKey;
use crate::error::{Entity, Error, Result};
use crate::events::{CertificateData, CertificateExpiring, CertificateUpdated, Event};
use crate::pagination::{Page, PageRequest};
use crate::unit_of_work::{ChangeTx, Target, UnitOfWork};

const MAX_TEXT: usize = 1024;
const MAX_METADATA_BYTES: usize = 64 * 1024;

/// A certificate to register: the PEM plus the annotations a caller may set.
#[derive(Debug, Default)]
pub struct Registration {
    pub certificate: String,
    pub issuance_source: Option<String>,
    pub auto_renewal: Option<bool>,
    pub location: Option<String>,
    pub metadata: Option<Value>,
}

/// Changes of a PUT. `None` leaves a field alone; `Some(None)` clears it.
#[derive(Debug, Default)]
pub struct Changes {
    pub auto_renewal: Option<bool>,
    pub location: Option<Option<String>>,
    pub metadata: Option<Value>,
    pub issuance_source: Option<String>,
}

/// List filters; values as the API receives them, checked here.
#[derive(Debug, Default)]
pub struct ListQuery {
    pub status: Option<String>,
    pub search: Option<String>,
    pub signature_algorithm: Option<String>,
    pub key_algorithm: Option<String>,
    pub usage_category: Option<String>,
    pub issuance_source: Option<String>,
    /// A CA's id: only the certificates issued through it.
    pub ca_id: Option<String>,
    /// `newest` (default), `expiresAt` (soonest first) or `-expiresAt` (latest first).
    pub sort: Option<String>,
}

/// What the inventory's use cases use, and nothing else of the service: the area's storage port,
/// the master key (stored private keys are sealed under it) and the clock.
/// `Context::certificate_deps` hands it out.
#[derive(Clone)]
pub struct CertificateDeps {
    pub store: Arc<dyn CertificateStore>,
    pub master_key: MasterKey,
    pub clock: SharedClock,
}

impl CertificateDeps {
    pub(crate) fn now_millis(&self) -> i64 {
        crate::clock::now_millis(self.clock.as_ref())
    }

    /// Opens a unit of work for a change made by `actor` in `workspace_id` (now).
    pub(crate) async fn change(
        &self,
        actor: Audit,
        workspace_id: Option<&str>,
    ) -> Result<UnitOfWork<'static, dyn CertificateTx>> {
        let tx = self.store.begin_certificates().await?;
        Ok(UnitOfWork::owning(tx, actor, workspace_id, self.now_millis()))
    }
}

pub async fn register(ctx: &CertificateDeps, caller: &Caller, registration: Registration) -> Result<Certificate> {
    caller.require(Scope::CertificatesWrite)?;
    let parsed = parse_pem(&registration.certificate)?;
    // `inventory::add` checks it too; checking it here as well keeps the certificate named
    // before the annotations when both are wrong.
    inventory::check_size(&parsed)?;
    // `internal` means "issued by our PKI, key held here"; an import cannot claim it.
    let source = match registration.issuance_source.as_deref() {
        None => IssuanceSource::External,
        Some(text) => match IssuanceSource::parse(text) {
            Some(IssuanceSource::Internal) => {
                return Err(Error::invalid_field(
                    "issuanceSource",
                    "`internal` is set only by internal issuance; use external, agent or vault",
                ))
            }
            Some(source) => source,
            None => return Err(Error::invalid_field("issuanceSource", "must be one of external, agent, vault")),
        },
    };
    let location = registration.location.map(|l| check_text("location", &l)).transpose()?;
    let metadata = check_metadata(registration.metadata.unwrap_or_else(|| json!({})))?;
    let now = ctx.now_millis();
    let actor = Audit::of(caller);
    let workspace_id = caller.workspace_id.clone();
    let auto_renewal = registration.auto_renewal.unwrap_or(false);
    // Registrations are the inventory's bulk write: they go through group commit.
    crate::unit_of_work::write(ctx.store.as_ref(), move |tx| {
        Box::pin(async move {
            let mut change = UnitOfWork::within(tx, actor, Some(&workspace_id), now);
            let entry = inventory::Entry {
                auto_renewal,
                location: location.as_deref(),
                ..inventory::Entry::new(&workspace_id, &parsed, &metadata)
            };
            let certificate = inventory::add(&mut change, entry, Provenance::Registered { source }).await?;
            change.commit().await?;
            Ok(certificate)
        })
    })
    .await
}

pub async fn list(
    ctx: &CertificateDeps,
    caller: &Caller,
    query: ListQuery,
    page: PageRequest,
) -> Result<Page<Certificate>> {
    caller.require(Scope::CertificatesRead)?;
    // An empty parameter (`?status=`) means "no filter", as list UIs send it.
    let present = |value: Option<String>| value.map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    let query = ListQuery {
        status: present(query.status),
        search: present(query.search),
        signature_algorithm: present(query.signature_algorithm),
        key_algorithm: present(query.key_algorithm),
        usage_category: present(query.usage_category),
        issuance_source: present(query.issuance_source),
        ca_id: present(query.ca_id),
        sort: present(query.sort),
    };
    let status = match query.status.as_deref() {
        None => None,
        Some(text) => Some(
            Status::parse(text)
                .ok_or_else(|| Error::invalid_field("status", "must be one of active, expiring, expired, revoked"))?,
        ),
    };
    let usage_category = match query.usage_category.as_deref() {
        None => None,
        Some(text) => Some(
            UsageCategory::parse(text)
                .ok_or_else(|| {
                    Error::invalid_field("usageCategory", "must be one of TLS, S/MIME, Code Signing, Client Auth")
                })?
                .as_str()
                .to_string(),
        ),
    };
    let issuance_source = match query.issuance_source.as_deref() {
        None => None,
        Some(text) => Some(IssuanceSource::parse(text).ok_or_else(|| {
            Error::invalid_field("issuanceSource", "must be one of internal, agent, vault, external")
        })?),
    };
    let search = query.search.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    if search.as_ref().is_some_and(|s| s.chars().count() > 200) {
        return Err(Error::invalid_field("search", "must be at most 200 characters"));
    }
    // A NUL or other control character cannot occur in a name and breaks the search index's
    // query syntax (found by fuzzing: it was a 500).
    if search.as_ref().is_some_and(|s| s.chars().any(char::is_control)) {
        return Err(Error::invalid_field("search", "must not contain control characters"));
    }
    let ca_id = match query.ca_id.as_deref() {
        None => None,
        Some(text) => Some(
            text.parse::<i64>()
                .ok()
                .filter(|id| *id > 0)
                .ok_or_else(|| Error::invalid_field("caId", "must be a CA's id (a positive integer)"))?,
        ),
    };
    let order = match query.sort.as_deref() {
        None => CertificateOrder::Newest,
        Some(text) => CertificateOrder::parse(text)
            .ok_or_else(|| Error::invalid_field("sort", "must be one of newest, expiresAt, -expiresAt"))?,
    };
    let filter = CertificateFilter {
        status,
        search,
        ca_id,
        order,
        signature_algorithm: query.signature_algorithm.map(|s| normalize_algorithm(&s)),
        key_algorithm: query.key_algorithm.map(|s| normalize_algorithm(&s)),
        usage_category,
        issuance_source,
        now: ctx.now_millis(),
    };
    Ok(ctx.store.list_certificates(&caller.workspace_id, &filter, page).await?)
}

/// Accepts `SHA-256`, `sha256`, `SHA256-RSA`, `rsa`, `Ed25519`…: upper-case, dashes only
/// between a hash and a key name, so the store can match exact values.
fn normalize_algorithm(text: &str) -> String {
    let upper = text.trim().to_uppercase().replace(['_', ' '], "-");
    match upper.as_str() {
        "SHA256" => "SHA-256".into(),
        "SHA384" => "SHA-384".into(),
        "SHA512" => "SHA-512".into(),
        "SHA1" => "SHA-1".into(),
        "EC" => "ECDSA".into(),
        "EDDSA" => "ED25519".into(),
        _ => upper,
    }
}

pub async fn get(ctx: &CertificateDeps, caller: &Caller, id: i64) -> Result<Certificate> {
    caller.require(Scope::CertificatesRead)?;
    ctx.store.find_certificate(&caller.workspace_id, id).await?.ok_or(Error::NotFound(Entity::Certificate))
}

pub async fn update(ctx: &CertificateDeps, caller: &Caller, id: i64, changes: Changes) -> Result<Certificate> {
    caller.require(Scope::CertificatesWrite)?;
    let location = match changes.location {
        Some(Some(text)) => Some(Some(check_text("location", &text)?)),
        other => other,
    };
    let metadata = changes.metadata.map(check_metadata).transpose()?;
    let issuance_source = match changes.issuance_source.as_deref() {
        None => None,
        Some(text) => match IssuanceSource::parse(text) {
            Some(IssuanceSource::Internal) | None => {
                return Err(Error::invalid_field("issuanceSource", "must be one of external, agent, vault"))
            }
            Some(source) => Some(source),
        },
    };
    let update = CertificateUpdate {
        auto_renewal: changes.auto_renewal,
        location: location.as_ref().map(|l| l.as_deref()),
        metadata: metadata.as_ref(),
        issuance_source,
        ..Default::default()
    };
    mutate(
        ctx,
        caller,
        id,
        update,
        "certificate.updated",
        Event::CertificateUpdated,
        |c| json!({ "changes": changed_fields(c) }),
    )
    .await
}

fn changed_fields(update: &CertificateUpdate<'_>) -> Vec<&'static str> {
    let mut fields = Vec::new();
    if update.auto_renewal.is_some() {
        fields.push("autoRenewal");
    }
    if update.location.is_some() {
        fields.push("location");
    }
    if update.metadata.is_some() {
        fields.push("metadata");
    }
    if update.issuance_source.is_some() {
        fields.push("issuanceSource");
    }
    if update.machine_identity_id.is_some() {
        fields.push("machineIdentityId");
    }
    fields
}

/// Sets auto-renewal to `enabled`. Whether the certificate's CA can renew it is checked above
/// the inventory (`lifecycle::set_auto_renewal`), which also resolves a toggle.
pub(crate) async fn set_auto_renewal(
    ctx: &CertificateDeps,
    caller: &Caller,
    id: i64,
    enabled: bool,
) -> Result<Certificate> {
    caller.require(Scope::CertificatesWrite)?;
    let update = CertificateUpdate { auto_renewal: Some(enabled), ..Default::default() };
    mutate(
        ctx,
        caller,
        id,
        update,
        "certificate.auto_renewal_changed",
        Event::CertificateUpdated,
        |_| json!({ "autoRenewal": enabled }),
    )
    .await
}

/// The reason a revocation records: the caller's, checked, else `unspecified`.
pub(crate) fn revocation_reason(reason: Option<String>) -> Result<String> {
    match reason.map(|r| r.trim().to_string()).filter(|r| !r.is_empty()) {
        Some(reason) => check_text("reason", &reason),
        None => Ok("unspecified".to_string()),
    }
}

pub(crate) fn already_revoked(certificate: &Certificate) -> Error {
    Error::validation_with(
        "Certificate is already revoked",
        json!({ "revokedAt": certificate.revoked_at.map(crate::clock::rfc3339), "reason": certificate.revocation_reason }),
    )
}

/// Marks certificate `id` revoked in the inventory within `change`, with its audit row (`at_ca`:
/// what its CA did) and `certificate.revoked`. Refused when it already is.
pub(crate) async fn record_revocation<T: ?Sized + ChangeTx + CertificateWrites>(
    change: &mut UnitOfWork<'_, T>,
    workspace_id: &str,
    id: i64,
    reason: &str,
    at_ca: &str,
) -> Result<Certificate> {
    let now = change.at();
    let current = change.tx().find_certificate(workspace_id, id).await?.ok_or(Error::NotFound(Entity::Certificate))?;
    if current.revoked {
        return Err(already_revoked(&current));
    }
    inventory::mark_revoked(change, workspace_id, id, now, reason, RevokedBy::Caller { at_ca }).await
}

/// Removes the record. The certificate itself stays valid: deleting is not revoking.
pub async fn delete(ctx: &CertificateDeps, caller: &Caller, id: i64) -> Result<()> {
    caller.require(Scope::CertificatesWrite)?;
    let now = ctx.now_millis();
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let certificate =
        change.tx().find_certificate(&caller.workspace_id, id).await?.ok_or(Error::NotFound(Entity::Certificate))?;
    change.tx().delete_certificate(&caller.workspace_id, id).await?;
    change.audit(
        "certificate.deleted",
        Target::new("certificate", id),
        json!({ "commonName": certificate.common_name, "fingerprintSha256": certificate.fingerprint_sha256 }),
    );
    change.emit(Event::CertificateDeleted(event_data(&certificate, now)));
    change.commit().await?;
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DownloadFormat {
    Pem,
    Der,
    /// The certificate then its issuing chain, PEM (what TLS servers load).
    FullChain,
}

impl DownloadFormat {
    pub fn parse(text: Option<&str>) -> Result<Self> {
        match text.map(str::to_ascii_lowercase).as_deref() {
            None | Some("pem") => Ok(DownloadFormat::Pem),
            Some("der") => Ok(DownloadFormat::Der),
            Some("fullchain") => Ok(DownloadFormat::FullChain),
            Some(_) => Err(Error::invalid_field("format", "must be pem, der or fullchain")),
        }
    }
}

pub struct Download {
    pub bytes: Vec<u8>,
    pub file_name: String,
    pub content_type: &'static str,
}

pub async fn download(ctx: &CertificateDeps, caller: &Caller, id: i64, format: DownloadFormat) -> Result<Download> {
    let certificate = get(ctx, caller, id).await?;
    let stem = file_stem(&certificate.common_name, id);
    Ok(match format {
        DownloadFormat::Pem => Download {
            bytes: certificate.certificate_pem.into_bytes(),
            file_name: format!("{stem}.pem"),
            content_type: "application/x-pem-file",
        },
        DownloadFormat::FullChain => {
            let mut text = certificate.certificate_pem.trim_end().to_owned();
            text.push('\n');
            for pem in certificate.chain() {
                text.push_str(&pem);
            }
            Download {
                bytes: text.into_bytes(),
                file_name: format!("{stem}-fullchain.pem"),
                content_type: "application/x-pem-file",
            }
        }
        DownloadFormat::Der => {
            let parsed = parse_pem(&certificate.certificate_pem)
                .map_err(|_| Error::Internal(format!("stored certificate {id} is not parsable")))?;
            Download { bytes: parsed.der, file_name: format!("{stem}.der"), content_type: "application/pkix-cert" }
        }
    })
}

/// A file name safe in a Content-Disposition header.
fn file_stem(common_name: &str, id: i64) -> String {
    let stem: String = common_name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
        .take(100)
        .collect();
    let stem = stem.trim_matches(['.', '_']);
    if stem.is_empty() {
        format!("certificate-{id}")
    } else {
        stem.to_string()
    }
}

pub struct PrivateKeyStatus {
    pub downloadable: bool,
    pub issuance_source: IssuanceSource,
    pub reason: String,
}

pub async fn private_key_status(ctx: &CertificateDeps, caller: &Caller, id: i64) -> Result<PrivateKeyStatus> {
    let certificate = get(ctx, caller, id).await?;
    let (downloadable, reason) = match (certificate.issuance_source, certificate.has_private_key) {
        (IssuanceSource::Internal, true) => {
            (true, "The private key was generated by the internal PKI and is held encrypted".to_string())
        }
        (IssuanceSource::Internal, false) => {
            (false, "The key pair was generated outside Trellis (a CSR was supplied)".to_string())
        }
        (source, _) => (
            false,
            format!(
                "Private keys are only available for internally issued certificates; this one is {}",
                source.as_str()
            ),
        ),
    };
    Ok(PrivateKeyStatus { downloadable, issuance_source: certificate.issuance_source, reason })
}

/// Returns the decrypted private key PEM and audits the download.
/// Needs `certificates:write`: a key that can read the inventory must not be able to take the
/// keys of the certificates in it.
pub async fn private_key(ctx: &CertificateDeps, caller: &Caller, id: i64) -> Result<(Certificate, String)> {
    caller.require(Scope::CertificatesWrite)?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let certificate =
        change.tx().find_certificate(&caller.workspace_id, id).await?.ok_or(Error::NotFound(Entity::Certificate))?;
    if certificate.issuance_source != IssuanceSource::Internal {
        return Err(Error::PrivateKeyNotAvailable);
    }
    let sealed =
        change.tx().find_private_key(&caller.workspace_id, id).await?.ok_or(Error::NotFound(Entity::PrivateKey))?;
    let key = ctx.master_key.open(&sealed).map_err(|e| Error::Internal(e.to_string()))?;
    let key = String::from_utf8(key).map_err(|_| Error::Internal("stored private key is not UTF-8 PEM".into()))?;
    change.audit(
        "certificate.private_key_downloaded",
        Target::new("certificate", id),
        json!({ "fingerprintSha256": certificate.fingerprint_sha256 }),
    );
    change.commit().await?;
    Ok((certificate, key))
}

pub async fn statistics(ctx: &CertificateDeps, caller: &Caller) -> Result<Statistics> {
    caller.require(Scope::CertificatesRead)?;
    Ok(ctx.store.certificate_statistics(&caller.workspace_id, ctx.now_millis()).await?)
}

/// How many unrevoked certificates expire on each of the next `days` days (1 to 366), day 0
/// being the 24 hours from now: the dashboard's windows and its timeline.
pub async fn expiry_outlook(ctx: &CertificateDeps, caller: &Caller, days: i64) -> Result<Vec<i64>> {
    caller.require(Scope::CertificatesRead)?;
    const DAY_MS: i64 = 24 * 3600 * 1000;
    let days = days.clamp(1, 366);
    let counts = ctx.store.expiry_histogram(&caller.workspace_id, ctx.now_millis(), DAY_MS, days).await?;
    let mut outlook = vec![0; days as usize];
    for (day, count) in counts {
        if let Some(slot) = usize::try_from(day).ok().and_then(|day| outlook.get_mut(day)) {
            *slot += count;
        }
    }
    Ok(outlook)
}

pub struct NewUsage {
    pub certificate_id: i64,
    pub host: String,
    pub port: Option<i64>,
    pub service: Option<String>,
    pub location: Option<String>,
    pub metadata: Option<Value>,
}

pub async fn add_usage(ctx: &CertificateDeps, caller: &Caller, new: NewUsage) -> Result<UsageRecord> {
    caller.require(Scope::CertificatesWrite)?;
    let host = check_text("host", &new.host)?;
    if host.is_empty() {
        return Err(Error::invalid_field("host", "is required"));
    }
    if let Some(port) = new.port {
        if !(1..=65535).contains(&port) {
            return Err(Error::invalid_field("port", "must be between 1 and 65535"));
        }
    }
    let record = UsageRecord {
        id: 0,
        workspace_id: caller.workspace_id.to_string(),
        certificate_id: new.certificate_id,
        host,
        port: new.port,
        service: new.service.map(|s| check_text("service", &s)).transpose()?,
        location: new.location.map(|s| check_text("location", &s)).transpose()?,
        metadata: check_metadata(new.metadata.unwrap_or_else(|| json!({})))?,
        created_at: ctx.now_millis(),
    };
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    if change.tx().find_certificate(&caller.workspace_id, new.certificate_id).await?.is_none() {
        return Err(Error::NotFound(Entity::Certificate));
    }
    let record = change.tx().insert_usage(&record).await?;
    change.audit(
        "certificate_usage.created",
        Target::new("certificate", record.certificate_id),
        json!({ "usageId": record.id, "host": record.host, "port": record.port }),
    );
    change.commit().await?;
    Ok(record)
}

pub async fn list_usage(
    ctx: &CertificateDeps,
    caller: &Caller,
    certificate_id: Option<i64>,
    page: PageRequest,
) -> Result<Page<UsageRecord>> {
    caller.require(Scope::CertificatesRead)?;
    if certificate_id.is_some_and(|id| id < 1) {
        return Err(Error::invalid_field("certificateId", "must be a positive integer"));
    }
    Ok(ctx.store.list_usage(&caller.workspace_id, certificate_id, page).await?)
}

pub struct NewIdentity {
    pub name: String,
    pub kind: Option<String>,
    pub description: Option<String>,
    pub metadata: Option<Value>,
}

pub const IDENTITY_KINDS: [&str; 5] = ["server", "workload", "device", "service_account", "other"];

pub async fn create_identity(ctx: &CertificateDeps, caller: &Caller, new: NewIdentity) -> Result<MachineIdentity> {
    caller.require(Scope::CertificatesWrite)?;
    let name = crate::validation::validate_name("name", &new.name)?;
    let kind = new.kind.unwrap_or_else(|| "server".into());
    if !IDENTITY_KINDS.contains(&kind.as_str()) {
        return Err(Error::invalid_field("type", format!("must be one of {}", IDENTITY_KINDS.join(", "))));
    }
    let now = ctx.now_millis();
    let identity = MachineIdentity {
        id: 0,
        workspace_id: caller.workspace_id.to_string(),
        name,
        kind,
        description: new.description.map(|d| check_text("description", &d)).transpose()?,
        metadata: check_metadata(new.metadata.unwrap_or_else(|| json!({})))?,
        certificate_count: 0,
        created_at: now,
        updated_at: now,
    };
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let identity = change.tx().insert_identity(&identity).await?;
    change.audit(
        "machine_identity.created",
        Target::new("machine_identity", identity.id),
        json!({ "name": identity.name, "type": identity.kind }),
    );
    change.commit().await?;
    Ok(identity)
}

pub async fn list_identities(
    ctx: &CertificateDeps,
    caller: &Caller,
    page: PageRequest,
) -> Result<Page<MachineIdentity>> {
    caller.require(Scope::CertificatesRead)?;
    Ok(ctx.store.list_identities(&caller.workspace_id, page).await?)
}

pub async fn get_identity(ctx: &CertificateDeps, caller: &Caller, id: i64) -> Result<MachineIdentity> {
    caller.require(Scope::CertificatesRead)?;
    ctx.store.find_identity(&caller.workspace_id, id).await?.ok_or(Error::NotFound(Entity::MachineIdentity))
}

/// Deletes an identity; its certificates stay and lose the link.
pub async fn delete_identity(ctx: &CertificateDeps, caller: &Caller, id: i64) -> Result<()> {
    caller.require(Scope::CertificatesWrite)?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    if !change.tx().delete_identity(&caller.workspace_id, id).await? {
        return Err(Error::NotFound(Entity::MachineIdentity));
    }
    change.audit("machine_identity.deleted", Target::new("machine_identity", id), json!({}));
    change.commit().await?;
    Ok(())
}

/// Attaches a certificate to a machine identity of the same workspace.
pub async fn assign_identity(ctx: &CertificateDeps, caller: &Caller, id: i64, identity_id: i64) -> Result<Certificate> {
    caller.require(Scope::CertificatesWrite)?;
    if ctx.store.find_identity(&caller.workspace_id, identity_id).await?.is_none() {
        return Err(Error::NotFound(Entity::MachineIdentity));
    }
    let update = CertificateUpdate { machine_identity_id: Some(identity_id), ..Default::default() };
    mutate(
        ctx,
        caller,
        id,
        update,
        "certificate.identity_assigned",
        Event::CertificateUpdated,
        |_| json!({ "machineIdentityId": identity_id }),
    )
    .await
}

/// Applies an update with its audit row and `certificate.updated`-style event.
async fn mutate(
    ctx: &CertificateDeps,
    caller: &Caller,
    id: i64,
    update: CertificateUpdate<'_>,
    action: &str,
    event: fn(CertificateUpdated) -> Event,
    details: impl FnOnce(&CertificateUpdate<'_>) -> Value,
) -> Result<Certificate> {
    let now = ctx.now_millis();
    let details = details(&update);
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let certificate = change
        .tx()
        .update_certificate(&caller.workspace_id, id, &update, now)
        .await?
        .ok_or(Error::NotFound(Entity::Certificate))?;
    change.audit(action, Target::new("certificate", id), details.clone());
    change.emit(event(CertificateUpdated { certificate: event_data(&certificate, now), changes: details }));
    change.commit().await?;
    Ok(certificate)
}

/// The certificate summary carried by events.
pub(crate) fn event_data(certificate: &Certificate, now: i64) -> CertificateData {
    CertificateData {
        certificate_id: certificate.id,
        common_name: certificate.common_name.clone(),
        issuer: certificate.issuer.clone(),
        serial_number: certificate.serial_number.clone(),
        fingerprint_sha256: certificate.fingerprint_sha256.clone(),
        expires_at: crate::clock::rfc3339(certificate.expires_at),
        status: Status::at(certificate.revoked, certificate.expires_at, now).as_str(),
    }
}

fn check_text(field: &str, text: &str) -> Result<String> {
    let text = text.trim();
    if text.chars().count() > MAX_TEXT || text.chars().any(char::is_control) {
        return Err(Error::invalid_field(field, format!("must be at most {MAX_TEXT} printable characters")));
    }
    Ok(text.to_string())
}

fn check_metadata(metadata: Value) -> Result<Value> {
    if !metadata.is_object() {
        return Err(Error::invalid_field("metadata", "must be a JSON object"));
    }
    if metadata.to_string().len() > MAX_METADATA_BYTES {
        return Err(Error::invalid_field("metadata", format!("must serialize to at most {MAX_METADATA_BYTES} bytes")));
    }
    Ok(metadata)
}

/// What one expiry scan emitted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ExpiryScan {
    pub expiring: usize,
    pub expired: usize,
}

/// Emits `certificate.expiring` when a certificate enters the 30-day window and
/// `certificate.expired` when it passes `expiresAt`, once each, across all workspaces.
/// Status itself is derived at read time; this only produces the events of §3.1.
pub async fn scan_expiry(ctx: &CertificateDeps) -> Result<ExpiryScan> {
    const BATCH: i64 = 500;
    let mut scan = ExpiryScan::default();
    loop {
        let now = ctx.now_millis();
        let mut change = ctx.change(Audit::system("expiry-scan"), None).await?;
        let expired = change.tx().claim_expired(now, BATCH).await?;
        for certificate in &expired {
            change.emit_in(&certificate.workspace_id, Event::CertificateExpired(event_data(certificate, now)));
        }
        let expiring = change.tx().claim_expiring(now, BATCH).await?;
        for certificate in &expiring {
            let days_until_expiry = certificate.days_until_expiry(ctx.clock.now());
            let expiring = CertificateExpiring { certificate: event_data(certificate, now), days_until_expiry };
            change.emit_in(&certificate.workspace_id, Event::CertificateExpiring(expiring));
        }
        change.commit().await?;
        scan.expired += expired.len();
        scan.expiring += expiring.len();
        if (expired.len() as i64) < BATCH && (expiring.len() as i64) < BATCH {
            return Ok(scan);
        }
    }
}
