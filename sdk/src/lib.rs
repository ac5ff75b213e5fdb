//! # trellis-plugin-sdk
//!
//! Write a Trellis plugin by implementing one plain Rust trait and invoking one macro. The
//! SDK targets the plugin contract `trellis:plugin@0.2.0`, whose WIT it embeds (`wit/`), and
//! owns the bindings: plugin code sees only the SDK's own types.
//!
//! A CA connector for a REST CA, whole:
//!
//! ```ignore
//! #![forbid(unsafe_code)]
//! use trellis_plugin_sdk::prelude::*;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! #[serde(rename_all = "camelCase")]
//! struct Config {
//!     url: String,
//!     /// Secret: encrypted at rest, masked in every API response.
//!     #[schemars(extend("writeOnly" = true))]
//!     api_key: String,
//! }
//!
//! struct RestCa;
//!
//! impl CaConnector for RestCa {
//!     type Config = Config;
//!     fn describe() -> PluginInfo {
//!         PluginInfo::ca_connector("com.example.rest-ca", env!("CARGO_PKG_VERSION"), "REST CA", &["rest-ca"])
//!     }
//!     fn test_connection(_: &CallContext, c: &Config) -> Result<TestReport, PluginError> {
//!         let health = http::Request::get(&format!("{}/health", c.url)).send()?;
//!         Ok(TestReport::from_checks("REST CA", vec![Check::pass("health", health.status.to_string())]))
//!     }
//!     fn issue(_: &CallContext, c: &Config, r: &IssueRequest) -> Result<IssueOutcome, PluginError> {
//!         let signed = http::Request::post(&format!("{}/sign", c.url))
//!             .header("authorization", &format!("Bearer {}", c.api_key))
//!             .json(&serde_json::json!({ "csr": r.csr_pem }))?
//!             .send()?;
//!         Ok(IssueOutcome::Issued(IssuedCertificate::pem(signed.text())))
//!     }
//! }
//!
//! trellis_plugin_sdk::export_ca_connector!(RestCa);
//! ```
//!
//! Build with `scripts/build-plugins.sh path/to/crate` (target `wasm32-wasip2`), test with
//! plain `cargo test`: in native builds [`http`], [`state`], [`keystore`], [`pki`] and [`log`]
//! use the fakes of [`testing`]. Each call runs in a fresh sandbox, so plugins keep nothing in memory
//! between calls: use [`state`] for that, and [`keystore`] for private keys.
//!
//! The configuration's JSON Schema is derived from `Config` (`schemars::JsonSchema`), and so
//! are its secret members: mark a field `#[schemars(extend("writeOnly" = true))]` to have the
//! host encrypt and mask it, and add `"x-trellis-withheld" = true` to keep it out of the
//! sandbox altogether (only host imports read it).

#![deny(unsafe_code)]

// The generated code and the export macros name the SDK by its crate name, which must
// therefore also resolve inside the SDK itself.
extern crate self as trellis_plugin_sdk;

pub mod bindings;
pub mod challenge;
pub mod clock;
#[doc(hidden)]
pub mod glue;
pub mod http;
pub mod jws;
pub mod keystore;
pub mod log;
pub mod pki;
pub mod policy;
pub mod poll;
pub mod root_certificate;
pub mod sigv4;
pub mod state;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;
mod types;
pub mod util;
pub mod verifier;

pub use crate::types::*;
pub use schemars;

/// Everything a plugin usually needs: `use trellis_plugin_sdk::prelude::*;`.
pub mod prelude {
    pub use crate::{challenge, clock, http, jws, keystore, log, pki, poll, root_certificate, sigv4, state, util};
    pub use crate::{
        CaConnector, CallContext, Capability, CertificatePage, CertificateProfile, CertificateRef, Check, CheckStatus,
        ConfigIssue, Delivery, DiscoveredCertificate, Event, Integration, IssueOutcome, IssueRequest,
        IssuedCertificate, PageRequest, PluginError, PluginInfo, RenewalWindow, RevocationReason, RevokeRequest,
        SubjectAltName, TestReport,
    };
}

/// A certificate-authority connector. Methods are associated functions: each call runs in a
/// fresh instance, so there is no `self`. Only `describe`, `test_connection` and `issue` are
/// required; declare the others you implement with [`PluginInfo::with_capabilities`].
pub trait CaConnector {
    /// The record's configuration. Its JSON Schema (and secret members) are derived from it.
    type Config: serde::de::DeserializeOwned + schemars::JsonSchema;

    /// Describe the plugin. No I/O.
    fn describe() -> PluginInfo;

    /// Check a configuration without contacting the CA (JSON that does not parse into
    /// `Config` is refused before this is called).
    fn validate_config(config: &Self::Config) -> Result<(), PluginError> {
        let _ = config;
        Ok(())
    }

    /// Prepare a new or changed record (register an account, create a key); idempotent.
    fn setup(ctx: &CallContext, config: &Self::Config) -> Result<(), PluginError> {
        let _ = (ctx, config);
        Ok(())
    }

