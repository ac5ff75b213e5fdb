//! [`InternalPki`]: the host's `pki-core` over the store. CA keys are sealed under the master
//! key bound to their CA; a prepared [`Signer`] per CA is cached so an issuance costs one
//! signature and one ledger row, not a key unsealing and a certificate parse.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use trellis_pki::x509::{pem_certificates, to_pem};
use trellis_pki::{
    error_response, sign_csr, sign_response, Authority, CertStatus, CertificateProfile, CsrCheck, HashAlgorithm,
    IssuerUrls, KeyAlgorithm, NewAuthority, OcspError, OcspErrorStatus, OcspIssuer, OcspRequest, PkiError,
    RevocationInfo, RevocationReason, Signer, SingleStatus,
};

use super::host::{
    AuthorityInfo, AuthoritySpec, IssuedEntryInfo, IssuedPageInfo, NewAuthoritySpec, PkiCore, PkiCoreError, PkiGrant,
    SerialStatus, SignedCertificate,
};
use super::ledger::{LedgerBacklog, Unrecorded};
use super::port::PkiStore;
use super::records::{IssuedRecord, StoredAuthority, StoredCrl};
use super::{CaChain, PkiPort};
use crate::clock::{SharedClock, SharedEntropy, UnixMillis};
use crate::crypto::MasterKey;
use crate::store_error::StoreError;

/// A CA ready to sign, with its chain (own certificate first, up to the root).
pub struct Prepared {
    pub signer: Signer,
    pub chain_der: Vec<Vec<u8>>,
    /// What issued certificates carry as their chain: `chain_der` without a self-signed root.
    pub issued_chain_der: Vec<Vec<u8>>,
    pub workspace_id: String,
}

pub struct InternalPki {
    store: Arc<dyn PkiStore>,
    master_key: MasterKey,
    clock: SharedClock,
    entropy: SharedEntropy,
    /// The service's public base URL (CRL and OCSP URLs in issued certificates).
    public_url: String,
    prepared: Mutex<HashMap<i64, Arc<Prepared>>>,
    /// The CRL this process last served per CA: reused while the store says it is current.
    crls: Mutex<HashMap<i64, CachedCrl>>,
    /// One CRL signature at a time: a burst of GETs after a revocation signs once.
    crl_signing: tokio::sync::Mutex<()>,
    /// Signed answers to nonce-less single-CertID OCSP requests.
    ocsp_answers: Mutex<HashMap<OcspKey, CachedOcsp>>,
    /// Signatures for the public endpoints run off the async workers, this many at a time, so
    /// a flood of OCSP requests takes at most this many cores from everything else.
    signing_slots: Arc<tokio::sync::Semaphore>,
    /// Ledger rows of signed certificates no issuance wrote (see `pki::ledger`): written before
    /// any ledger read or write here, and by the jobs tick.
    backlog: Arc<LedgerBacklog>,
}

/// A CRL as this process serves it.
struct CachedCrl {
    number: i64,
    der: Arc<[u8]>,
}

/// (CA, CertID hash algorithm, serial octets).
type OcspKey = (i64, HashAlgorithm, Vec<u8>);

struct CachedOcsp {
    /// The CA's revocation marker when the answer was signed.
    revision: i64,
    /// Reused until then, well before the answer's nextUpdate.
    fresh_until: i64,
    der: Arc<[u8]>,
}

/// Answers kept at most; a flood of distinct serials cannot grow memory without bound.
const OCSP_CACHE_ENTRIES: usize = 16_384;

fn key_context(workspace_id: &str, ca_id: i64) -> Vec<u8> {
    format!("trellis:internal-ca-key:{workspace_id}:{ca_id}").into_bytes()
}

fn store_error(err: StoreError) -> PkiCoreError {
    tracing::error!(error = %err, "internal PKI storage failed");
    PkiCoreError::Unavailable("the internal PKI's storage failed; retry later".into())
}

