//! # trellis-plugin-sdk
//!
//! Write a Trellis plugin by implementing one plain Rust trait and invoking one macro.
//! The SDK owns the WebAssembly bindings (wit-bindgen, package `trellis:plugin@0.1.0`);
//! plugin authors never touch them.
//!
//! ```ignore
//! use trellis_plugin_sdk::prelude::*;
//!
//! #[derive(serde::Deserialize)]
//! struct Config { webhook_url: String }
//!
//! struct Hello;
//!
//! impl Integration for Hello {
//!     type Config = Config;
//!     fn describe() -> PluginInfo {
//!         PluginInfo::integration("com.example.hello", env!("CARGO_PKG_VERSION"), "Hello", &["hello"])
//!     }
//!     fn test(_ctx: &CallContext, _config: &Config) -> Result<TestReport, PluginError> {
//!         Ok(TestReport::passed("nothing to check", vec![]))
//!     }
//!     fn notify(_ctx: &CallContext, config: &Config, event: &Event) -> Result<Delivery, PluginError> {
//!         let res = http::Request::post(&config.webhook_url).json(&serde_json::json!({"text": event.summary}))?.send()?;
//!         Ok(Delivery { status: Some(res.status), reference: None })
//!     }
//! }
//!
//! trellis_plugin_sdk::export_integration!(Hello);
//! ```
//!
//! Build for `wasm32-wasip2` (see `docs/plugins.md`); every call runs in a fresh sandbox,
//! so plugins keep no state in memory between calls: use [`state`] for that.

#![deny(unsafe_code)]

// The generated code and the export macros name the SDK by its crate name, which must
// therefore also resolve inside the SDK itself.
extern crate self as trellis_plugin_sdk;

pub mod bindings;
pub mod http;
pub mod log;
pub mod state;
mod types;

pub use crate::types::*;

/// Everything a plugin usually needs: `use trellis_plugin_sdk::prelude::*;`.
pub mod prelude {
    pub use crate::http;
    pub use crate::log;
    pub use crate::state;
    pub use crate::{
        AttestationVerifier, CaConnector, CallContext, CertificatePage, Check, CheckStatus, ConfigIssue, Delivery,
        DiscoveredCertificate, Event, Evidence, Failure, Integration, IssueRequest, IssuedCertificate, PageRequest,
        PcrValue, PluginError, PluginInfo, PluginKind, RevocationReason, RevokeRequest, TestReport, UpstreamFailure,
        Verdict, VerifyRequest,
    };
}

/// A certificate-authority connector.
///
/// Every method receives the CA record's configuration, already parsed into [`Self::Config`].
/// Methods are associated functions: each call runs in a fresh instance, so there is no `self`.
pub trait CaConnector {
    /// The configuration object, parsed from the record's JSON configuration.
    type Config: serde::de::DeserializeOwned;

    /// Describe the plugin. Must not perform I/O.
    fn describe() -> PluginInfo;

    /// Check the configuration without contacting the CA.
    /// JSON that does not parse into [`Self::Config`] is rejected before this is called.
    fn validate_config(config: &Self::Config) -> Result<(), PluginError> {
        let _ = config;
        Ok(())
    }

    /// Contact the CA and report each check.
    fn test_connection(ctx: &CallContext, config: &Self::Config) -> Result<TestReport, PluginError>;

    /// Issue a certificate for a CSR.
    fn issue(
        ctx: &CallContext,
        config: &Self::Config,
        request: &IssueRequest,
    ) -> Result<IssuedCertificate, PluginError>;

    /// Revoke a certificate.
    fn revoke(ctx: &CallContext, config: &Self::Config, request: &RevokeRequest) -> Result<(), PluginError>;

    /// List certificates for discovery, one page at a time.
    /// The default says discovery is not supported.
    fn list_certificates(
        ctx: &CallContext,
        config: &Self::Config,
        page: &PageRequest,
    ) -> Result<CertificatePage, PluginError> {
        let _ = (ctx, config, page);
        Err(PluginError::not_supported("this connector does not support discovery"))
    }
}

