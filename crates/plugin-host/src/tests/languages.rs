//! The per-kind limits hold whatever the guest's language: the same issuance policy built from
//! Rust, Python (componentize-py) and JavaScript (jco), each run under the policy kind's default
//! limits, then under a memory limit just below
//! what its call needed, which refuses it (at install, whose `describe` call has the same limits,
//! or at the call, with the memory-limit code).
//! (The figures per language are `polyglot-bench`'s; here only that the limits apply.)

use serde_json::json;

use crate::tests::{built_plugins_dir, install, plugin_bytes, runtime};
use crate::{
    Activation, CallTarget, Decision, EvaluationRequest, IssuanceSource, KindLimits, PluginError, PluginHost,
    PluginKind, PluginRef, Requester, RequesterKind, RuntimeConfig, SubjectAltName, SubjectKey,
};

/// With a compiled-code cache kept in the build tree: CPython's component takes tens of seconds
/// to compile, once per build tree instead of once per runtime.
fn config_with(limits: KindLimits) -> RuntimeConfig {
    let mut config = RuntimeConfig::without_cache();
    config.cache_dir = built_plugins_dir().parent().map(|target| target.join("plugin-cache-host-tests"));
    config.cache_key = Some(crate::ArtefactKey::new([7; 32]));
    config.limits = limits;
    config.egress.use_system_roots = false;
    config
}

fn evaluation(name: &str) -> EvaluationRequest {
    EvaluationRequest {
        ca_type: "internal".into(),
        ca_id: "ca_1".into(),
        template: None,
        subject: crate::CertificateProfile::default().subject,
        subject_alt_names: vec![SubjectAltName::Dns(name.into())],
        key: SubjectKey {
            algorithm: "ecdsa".into(),
            size_bits: 256,
            curve: Some("P-256".into()),
            server_generated: false,
        },
        validity_days: 30,
        requester: Requester { kind: RequesterKind::User, id: "usr_1".into(), display_name: None },
        source: IssuanceSource::Api,
    }
}

/// One call of the component's kind that needs no peer: a policy decision, or (for the other
/// kinds) checking a configuration, which instantiates the guest and runs its code.
async fn call_once(runtime: &crate::PluginRuntime, kind: PluginKind, target: &CallTarget) -> Result<(), PluginError> {
    match kind {
        PluginKind::IssuancePolicy => {
            let decision = runtime.policy_evaluate(target, &evaluation("www.corp.test")).await?;
            assert_eq!(decision, Decision::Allow { max_validity_days: None }, "a name under the allowed suffix");
            Ok(())
        }
        _ => runtime.validate_config(target, kind).await.map(|_| ()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_language_runs_within_its_kinds_limits_and_is_stopped_past_them() {
    let cases = [
        ("domain-policy", json!({ "allowedDnsSuffixes": [".corp.test"] })),
        ("py-domain-policy", json!({ "allowedDnsSuffixes": [".corp.test"] })),
        ("js-domain-policy", json!({ "allowedDnsSuffixes": [".corp.test"] })),
    ];
    for (name, config) in cases {
        let defaults = runtime(config_with(KindLimits::default()));
        let installed = install(&defaults, name).await;
        let kind = installed.info.kind;
        let target =
            CallTarget::new("ws_test", PluginRef::Id(installed.info.id.clone()), config.clone()).for_record("rec_1");
        call_once(&defaults, kind, &target).await.unwrap_or_else(|err| panic!("{name} under the defaults: {err}"));
        let used = defaults.call_usage(&installed.info.id).expect("the call's usage is recorded");
        let limit = KindLimits::default().for_kind(kind).memory_bytes as u64;
        assert!(
            used.memory_peak_bytes > 0 && used.memory_peak_bytes <= limit,
            "{name}: peak {} of a {limit}-byte limit",
            used.memory_peak_bytes
        );

        // A limit one page short of what the call needed: summed over all the component's
        // memories, so no module gets the limit to itself.
        let mut tight = KindLimits::default();
        let mut limits = tight.for_kind(kind);
        limits.memory_bytes = (used.memory_peak_bytes - 65_536) as usize;
        tight = match kind {
            PluginKind::IssuancePolicy => KindLimits { issuance_policy: limits, ..tight },
            PluginKind::Integration => KindLimits { integration: limits, ..tight },
            PluginKind::CaConnector => KindLimits { ca_connector: limits, ..tight },
            PluginKind::AttestationVerifier => KindLimits { attestation_verifier: limits, ..tight },
        };
        let tight = runtime(config_with(tight));
        match tight.install(&plugin_bytes(name), Activation::IfNewer).await {
            // Installing calls `describe`, under the same limits: a guest whose start alone
            // needs more is refused there.
            Err(err) => assert!(err.to_string().contains("memory limit"), "{name}: {err} ({})", err.code()),
            Ok(_) => {
                let err = call_once(&tight, kind, &target).await.expect_err("past the limit");
                assert_eq!(err.code(), "plugin.memory_limit_exceeded", "{name}: {err}");
            }
        }
        // Only that call failed: the runtime still serves other plugins.
        assert_eq!(tight.calls_in_flight(), 0, "{name}");
    }
}
