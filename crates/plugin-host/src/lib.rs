//! Plugin runtime: CA connectors, integrations and attestation verifiers are WebAssembly
//! components (`wit/`: package `trellis:plugin@0.1.0`; `wit/v0.2`: `@0.2.0`) run in a sandbox.
//! Both contract versions are served side by side; a component is bound to the one it was
//! built against.
//!
//! Code map: `engine` (engine, linker, epoch ticker) · `registry` (installed versions,
//! bindings, grants) · `install` (validation, compilation, describe) · `invoke` (admission,
//! store, limits, failure classification) · `worlds` (typed calls per world and version) ·
//! `bindings` (generated, per version) · `host_v0_1`/`host_v0_2` (host imports) · `egress` (the `wasi:http` hooks; the
//! address and allow-list rules are `trellis-egress`'s).
//!
//! One wasmtime engine per process (pooling allocator, epoch ticker). Each installed version
//! keeps an `InstancePre`; every call gets a fresh `Store` with a memory limit, an epoch (CPU)
//! deadline and a wall-clock timeout, behind an admission semaphore (excess calls queue).
//! The WASI context grants nothing; outbound HTTP goes through [`egress`]'s policy.
//! A misbehaving plugin fails only its own call, with a distinct [`PluginError`] code.
//!
//! Versions are swapped atomically: a call clones the `Arc` of the active version when it
//! starts, so in-flight calls finish on their version while new calls use the new one.

mod artefacts;
#[doc(hidden)]
pub mod bench_support;
mod bindings;
mod call;
mod config;
mod dns01;
mod egress;
mod engine;
mod host_v0_1;
mod host_v0_2;
mod install;
mod invoke;
mod registry;
mod runtime;
pub mod tls_probe;
mod worlds;

#[cfg(test)]
mod tests;

pub use artefacts::CacheStats;
pub use call::CallUsage;
pub use config::{ArtefactKey, CallLimits, EgressConfig, KindLimits, RuntimeConfig};
pub use runtime::{PluginRuntime, WIT_PACKAGE_VERSION};
// The plugin vocabulary is the domain's (`trellis_core::plugins`); re-exported so that users of
// the runtime need one import path.
pub use trellis_core::plugins::{
    Activation, ActivationChallenge, BoundCsr, CallContext, CallTarget, CertificatePage, CertificateProfile,
    CertificateRef, Check, CheckStatus, ClientCertificate, ConfigIssue, Decision, Delivery, DiscoveredCertificate,
    EnrolledDevice, EnrollmentRequest, EnrollmentVerdict, EvaluationRequest, Event, Evidence, Failure,
    InMemoryStateStore, InstallError, InstalledVersion, IssuanceSource, IssueOutcome, IssueRequest, IssuedCertificate,
    Keystore, PcrValue, PluginError, PluginHost, PluginInfo, PluginKind, PluginRef, PluginStateStore, PluginSummary,
    PolicyReason, RecordNetwork, RenewalWindow, ReportedError, Requester, RequesterKind, RevocationReason,
    RevokeRequest, StateError, StateFuture, StateScope, SubjectAltName, SubjectKey, TestReport, Tpm2Certification,
    Tpm2Evidence, TpmClock, TrustAnchor, Verdict, VerifyRequest,
};