fn pki_error(err: PkiError) -> PkiCoreError {
    match err {
        PkiError::InvalidCsr => PkiCoreError::InvalidCsr(err.to_string()),
        PkiError::AuthorityExpired(_) => PkiCoreError::Unavailable(err.to_string()),
        PkiError::Signing(_) => PkiCoreError::Unavailable(err.to_string()),
        other => PkiCoreError::InvalidRequest(other.to_string()),
    }
}

/// Subject, issuer and validity of a CA certificate (times in seconds).
pub fn describe(certificate_der: &[u8]) -> Option<(String, String, i64, i64)> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate_der).ok()?;
    Some((
        parsed.subject().to_string(),
        parsed.issuer().to_string(),
        parsed.validity().not_before.timestamp(),
        parsed.validity().not_after.timestamp(),
    ))
}

impl InternalPki {
    pub fn new(
        store: Arc<dyn PkiStore>,
        master_key: MasterKey,
        clock: SharedClock,
        entropy: SharedEntropy,
        public_url: &str,
    ) -> InternalPki {
        InternalPki {
            store,
            master_key,
            clock,
            entropy,
            public_url: public_url.trim_end_matches('/').to_owned(),
            prepared: Mutex::new(HashMap::new()),
            crls: Mutex::new(HashMap::new()),
            crl_signing: tokio::sync::Mutex::new(()),
            ocsp_answers: Mutex::new(HashMap::new()),
            signing_slots: Arc::new(tokio::sync::Semaphore::new(default_signing_slots())),
            backlog: LedgerBacklog::shared(),
        }
    }

    /// How many CRL and OCSP signatures run at once (at least one).
    pub fn with_signing_slots(mut self, slots: usize) -> Self {
        self.signing_slots = Arc::new(tokio::sync::Semaphore::new(slots.max(1)));
        self
    }

