//! In-memory fakes of the ports, so use cases are unit-tested without a database or a sandbox.
//! Every area fakes its whole port next to it, over `MemoryStore`'s tables
//! (`certificates::fake`, `discovery::fake`, `attestation::fake`, `auth::fake`, …) or, for
//! webhooks, over any tables that hold its rows (`webhooks::fake`: its own, or `MemoryStore`'s),
//! on the one kernel of transactions, ids, audit rows and events (`kernel`). No method panics
//! as "not faked": `MemoryStore` is the full `Store` the fakes add up to.

pub(crate) mod kernel;
pub(crate) mod memory_store;
mod no_plugins;

use std::sync::Arc;

pub use self::memory_store::{MemoryStore, MemoryTx};
pub use self::no_plugins::{IssueScript, ListScript, NoPlugins, PolicyScript, PollScript, RevokeScript, VerifyScript};
use crate::caller::{Actor, Caller, Role};
use crate::clock::{FixedClock, OsEntropy};
use crate::context::{Context, Settings};
use crate::crypto::MasterKey;
use crate::plugins::service::PluginService;

/// A context over `store`, stopped at `now` (RFC 3339), with no plugins installed.
pub fn context(store: MemoryStore, now: &str) -> Context {
    context_with(store, now, NoPlugins::default())
}

/// [`context`] with `plugins` as the plugin host.
pub fn context_with(store: MemoryStore, now: &str, plugins: NoPlugins) -> Context {
    let now = chrono::DateTime::parse_from_rfc3339(now).map(|t| t.with_timezone(&chrono::Utc)).unwrap_or_default();
    let settings =
        Settings { login_max_failures: 5, login_window: std::time::Duration::from_secs(900), ..Settings::default() };
    let key = MasterKey::parse(&"ab".repeat(32)).unwrap_or_else(|_| unreachable!("a valid test key"));
    Context::new(
        settings,
        Arc::new(store),
        Arc::new(FixedClock(now)),
        Arc::new(OsEntropy),
        key,
        PluginService::new(Arc::new(plugins)),
    )
}

/// An active, healthy CA record of `ca_type` with an empty configuration.
pub fn active_ca(workspace_id: &str, id: i64, ca_type: &str) -> crate::cas::CertificateAuthority {
    crate::cas::CertificateAuthority {
        id,
        workspace_id: workspace_id.into(),
        name: format!("{ca_type} CA {id}"),
        ca_type: ca_type.into(),
        description: None,
        url: None,
        status: crate::cas::CaStatus::Active,
        health_status: crate::cas::HealthStatus::Healthy,
        issuer_patterns: Vec::new(),
        config: serde_json::json!({}),
        last_sync: None,
        created_at: 0,
        updated_at: 0,
    }
}

/// A workspace owner signed in to `workspace_id`.
pub fn owner(workspace_id: &str) -> Caller {
    Caller {
        actor: Actor::User { id: "usr_test".into(), email: "owner@example.com".into() },
        workspace_id: workspace_id.into(),
        scopes: Role::Owner.scopes(),
        instance_admin: false,
        request_id: "req_test".into(),
    }
}

/// A certificate row of `workspace_id` linked to `ca_id`, valid from 2026 to 2027, for tests
/// that need one in the inventory and care only about the fields they override.
pub fn certificate_row(workspace_id: &str, id: i64, ca_id: Option<i64>) -> crate::certificates::Certificate {
    const START_2026_MS: i64 = 1_767_225_600_000;
    const YEAR_MS: i64 = 365 * 24 * 3600 * 1000;
    crate::certificates::Certificate {
        id,
        workspace_id: workspace_id.into(),
        common_name: format!("host-{id}.example.com"),
        issuer: "CN=Test CA".into(),
        subject: format!("CN=host-{id}.example.com"),
        serial_number: format!("{id:x}"),
        not_before: START_2026_MS,
        expires_at: START_2026_MS + YEAR_MS,
        signature_algorithm: "ecdsa-with-SHA256".into(),
        signature_hash: None,
        key_algorithm: "ECDSA".into(),
        key_size: Some(256),
        fingerprint_sha256: format!("{id:064}"),
        usage_category: "server".into(),
        subject_alt_names: vec![],
        is_ca: false,
        issuance_source: crate::certificates::IssuanceSource::Internal,
        auto_renewal: false,
        location: None,
        metadata: serde_json::json!({}),
        ca_id,
        machine_identity_id: None,
        revoked: false,
        revoked_at: None,
        revocation_reason: None,
        certificate_pem: String::new(),
        chain_pem: None,
        issuance_template: None,
        csr_pem: None,
        renewed_by_id: None,
        renewal_error: None,
        has_private_key: false,
        created_at: START_2026_MS,
        updated_at: START_2026_MS,
    }
}
