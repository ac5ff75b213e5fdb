//! Trellis as an ACME server (RFC 8555): one directory per CA (`/acme/{caId}/…`), every
//! protocol object in the store ([`port::AcmeStore`]) so replicas on one database serve the same
//! clients. `server.rs` is the protocol (JWS checks, accounts, orders, authorizations,
//! challenges, finalize through the one issuance path, revocation); `validation.rs` runs
//! challenge validation off the request path through the [`port::ChallengeValidator`] port;
//! `admin.rs` is the REST management (directory settings, EAB keys, accounts); `jws.rs` the JWS
//! and JWK checks; `problem.rs` the problem documents; `renewal_info.rs` ACME Renewal
//! Information (RFC 9773: certIDs, the suggested window, `replaces`); `cache.rs` keeps the
//! directory and account rows every POST reads.

pub mod admin;
pub mod cache;
mod deps;
pub mod jws;
pub mod port;
pub mod problem;
pub mod renewal_info;
pub mod server;
pub mod validation;

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::{json, Value};

pub use self::deps::AcmeDeps;
pub use self::port::{AcmeStore, ChallengeValidator, NoValidator, ValidationFailure};
pub use self::problem::{Problem, ProblemType, Subproblem};

/// What the ACME server needs of the configuration.
#[derive(Debug, Clone)]
pub struct AcmeSettings {
    /// `TRELLIS_PUBLIC_URL`: every URL the directory hands out starts with it.
    pub public_url: String,
    /// New orders per account per hour, and per EAB key (the account it bound).
    pub orders_per_hour: i64,
    /// Pending authorizations an account may hold at once.
    pub pending_authorizations: i64,
    /// How long a nonce stays usable.
    pub nonce_lifetime_ms: i64,
    /// How long a valid authorization is reused for new orders.
    pub authorization_lifetime_ms: i64,
    /// How long a challenge POST waits for its validation before answering `processing`
    /// (`TRELLIS_ACME_CHALLENGE_WAIT_MS`; zero answers at once).
    pub challenge_answer_wait: std::time::Duration,
}

impl Default for AcmeSettings {
    fn default() -> Self {
        AcmeSettings {
            public_url: "http://localhost:8080".into(),
            orders_per_hour: 300,
            pending_authorizations: 1000,
            nonce_lifetime_ms: 3_600_000,
            authorization_lifetime_ms: 30 * 86_400_000,
            challenge_answer_wait: std::time::Duration::from_secs(2),
        }
    }
}

pub const CHALLENGE_TYPES: &[&str] = &["http-01", "dns-01", "tls-alpn-01"];

/// A CA's directory settings (`GET/PUT /api/certificate-authorities/{id}/acme`).
#[derive(Debug, Clone, PartialEq)]
pub struct DirectoryConfig {
    pub ca_id: i64,
    pub workspace_id: String,
    pub enabled: bool,
    pub external_account_required: bool,
    pub default_template: Option<String>,
    /// Profile name → template id (draft-aaron-acme-profiles).
    pub profiles: BTreeMap<String, String>,
    pub challenge_types: Vec<String>,
    pub order_lifetime_seconds: i64,
    pub updated_at: i64,
}

impl DirectoryConfig {
    pub fn off(ca_id: i64, workspace_id: &str) -> DirectoryConfig {
        DirectoryConfig {
            ca_id,
            workspace_id: workspace_id.to_owned(),
            enabled: false,
            external_account_required: true,
            default_template: None,
            profiles: BTreeMap::new(),
            challenge_types: CHALLENGE_TYPES.iter().map(|t| t.to_string()).collect(),
            order_lifetime_seconds: 86_400,
            updated_at: 0,
        }
    }
}

/// An external account binding key; the MAC key is sealed under the master key.
#[derive(Debug, Clone)]
pub struct EabKey {
    pub id: String,
    pub workspace_id: String,
    pub ca_id: i64,
    pub name: String,
    pub key_id: String,
    pub hmac_sealed: String,
    pub account_id: Option<String>,
    pub revoked_at: Option<i64>,
    pub created_at: i64,
}

crate::state::state_enum! {
    /// An ACME account's state (RFC 8555 §7.1.6).
    pub enum AccountStatus {
        Valid => "valid",
        Deactivated => "deactivated",
        Revoked => "revoked",
    }
}

crate::state::state_enum! {
    /// An order's state (RFC 8555 §7.1.6): `processing` while the CA issues after finalize.
    pub enum OrderStatus {
        Pending => "pending",
        Ready => "ready",
        Processing => "processing",
        Valid => "valid",
        Invalid => "invalid",
    }
}

