//! Plugin runtime: CA connectors, integrations and attestation verifiers are WebAssembly
//! components (`wit/`, package `trellis:plugin@0.1.0`) run in a sandbox.
//!
//! One wasmtime engine per process (pooling allocator, epoch ticker). Each installed version
//! keeps an `InstancePre`; every call gets a fresh `Store` with a memory limit, an epoch (CPU)
//! deadline and a wall-clock timeout, behind an admission semaphore (excess calls queue).
//! The WASI context grants nothing; outbound HTTP goes through [`egress`]'s policy.
//! A misbehaving plugin fails only its own call, with a distinct [`PluginError`] code.
//!
//! Versions are swapped atomically: a call clones the `Arc` of the active version when it
//! starts, so in-flight calls finish on their version while new calls use the new one.

#[doc(hidden)]
pub mod bench_support;
mod bindings;
mod call;
mod config;
mod egress;
mod error;
mod runtime;
pub mod service;
mod state;
mod types;

#[cfg(test)]
mod tests;

pub use config::{CallLimits, EgressConfig, KindLimits, RuntimeConfig};
pub use error::{InstallError, PluginError};
pub use runtime::{
    Activation, CallTarget, InstalledVersion, PluginRef, PluginRuntime, PluginSummary, WIT_PACKAGE_VERSION,
};
pub use state::{InMemoryStateStore, PluginStateStore, StateError, StateFuture, StateScope};
pub use types::{
    CallContext, CertificatePage, Check, CheckStatus, ConfigIssue, Delivery, DiscoveredCertificate, Event, Evidence,
    Failure, IssueRequest, IssuedCertificate, PcrValue, PluginInfo, PluginKind, ReportedError, RevocationReason,
    RevokeRequest, TestReport, Verdict, VerifyRequest,
};

/// Where `make plugins` puts built components, relative to the workspace root.
pub const BUILT_PLUGINS_DIR: &str = "target/plugins";

/// First-party plugins installed on first start (file stems in [`BUILT_PLUGINS_DIR`]).
pub const FIRST_PARTY_PLUGINS: &[&str] = &["slack"];
