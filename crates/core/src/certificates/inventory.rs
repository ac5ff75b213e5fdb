//! The one way a certificate enters the inventory, and the one way the inventory records that
//! a certificate was revoked. Registration, issuance and discovery all call [`add`]: the size
//! bounds, the issuance source, the expiry bookkeeping, the audit row and `certificate.created`
//! are decided here from the certificate's [`Provenance`], so the three paths cannot drift.

use serde_json::{json, Value};

use super::{event_data, Certificate, CertificateUpdate, IssuanceSource, NewCertificate, ParsedCertificate};
use crate::certificates::port::CertificateWrites;
use crate::error::{Entity, Error, Result};
use crate::events::{CertificateRevoked, Event};
use crate::store_error::StoreError;
use crate::unit_of_work::{ChangeTx, Target, UnitOfWork};

/// Bounds of what a certificate may carry into the inventory. Real certificates stay far below
/// them (a DN of a few hundred characters, tens of SANs); a certificate made to be huge would
/// otherwise make every list page that shows it huge too.
const MAX_NAME_CHARS: usize = 1024;
const MAX_DN_CHARS: usize = 4096;
const MAX_SANS: usize = 1000;

/// The CA type of the host's internal PKI (`cas::service::INTERNAL`, spelled here so the
/// inventory does not depend on the CA registry; a unit test keeps the two equal).
const INTERNAL_CA_TYPE: &str = "internal";

/// A CA as the inventory needs to know it: which one, and of what type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaRef<'a> {
    pub id: i64,
    pub ca_type: &'a str,
}

impl CaRef<'_> {
    /// What a certificate of this CA counts as: `internal` for the host's PKI, `vault` for a
    /// Vault connector's types, `external` for any other CA.
    pub fn issuance_source(&self) -> IssuanceSource {
        if self.ca_type == INTERNAL_CA_TYPE {
            IssuanceSource::Internal
        } else if self.ca_type.contains("vault") {
            IssuanceSource::Vault
        } else {
            IssuanceSource::External
        }
    }
}

/// Where a certificate entering the inventory comes from.
#[derive(Debug, Clone, Copy)]
pub enum Provenance<'a> {
    /// Registered by a caller (`POST /api/certificates`), with the source the caller named
    /// (never `internal`: the registration use case refuses it).
    Registered { source: IssuanceSource },
    /// Issued here through a CA of the workspace, under a template.
    Issued { ca: CaRef<'a>, template: &'a str },
    /// Found by a discovery scan: the CA that claims it (if any), the endpoint that served it
    /// (`tls_endpoints` scans) and its revocation (time in ms, reason) when the CA says so.
    Discovered { scan_id: i64, owner: Option<CaRef<'a>>, endpoint: Option<&'a str>, revoked: Option<(i64, &'a str)> },
}

impl Provenance<'_> {
    /// The certificate's issuance source, derived one way for every path.
    pub fn issuance_source(&self) -> IssuanceSource {
        match self {
            Provenance::Registered { source } => *source,
            Provenance::Issued { ca, .. } => ca.issuance_source(),
            Provenance::Discovered { owner, .. } => owner.map_or(IssuanceSource::External, |ca| ca.issuance_source()),
        }
    }

    /// The CA the certificate is linked to.
    pub fn ca_id(&self) -> Option<i64> {
        match self {
            Provenance::Registered { .. } => None,
            Provenance::Issued { ca, .. } => Some(ca.id),
            Provenance::Discovered { owner, .. } => owner.map(|ca| ca.id),
        }
    }

    /// The audit row of the arrival: its action and details.
    fn audit(&self, certificate: &Certificate) -> (&'static str, Value) {
        match self {
            Provenance::Registered { source } => (
                "certificate.created",
                json!({ "commonName": certificate.common_name, "fingerprintSha256": certificate.fingerprint_sha256,
                    "issuanceSource": source.as_str() }),
            ),
            Provenance::Issued { ca, template } => (
                "certificate.issued",
                json!({ "caId": ca.id, "caType": ca.ca_type, "template": template,
                    "serialNumber": certificate.serial_number, "commonName": certificate.common_name }),
            ),
            Provenance::Discovered { scan_id, endpoint, .. } => (
                "certificate.created",
                json!({ "commonName": certificate.common_name, "source": "discovery", "scanId": scan_id,
                    "caId": certificate.ca_id, "endpoint": endpoint }),
            ),
        }
    }

    /// The 409 of a certificate the workspace's inventory already holds.
    pub(crate) fn duplicate(&self, parsed: &ParsedCertificate) -> Error {
        Error::Conflict(match self {
            Provenance::Registered { .. } => format!(
                "A certificate with SHA-256 fingerprint {} is already registered in this workspace",
                parsed.fingerprint_sha256
            ),
            Provenance::Issued { .. } => "the CA returned a certificate already in the inventory".into(),
            Provenance::Discovered { .. } => {
                format!("the certificate {} is already in the inventory", parsed.fingerprint_sha256)
            }
        })
    }
}