crate::state::state_enum! {
    /// An authorization's state (RFC 8555 §7.1.6).
    pub enum AuthorizationStatus {
        Pending => "pending",
        Valid => "valid",
        Invalid => "invalid",
        Deactivated => "deactivated",
        Expired => "expired",
        Revoked => "revoked",
    }
}

crate::state::state_enum! {
    /// A challenge's state (RFC 8555 §7.1.6): `processing` while a validator works on it.
    pub enum ChallengeStatus {
        Pending => "pending",
        Processing => "processing",
        Valid => "valid",
        Invalid => "invalid",
    }
}

#[derive(Debug, Clone)]
pub struct Account {
    pub id: String,
    pub workspace_id: String,
    pub ca_id: i64,
    pub thumbprint: String,
    pub jwk: jws::Jwk,
    pub status: AccountStatus,
    pub contact: Vec<String>,
    pub eab_key_id: Option<String>,
    pub created_at: i64,
}

/// An identifier of an order (`dns` or `ip`, RFC 8738).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Identifier {
    pub kind: String,
    pub value: String,
}

impl Identifier {
    pub fn to_value(&self) -> Value {
        json!({ "type": self.kind, "value": self.value })
    }

    /// Parses and normalises one identifier of a newOrder (lowercase names, canonical IPs).
    pub fn parse(value: &Value) -> Result<Identifier, Problem> {
        let kind = value.get("type").and_then(Value::as_str).unwrap_or_default();
        let text = value.get("value").and_then(Value::as_str).unwrap_or_default().trim();
        let rejected = |detail: String| {
            let identifier = Identifier { kind: kind.to_owned(), value: text.to_owned() };
            Problem::new(ProblemType::RejectedIdentifier, detail.clone()).with_subproblems(vec![Subproblem {
                kind: ProblemType::RejectedIdentifier,
                detail,
                identifier,
            }])
        };
        match kind {
            "dns" => {
                let name = text.to_ascii_lowercase();
                let bare = name.strip_prefix("*.").unwrap_or(&name);
                let valid = !bare.is_empty()
                    && bare.len() <= 253
                    && bare.parse::<IpAddr>().is_err()
                    && bare.split('.').count() >= 2
                    && bare.split('.').all(|label| {
                        !label.is_empty()
                            && label.len() <= 63
                            && !label.starts_with('-')
                            && !label.ends_with('-')
                            && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    });
                if !valid {
                    return Err(rejected(format!("`{text}` is not a DNS name Trellis issues for")));
                }
                Ok(Identifier { kind: "dns".into(), value: name })
            }
            "ip" => match text.parse::<IpAddr>() {
                Ok(ip) => Ok(Identifier { kind: "ip".into(), value: ip.to_string() }),
                Err(_) => Err(rejected(format!("`{text}` is not an IP address"))),
            },
            other => Err(Problem::new(
                ProblemType::UnsupportedIdentifier,
                format!("identifier type `{other}` is not supported (dns, ip)"),
            )),
        }
    }

    /// The name without its wildcard label, and whether it had one.
    pub fn base(&self) -> (Identifier, bool) {
        match self.value.strip_prefix("*.") {
            Some(base) if self.kind == "dns" => (Identifier { kind: "dns".into(), value: base.to_owned() }, true),
            _ => (self.clone(), false),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Order {
    pub id: String,
    pub workspace_id: String,
    pub ca_id: i64,
    pub account_id: String,
    pub status: OrderStatus,
    pub identifiers: Vec<Identifier>,
    pub authorizations: Vec<String>,
    pub profile: Option<String>,
    pub not_before: Option<String>,
    pub not_after: Option<String>,
    pub expires_at: i64,
    pub error: Option<Value>,
    pub certificate_id: Option<i64>,
    pub certificate_pem: Option<String>,
    pub fingerprint: Option<String>,
    /// The certificate request an approval or a pending CA left the order waiting on.
    pub request_id: Option<i64>,
    /// The issued leaf's RFC 9773 certID (renewalInfo finds the certificate by it).
    pub cert_id: Option<String>,
    /// The certID of the certificate this order replaces (RFC 9773 §5), accepted once.
    pub replaces: Option<String>,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Authorization {
    pub id: String,
    pub ca_id: i64,
    pub account_id: String,
    /// The identifier without the wildcard label.
    pub identifier: Identifier,
    pub wildcard: bool,
    pub status: AuthorizationStatus,
    pub expires_at: i64,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Challenge {
    pub id: String,
    pub authz_id: String,
    /// `http-01`, `dns-01`, `tls-alpn-01`.
    pub kind: String,
    pub token: String,
    pub status: ChallengeStatus,
    pub validated_at: Option<i64>,
    pub error: Option<Value>,
    pub updated_at: i64,
}

/// RFC 3339 of milliseconds since the epoch.
pub(crate) fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}