    /// Runs a signature on the blocking pool under a signing slot: an RSA-4096 signature takes
    /// milliseconds of CPU, which would otherwise stall every request sharing the worker.
    async fn sign_off_runtime<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, PkiError> + Send + 'static,
    ) -> Result<T, PkiCoreError> {
        let _slot = self
            .signing_slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| PkiCoreError::Unavailable("the signer is shutting down".into()))?;
        match tokio::task::spawn_blocking(work).await {
            Ok(result) => result.map_err(pki_error),
            Err(err) => {
                tracing::error!(error = %err, "a CRL or OCSP signature panicked");
                Err(PkiCoreError::Unavailable("signing failed".into()))
            }
        }
    }

    /// Writes the ledger rows waiting in the backlog, so that what follows (a CRL, an OCSP or
    /// status answer, a revocation, a listing, a signature) sees every certificate signed.
    async fn settle_backlog(&self) -> Result<(), PkiCoreError> {
        if self.backlog.is_empty() {
            return Ok(());
        }
        self.record_backlog().await.map(|_| ()).map_err(|err| {
            tracing::error!(error = %err, "recording issued certificates in the CA's ledger failed");
            PkiCoreError::Unavailable("recording issued certificates failed; retry later".into())
        })
    }

    async fn record_backlog(&self) -> Result<usize, crate::Error> {
        let recorded = self.backlog.record(self.store.as_ref()).await?;
        if recorded > 0 {
            tracing::info!(recorded, "recorded issued certificates from the ledger backlog");
        }
        Ok(recorded)
    }

    /// The backlog of ledger rows this service writes (tests look at it).
    pub fn ledger_backlog(&self) -> &Arc<LedgerBacklog> {
        &self.backlog
    }

    fn now_secs(&self) -> i64 {
        self.clock.now().timestamp()
    }

    /// Where relying parties find the revocation status of `ca_id`'s certificates.
    pub fn urls(&self, ca_id: i64) -> IssuerUrls {
        IssuerUrls {
            crl: format!("{}/pki/{ca_id}/crl", self.public_url),
            ocsp: format!("{}/pki/{ca_id}/ocsp", self.public_url),
            ca_issuers: format!("{}/pki/{ca_id}/ca", self.public_url),
        }
    }

    async fn stored(&self, ca_id: i64) -> Result<Option<StoredAuthority>, PkiCoreError> {
        self.store.reads().find_authority(ca_id).await.map_err(store_error)
    }

    fn open(&self, stored: &StoredAuthority) -> Result<Authority, PkiCoreError> {
        let certificate_der = pem_certificates(&stored.certificate_pem)
            .and_then(|blocks| blocks.into_iter().next())
            .ok_or_else(|| PkiCoreError::Unavailable("the stored CA certificate is unreadable".into()))?;
        let key_pkcs8 = self
            .master_key
            .open_bound(&stored.key_sealed, &key_context(&stored.workspace_id, stored.ca_id))
            .map_err(|_| PkiCoreError::Unavailable("the CA key does not open under this master key".into()))?;
        let key_algorithm = stored.key_algorithm.as_deref().and_then(KeyAlgorithm::parse);
        Ok(Authority { certificate_der, key_pkcs8, key_algorithm })
    }

    /// The CA of `ca_id` prepared for signing (cached), from any workspace: callers check.
    pub async fn prepared(&self, ca_id: i64) -> Result<Arc<Prepared>, PkiCoreError> {
        if let Some(prepared) = self.prepared.lock().ok().and_then(|cache| cache.get(&ca_id).cloned()) {
            return Ok(prepared);
        }
        let stored = self.stored(ca_id).await?.ok_or(PkiCoreError::NoAuthority)?;
        let authority = self.open(&stored)?;
        let signer = authority.signer().map_err(pki_error)?;
        let mut chain_der = vec![authority.certificate_der.clone()];
        let mut parent = stored.parent_ca_id;
        // Internal hierarchies are shallow; the bound keeps a corrupt parent loop finite.
        for _ in 0..8 {
            let Some(parent_id) = parent else { break };
            let Some(parent_row) = self.stored(parent_id).await? else { break };
            if let Some(der) = pem_certificates(&parent_row.certificate_pem).and_then(|b| b.into_iter().next()) {
                chain_der.push(der);
            }
            parent = parent_row.parent_ca_id;
        }
        // The root is what relying parties already trust; the chain carries what lies between,
        // and always the issuing CA's certificate, even when that is the root itself.
        let issued_chain_der = match chain_der.split_last() {
            Some((last, rest)) if is_self_signed(last) && !rest.is_empty() => rest.to_vec(),
            _ => chain_der.clone(),
        };
        let prepared = Arc::new(Prepared { signer, chain_der, issued_chain_der, workspace_id: stored.workspace_id });
        if let Ok(mut cache) = self.prepared.lock() {
            cache.insert(ca_id, prepared.clone());
        }
        Ok(prepared)
    }

    async fn prepared_for(&self, grant: &PkiGrant) -> Result<Arc<Prepared>, PkiCoreError> {
        let prepared = self.prepared(grant.ca_id).await?;
        if prepared.workspace_id != grant.workspace_id {
            return Err(PkiCoreError::NoAuthority);
        }
        Ok(prepared)
    }

    fn info(&self, stored: &StoredAuthority) -> Result<AuthorityInfo, PkiCoreError> {
        let certificate_der = pem_certificates(&stored.certificate_pem)
            .and_then(|blocks| blocks.into_iter().next())
            .ok_or_else(|| PkiCoreError::Unavailable("the stored CA certificate is unreadable".into()))?;
        let (subject, issuer, not_before, not_after) = describe(&certificate_der)
            .ok_or_else(|| PkiCoreError::Unavailable("the stored CA certificate is unreadable".into()))?;
        Ok(AuthorityInfo {
            certificate_der,
            subject,
            issuer,
            not_before,
            not_after,
            key_algorithm: stored.key_algorithm.as_deref().and_then(KeyAlgorithm::parse),
            parent_record_id: stored.parent_ca_id.map(|id| id.to_string()),
        })
    }

    fn new_authority(spec: &NewAuthoritySpec) -> NewAuthority {
        NewAuthority {
            subject: spec.subject.clone(),
            key_algorithm: spec.key_algorithm,
            validity_days: spec.validity_days,
            path_length: spec.path_length,
        }
    }
}