/// An integration that delivers certificate lifecycle events to an external system.
pub trait Integration {
    /// The configuration object, parsed from the record's JSON configuration.
    type Config: serde::de::DeserializeOwned;

    /// Describe the plugin. Must not perform I/O.
    fn describe() -> PluginInfo;

    /// Check the configuration without contacting the external system.
    fn validate_config(config: &Self::Config) -> Result<(), PluginError> {
        let _ = config;
        Ok(())
    }

    /// Send a harmless test message and report each check.
    fn test(ctx: &CallContext, config: &Self::Config) -> Result<TestReport, PluginError>;

    /// Deliver one event.
    fn notify(ctx: &CallContext, config: &Self::Config, event: &Event) -> Result<Delivery, PluginError>;
}

/// An attestation verifier: pure computation over evidence, with no outbound HTTP.
pub trait AttestationVerifier {
    /// The configuration (policy defaults) object.
    type Config: serde::de::DeserializeOwned;

    /// Describe the plugin. Must not perform I/O.
    fn describe() -> PluginInfo;

    /// Check the configuration.
    fn validate_config(config: &Self::Config) -> Result<(), PluginError> {
        let _ = config;
        Ok(())
    }

    /// Verify evidence against a policy.
    fn verify(config: &Self::Config, request: &VerifyRequest) -> Result<Verdict, PluginError>;
}

/// Export a type implementing [`CaConnector`] as this component's `trellis:plugin/connector`.
// Skipped: rustfmt mis-indents the wit-bindgen `export!` call inside the macro body.
#[rustfmt::skip]
#[macro_export]
macro_rules! export_ca_connector {
    ($plugin:ty) => {
        const _: () = {
            struct __TrellisExport;
            impl $crate::bindings::ca_connector::exports::trellis::plugin::connector::Guest for __TrellisExport {
                fn describe() -> $crate::PluginInfo {
                    <$plugin as $crate::CaConnector>::describe()
                }
                fn validate_config(config: String) -> Result<(), $crate::PluginError> {
                    let parsed = $crate::__private::parse_config::<<$plugin as $crate::CaConnector>::Config>(&config)?;
                    <$plugin as $crate::CaConnector>::validate_config(&parsed)
                }
                fn test_connection(
                    ctx: $crate::CallContext,
                    config: String,
                ) -> Result<$crate::TestReport, $crate::PluginError> {
                    let parsed = $crate::__private::parse_config::<<$plugin as $crate::CaConnector>::Config>(&config)?;
                    <$plugin as $crate::CaConnector>::test_connection(&ctx, &parsed)
                }
                fn issue(
                    ctx: $crate::CallContext,
                    config: String,
                    request: $crate::IssueRequest,
                ) -> Result<$crate::IssuedCertificate, $crate::PluginError> {
                    let parsed = $crate::__private::parse_config::<<$plugin as $crate::CaConnector>::Config>(&config)?;
                    <$plugin as $crate::CaConnector>::issue(&ctx, &parsed, &request)
                }
                fn revoke(
                    ctx: $crate::CallContext,
                    config: String,
                    request: $crate::RevokeRequest,
                ) -> Result<(), $crate::PluginError> {
                    let parsed = $crate::__private::parse_config::<<$plugin as $crate::CaConnector>::Config>(&config)?;
                    <$plugin as $crate::CaConnector>::revoke(&ctx, &parsed, &request)
                }
                fn list_certificates(
                    ctx: $crate::CallContext,
                    config: String,
                    page: $crate::PageRequest,
                ) -> Result<$crate::CertificatePage, $crate::PluginError> {
                    let parsed = $crate::__private::parse_config::<<$plugin as $crate::CaConnector>::Config>(&config)?;
                    <$plugin as $crate::CaConnector>::list_certificates(&ctx, &parsed, &page)
                }
            }
            $crate::bindings::ca_connector::export!(__TrellisExport with_types_in $crate::bindings::ca_connector);
        };
    };
}