    /// Contact the CA and report each check.
    fn test_connection(ctx: &CallContext, config: &Self::Config) -> Result<TestReport, PluginError>;

    /// Issue a certificate, or answer pending when the CA needs longer than
    /// `ctx.time_budget_ms`. Must be idempotent under `request.idempotency_key`.
    fn issue(ctx: &CallContext, config: &Self::Config, request: &IssueRequest) -> Result<IssueOutcome, PluginError>;

    /// Continue a pending issuance.
    fn poll_issue(
        ctx: &CallContext,
        config: &Self::Config,
        reference: &str,
        request: &IssueRequest,
    ) -> Result<IssueOutcome, PluginError> {
        let _ = (ctx, config, reference, request);
        Err(PluginError::not_supported("this connector never answers pending"))
    }

    /// Fetch an issued certificate again by the CA's reference.
    fn fetch_certificate(
        ctx: &CallContext,
        config: &Self::Config,
        ca_reference: &str,
    ) -> Result<IssuedCertificate, PluginError> {
        let _ = (ctx, config, ca_reference);
        Err(PluginError::not_supported("this connector cannot fetch certificates"))
    }

    /// The CA's own chain, PEM, issuing CA first. Empty when unknown.
    fn ca_chain(ctx: &CallContext, config: &Self::Config) -> Result<Vec<String>, PluginError> {
        let _ = (ctx, config);
        Ok(Vec::new())
    }

    /// Revoke a certificate (declare [`Capability::Revoke`]).
    fn revoke(ctx: &CallContext, config: &Self::Config, request: &RevokeRequest) -> Result<(), PluginError> {
        let _ = (ctx, config, request);
        Err(PluginError::not_supported("this connector cannot revoke"))
    }

    /// Certificates on the CA, a page at a time (declare [`Capability::Discover`]).
    fn list_certificates(
        ctx: &CallContext,
        config: &Self::Config,
        page: &PageRequest,
    ) -> Result<CertificatePage, PluginError> {
        let _ = (ctx, config, page);
        Err(PluginError::not_supported("this connector does not support discovery"))
    }

    /// The CA's suggested renewal window (declare [`Capability::RenewalInfo`]).
    fn renewal_info(
        ctx: &CallContext,
        config: &Self::Config,
        certificate: &CertificateRef,
    ) -> Result<Option<RenewalWindow>, PluginError> {
        let _ = (ctx, config, certificate);
        Ok(None)
    }
}

/// An integration that delivers certificate lifecycle events to an external system.
pub trait Integration {
    /// The record's configuration. Its JSON Schema (and secret members) are derived from it.
    type Config: serde::de::DeserializeOwned + schemars::JsonSchema;

    /// Describe the plugin. No I/O.
    fn describe() -> PluginInfo;

    /// Check a configuration without contacting the external system.
    fn validate_config(config: &Self::Config) -> Result<(), PluginError> {
        let _ = config;
        Ok(())
    }

    /// Send a harmless test message and report each check.
    fn test(ctx: &CallContext, config: &Self::Config) -> Result<TestReport, PluginError>;

    /// Deliver one event (at least once: deduplicate on `event.id` where you can).
    fn notify(ctx: &CallContext, config: &Self::Config, event: &Event) -> Result<Delivery, PluginError>;
}

/// Exports a type implementing [`CaConnector`] as this component's `trellis:plugin/connector`.
/// The expansion is safe code (the unsafe ABI glue lives in the SDK's macros), so plugin crates
/// may `#![forbid(unsafe_code)]`.
#[rustfmt::skip]
#[macro_export]
macro_rules! export_ca_connector {
    ($plugin:ty) => {
        /// The component's exports (generated by `export_ca_connector!`).
        #[doc(hidden)]
        pub struct __TrellisExport;
        const _: () = {
            use $crate::bindings::ca_connector::exports::trellis::plugin::connector as c;
            use $crate::bindings::imports::trellis::plugin::types as t;
            use $crate::glue::connector as g;
            impl c::Guest for __TrellisExport {
                fn describe() -> t::PluginInfo { g::describe::<$plugin>() }
                fn validate_config(config: String) -> Result<(), t::PluginError> { g::validate_config::<$plugin>(config) }
                fn setup(ctx: t::CallContext, config: String) -> Result<(), t::PluginError> { g::setup::<$plugin>(ctx, config) }
                fn test_connection(ctx: t::CallContext, config: String) -> Result<t::TestReport, t::PluginError> { g::test_connection::<$plugin>(ctx, config) }
                fn issue(ctx: t::CallContext, config: String, r: c::IssueRequest) -> Result<c::IssueOutcome, t::PluginError> { g::issue::<$plugin>(ctx, config, r) }
                fn poll_issue(ctx: t::CallContext, config: String, reference: String, r: c::IssueRequest) -> Result<c::IssueOutcome, t::PluginError> { g::poll_issue::<$plugin>(ctx, config, reference, r) }
                fn fetch_certificate(ctx: t::CallContext, config: String, reference: String) -> Result<c::IssuedCertificate, t::PluginError> { g::fetch_certificate::<$plugin>(ctx, config, reference) }
                fn ca_chain(ctx: t::CallContext, config: String) -> Result<Vec<t::CertificateData>, t::PluginError> { g::ca_chain::<$plugin>(ctx, config) }
                fn revoke(ctx: t::CallContext, config: String, r: c::RevokeRequest) -> Result<(), t::PluginError> { g::revoke::<$plugin>(ctx, config, r) }
                fn list_certificates(ctx: t::CallContext, config: String, page: t::PageRequest) -> Result<c::CertificatePage, t::PluginError> { g::list_certificates::<$plugin>(ctx, config, page) }
                fn renewal_info(ctx: t::CallContext, config: String, certificate: t::CertificateRef) -> Result<Option<c::RenewalWindow>, t::PluginError> { g::renewal_info::<$plugin>(ctx, config, certificate) }
            }
            // Only components export the ABI symbols: natively (`cargo test`) a cdylib would
            // not link them, and tests call the trait directly.
            #[cfg(target_arch = "wasm32")]
            $crate::bindings::ca_connector::export!(__TrellisExport with_types_in $crate::bindings::ca_connector);
        };
    };
}

