//! One module per world, each with typed calls per contract version. A call is built here as a
//! [`Call`]: a closure that instantiates the component in the store `invoke` prepared and calls
//! one export, with the domain's types converted to that version's WIT types and back. Nothing
//! is erased and re-checked at run time: which world a plugin serves is decided once, when its
//! [`WorldPre`] is built at install.

pub(crate) mod connector;
pub(crate) mod notifier;
pub(crate) mod policy;
mod v0_1;
pub(crate) mod v0_2;
pub(crate) mod verifier;

use std::future::Future;
use std::pin::Pin;

use trellis_core::plugins::{CallTarget, Capabilities, PluginKind, ReportedError, SecretField};
use wasmtime::component::InstancePre;
use wasmtime::Store;

use crate::call::CallState;

pub(crate) use self::connector::ConnectorPre;
pub(crate) use self::notifier::NotifierPre;
pub(crate) use self::policy::PolicyPre;
pub(crate) use self::verifier::VerifierPre;

/// The future of one wasm call: traps and host failures in the outer `Result`, the plugin's own
/// errors in the inner one.
pub(crate) type WasmFuture<'s, T> = Pin<Box<dyn Future<Output = wasmtime::Result<T>> + Send + 's>>;

/// One typed call into a component, run by `invoke` in a fresh store.
pub(crate) type Call<T> =
    Box<dyn for<'s> FnOnce(&'s mut Store<CallState>) -> WasmFuture<'s, Result<T, ReportedError>> + Send>;

/// Boxes a closure as a [`Call`] (the bound makes the closure generic over the store's lifetime).
pub(crate) fn call<T, F>(f: F) -> Call<T>
where
    F: for<'s> FnOnce(&'s mut Store<CallState>) -> WasmFuture<'s, Result<T, ReportedError>> + Send + 'static,
{
    Box::new(f)
}

/// A [`Call`] of one export: instantiates `$pre` in the call's store, then evaluates `$body`
/// with `$api` bound to the export's typed functions and `$store` to the store. Values the
/// body uses are moved into the call.
macro_rules! export_call {
    ($pre:expr, $export:ident, |$api:ident, $store:ident| $body:expr) => {{
        let pre = $pre.clone();
        $crate::worlds::call(move |$store| {
            Box::pin(async move {
                let instance = pre.instantiate_async(&mut *$store).await?;
                let $api = instance.$export();
                $body
            })
        })
    }};
}
pub(crate) use export_call;

/// A call that needs no wasm (an operation an older contract lacks, answered by the host).
pub(crate) fn answer<T: Send + 'static>(value: Result<T, ReportedError>) -> Call<T> {
    call(move |_| Box::pin(async move { Ok(value) }))
}

/// What every call receives besides its input.
pub(crate) struct Ctx<'a> {
    pub(crate) target: &'a CallTarget,
    /// Milliseconds the plugin should return within (below the host's hard timeout).
    pub(crate) time_budget_ms: u32,
}

impl Ctx<'_> {
    pub(crate) fn config(&self) -> String {
        self.target.config.to_string()
    }
}

/// `describe()` as any version reports it, before the host validates it.
pub(crate) struct Described {
    pub(crate) id: String,
    pub(crate) version: String,
    pub(crate) kind: PluginKind,
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) serves: Vec<String>,
    pub(crate) config_schema: String,
    pub(crate) secret_fields: Vec<SecretField>,
    pub(crate) capabilities: Capabilities,
    pub(crate) default_issuer_patterns: Vec<String>,
    pub(crate) outbound_hosts: Vec<String>,
}

/// A component ready to instantiate, typed by the world and contract version it exports.
pub(crate) enum WorldPre {
    Connector(ConnectorPre),
    Notifier(NotifierPre),
    Verifier(VerifierPre),
    Policy(PolicyPre),
}

impl WorldPre {
    /// Binds `pre` to the typed exports of `kind` at contract `version`; fails when the
    /// component's exports do not have that world's types.
    pub(crate) fn new(
        kind: PluginKind,
        version: &semver::Version,
        pre: InstancePre<CallState>,
    ) -> wasmtime::Result<WorldPre> {
        Ok(match kind {
            PluginKind::CaConnector => WorldPre::Connector(ConnectorPre::new(version, pre)?),
            PluginKind::Integration => WorldPre::Notifier(NotifierPre::new(version, pre)?),
            PluginKind::AttestationVerifier => WorldPre::Verifier(VerifierPre::new(version, pre)?),
            PluginKind::IssuancePolicy => WorldPre::Policy(PolicyPre::new(version, pre)?),
        })
    }

    pub(crate) fn kind(&self) -> PluginKind {
        match self {
            WorldPre::Connector(_) => PluginKind::CaConnector,
            WorldPre::Notifier(_) => PluginKind::Integration,
            WorldPre::Verifier(_) => PluginKind::AttestationVerifier,
            WorldPre::Policy(_) => PluginKind::IssuancePolicy,
        }
    }

    pub(crate) fn describe(&self) -> Call<Described> {
        match self {
            WorldPre::Connector(pre) => pre.describe(),
            WorldPre::Notifier(pre) => pre.describe(),
            WorldPre::Verifier(pre) => pre.describe(),
            WorldPre::Policy(pre) => pre.describe(),
        }
    }

    pub(crate) fn validate_config(&self, config: String) -> Call<()> {
        match self {
            WorldPre::Connector(pre) => pre.validate_config(config),
            WorldPre::Notifier(pre) => pre.validate_config(config),
            WorldPre::Verifier(pre) => pre.validate_config(config),
            WorldPre::Policy(pre) => pre.validate_config(config),
        }
    }
}

/// Which contract versions this host serves: the oldest and newest `major.minor`.
pub(crate) const SERVED_VERSIONS: &[(u64, u64)] = &[(0, 1), (0, 2)];

/// Whether a component's export version is one of [`SERVED_VERSIONS`] (compatibility as the
/// component model canonicalizes it: `0.x.*` by minor, else by major).
pub(crate) fn served(version: &semver::Version) -> bool {
    SERVED_VERSIONS.iter().any(|&(major, minor)| {
        if major == 0 {
            version.major == 0 && version.minor == minor
        } else {
            version.major == major
        }
    })
}

/// Contract 0.1 and 0.2 share the shape of `test-report`; generated per version, converted by
/// one macro.
/// Expands where `w` names the version's `types` bindings.
macro_rules! test_report_conversion {
    () => {
        pub(super) fn report(r: w::TestReport) -> trellis_core::plugins::TestReport {
            use trellis_core::plugins::{Check, CheckStatus, TestReport};
            TestReport {
                success: r.success,
                message: r.message,
                checks: r
                    .checks
                    .into_iter()
                    .map(|c| Check {
                        name: c.name,
                        status: match c.status {
                            w::CheckStatus::Pass => CheckStatus::Pass,
                            w::CheckStatus::Warn => CheckStatus::Warn,
                            w::CheckStatus::Fail => CheckStatus::Fail,
                            w::CheckStatus::Skip => CheckStatus::Skip,
                        },
                        message: c.message,
                    })
                    .collect(),
                // A plugin handing back malformed JSON must not fail the whole test.
                details: serde_json::from_str(&r.details).unwrap_or_else(|_| serde_json::json!({ "raw": r.details })),
            }
        }
    };
}
pub(crate) use test_report_conversion;
