//! Plugins as the domain sees them: the vocabulary of plugin calls ([`types`], with
//! `policy` and `verifier` for those worlds), the runtime's
//! errors ([`error`]), the ports the runtime implements ([`PluginHost`]) and uses
//! ([`PluginStateStore`]), and the lifecycle use cases ([`service`]).
//!
//! The sandbox itself (wasmtime, WIT bindings, egress) lives in `trellis-plugin-host`.

pub mod binding;
pub mod challenges;
mod error;
#[cfg(test)]
pub(crate) mod fake;
mod host;
mod keystore;
mod policy;
pub mod port;
pub mod record_config;
pub mod service;
pub mod signatures;
mod state;
mod stored;
#[cfg(test)]
mod trust_store_tests;
mod types;
mod verifier;

pub use self::error::{InstallError, PluginError};
pub use self::host::{ComponentSource, DeferredVersion, PluginHost};
pub(crate) use self::keystore::generate_pkcs8;
pub use self::keystore::{
    InMemoryKeyRecords, KeyInsert, Keystore, KeystoreError, PluginKeyRecords, PublicKeyInfo, SealedKey,
    MAX_KEYS_PER_RECORD, MAX_SIGNED_MESSAGE,
};
// The `pki-core` port is the PKI's own (`crate::pki::host`); named here too because plugin
// call targets carry its grant (the edge runs plugins -> pki, never back).
pub use self::policy::{
    combine, Combined, Decision, EvaluationRequest, IssuanceSource, PolicyReason, Requester, RequesterKind,
};
pub use self::state::{InMemoryStateStore, PluginStateStore, StateError, StateFuture, StateScope};
pub use self::stored::{NewPluginVersion, StoredBinding, StoredPlugin, StoredPluginVersion};
pub use self::types::*;
pub use crate::pki::host::{
    AuthorityInfo, AuthoritySpec, IssuedEntryInfo, IssuedPageInfo, NewAuthoritySpec, PkiCore, PkiCoreError, PkiGrant,
    SerialStatus, SignPermit, SignedCertificate,
};
// The certificate vocabulary of plugin calls is the pure PKI crate's.
pub use self::verifier::{
    ActivationChallenge, BoundCsr, EnrolledDevice, EnrollmentRequest, EnrollmentVerdict, Evidence, Failure, PcrValue,
    Tpm2Certification, Tpm2Evidence, TpmClock, TrustAnchor, Verdict, VerifyRequest,
};
pub use trellis_pki::{
    CertificateProfile, KeyAlgorithm, KeyUsage, RevocationInfo, RevocationReason, Subject, SubjectAltName, SubjectKey,
};

/// Where `make plugins` puts built components, relative to the workspace root.
pub const BUILT_PLUGINS_DIR: &str = "target/plugins";

/// First-party plugins installed on first start (file stems in [`BUILT_PLUGINS_DIR`]).
pub const FIRST_PARTY_PLUGINS: &[&str] = &[
    "slack",
    "msteams",
    "pagerduty",
    "jira",
    "servicenow",
    "splunk",
    "datadog",
    "internal",
    "acme",
    "domain-policy",
    "tpm2-verifier",
    "ca-probe",
    "aws-pca",
    "vault",
];
