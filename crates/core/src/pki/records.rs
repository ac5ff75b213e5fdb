//! The internal PKI's rows as the store keeps them: CA key material, the ledger of issued
//! certificates, the CRL cache.

/// An internal CA's key material as stored (the key sealed under the master key).
#[derive(Clone, PartialEq, Eq)]
pub struct StoredAuthority {
    pub ca_id: i64,
    pub workspace_id: String,
    pub certificate_pem: String,
    pub key_sealed: String,
    pub key_algorithm: Option<String>,
    pub parent_ca_id: Option<i64>,
    pub created_at: i64,
}

impl std::fmt::Debug for StoredAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredAuthority").field("ca_id", &self.ca_id).finish_non_exhaustive()
    }
}

/// One certificate an internal CA signed (times in seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedRecord {
    pub id: i64,
    pub ca_id: i64,
    pub workspace_id: String,
    pub serial_number: String,
    pub certificate_pem: String,
    pub not_after: i64,
    pub issued_at: i64,
    pub revoked_at: Option<i64>,
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

/// A signed CRL as kept for every replica (times in seconds).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredCrl {
    /// The `revocations` value the CRL reflects.
    pub revision: i64,
    pub number: i64,
    pub this_update: i64,
    pub next_update: i64,
    /// Empty when the reader did not ask for the bytes.
    pub der: Vec<u8>,
}