/// A certificate to add: the parsed certificate and what the path that brings it knows of it.
/// The issuance source, the CA link, the arrival time and the expiry bookkeeping are not here:
/// [`add`] derives them.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub workspace_id: &'a str,
    pub parsed: &'a ParsedCertificate,
    pub auto_renewal: bool,
    pub location: Option<&'a str>,
    pub metadata: &'a Value,
    /// The issuing chain (PEM, issuing CA first), when known.
    pub chain_pem: Option<&'a str>,
    /// The private key generated here, sealed under the master key.
    pub private_key_sealed: Option<&'a str>,
    /// The CSR of a caller-held key (renewal signs it again).
    pub csr_pem: Option<&'a str>,
    /// How long before expiry auto-renewal renews it (the template's window).
    pub renew_before_ms: Option<i64>,
}

impl<'a> Entry<'a> {
    /// An entry with no annotations: no auto-renewal, location, chain or key.
    pub fn new(workspace_id: &'a str, parsed: &'a ParsedCertificate, metadata: &'a Value) -> Self {
        Entry {
            workspace_id,
            parsed,
            auto_renewal: false,
            location: None,
            metadata,
            chain_pem: None,
            private_key_sealed: None,
            csr_pem: None,
            renew_before_ms: None,
        }
    }
}

/// Adds a certificate to the inventory inside `change`, with its audit row and
/// `certificate.created` (the caller commits). Refused with nothing written when the
/// certificate passes the inventory's size bounds, and with a 409 when the workspace already
/// holds it. A certificate that arrives expired (or, found by a scan, revoked) never made that
/// transition here: `certificate.created` carries its status, and no `certificate.expired`
/// (or `certificate.revoked`) follows.
pub async fn add<T: ?Sized + ChangeTx + CertificateWrites>(
    change: &mut UnitOfWork<'_, T>,
    entry: Entry<'_>,
    provenance: Provenance<'_>,
) -> Result<Certificate> {
    check_size(entry.parsed)?;
    let now = change.at();
    let template = match provenance {
        Provenance::Issued { template, .. } => Some(template),
        _ => None,
    };
    let new = NewCertificate {
        workspace_id: entry.workspace_id,
        parsed: entry.parsed,
        issuance_source: provenance.issuance_source(),
        auto_renewal: entry.auto_renewal,
        location: entry.location,
        metadata: entry.metadata,
        created_at: now,
        expiry_announced: entry.parsed.expires_at <= now,
        ca_id: provenance.ca_id(),
        chain_pem: entry.chain_pem,
        private_key_sealed: entry.private_key_sealed,
        issuance_template: template,
        csr_pem: entry.csr_pem,
        renew_before_ms: entry.renew_before_ms,
    };
    let inserted = match provenance {
        // New by construction: the store may send its insert later, and `store_issued` then
        // names a duplicate.
        Provenance::Issued { .. } => change.tx().insert_new_certificate(&new).await,
        Provenance::Registered { .. } | Provenance::Discovered { .. } => change.tx().insert_certificate(&new).await,
    };
    let mut certificate = inserted.map_err(|err| match err {
        StoreError::Unique(_) => provenance.duplicate(entry.parsed),
        other => other.into(),
    })?;
    if let Provenance::Discovered { revoked: Some((at, reason)), .. } = provenance {
        let update = CertificateUpdate { revoke: Some((at.max(0), reason)), ..Default::default() };
        if let Some(revoked) = change.tx().update_certificate(entry.workspace_id, certificate.id, &update, now).await? {
            certificate = revoked;
        }
    }
    let (action, details) = provenance.audit(&certificate);
    change
        .audit(action, Target::new("certificate", certificate.id), details)
        .emit(Event::CertificateCreated(event_data(&certificate, now)));
    Ok(certificate)
}

