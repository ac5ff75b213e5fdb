//! wasmtime bindings, one module per contract version (`v0_1`, `v0_2`), each with one module
//! per world. The host serves every version here side by side: a component is bound against
//! the version it was built for (read from its exports at install), and the `worlds` modules
//! adapt each version's types to the domain's.

#![allow(clippy::all, missing_docs)]

pub(crate) mod v0_1;
pub(crate) mod v0_2;

/// The interface names a component exports, per world, without version.
pub(crate) const CONNECTOR_EXPORT: &str = "trellis:plugin/connector";
pub(crate) const NOTIFIER_EXPORT: &str = "trellis:plugin/notifier";
pub(crate) const VERIFIER_EXPORT: &str = "trellis:plugin/verifier";
/// Contract 0.2 on.
pub(crate) const POLICY_EXPORT: &str = "trellis:plugin/policy";
