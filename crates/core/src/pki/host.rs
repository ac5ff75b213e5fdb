//! The host's `pki-core` import as a port: what a plugin serving an internal CA record may ask
//! of the internal PKI. `trellis-plugin-host` adapts the WIT calls onto [`PkiCore`];
//! [`super::InternalPki`] implements it over the store.
//!
//! It lives with the PKI, not with the plugin runtime, so that the edge runs one way: the
//! plugin vocabulary carries a [`PkiGrant`] on a call target (plugins -> pki), and the PKI
//! needs nothing of the plugins area.
//!
//! Access is granted per call by the domain ([`PkiGrant`] on the call target): only calls that
//! serve a CA record of type `internal` get one, and only `issue` calls may sign, and only the
//! request's own CSR under a profile no wider than the request's.

use async_trait::async_trait;

use trellis_pki::{CertificateProfile, KeyAlgorithm, RevocationInfo, RevocationReason, Subject};

use super::ledger::LedgerSlot;

/// The internal CA a call may use: the CA record, and what the host may read of its stored
/// configuration (withheld members such as an imported private key; never sent to the plugin).
#[derive(Clone)]
pub struct PkiGrant {
    pub workspace_id: String,
    pub ca_id: i64,
    pub withheld_config: serde_json::Value,
    /// Set on `issue`/`poll-issue` calls: the one CSR and the widest profile that may be signed.
    pub sign: Option<SignPermit>,
}

impl std::fmt::Debug for PkiGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PkiGrant").field("ca_id", &self.ca_id).field("sign", &self.sign.is_some()).finish()
    }
}

/// What an issuance call may sign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignPermit {
    pub csr_der: Vec<u8>,
    pub profile: CertificateProfile,
    /// Set by the issuance use case: `sign-csr` leaves the certificate's ledger row here, and
    /// the use case writes it in the transaction that stores the certificate, which commits
    /// before the certificate leaves the service (see [`super::ledger`]). Without a slot,
    /// `sign-csr` writes the row itself before it returns.
    pub ledger: Option<LedgerSlot>,
}

impl SignPermit {
    /// Whether `profile` asks for no more than the permit: a subset of its names and usages,
    /// the same subject, no longer validity.
    pub fn allows(&self, csr_der: &[u8], profile: &CertificateProfile) -> Result<(), String> {
        if csr_der != self.csr_der.as_slice() {
            return Err("only the CSR of this issuance request may be signed".into());
        }
        let allowed = &self.profile;
        if profile.subject != allowed.subject {
            return Err("the subject differs from the request's".into());
        }
        if let Some(name) = profile.subject_alt_names.iter().find(|n| !allowed.subject_alt_names.contains(n)) {
            return Err(format!("the name {name} was not requested"));
        }
        if profile.key_usages.iter().any(|u| !allowed.key_usages.contains(u))
            || profile.extended_key_usages.iter().any(|u| !allowed.extended_key_usages.contains(u))
        {
            return Err("a key usage was not requested".into());
        }
        if profile.validity_days > allowed.validity_days {
            return Err(format!("the validity exceeds the {} days allowed", allowed.validity_days));
        }
        Ok(())
    }
}

/// How to create a record's internal CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthoritySpec {
    Root(NewAuthoritySpec),
    Intermediate {
        parent_record_id: String,
        authority: NewAuthoritySpec,
    },
    /// The private key is read from the record's configuration at `private_key_field`.
    Imported {
        certificate_pem: String,
        private_key_field: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAuthoritySpec {
    pub subject: Subject,
    pub key_algorithm: KeyAlgorithm,
    pub validity_days: u32,
    pub path_length: Option<u8>,
}

/// A record's internal CA, as plugins see it (no key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorityInfo {
    pub certificate_der: Vec<u8>,
    pub subject: String,
    pub issuer: String,
    pub not_before: i64,
    pub not_after: i64,
    pub key_algorithm: Option<KeyAlgorithm>,
    pub parent_record_id: Option<String>,
}

/// A certificate the internal CA signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedCertificate {
    pub certificate_der: Vec<u8>,
    /// Intermediates up to (not including) the root, leaf-most first.
    pub chain_der: Vec<Vec<u8>>,
    pub serial_number: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SerialStatus {
    Good,
    Revoked(RevocationInfo),
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedEntryInfo {
    pub certificate_der: Vec<u8>,
    pub serial_number: String,
    pub revocation: Option<RevocationInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedPageInfo {
    pub items: Vec<IssuedEntryInfo>,
    pub next_cursor: Option<String>,
}

/// Why a pki-core call failed (the WIT `pki-error`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PkiCoreError {
    #[error("invalid CSR: {0}")]
    InvalidCsr(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("this CA has no authority yet")]
    NoAuthority,
    #[error("this CA already has an authority")]
    AuthorityExists(Box<AuthorityInfo>),
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("unknown serial {0}")]
    UnknownSerial(String),
}

/// The internal PKI, as the plugin host calls it on behalf of a granted call.
#[async_trait]
pub trait PkiCore: Send + Sync + 'static {
    async fn authority(&self, grant: &PkiGrant) -> Result<Option<AuthorityInfo>, PkiCoreError>;
    async fn create_authority(&self, grant: &PkiGrant, spec: AuthoritySpec) -> Result<AuthorityInfo, PkiCoreError>;
    /// Signs (the caller checked the permit) and records the certificate before returning it,
    /// or, when the permit carries a ledger slot, leaves its ledger row there for the caller.
    async fn sign_csr(
        &self,
        grant: &PkiGrant,
        csr_der: &[u8],
        profile: &CertificateProfile,
    ) -> Result<SignedCertificate, PkiCoreError>;
    async fn ca_chain(&self, grant: &PkiGrant) -> Result<Vec<Vec<u8>>, PkiCoreError>;
    async fn revoke(&self, grant: &PkiGrant, serial_number: &str, reason: RevocationReason)
        -> Result<(), PkiCoreError>;
    async fn status(&self, grant: &PkiGrant, serial_number: &str) -> Result<SerialStatus, PkiCoreError>;
    async fn list_issued(
        &self,
        grant: &PkiGrant,
        cursor: Option<String>,
        limit: u32,
    ) -> Result<IssuedPageInfo, PkiCoreError>;
}