/// Export a type implementing [`Integration`] as this component's `trellis:plugin/notifier`.
// Skipped: rustfmt mis-indents the wit-bindgen `export!` call inside the macro body.
#[rustfmt::skip]
#[macro_export]
macro_rules! export_integration {
    ($plugin:ty) => {
        const _: () = {
            struct __TrellisExport;
            impl $crate::bindings::integration::exports::trellis::plugin::notifier::Guest for __TrellisExport {
                fn describe() -> $crate::PluginInfo {
                    <$plugin as $crate::Integration>::describe()
                }
                fn validate_config(config: String) -> Result<(), $crate::PluginError> {
                    let parsed = $crate::__private::parse_config::<<$plugin as $crate::Integration>::Config>(&config)?;
                    <$plugin as $crate::Integration>::validate_config(&parsed)
                }
                fn test(ctx: $crate::CallContext, config: String) -> Result<$crate::TestReport, $crate::PluginError> {
                    let parsed = $crate::__private::parse_config::<<$plugin as $crate::Integration>::Config>(&config)?;
                    <$plugin as $crate::Integration>::test(&ctx, &parsed)
                }
                fn notify(
                    ctx: $crate::CallContext,
                    config: String,
                    event: $crate::Event,
                ) -> Result<$crate::Delivery, $crate::PluginError> {
                    let parsed = $crate::__private::parse_config::<<$plugin as $crate::Integration>::Config>(&config)?;
                    <$plugin as $crate::Integration>::notify(&ctx, &parsed, &event)
                }
            }
            $crate::bindings::integration::export!(__TrellisExport with_types_in $crate::bindings::integration);
        };
    };
}

/// Export a type implementing [`AttestationVerifier`] as this component's `trellis:plugin/verifier`.
// Skipped: rustfmt mis-indents the wit-bindgen `export!` call inside the macro body.
#[rustfmt::skip]
#[macro_export]
macro_rules! export_attestation_verifier {
    ($plugin:ty) => {
        const _: () = {
            struct __TrellisExport;
            impl $crate::bindings::attestation_verifier::exports::trellis::plugin::verifier::Guest
                for __TrellisExport
            {
                fn describe() -> $crate::PluginInfo {
                    <$plugin as $crate::AttestationVerifier>::describe()
                }
                fn validate_config(config: String) -> Result<(), $crate::PluginError> {
                    let parsed = $crate::__private::parse_config::<<$plugin as $crate::AttestationVerifier>::Config>(&config)?;
                    <$plugin as $crate::AttestationVerifier>::validate_config(&parsed)
                }
                fn verify(
                    config: String,
                    request: $crate::VerifyRequest,
                ) -> Result<$crate::Verdict, $crate::PluginError> {
                    let parsed = $crate::__private::parse_config::<<$plugin as $crate::AttestationVerifier>::Config>(&config)?;
                    <$plugin as $crate::AttestationVerifier>::verify(&parsed, &request)
                }
            }
            $crate::bindings::attestation_verifier::export!(__TrellisExport with_types_in $crate::bindings::attestation_verifier);
        };
    };
}

#[doc(hidden)]
pub mod __private {
    pub use wit_bindgen;

    use crate::{ConfigIssue, PluginError};

    /// Parses a configuration document into the plugin's typed config.
    pub fn parse_config<T: serde::de::DeserializeOwned>(config: &str) -> Result<T, PluginError> {
        // An absent configuration is an empty object, so plugins whose fields are all
        // optional need no special case.
        let config = if config.trim().is_empty() { "{}" } else { config };
        serde_json::from_str(config).map_err(|err| {
            PluginError::InvalidConfig(vec![ConfigIssue {
                field: String::new(),
                message: format!("configuration does not match the schema: {err}"),
            }])
        })
    }
}