/// How long a CRL is valid: relying parties fetch a new one within a day.
const CRL_LIFETIME_SECS: i64 = 86_400;
/// A cached CRL is re-signed once less than this is left of it, so a relying party that fetches
/// it always gets at least half a day before its nextUpdate.
const CRL_REFRESH_SECS: i64 = CRL_LIFETIME_SECS / 2;

impl InternalPki {
    /// The DER CRL of internal CA `ca_id` (any workspace: CRLs are public), listing every
    /// revoked certificate that has not expired. Served from a cache kept in the store for
    /// every replica and re-signed when the CA's revocation marker moved (a revocation on any
    /// replica) or its nextUpdate comes near. The CRL number is the signing time in
    /// milliseconds, or one more than the kept CRL's when that is higher: it never goes back.
    pub async fn crl(&self, ca_id: i64) -> Result<Vec<u8>, PkiCoreError> {
        let prepared = self.prepared(ca_id).await?;
        self.settle_backlog().await?;
        if let Some(der) = self.current_crl(ca_id).await? {
            return Ok(der.to_vec());
        }
        let _signing = self.crl_signing.lock().await;
        // Another request may have signed it while this one waited.
        if let Some(der) = self.current_crl(ca_id).await? {
            return Ok(der.to_vec());
        }
        let state = self.store.reads().crl_state(ca_id, false).await.map_err(store_error)?;
        let now = self.now_secs();
        let revoked = self.store.reads().list_revoked(ca_id, UnixMillis::from_secs(now)).await.map_err(store_error)?;
        let entries: Vec<trellis_pki::RevokedEntry> = revoked
            .iter()
            .filter_map(|record| {
                revocation(record).map(|info| trellis_pki::RevokedEntry {
                    serial_number: record.serial_number.clone(),
                    revoked_at: info.revoked_at.unwrap_or(now),
                    reason: info.reason,
                })
            })
            .collect();
        let after = state.cached.as_ref().map_or(0, |kept| kept.number.saturating_add(1));
        let number = self.clock.now().timestamp_millis().max(after);
        let signer = prepared.clone();
        let der = self
            .sign_off_runtime(move || {
                let number = u64::try_from(number).unwrap_or_default();
                trellis_pki::sign_crl(&signer.signer, &entries, number, now, now + CRL_LIFETIME_SECS)
            })
            .await?;
        let crl = StoredCrl {
            revision: state.revocations,
            number,
            this_update: UnixMillis::from_secs(now),
            next_update: UnixMillis::from_secs(now + CRL_LIFETIME_SECS),
            der: der.clone(),
        };
        let kept = self.store.write_crl(ca_id, crl).await;
        match kept {
            Ok(true) => self.keep_crl(ca_id, number, &der),
            // Another replica kept a newer one meanwhile: this one is still correct as of now.
            Ok(false) => {}
            Err(err) => tracing::warn!(error = %err, ca_id, "keeping the signed CRL failed; served uncached"),
        }
        Ok(der)
    }

    /// The kept CRL when it reflects the CA's revocations and is not near its nextUpdate: this
    /// process's copy, or the bytes another replica signed.
    async fn current_crl(&self, ca_id: i64) -> Result<Option<Arc<[u8]>>, PkiCoreError> {
        let now = self.now_secs();
        let state = self.store.reads().crl_state(ca_id, false).await.map_err(store_error)?;
        let current = |kept: &StoredCrl| {
            kept.revision == state.revocations && now < kept.next_update.as_secs() - CRL_REFRESH_SECS
        };
        let Some(kept) = state.cached.as_ref().filter(|kept| current(kept)) else { return Ok(None) };
        let local = self
            .crls
            .lock()
            .ok()
            .and_then(|crls| crls.get(&ca_id).filter(|crl| crl.number == kept.number).map(|crl| crl.der.clone()));
        if local.is_some() {
            return Ok(local);
        }
        let with_der = self.store.reads().crl_state(ca_id, true).await.map_err(store_error)?;
        match with_der.cached {
            Some(kept) if current(&kept) && !kept.der.is_empty() => {
                self.keep_crl(ca_id, kept.number, &kept.der);
                Ok(Some(kept.der.into()))
            }
            _ => Ok(None),
        }
    }

