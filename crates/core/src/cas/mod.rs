//! Certificate authorities of a workspace (spec §2.1, §4.1): the registry, its status machine
//! (§3.2) and health, and the secrets in their configuration.
//!
//! A CA's `type` is served by the connector plugin the workspace binds to it (or the only one
//! installed that serves it); every operation on a CA is a call into that plugin.

#[cfg(test)]
mod fake;
pub mod port;
pub mod service;
#[cfg(test)]
mod use_case_tests;

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
