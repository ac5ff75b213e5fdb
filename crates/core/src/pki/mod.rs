//! The internal PKI over the store: CA keys and certificates the host creates, imports and signs
//! with. CA private keys never leave this module except sealed under the master key, and never
//! enter a plugin sandbox: the `internal` connector reaches them only through the host's
//! `pki-core` interface (contract 0.2), which [`host`] defines and [`InternalPki`] implements.
//!
//! What is signed and how (authority, issue, CRL, OCSP, X.509/CSR reading) is the pure crate
//! `trellis-pki`, re-exported here; this module keeps what needs the store:
//!
//! - [`service`]: [`InternalPki`], the CA keys sealed in the store, a prepared signer per CA,
//!   the ledger of issued certificates, the CRL and OCSP answers relying parties fetch.
//! - [`host`]: the `pki-core` port a plugin serving an internal CA record calls ([`PkiCore`]),
//!   and the grant that limits what a call may do ([`PkiGrant`], [`SignPermit`]).
//! - [`ledger`]: the ledger row of a certificate signed for an issuance, written in the
//!   issuance's own transaction, and the backlog that keeps a row nobody wrote.
//! - [`records`]: the PKI's rows as the store keeps them; [`port`]: how it reads and writes them.
//! - [`PkiPort`]: what the HTTP layer, the CA registry and the jobs use of the PKI (`Context`
//!   holds this port, not the service).

#[cfg(test)]
mod crl_tests;
#[cfg(test)]
mod fake;
pub mod host;
pub mod ledger;
pub mod port;
mod records;
pub mod service;

pub use trellis_pki::{
    crl, error_response, issue, ocsp, oid_arcs, parse_get_request, parse_request, sign_crl, sign_csr, sign_response,
    Authority, CertId, CertStatus, CsrCheck, HashAlgorithm, IssuerUrls, NewAuthority, OcspError, OcspErrorStatus,
    OcspIssuer, OcspRequest, PkiError, RevokedEntry, Signed, Signer, SingleStatus,
};

pub use self::host::{
    AuthorityInfo, AuthoritySpec, IssuedEntryInfo, IssuedPageInfo, NewAuthoritySpec, PkiCore, PkiCoreError, PkiGrant,
    SerialStatus, SignPermit, SignedCertificate,
};
pub use self::ledger::{LedgerBacklog, LedgerSlot, Unrecorded};
pub use self::port::PkiStore;
pub use self::records::{CrlState, IssuedRecord, StoredAuthority, StoredCrl};
pub use self::service::InternalPki;

/// What the rest of Trellis uses of the internal PKI outside plugin calls: the port `Context`
/// holds (the public CRL, CA and OCSP endpoints, the CA registry showing an internal CA's
/// certificate, the ledger backlog job). [`InternalPki`] implements it.
#[async_trait::async_trait]
pub trait PkiPort: Send + Sync + 'static {
    /// The CA's current CRL, DER (signed now if the cached one is stale).
    async fn crl(&self, ca_id: i64) -> Result<Vec<u8>, PkiCoreError>;
    /// The CA's workspace and its certificate chain, own certificate first, up to the root.
    async fn ca_chain(&self, ca_id: i64) -> Result<CaChain, PkiCoreError>;
    /// The DER OCSP response to `request` (an error response for a bad request), never an error.
    async fn ocsp(&self, ca_id: i64, request: Result<OcspRequest, OcspError>) -> Vec<u8>;
    /// Writes the ledger rows of signed certificates that no issuance wrote (see [`ledger`]);
    /// how many were written. The jobs tick calls this.
    async fn record_ledger_backlog(&self) -> Result<usize, crate::Error>;
}

/// An internal CA's certificate chain and the workspace it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaChain {
    pub workspace_id: String,
    /// Own certificate first, up to the root, DER.
    pub chain_der: Vec<Vec<u8>>,
}