    fn keep_crl(&self, ca_id: i64, number: i64, der: &[u8]) {
        if let Ok(mut crls) = self.crls.lock() {
            crls.insert(ca_id, CachedCrl { number, der: der.into() });
        }
    }

    /// The status of a serial of CA `ca_id`, for OCSP.
    pub async fn serial_status(&self, ca_id: i64, serial_number: &str) -> Result<SerialStatus, PkiCoreError> {
        self.settle_backlog().await?;
        let record =
            self.store.reads().find_issued(ca_id, &normalize_serial(serial_number)).await.map_err(store_error)?;
        Ok(match record {
            None => SerialStatus::Unknown,
            Some(record) => revocation(&record).map_or(SerialStatus::Good, SerialStatus::Revoked),
        })
    }
}

/// How long an OCSP answer is valid.
const OCSP_LIFETIME_SECS: i64 = 3600;

impl InternalPki {
    /// The OCSP response (RFC 6960, DER) to a parsed request for CA `ca_id`. Every outcome is a
    /// response: malformed requests, unknown CAs and CertIDs of other CAs get the matching error
    /// status, never an HTTP error, as OCSP clients expect.
    ///
    /// Answers to requests without a nonce for one certificate are kept and reused until half
    /// their validity has passed or the CA's revocation marker moves; a request with a nonce
    /// is always signed afresh, as its nonce must be echoed.
    pub async fn ocsp(&self, ca_id: i64, request: Result<OcspRequest, OcspError>) -> Vec<u8> {
        let request = match request {
            Ok(request) => request,
            Err(err) => return error_response(err.status()),
        };
        let prepared = match self.prepared(ca_id).await {
            Ok(prepared) => prepared,
            Err(PkiCoreError::NoAuthority) => return error_response(OcspErrorStatus::Unauthorized),
            Err(_) => return error_response(OcspErrorStatus::TryLater),
        };
        // Clients hash the name as the certificate encodes it: use the stored certificate.
        let Some(issuer) = prepared.chain_der.first().and_then(|der| OcspIssuer::from_certificate(der).ok()) else {
            return error_response(OcspErrorStatus::InternalError);
        };
        if !request.cert_ids.iter().all(|id| issuer.matches(id)) {
            return error_response(OcspErrorStatus::Unauthorized);
        }
        let key = match (&request.nonce, request.cert_ids.as_slice()) {
            (None, [only]) => Some((ca_id, only.hash_algorithm, only.serial_number.clone())),
            _ => None,
        };
        if self.settle_backlog().await.is_err() {
            return error_response(OcspErrorStatus::TryLater);
        }
        let now = self.now_secs();
        // Read before the statuses: a revocation after this read makes the answer stale.
        let revision = match &key {
            None => None,
            Some(key) => match self.store.reads().crl_state(ca_id, false).await {
                Ok(state) => {
                    if let Some(der) = self.kept_answer(key, state.revocations, now) {
                        return der.to_vec();
                    }
                    Some(state.revocations)
                }
                Err(err) => {
                    tracing::error!(error = %err, "reading the CA's revocation marker failed");
                    return error_response(OcspErrorStatus::TryLater);
                }
            },
        };
        let mut statuses = Vec::with_capacity(request.cert_ids.len());
        for id in request.cert_ids {
            let status = match self.serial_status(ca_id, &id.serial_hex()).await {
                Ok(SerialStatus::Good) => CertStatus::Good,
                Ok(SerialStatus::Revoked(info)) => {
                    CertStatus::Revoked { at: info.revoked_at.unwrap_or(now), reason: Some(info.reason) }
                }
                Ok(SerialStatus::Unknown) => CertStatus::Unknown,
                Err(_) => return error_response(OcspErrorStatus::TryLater),
            };
            statuses.push(SingleStatus {
                cert_id: id,
                status,
                this_update: now,
                next_update: Some(now + OCSP_LIFETIME_SECS),
            });
        }
        // Serials the CA never issued are not kept: a flood of made-up serials cannot evict
        // the answers relying parties ask for.
        let known = statuses.iter().all(|single| !matches!(single.status, CertStatus::Unknown));
        let nonce = request.nonce;
        let signer = prepared.clone();
        let signed =
            self.sign_off_runtime(move || sign_response(&signer.signer, &statuses, now, nonce.as_deref())).await;
        let der: Arc<[u8]> = match signed {
            Ok(der) => der.into(),
            Err(_) => return error_response(OcspErrorStatus::InternalError),
        };
        if let (Some(key), Some(revision), true) = (key, revision, known) {
            self.keep_answer(key, CachedOcsp { revision, fresh_until: now + OCSP_LIFETIME_SECS / 2, der: der.clone() });
        }
        der.to_vec()
    }

