//! The internal PKI's rows as the store keeps them: CA key material, the ledger of issued
//! certificates, the CRL cache. Their times are [`UnixMillis`]; the store keeps these tables'
//! in seconds (the precision of X.509 times) and converts at its edge.

use crate::clock::UnixMillis;

/// An internal CA's key material as stored (the key sealed under the master key).
#[derive(Clone, PartialEq, Eq)]
pub struct StoredAuthority {
    pub ca_id: i64,
    pub workspace_id: String,
    pub certificate_pem: String,
    pub key_sealed: String,
    pub key_algorithm: Option<String>,
    pub parent_ca_id: Option<i64>,
    pub created_at: UnixMillis,
}

impl std::fmt::Debug for StoredAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredAuthority").field("ca_id", &self.ca_id).finish_non_exhaustive()
    }
}

/// One certificate an internal CA signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedRecord {
    pub id: i64,
    pub ca_id: i64,
    pub workspace_id: String,
    pub serial_number: String,
    pub certificate_pem: String,
    pub not_after: UnixMillis,
    pub issued_at: UnixMillis,
    pub revoked_at: Option<UnixMillis>,
    pub revocation_reason: Option<String>,
}

/// An internal CA's revocation marker and its cached CRL (`internal_crls`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrlState {
    /// Bumped by every revocation recorded in the CA's ledger, on any replica: a CRL or OCSP
    /// answer signed at another value may be stale.
    pub revocations: i64,
    pub cached: Option<StoredCrl>,
}

/// A signed CRL as kept for every replica.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredCrl {
    /// The `revocations` value the CRL reflects.
    pub revision: i64,
    pub number: i64,
    pub this_update: UnixMillis,
    pub next_update: UnixMillis,
    /// Empty when the reader did not ask for the bytes.
    pub der: Vec<u8>,
}
