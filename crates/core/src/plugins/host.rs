//! The port to the plugin sandbox. `trellis-plugin-host` implements it with wasmtime; the
//! domain only sees these operations and the plugin vocabulary of [`super::types`].
//!
//! The calls take the newest contract's shape (`trellis:plugin@0.2`); the host adapts them for
//! components built against older contracts (see `trellis-plugin-host`'s `worlds`).

use std::sync::Arc;

use async_trait::async_trait;

use super::error::PluginError;
use super::policy::{Decision, EvaluationRequest};
use super::types::{
    Activation, CallTarget, CertificatePage, CertificateRef, Delivery, Event, InstalledVersion, IssueOutcome,
    IssueRequest, IssuedCertificate, PluginInfo, PluginKind, PluginSummary, RenewalWindow, RevokeRequest, TestReport,
};
use super::verifier::{EnrollmentRequest, EnrollmentVerdict, Verdict, VerifyRequest};

/// A stored version to register without compiling (see [`PluginHost::install_deferred`]).
pub struct DeferredVersion {
    pub info: PluginInfo,
    /// Lowercase hex sha256 of the component: the bytes fetched later must match it.
    pub sha256: String,
    pub size_bytes: usize,
    pub wit_version: String,
    pub source: Arc<dyn ComponentSource>,
    /// The trust-store key that signed it, as stored.
    pub signer_key_id: Option<String>,
}

/// Where a deferred version's component bytes come from on its first call.
#[async_trait]
pub trait ComponentSource: Send + Sync {
    async fn component(&self, sha256: &str) -> Result<Vec<u8>, PluginError>;
}

/// This replica's plugin runtime: a registry of installed versions and the typed calls into
/// them. Lifecycle changes here are not persisted: the domain's plugin service stores them.
#[async_trait]
pub trait PluginHost: Send + Sync + 'static {
    // ---- lifecycle -------------------------------------------------------------------------

    /// Validates and compiles a component and adds it to the registry.
    async fn install(&self, wasm: &[u8], activation: Activation) -> Result<InstalledVersion, PluginError>;
    /// Records the trust-store key that signed an installed version (checked by the domain), so
    /// that the version shows it.
    fn set_signer(
        &self,
        id: &str,
        version: &semver::Version,
        signer_key_id: Option<String>,
    ) -> Result<(), PluginError> {
        let _ = (id, version, signer_key_id);
        Ok(())
    }
    /// Adds a version validated at an earlier install (the database's) without compiling it:
    /// its component is fetched from `version.source` and compiled (or loaded from the
    /// compiled-code cache) on its first call. A restart so costs no memory or time for plugins
    /// nobody calls.
    fn install_deferred(&self, version: DeferredVersion) -> Result<InstalledVersion, PluginError>;
    /// Compiles into the on-disk cache every registered version that has no compiled artefact
    /// there yet (in the background, after a start or a sync), keeping none of it in memory.
    /// Returns how many were compiled.
    async fn precompile(&self) -> usize {
        0
    }
    /// Drops the compiled code of every version (calls in flight keep theirs); each is compiled
    /// again from `source` on its next call. Returns how many were released.
    fn release_compiled(&self, source: Arc<dyn ComponentSource>) -> usize;
    fn activate(&self, id: &str, version: &semver::Version) -> Result<(), PluginError>;
    /// Re-activates the previously active version; returns it.
    fn rollback(&self, id: &str) -> Result<semver::Version, PluginError>;
    /// Removes one version or (without `version`) the whole plugin.
    fn remove(&self, id: &str, version: Option<&semver::Version>) -> Result<(), PluginError>;
    fn list(&self) -> Vec<PluginSummary>;
    fn show(&self, id: &str) -> Option<PluginSummary>;
    fn bind(
        &self,
        workspace_id: &str,
        kind: PluginKind,
        service_type: &str,
        plugin_id: &str,
    ) -> Result<(), PluginError>;
    fn unbind(&self, workspace_id: &str, kind: PluginKind, service_type: &str);
    fn grant_hosts(&self, plugin_id: &str, hosts: Vec<String>) -> Result<(), PluginError>;
    /// Sets the active version and the rollback history as the database has them.
    fn restore_activation(
        &self,
        id: &str,
        active: Option<&semver::Version>,
        history: &[semver::Version],
    ) -> Result<(), PluginError>;
    /// Replaces every binding: `(workspace, kind, service type, plugin id)`.
    fn replace_bindings(&self, bindings: Vec<(String, PluginKind, String, String)>);
    /// What the plugin serving `service_type` for the workspace says about itself (its active
    /// version), as a call would resolve it. Shared, not copied: every issuance asks.
    fn serving(
        &self,
        workspace_id: &str,
        kind: PluginKind,
        service_type: &str,
    ) -> Result<std::sync::Arc<PluginInfo>, PluginError>;
    /// Every type some active plugin of `kind` serves, sorted.
    fn served_types(&self, kind: PluginKind) -> Vec<String>;

    // ---- calls -------------------------------------------------------------------------------

    async fn validate_config(&self, target: &CallTarget, kind: PluginKind) -> Result<(), PluginError>;

    // integration
    async fn integration_test(&self, target: &CallTarget) -> Result<TestReport, PluginError>;
    async fn notify(&self, target: &CallTarget, event: &Event) -> Result<Delivery, PluginError>;

    // ca-connector
    /// Prepares a record (account registration, internal CA creation); a no-op for 0.1.
    async fn ca_setup(&self, target: &CallTarget) -> Result<(), PluginError>;
    async fn ca_test_connection(&self, target: &CallTarget) -> Result<TestReport, PluginError>;
    async fn ca_issue(&self, target: &CallTarget, request: &IssueRequest) -> Result<IssueOutcome, PluginError>;
    async fn ca_poll_issue(
        &self,
        target: &CallTarget,
        reference: &str,
        request: &IssueRequest,
    ) -> Result<IssueOutcome, PluginError>;
    async fn ca_fetch_certificate(
        &self,
        target: &CallTarget,
        ca_reference: &str,
    ) -> Result<IssuedCertificate, PluginError>;
    /// The CA's own chain, issuing CA first, DER.
    async fn ca_chain(&self, target: &CallTarget) -> Result<Vec<Vec<u8>>, PluginError>;
    async fn ca_revoke(&self, target: &CallTarget, request: &RevokeRequest) -> Result<(), PluginError>;
    async fn ca_list_certificates(
        &self,
        target: &CallTarget,
        cursor: Option<String>,
        limit: u32,
    ) -> Result<CertificatePage, PluginError>;
    async fn ca_renewal_info(
        &self,
        target: &CallTarget,
        certificate: &CertificateRef,
    ) -> Result<Option<RenewalWindow>, PluginError>;

    // attestation-verifier
    /// Step 1 (contract 0.2): checks the EK and AK, makes the activation challenge. A 0.1
    /// verifier answers `NotSupported`.
    async fn verifier_enroll(
        &self,
        target: &CallTarget,
        request: &EnrollmentRequest,
    ) -> Result<EnrollmentVerdict, PluginError>;
    /// Step 2: checks evidence. The verdict is normalized (passing needs no failures).
    async fn verify(&self, target: &CallTarget, request: &VerifyRequest) -> Result<Verdict, PluginError>;

    // issuance-policy
    async fn policy_evaluate(&self, target: &CallTarget, request: &EvaluationRequest) -> Result<Decision, PluginError>;
}