    fn kept_answer(&self, key: &OcspKey, revision: i64, now: i64) -> Option<Arc<[u8]>> {
        let answers = self.ocsp_answers.lock().ok()?;
        let kept = answers.get(key)?;
        (kept.revision == revision && now < kept.fresh_until).then(|| kept.der.clone())
    }

    fn keep_answer(&self, key: OcspKey, answer: CachedOcsp) {
        let Ok(mut answers) = self.ocsp_answers.lock() else { return };
        if answers.len() >= OCSP_CACHE_ENTRIES {
            let now = answer.fresh_until - OCSP_LIFETIME_SECS / 2;
            answers.retain(|_, kept| now < kept.fresh_until);
            if answers.len() >= OCSP_CACHE_ENTRIES {
                answers.clear();
            }
        }
        answers.insert(key, answer);
    }
}

/// Signatures for the public endpoints may take every core but one, so the API keeps one.
fn default_signing_slots() -> usize {
    std::thread::available_parallelism().map_or(1, |cores| cores.get().saturating_sub(1).max(1))
}

fn revocation(record: &IssuedRecord) -> Option<RevocationInfo> {
    record.revoked_at.map(|at| RevocationInfo {
        revoked_at: Some(at.as_secs()),
        reason: record
            .revocation_reason
            .as_deref()
            .and_then(RevocationReason::parse)
            .unwrap_or(RevocationReason::Unspecified),
    })
}

fn entry(record: IssuedRecord) -> IssuedEntryInfo {
    let revocation = revocation(&record);
    IssuedEntryInfo {
        certificate_der: pem_certificates(&record.certificate_pem)
            .and_then(|b| b.into_iter().next())
            .unwrap_or_default(),
        serial_number: record.serial_number,
        revocation,
    }
}

/// Serials compare as stored: lowercase hex without separators.
fn normalize_serial(serial: &str) -> String {
    serial.chars().filter(|c| *c != ':').collect::<String>().to_ascii_lowercase()
}

#[async_trait]
impl PkiCore for InternalPki {
    async fn authority(&self, grant: &PkiGrant) -> Result<Option<AuthorityInfo>, PkiCoreError> {
        match self.stored(grant.ca_id).await? {
            Some(stored) if stored.workspace_id == grant.workspace_id => self.info(&stored).map(Some),
            _ => Ok(None),
        }
    }

