//! Certificate authorities of a workspace (spec §2.1, §4.1): the registry, its status machine
//! (§3.2) and health, and the secrets in their configuration.
//!
//! A CA's `type` is served by the connector plugin the workspace binds to it (or the only one
//! installed that serves it); every operation on a CA is a call into that plugin.

pub mod service;

use serde_json::Value;

/// §3.2 CA status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaStatus {
    Active,
    Disconnected,
    Error,
}

impl CaStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CaStatus::Active => "active",
            CaStatus::Disconnected => "disconnected",
            CaStatus::Error => "error",
        }
    }

    pub fn parse(text: &str) -> Option<CaStatus> {
        match text {
            "active" => Some(CaStatus::Active),
            "disconnected" => Some(CaStatus::Disconnected),
            "error" => Some(CaStatus::Error),
            _ => None,
        }
    }
}

/// What the last probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthStatus {
    Healthy,
    Degraded,
    Unhealthy,
    Unknown,
}

impl HealthStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            HealthStatus::Healthy => "healthy",
            HealthStatus::Degraded => "degraded",
            HealthStatus::Unhealthy => "unhealthy",
            HealthStatus::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<HealthStatus> {
        match text {
            "healthy" => Some(HealthStatus::Healthy),
            "degraded" => Some(HealthStatus::Degraded),
            "unhealthy" => Some(HealthStatus::Unhealthy),
            "unknown" => Some(HealthStatus::Unknown),
            _ => None,
        }
    }
}

/// A stored CA. `config` holds sealed secrets (see [`secrets`]); never return it as is.
#[derive(Debug, Clone, PartialEq)]
pub struct CertificateAuthority {
    pub id: i64,
    pub workspace_id: String,
    pub name: String,
    pub ca_type: String,
    pub description: Option<String>,
    pub url: Option<String>,
    pub status: CaStatus,
    pub health_status: HealthStatus,
    pub issuer_patterns: Vec<String>,
    pub config: Value,
    pub last_sync: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// The columns a create or update writes (everything but id, workspace and timestamps).
#[derive(Debug, Clone, PartialEq)]
pub struct CaFields {
    pub name: String,
    pub ca_type: String,
    pub description: Option<String>,
    pub url: Option<String>,
    pub status: CaStatus,
    pub health_status: HealthStatus,
    pub issuer_patterns: Vec<String>,
    /// Sealed.
    pub config: Value,
}

/// §4.1 stats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaStats {
    pub total: i64,
    pub connected: i64,
    pub disconnected: i64,
    pub healthy: i64,
    pub certificates_issued: i64,
}

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
