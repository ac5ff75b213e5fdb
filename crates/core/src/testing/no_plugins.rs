//! `NoPlugins`: a plugin host with nothing installed. Every call fails as an unbound type would,
//! but `ca_issue`, `ca_poll_issue`, `ca_renewal_info`, `ca_revoke`, `ca_list_certificates`,
//! `policy_evaluate` and `verify`, which a test may script, and `serving`, which answers with a
//! test's connector.

use std::sync::Arc;

use async_trait::async_trait;
use futures_util::future::BoxFuture;

use crate::plugins::*;

/// A connector's `issue` as a test scripts it: the call's target (with its `pki-core` grant)
/// and request in, the outcome out.
pub type IssueScript =
    Arc<dyn Fn(CallTarget, IssueRequest) -> BoxFuture<'static, Result<IssueOutcome, PluginError>> + Send + Sync>;

/// A connector's `poll-issue` as a test scripts it: the reference and request in.
pub type PollScript =
    Arc<dyn Fn(String, IssueRequest) -> BoxFuture<'static, Result<IssueOutcome, PluginError>> + Send + Sync>;

/// An issuance policy's `evaluate` as a test scripts it: the call's target (its record names the
/// policy: `policy-<id>`) and the request in.
pub type PolicyScript = Arc<dyn Fn(&CallTarget, &EvaluationRequest) -> Result<Decision, PluginError> + Send + Sync>;

/// A connector's `revoke` as a test scripts it.
pub type RevokeScript = Arc<dyn Fn(&RevokeRequest) -> Result<(), PluginError> + Send + Sync>;

/// A connector's `renewal-info` as a test scripts it: the certificate reference in.
pub type RenewalInfoScript = Arc<dyn Fn(&CertificateRef) -> Result<Option<RenewalWindow>, PluginError> + Send + Sync>;

/// A connector's `list-certificates` as a test scripts it: the cursor in, the page out.
pub type ListScript = Arc<dyn Fn(Option<String>) -> Result<CertificatePage, PluginError> + Send + Sync>;

/// A verifier's `verify` as a test scripts it: the call's target and request in.
pub type VerifyScript = Arc<dyn Fn(&CallTarget, &VerifyRequest) -> Result<Verdict, PluginError> + Send + Sync>;

#[derive(Default)]
pub struct NoPlugins {
    /// What `ca_list_certificates` does; unset, it fails like every other call.
    pub list_certificates: Option<ListScript>,
    /// What `verify` does; unset, it fails like every other call.
    pub verify: Option<VerifyScript>,
    /// What `ca_renewal_info` does; unset, it fails like every other call.
    pub renewal_info: Option<RenewalInfoScript>,
    /// What `ca_issue` does; unset, it fails like every other call.
    pub issue: Option<IssueScript>,
    /// What `ca_poll_issue` does; unset, it fails like every other call.
    pub poll: Option<PollScript>,
    /// The connector `serving` answers with for the types it serves.
    pub connector: Option<PluginInfo>,
    /// The issuance policy plugin `serving` answers with for the types it serves, and what its
    /// `evaluate` does.
    pub policy: Option<(PluginInfo, PolicyScript)>,
    /// What `ca_revoke` does; unset, it fails like every other call.
    pub revoke: Option<RevokeScript>,
}

fn none() -> PluginError {
    PluginError::NotFound { id: "(no plugins in this test)".into() }
}