    async fn create_authority(&self, grant: &PkiGrant, spec: AuthoritySpec) -> Result<AuthorityInfo, PkiCoreError> {
        if let Some(existing) = self.authority(grant).await? {
            return Err(PkiCoreError::AuthorityExists(Box::new(existing)));
        }
        let now = self.now_secs();
        let entropy = self.entropy.as_ref();
        let (authority, parent_ca_id) = match spec {
            AuthoritySpec::Root(spec) => {
                (Authority::create_root(&Self::new_authority(&spec), now, entropy).map_err(pki_error)?, None)
            }
            AuthoritySpec::Intermediate { parent_record_id, authority } => {
                let parent_id: i64 = parent_record_id.trim().parse().map_err(|_| {
                    PkiCoreError::InvalidRequest(format!("parentCaId `{parent_record_id}` is not a CA id"))
                })?;
                let parent = match self.stored(parent_id).await? {
                    Some(parent) if parent.workspace_id == grant.workspace_id && parent_id != grant.ca_id => parent,
                    _ => {
                        return Err(PkiCoreError::InvalidRequest(format!(
                            "parentCaId {parent_id} is not an internal CA of this workspace"
                        )))
                    }
                };
                let parent_authority = self.open(&parent)?;
                let created =
                    Authority::create_intermediate(&Self::new_authority(&authority), &parent_authority, now, entropy)
                        .map_err(pki_error)?;
                (created, Some(parent_id))
            }
            AuthoritySpec::Imported { certificate_pem, private_key_field } => {
                let key_pem =
                    grant.withheld_config.pointer(&private_key_field).and_then(|v| v.as_str()).ok_or_else(|| {
                        PkiCoreError::InvalidRequest(format!(
                            "the configuration has no private key at {private_key_field}"
                        ))
                    })?;
                (Authority::import(&certificate_pem, key_pem).map_err(pki_error)?, None)
            }
        };
        let stored = StoredAuthority {
            ca_id: grant.ca_id,
            workspace_id: grant.workspace_id.clone(),
            certificate_pem: to_pem(&authority.certificate_der),
            key_sealed: self.master_key.seal_bound(
                &authority.key_pkcs8,
                &key_context(&grant.workspace_id, grant.ca_id),
                entropy,
            ),
            key_algorithm: authority.key_algorithm.map(|a| a.as_str().to_owned()),
            parent_ca_id,
            created_at: UnixMillis::from_secs(now),
        };
        let inserted = self.store.write_authority(stored.clone()).await;
        match inserted {
            Ok(()) => self.info(&stored),
            // A concurrent setup won: report what exists, as a repeated setup would see it.
            Err(crate::Error::Store(StoreError::Unique(_))) => match self.authority(grant).await? {
                Some(existing) => Err(PkiCoreError::AuthorityExists(Box::new(existing))),
                None => Err(PkiCoreError::Unavailable("the CA record is gone".into())),
            },
            Err(err) => {
                tracing::error!(error = %err, "storing an internal CA failed");
                Err(PkiCoreError::Unavailable("storing the CA failed; retry later".into()))
            }
        }
    }

    async fn sign_csr(
        &self,
        grant: &PkiGrant,
        csr_der: &[u8],
        profile: &CertificateProfile,
    ) -> Result<SignedCertificate, PkiCoreError> {
        let prepared = self.prepared_for(grant).await?;
        self.settle_backlog().await?;
        let now = self.now_secs();
        // Only the bytes of the request's permit reach here, and the issuance use case verified
        // exactly those.
        let check = if grant.sign.as_ref().is_some_and(|permit| permit.csr_der == csr_der) {
            CsrCheck::AlreadyVerified
        } else {
            CsrCheck::Verify
        };
        let urls = self.urls(grant.ca_id);
        let signed = sign_csr(&prepared.signer, csr_der, check, profile, &urls, now, self.entropy.as_ref())
            .map_err(pki_error)?;
        let certificate_pem = to_pem(&signed.certificate_der);
        let not_after = now + i64::from(profile.validity_days) * 86_400;
        let record = IssuedRecord {
            id: 0,
            ca_id: grant.ca_id,
            workspace_id: grant.workspace_id.clone(),
            serial_number: signed.serial_number.clone(),
            certificate_pem,
            not_after: UnixMillis::from_secs(not_after.min(prepared.signer.not_after())),
            issued_at: UnixMillis::from_secs(now),
            revoked_at: None,
            revocation_reason: None,
        };
        // A CA never hands out a certificate its CRL and OCSP could not answer for. Inside an
        // issuance, the ledger row goes back to the issuance use case, which writes it in the
        // transaction that stores the certificate, committed before the certificate leaves the
        // service (one group commit per issuance, not two: see `pki::ledger`). Otherwise the
        // row is durable before the certificate leaves the host.
        let row = Unrecorded::new(record, self.store.clone(), self.backlog.clone());
        let row = match grant.sign.as_ref().and_then(|permit| permit.ledger.as_ref()) {
            Some(slot) => slot.put(row).err(),
            None => Some(row),
        };
        if let Some(row) = row {
            row.record_now().await.map_err(|err| {
                tracing::error!(error = %err, "recording an issued certificate failed");
                PkiCoreError::Unavailable("recording the certificate failed; retry later".into())
            })?;
        }
        Ok(SignedCertificate {
            certificate_der: signed.certificate_der,
            chain_der: prepared.issued_chain_der.clone(),
            serial_number: signed.serial_number,
        })
    }