/// Who marked a certificate revoked, for its audit row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokedBy<'a> {
    /// A caller's revocation (or an approved request), after the CA was asked: what it did
    /// (`revoked`, `not_issued_here`, `unsupported`).
    Caller { at_ca: &'a str },
    /// A discovery scan whose CA listed the certificate as revoked.
    Scan { scan_id: i64 },
}

/// Marks a certificate of the inventory revoked at `revoked_at` (ms) for `reason`, inside
/// `change`, with its audit row and `certificate.revoked` (whose data carries `reason` on every
/// path). `NotFound` when the workspace has no such certificate.
pub async fn mark_revoked<T: ?Sized + ChangeTx + CertificateWrites>(
    change: &mut UnitOfWork<'_, T>,
    workspace_id: &str,
    id: i64,
    revoked_at: i64,
    reason: &str,
    by: RevokedBy<'_>,
) -> Result<Certificate> {
    let now = change.at();
    let update = CertificateUpdate { revoke: Some((revoked_at.max(0), reason)), ..Default::default() };
    let certificate = change
        .tx()
        .update_certificate(workspace_id, id, &update, now)
        .await?
        .ok_or(Error::NotFound(Entity::Certificate))?;
    let details = match by {
        RevokedBy::Caller { at_ca } => json!({ "reason": reason, "atCa": at_ca }),
        RevokedBy::Scan { scan_id } => json!({ "reason": reason, "source": "discovery", "scanId": scan_id }),
    };
    change.audit("certificate.revoked", Target::new("certificate", id), details);
    change.emit(Event::CertificateRevoked(revoked_event_data(&certificate, reason, now)));
    Ok(certificate)
}

/// `certificate.revoked`'s data: the certificate summary and the reason.
pub(crate) fn revoked_event_data(certificate: &Certificate, reason: &str, now: i64) -> CertificateRevoked {
    CertificateRevoked { certificate: event_data(certificate, now), reason: Some(reason.to_owned()) }
}

