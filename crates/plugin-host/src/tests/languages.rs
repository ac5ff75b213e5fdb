//! The per-kind limits hold whatever the guest's language. Each world's call, in every language
//! this repository has a guest of (the same issuance policy from Rust, Python (componentize-py)
//! and JavaScript (jco, QuickJS); a notifier from Rust (Slack) and Python; a CA connector from
//! Rust (Vault) and JavaScript (componentize-js, SpiderMonkey)), runs under its kind's default
//! limits, then under a memory limit one page below what its call needed, which refuses it (at
//! install, whose `describe` call has the same limits, or at the call, with the memory-limit
//! code). A Python and a JavaScript guest that never return are stopped at their kind's CPU
//! budget, and the runtime keeps serving.
//! (The figures per language are `polyglot-bench`'s; here only that the limits apply.)

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

use crate::tests::slack::{https_responder, Reply};
use crate::tests::worlds::issue_request;
use crate::tests::{built_plugins_dir, event, install, plugin_bytes, runtime};
use crate::{
    Activation, CallTarget, Decision, EvaluationRequest, IssuanceSource, IssueOutcome, KindLimits, PluginError,
    PluginHost, PluginKind, PluginRef, PluginRuntime, Requester, RequesterKind, RuntimeConfig, SubjectAltName,
    SubjectKey,
};

