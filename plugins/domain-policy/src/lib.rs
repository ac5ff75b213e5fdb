//! First-party issuance policy `trellis.domain-policy` (serves policy type `domain-policy`,
//! contract 0.2 `issuance-policy`, on the SDK): which DNS names and IP addresses a certificate
//! may carry, whether wildcards are allowed, which key algorithms and RSA sizes, the longest
//! validity (longer requests are shortened, not denied) and which names need a second
//! person's approval. Pure: no HTTP, no state. See README.md for the configuration.
//!
//! A request is denied with one reason per violation (every violation, not the first); a
//! request without violations whose names match an approval pattern is held for approval;
//! any other is allowed, its validity capped. A configuration the policy cannot read fails
//! the call (`invalid-config`), and the host counts a failing policy as a denial: a typo never
//! allows everything.

#![forbid(unsafe_code)]

mod config;
mod decide;
mod net;

use trellis_plugin_sdk::policy::{Decision, EvaluationRequest, IssuancePolicy};
use trellis_plugin_sdk::prelude::*;

pub use config::Config;
use config::Rules;
pub use decide::codes;

/// The plugin.
pub struct DomainPolicy;

impl IssuancePolicy for DomainPolicy {
    type Config = Config;

    fn describe() -> PluginInfo {
        PluginInfo::issuance_policy(
            "trellis.domain-policy",
            env!("CARGO_PKG_VERSION"),
            "Domain policy",
            &["domain-policy"],
        )
        .with_description(
            "Allowed DNS suffixes and IP ranges, wildcards, key algorithms and RSA sizes, a validity cap \
                 (longer requests are shortened) and name patterns that need a second person's approval.",
        )
    }

    fn validate_config(config: &Config) -> Result<(), PluginError> {
        Rules::compile(config).map(|_| ())
    }

    fn evaluate(_ctx: &CallContext, config: &Config, request: &EvaluationRequest) -> Result<Decision, PluginError> {
        // The binding's configuration was validated when it was saved; compiling it again is
        // cheap and keeps a configuration that slipped past validation from allowing anything.
        Ok(Rules::compile(config)?.decide(request))
    }
}

trellis_plugin_sdk::export_issuance_policy!(DomainPolicy);