/// The inventory's size bounds (see [`MAX_NAME_CHARS`] and its neighbours).
pub fn check_size(parsed: &ParsedCertificate) -> Result<()> {
    let too_long = |what: &str, limit: usize| {
        Error::validation_with(
            format!("The certificate's {what} is longer than the {limit} characters the inventory stores"),
            json!({ "field": "certificate", "problem": format!("{what} over {limit} characters") }),
        )
    };
    if parsed.common_name.chars().count() > MAX_NAME_CHARS {
        return Err(too_long("common name", MAX_NAME_CHARS));
    }
    if parsed.subject.chars().count() > MAX_DN_CHARS {
        return Err(too_long("subject", MAX_DN_CHARS));
    }
    if parsed.issuer.chars().count() > MAX_DN_CHARS {
        return Err(too_long("issuer", MAX_DN_CHARS));
    }
    if parsed.subject_alt_names.len() > MAX_SANS {
        return Err(Error::validation_with(
            format!("The certificate has more than {MAX_SANS} subject alternative names"),
            json!({ "field": "certificate", "problem": format!("over {MAX_SANS} SANs") }),
        ));
    }
    if parsed.subject_alt_names.iter().any(|san| san.chars().count() > MAX_NAME_CHARS) {
        return Err(too_long("subject alternative name", MAX_NAME_CHARS));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::audit::Audit;
    use crate::certificates::Status;
    use crate::testing::{context, MemoryStore};
    use trellis_pki::x509::parse_pem;

    const WORKSPACE: &str = "ws_inv";
    const NOW: &str = "2026-11-24T12:00:00Z";

    fn parsed(names: Vec<String>) -> ParsedCertificate {
        let pem = rcgen::generate_simple_self_signed(names)
            .map(|certified| certified.cert.pem())
            .unwrap_or_else(|err| panic!("rcgen: {err}"));
        parse_pem(&pem).unwrap_or_else(|err| panic!("parse: {err}"))
    }

    /// Adds `certificate` as `provenance` in one committed unit of work.
    async fn add_one(
        store: &MemoryStore,
        certificate: &ParsedCertificate,
        provenance: Provenance<'_>,
    ) -> Result<Certificate> {
        let ctx = context(store.clone(), NOW);
        let mut change = ctx.change(Audit::system("test"), Some(WORKSPACE)).await?;
        let metadata = json!({});
        let added = add(&mut change, Entry::new(WORKSPACE, certificate, &metadata), provenance).await?;
        change.commit().await?;
        Ok(added)
    }

    #[test]
    fn the_source_is_derived_one_way_from_the_ca() {
        let ca = |ca_type| CaRef { id: 1, ca_type };
        assert_eq!(INTERNAL_CA_TYPE, crate::cas::service::INTERNAL);
        assert_eq!(
            Provenance::Issued { ca: ca("internal"), template: "t" }.issuance_source(),
            IssuanceSource::Internal
        );
        assert_eq!(Provenance::Issued { ca: ca("vault_pki"), template: "t" }.issuance_source(), IssuanceSource::Vault);
        assert_eq!(Provenance::Issued { ca: ca("acme"), template: "t" }.issuance_source(), IssuanceSource::External);
        let found = |owner| Provenance::Discovered { scan_id: 1, owner, endpoint: None, revoked: None };
        assert_eq!(found(Some(ca("internal"))).issuance_source(), IssuanceSource::Internal);
        assert_eq!(found(Some(ca("vault"))).issuance_source(), IssuanceSource::Vault);
        assert_eq!(found(None).issuance_source(), IssuanceSource::External);
        assert_eq!(found(None).ca_id(), None);
        let registered = Provenance::Registered { source: IssuanceSource::Agent };
        assert_eq!((registered.issuance_source(), registered.ca_id()), (IssuanceSource::Agent, None));
    }

    #[tokio::test]
    async fn every_path_keeps_the_size_bounds_and_writes_nothing_when_refused() {
        let too_many: Vec<String> = (0..=MAX_SANS).map(|i| format!("h{i}.example.com")).collect();
        let huge = parsed(too_many);
        let ca = CaRef { id: 3, ca_type: "acme" };
        for provenance in [
            Provenance::Registered { source: IssuanceSource::External },
            Provenance::Issued { ca, template: "web_server" },
            Provenance::Discovered { scan_id: 9, owner: Some(ca), endpoint: None, revoked: None },
        ] {
            let store = MemoryStore::default();
            let refused = add_one(&store, &huge, provenance).await;
            assert!(matches!(refused, Err(Error::Validation { .. })), "{provenance:?}: {refused:?}");
            let tables = store.snapshot();
            assert!(tables.certificates.is_empty() && tables.audit.is_empty() && tables.events.is_empty());
        }
    }

    #[tokio::test]
    async fn an_issued_certificate_is_linked_audited_as_issued_and_announced_as_created() {
        let store = MemoryStore::default();
        let certificate = parsed(vec!["issued.example.com".into()]);
        let ca = CaRef { id: 3, ca_type: "internal" };

        let added = add_one(&store, &certificate, Provenance::Issued { ca, template: "web_server" })
            .await
            .unwrap_or_else(|err| panic!("add: {err}"));

        assert_eq!((added.ca_id, added.issuance_source), (Some(3), IssuanceSource::Internal));
        assert_eq!(added.issuance_template.as_deref(), Some("web_server"));
        let tables = store.snapshot();
        assert_eq!(tables.audit[0].action, "certificate.issued");
        assert_eq!(tables.audit[0].details["caType"], "internal");
        assert_eq!(tables.events[0].event_type, "certificate.created");
        assert_eq!(tables.events[0].payload["data"]["certificateId"], added.id);
    }

    #[tokio::test]
    async fn a_certificate_already_held_is_a_conflict_on_every_path() {
        let store = MemoryStore::default();
        let certificate = parsed(vec!["twice.example.com".into()]);
        let registered = Provenance::Registered { source: IssuanceSource::External };
        add_one(&store, &certificate, registered).await.unwrap_or_else(|err| panic!("add: {err}"));
        let ca = CaRef { id: 3, ca_type: "acme" };
        for provenance in [
            registered,
            Provenance::Issued { ca, template: "web_server" },
            Provenance::Discovered { scan_id: 9, owner: None, endpoint: None, revoked: None },
        ] {
            let again = add_one(&store, &certificate, provenance).await;
            assert!(matches!(again, Err(Error::Conflict(_))), "{provenance:?}: {again:?}");
        }
        assert_eq!(store.snapshot().events.len(), 1);
    }

    #[tokio::test]
    async fn a_revocation_carries_its_reason_whoever_made_it() {
        let store = MemoryStore::default();
        let first = parsed(vec!["one.example.com".into()]);
        let second = parsed(vec!["two.example.com".into()]);
        let registered = Provenance::Registered { source: IssuanceSource::External };
        let one = add_one(&store, &first, registered).await.unwrap_or_else(|err| panic!("add: {err}"));
        let two = add_one(&store, &second, registered).await.unwrap_or_else(|err| panic!("add: {err}"));
        let ctx = context(store.clone(), NOW);
        let now = ctx.now_millis();
        for (id, by) in
            [(one.id, RevokedBy::Caller { at_ca: "not_issued_here" }), (two.id, RevokedBy::Scan { scan_id: 4 })]
        {
            let mut change =
                ctx.change(Audit::system("test"), Some(WORKSPACE)).await.unwrap_or_else(|err| panic!("{err}"));
            let revoked = mark_revoked(&mut change, WORKSPACE, id, now, "keyCompromise", by)
                .await
                .unwrap_or_else(|err| panic!("revoke: {err}"));
            change.commit().await.unwrap_or_else(|err| panic!("{err}"));
            assert_eq!(revoked.status(ctx.clock.now()), Status::Revoked);
        }
        let tables = store.snapshot();
        let revoked: Vec<&Value> = tables
            .events
            .iter()
            .filter(|e| e.event_type == "certificate.revoked")
            .map(|e| &e.payload["data"])
            .collect();
        assert_eq!(revoked.len(), 2);
        assert!(revoked.iter().all(|data| data["reason"] == "keyCompromise" && data["status"] == "revoked"));
        let mut change = ctx.change(Audit::system("test"), Some(WORKSPACE)).await.unwrap_or_else(|err| panic!("{err}"));
        let absent =
            mark_revoked(&mut change, WORKSPACE, 9999, now, "superseded", RevokedBy::Scan { scan_id: 4 }).await;
        assert!(matches!(absent, Err(Error::NotFound(_))), "{absent:?}");
    }
}