/// With the build tree's compiled-code cache, the one the binary's servers share: CPython's
/// component takes tens of seconds to compile, once per build tree instead of once per runtime,
/// and the plugins `scripts/warm-plugin-cache.sh` compiled before the suite are not compiled
/// again here. `peer_roots`: the PEM bundle of the local HTTPS peer the notifiers and
/// connectors reach (private addresses allowed for it).
fn config_with(limits: KindLimits, peer_roots: Option<&Path>) -> RuntimeConfig {
    let mut config = RuntimeConfig::without_cache();
    let cache = built_plugins_dir().parent().map(|target| target.join("plugin-cache"));
    let key = cache.as_deref().map(|dir| crate::ArtefactKey::from_key_file(dir, &trellis_core::clock::OsEntropy));
    config.cache_key = match key {
        Some(Ok(key)) => Some(key),
        Some(Err(err)) => panic!("the build tree's plugin cache key: {err}"),
        None => None,
    };
    config.cache_dir = cache;
    config.limits = limits;
    config.egress.use_system_roots = false;
    if let Some(bundle) = peer_roots {
        config.egress.allow_private_networks = true;
        config.egress.ca_bundle = Some(bundle.to_owned());
    }
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

/// The call each case makes: its world's everyday call.
#[derive(Clone, Copy)]
enum WorldCall {
    /// A policy decision (`evaluate`).
    Evaluate,
    /// A lifecycle event delivered to the peer (`notify`).
    Notify,
    /// A certificate issued by the peer (`issue`).
    Issue,
}

struct Case {
    /// The component's file stem in `target/plugins`.
    name: &'static str,
    config: Value,
    call: WorldCall,
}

async fn call_once(runtime: &PluginRuntime, call: WorldCall, target: &CallTarget) -> Result<(), PluginError> {
    match call {
        WorldCall::Evaluate => {
            let decision = runtime.policy_evaluate(target, &evaluation("www.corp.test")).await?;
            assert_eq!(decision, Decision::Allow { max_validity_days: None }, "a name under the allowed suffix");
        }
        WorldCall::Notify => {
            let delivery = runtime.notify(target, &event("certificate.created")).await?;
            assert!(delivery.status.is_some_and(|s| (200..300).contains(&s)), "{delivery:?}");
        }
        WorldCall::Issue => match runtime.ca_issue(target, &issue_request(&["a.corp.test"], 30)).await? {
            IssueOutcome::Issued(_) => {}
            other => panic!("expected a certificate, got {other:?}"),
        },
    }
    Ok(())
}

fn with_kind_limits(limits: KindLimits, kind: PluginKind, these: crate::CallLimits) -> KindLimits {
    match kind {
        PluginKind::IssuancePolicy => KindLimits { issuance_policy: these, ..limits },
        PluginKind::Integration => KindLimits { integration: these, ..limits },
        PluginKind::CaConnector => KindLimits { ca_connector: these, ..limits },
        PluginKind::AttestationVerifier => KindLimits { attestation_verifier: these, ..limits },
    }
}

/// Runs `case` under its kind's default limits (its call's usage within them), then with a
/// memory limit one 64 KiB page below the most a call needed: refused at install or at the call.
async fn runs_within_its_kinds_limits_and_is_stopped_past_them(case: &Case, peer: Option<(&str, &Path)>) {
    let name = case.name;
    let defaults = runtime(config_with(KindLimits::default(), peer.map(|(_, roots)| roots)));
    let installed = install(&defaults, name).await;
    let kind = installed.info.kind;
    let mut target =
        CallTarget::new("ws_test", PluginRef::Id(installed.info.id.clone()), case.config.clone()).for_record("rec_1");
    if let Some((url, _)) = peer {
        // The record's URL: the connectors' CA endpoint; reachable, as the host allows a record's own hosts.
        target.context.endpoint = Some(url.to_owned());
        target = target.with_record_hosts([url.to_owned()]);
    }
    call_once(&defaults, case.call, &target).await.unwrap_or_else(|err| panic!("{name} under the defaults: {err}"));
    let used = defaults.call_usage(&installed.info.id).expect("the call's usage is recorded");
    let limits = KindLimits::default().for_kind(kind);
    assert!(
        used.memory_peak_bytes > 0 && used.memory_peak_bytes <= limits.memory_bytes as u64,
        "{name}: peak {} of a {}-byte limit",
        used.memory_peak_bytes,
        limits.memory_bytes
    );
    assert!(used.cpu_ms <= limits.cpu_time.as_millis() as u64, "{name}: {} ms of CPU charged", used.cpu_ms);

    // A limit one page short of what the call needed: summed over all the component's
    // memories, so no module gets the limit to itself.
    let tight_limits = crate::CallLimits { memory_bytes: (used.memory_peak_bytes - 65_536) as usize, ..limits };
    let tight = with_kind_limits(KindLimits::default(), kind, tight_limits);
    let tight = runtime(config_with(tight, peer.map(|(_, roots)| roots)));
    match tight.install(&plugin_bytes(name), Activation::IfNewer).await {
        // Installing calls `describe`, under the same limits: a guest whose start alone
        // needs more is refused there.
        Err(err) => assert!(err.to_string().contains("memory limit"), "{name}: {err} ({})", err.code()),
        Ok(_) => {
            let err = call_once(&tight, case.call, &target).await.expect_err("past the limit");
            assert_eq!(err.code(), "plugin.memory_limit_exceeded", "{name}: {err}");
        }
    }
    // Only that call failed: the runtime still serves other plugins.
    assert_eq!(tight.calls_in_flight(), 0, "{name}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_language_runs_within_its_kinds_limits_and_is_stopped_past_them() {
    let config = json!({ "allowedDnsSuffixes": [".corp.test"] });
    for name in ["domain-policy", "py-domain-policy", "js-domain-policy"] {
        let case = Case { name, config: config.clone(), call: WorldCall::Evaluate };
        runs_within_its_kinds_limits_and_is_stopped_past_them(&case, None).await;
    }
}

/// A fixed certificate the peer hands out: the connectors pass it on (checking it against the
/// CSR is the issuance path's work, not the sandbox's).
fn peer_certificate() -> String {
    let certified = rcgen::generate_simple_self_signed(vec!["a.corp.test".into()]).expect("certificate");
    certified.cert.pem()
}

/// The notifiers' receiver and the connectors' CAs in one HTTPS peer: a POST under `/hooks/` or
/// `/services/` is a delivered event (202 with a JSON id); `POST /v1/sign` is the REST CA that
/// `plugins-js/rest-ca` speaks; `POST /v1/pki/sign/web` is Vault's PKI `sign` for the role `web`.
fn peer_answer(certificate: &str, head: &str) -> Reply {
    let json = |status_line, body: Value| Reply {
        status_line,
        content_type: Some("application/json"),
        body: body.to_string(),
    };
    let line = head.lines().next().unwrap_or_default();
    if line.starts_with("POST /hooks/") || line.starts_with("POST /services/") {
        json("HTTP/1.1 202 Accepted", json!({ "id": "msg-1" }))
    } else if line.starts_with("POST /v1/sign ") {
        json("HTTP/1.1 201 Created", json!({ "certificate": certificate, "chain": [certificate], "id": "cert-1" }))
    } else if line.starts_with("POST /v1/pki/sign/web ") {
        json(
            "HTTP/1.1 200 OK",
            json!({ "data": {
                "certificate": certificate, "issuing_ca": certificate, "ca_chain": [certificate],
                "serial_number": "1a:2b:3c",
            } }),
        )
    } else {
        json("HTTP/1.1 404 Not Found", json!({ "errors": ["no such path"] }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifiers_and_connectors_of_every_language_run_within_their_kinds_limits_and_are_stopped_past_them() {
    let certificate = peer_certificate();
    let (port, peer_pem, _received) =
        https_responder(Arc::new(move |request| peer_answer(&certificate, &request.head))).await;
    let roots = tempfile::NamedTempFile::new().expect("bundle");
    std::fs::write(roots.path(), peer_pem).expect("write bundle");
    let hooks = format!("https://localhost:{port}/hooks/trellis");
    let slack = format!("https://localhost:{port}/services/T000/B000/XXXX");
    let cases = [
        // Rust (Slack) and Python notifiers: `notify` POSTs the event to the peer.
        (Case { name: "slack", config: json!({ "webhookUrl": slack }), call: WorldCall::Notify }, slack.clone()),
        (
            Case {
                name: "py-webhook-notifier",
                config: json!({ "url": hooks, "token": "t0ken" }),
                call: WorldCall::Notify,
            },
            hooks.clone(),
        ),
        // Rust (Vault) and JavaScript (SpiderMonkey) connectors: `issue` signs at the peer.
        (
            Case { name: "vault", config: json!({ "token": "s.t0ken", "role": "web" }), call: WorldCall::Issue },
            format!("https://localhost:{port}"),
        ),
        (
            Case { name: "js-rest-ca", config: json!({ "apiKey": "k3y" }), call: WorldCall::Issue },
            format!("https://localhost:{port}/v1"),
        ),
    ];
    for (case, url) in &cases {
        runs_within_its_kinds_limits_and_is_stopped_past_them(case, Some((url, roots.path()))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_javascript_guests_in_an_endless_loop_are_stopped_at_their_kinds_cpu_budget() {
    let runtime = runtime(config_with(KindLimits::default(), None));
    let other = install(&runtime, "domain-policy").await;
    let other =
        CallTarget::new("ws_test", PluginRef::Id(other.info.id), json!({ "allowedDnsSuffixes": [".corp.test"] }));
    let tick = runtime.config().epoch_tick;
    // A Python policy (CPython's interpreter loop) and a JavaScript integration (SpiderMonkey's).
    for (name, call) in [("py-fixture-spin-loop", WorldCall::Evaluate), ("js-fixture-spin-loop", WorldCall::Notify)] {
        let installed = install(&runtime, name).await;
        let limits = KindLimits::default().for_kind(installed.info.kind);
        let target = CallTarget::new("ws_test", PluginRef::Id(installed.info.id.clone()), json!({ "spin": true }))
            .for_record("rec_1");
        let started = Instant::now();
        let err = call_once(&runtime, call, &target).await.expect_err("an endless loop cannot answer");
        let took = started.elapsed();
        assert_eq!(err.code(), "plugin.cpu_time_exceeded", "{name}: {err}");
        assert_eq!(err.api_code(), "PLUGIN_TIMEOUT", "{name}: {err}");
        let budget_ms = limits.cpu_time.as_millis();
        assert!(err.to_string().contains(&format!("{budget_ms} ms")), "{name}: the message names the budget: {err}");
        // Stopped by the CPU budget (counted in ticks while its code runs), well before the wall clock.
        assert!(took + tick >= limits.cpu_time && took < limits.wall_time, "{name}: stopped after {took:?}");
        let used = runtime.call_usage(&installed.info.id).expect("usage");
        assert!(used.cpu_ms > budget_ms as u64, "{name}: charged {} ms", used.cpu_ms);

        // The runtime stays healthy: nothing in flight, another plugin's next call and the same
        // plugin's next (finite) call answer.
        assert_eq!(runtime.calls_in_flight(), 0, "{name}");
        let decision = runtime.policy_evaluate(&other, &evaluation("www.corp.test")).await.expect("another plugin");
        assert_eq!(decision, Decision::Allow { max_validity_days: None });
        let calm = CallTarget::new("ws_test", PluginRef::Id(installed.info.id), json!({ "spin": false }));
        match call {
            WorldCall::Evaluate => {
                runtime
                    .policy_evaluate(&calm, &evaluation("www.corp.test"))
                    .await
                    .expect("the same plugin, not spinning");
            }
            _ => {
                runtime.notify(&calm, &event("certificate.created")).await.expect("the same plugin, not spinning");
            }
        }
    }
}