/// Exports a type implementing [`Integration`] as this component's `trellis:plugin/notifier`.
#[rustfmt::skip]
#[macro_export]
macro_rules! export_integration {
    ($plugin:ty) => {
        /// The component's exports (generated by `export_integration!`).
        #[doc(hidden)]
        pub struct __TrellisExport;
        const _: () = {
            use $crate::bindings::imports::trellis::plugin::types as t;
            use $crate::bindings::integration::exports::trellis::plugin::notifier as n;
            use $crate::glue::integration as g;
            impl n::Guest for __TrellisExport {
                fn describe() -> t::PluginInfo { g::describe::<$plugin>() }
                fn validate_config(config: String) -> Result<(), t::PluginError> { g::validate_config::<$plugin>(config) }
                fn test(ctx: t::CallContext, config: String) -> Result<t::TestReport, t::PluginError> { g::test::<$plugin>(ctx, config) }
                fn notify(ctx: t::CallContext, config: String, event: n::Event) -> Result<n::Delivery, t::PluginError> { g::notify::<$plugin>(ctx, config, event) }
            }
            #[cfg(target_arch = "wasm32")]
            $crate::bindings::integration::export!(__TrellisExport with_types_in $crate::bindings::integration);
        };
    };
}

/// Exports a type implementing [`policy::IssuancePolicy`] as this component's
/// `trellis:plugin/policy`.
#[rustfmt::skip]
#[macro_export]
macro_rules! export_issuance_policy {
    ($plugin:ty) => {
        /// The component's exports (generated by `export_issuance_policy!`).
        #[doc(hidden)]
        pub struct __TrellisExport;
        const _: () = {
            use $crate::bindings::imports::trellis::plugin::types as t;
            use $crate::bindings::issuance_policy::exports::trellis::plugin::policy as p;
            use $crate::glue::policy as g;
            impl p::Guest for __TrellisExport {
                fn describe() -> t::PluginInfo { g::describe::<$plugin>() }
                fn validate_config(config: String) -> Result<(), t::PluginError> { g::validate_config::<$plugin>(config) }
                fn evaluate(ctx: t::CallContext, config: String, r: p::EvaluationRequest) -> Result<p::Decision, t::PluginError> { g::evaluate::<$plugin>(ctx, config, r) }
            }
            #[cfg(target_arch = "wasm32")]
            $crate::bindings::issuance_policy::export!(__TrellisExport with_types_in $crate::bindings::issuance_policy);
        };
    };
}

/// Exports a type implementing [`verifier::AttestationVerifier`] as this component's
/// `trellis:plugin/verifier`.
#[rustfmt::skip]
#[macro_export]
macro_rules! export_attestation_verifier {
    ($plugin:ty) => {
        /// The component's exports (generated by `export_attestation_verifier!`).
        #[doc(hidden)]
        pub struct __TrellisExport;
        const _: () = {
            use $crate::bindings::imports::trellis::plugin::types as t;
            use $crate::bindings::attestation_verifier::exports::trellis::plugin::verifier as v;
            use $crate::glue::verifier as g;
            impl v::Guest for __TrellisExport {
                fn describe() -> t::PluginInfo { g::describe::<$plugin>() }
                fn validate_config(config: String) -> Result<(), t::PluginError> { g::validate_config::<$plugin>(config) }
                fn enroll(ctx: t::CallContext, config: String, r: v::EnrollmentRequest) -> Result<v::EnrollmentVerdict, t::PluginError> { g::enroll::<$plugin>(ctx, config, r) }
                fn verify(ctx: t::CallContext, config: String, r: v::VerifyRequest) -> Result<v::Verdict, t::PluginError> { g::verify::<$plugin>(ctx, config, r) }
            }
            #[cfg(target_arch = "wasm32")]
            $crate::bindings::attestation_verifier::export!(__TrellisExport with_types_in $crate::bindings::attestation_verifier);
        };
    };
}

#[doc(hidden)]
pub mod __private {
    pub use wit_bindgen;
}