    async fn ca_chain(&self, grant: &PkiGrant) -> Result<Vec<Vec<u8>>, PkiCoreError> {
        Ok(self.prepared_for(grant).await?.chain_der.clone())
    }

    async fn revoke(
        &self,
        grant: &PkiGrant,
        serial_number: &str,
        reason: RevocationReason,
    ) -> Result<(), PkiCoreError> {
        self.prepared_for(grant).await?;
        self.settle_backlog().await?;
        let (ca_id, serial) = (grant.ca_id, normalize_serial(serial_number));
        let at = UnixMillis::from_time(self.clock.now());
        let shown = serial.clone();
        let found = self.store.write_revocation(ca_id, serial, at, reason.as_str()).await.map_err(|err| {
            tracing::error!(error = %err, "recording a revocation failed");
            PkiCoreError::Unavailable("recording the revocation failed; retry later".into())
        })?;
        if found {
            Ok(())
        } else {
            Err(PkiCoreError::UnknownSerial(shown))
        }
    }

    async fn status(&self, grant: &PkiGrant, serial_number: &str) -> Result<SerialStatus, PkiCoreError> {
        self.prepared_for(grant).await?;
        self.serial_status(grant.ca_id, serial_number).await
    }

    async fn list_issued(
        &self,
        grant: &PkiGrant,
        cursor: Option<String>,
        limit: u32,
    ) -> Result<IssuedPageInfo, PkiCoreError> {
        self.prepared_for(grant).await?;
        self.settle_backlog().await?;
        let after: i64 = match cursor {
            None => 0,
            Some(text) => text.parse().map_err(|_| PkiCoreError::InvalidRequest(format!("bad cursor `{text}`")))?,
        };
        let limit = i64::from(limit.clamp(1, 500));
        let records = self.store.reads().list_issued(grant.ca_id, after, limit).await.map_err(store_error)?;
        let next_cursor = (records.len() as i64 == limit).then(|| records.last().map(|r| r.id.to_string())).flatten();
        Ok(IssuedPageInfo { items: records.into_iter().map(entry).collect(), next_cursor })
    }
}

#[async_trait]
impl PkiPort for InternalPki {
    async fn crl(&self, ca_id: i64) -> Result<Vec<u8>, PkiCoreError> {
        InternalPki::crl(self, ca_id).await
    }

    async fn ca_chain(&self, ca_id: i64) -> Result<CaChain, PkiCoreError> {
        let prepared = self.prepared(ca_id).await?;
        Ok(CaChain { workspace_id: prepared.workspace_id.clone(), chain_der: prepared.chain_der.clone() })
    }

    async fn ocsp(&self, ca_id: i64, request: Result<OcspRequest, OcspError>) -> Vec<u8> {
        InternalPki::ocsp(self, ca_id, request).await
    }

    async fn record_ledger_backlog(&self) -> Result<usize, crate::Error> {
        self.record_backlog().await
    }
}

fn is_self_signed(der: &[u8]) -> bool {
    x509_parser::parse_x509_certificate(der).is_ok_and(|(_, c)| c.subject().as_raw() == c.issuer().as_raw())
}