#[async_trait]
impl PluginHost for NoPlugins {
    async fn install(&self, _: &[u8], _: Activation) -> Result<InstalledVersion, PluginError> {
        Err(none())
    }
    fn install_deferred(&self, _: crate::plugins::DeferredVersion) -> Result<InstalledVersion, PluginError> {
        Err(none())
    }
    fn release_compiled(&self, _: std::sync::Arc<dyn crate::plugins::ComponentSource>) -> usize {
        0
    }
    fn activate(&self, _: &str, _: &semver::Version) -> Result<(), PluginError> {
        Err(none())
    }
    fn rollback(&self, _: &str) -> Result<semver::Version, PluginError> {
        Err(none())
    }
    fn remove(&self, _: &str, _: Option<&semver::Version>) -> Result<(), PluginError> {
        Err(none())
    }
    fn list(&self) -> Vec<PluginSummary> {
        Vec::new()
    }
    fn show(&self, _: &str) -> Option<PluginSummary> {
        None
    }
    fn bind(&self, _: &str, _: PluginKind, _: &str, _: &str) -> Result<(), PluginError> {
        Err(none())
    }
    fn unbind(&self, _: &str, _: PluginKind, _: &str) {}
    fn grant_hosts(&self, _: &str, _: Vec<String>) -> Result<(), PluginError> {
        Err(none())
    }
    fn restore_activation(
        &self,
        _: &str,
        _: Option<&semver::Version>,
        _: &[semver::Version],
    ) -> Result<(), PluginError> {
        Err(none())
    }
    fn replace_bindings(&self, _: Vec<(String, PluginKind, String, String)>) {}
    fn serving(
        &self,
        _: &str,
        kind: PluginKind,
        service_type: &str,
    ) -> Result<std::sync::Arc<PluginInfo>, PluginError> {
        let policy = self.policy.as_ref().map(|(info, _)| info);
        match [self.connector.as_ref(), policy]
            .into_iter()
            .flatten()
            .find(|info| info.kind == kind && info.serves.iter().any(|t| t == service_type))
        {
            Some(info) => Ok(std::sync::Arc::new(info.clone())),
            None => Err(PluginError::NotBound { kind, service_type: service_type.to_owned() }),
        }
    }
    fn served_types(&self, _: PluginKind) -> Vec<String> {
        Vec::new()
    }
    async fn validate_config(&self, _: &CallTarget, _: PluginKind) -> Result<(), PluginError> {
        Err(none())
    }
    async fn integration_test(&self, _: &CallTarget) -> Result<TestReport, PluginError> {
        Err(none())
    }
    async fn notify(&self, _: &CallTarget, _: &Event) -> Result<Delivery, PluginError> {
        Err(none())
    }
    async fn ca_test_connection(&self, _: &CallTarget) -> Result<TestReport, PluginError> {
        Err(none())
    }
    async fn ca_setup(&self, _: &CallTarget) -> Result<(), PluginError> {
        Err(none())
    }
    async fn ca_issue(&self, target: &CallTarget, request: &IssueRequest) -> Result<IssueOutcome, PluginError> {
        match &self.issue {
            Some(script) => script(target.clone(), request.clone()).await,
            None => Err(none()),
        }
    }
    async fn ca_poll_issue(
        &self,
        _: &CallTarget,
        reference: &str,
        request: &IssueRequest,
    ) -> Result<IssueOutcome, PluginError> {
        match &self.poll {
            Some(script) => script(reference.to_owned(), request.clone()).await,
            None => Err(none()),
        }
    }
    async fn ca_fetch_certificate(&self, _: &CallTarget, _: &str) -> Result<IssuedCertificate, PluginError> {
        Err(none())
    }
    async fn ca_chain(&self, _: &CallTarget) -> Result<Vec<Vec<u8>>, PluginError> {
        Err(none())
    }
    async fn ca_renewal_info(
        &self,
        _: &CallTarget,
        certificate: &CertificateRef,
    ) -> Result<Option<RenewalWindow>, PluginError> {
        match &self.renewal_info {
            Some(script) => script(certificate),
            None => Err(none()),
        }
    }
    async fn ca_revoke(&self, _: &CallTarget, request: &RevokeRequest) -> Result<(), PluginError> {
        match &self.revoke {
            Some(script) => script(request),
            None => Err(none()),
        }
    }
    async fn ca_list_certificates(
        &self,
        _: &CallTarget,
        cursor: Option<String>,
        _: u32,
    ) -> Result<CertificatePage, PluginError> {
        match &self.list_certificates {
            Some(script) => script(cursor),
            None => Err(none()),
        }
    }
    async fn verifier_enroll(&self, _: &CallTarget, _: &EnrollmentRequest) -> Result<EnrollmentVerdict, PluginError> {
        Err(none())
    }
    async fn verify(&self, target: &CallTarget, request: &VerifyRequest) -> Result<Verdict, PluginError> {
        match &self.verify {
            Some(script) => script(target, request),
            None => Err(none()),
        }
    }
    async fn policy_evaluate(&self, target: &CallTarget, request: &EvaluationRequest) -> Result<Decision, PluginError> {
        match &self.policy {
            Some((_, script)) => script(target, request),
            None => Err(none()),
        }
    }
}
