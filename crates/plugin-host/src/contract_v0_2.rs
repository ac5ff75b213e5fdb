//! `trellis:plugin@0.2.0` (wit/v0.2) bound by the host's bindgen, so the contract is known to
//! parse and to be bindable before the host serves it. The runtime does not use these
//! bindings yet: components must target 0.1 until it does (see wit/v0.2/README.md).

#![allow(clippy::all, missing_docs, dead_code)]

mod ca_connector {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.2",
        world: "ca-connector",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

mod integration {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.2",
        world: "integration",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

mod issuance_policy {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.2",
        world: "issuance-policy",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

mod attestation_verifier {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.2",
        world: "attestation-verifier",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

/// The types the 0.2 worlds generate, spot-checked: flags, the full RFC 5280 reason set, the
/// pending issuance outcome and the policy decision.
#[test]
fn the_0_2_contract_binds() {
    use ca_connector::exports::trellis::plugin::connector::{IssueOutcome, PendingIssue};
    use ca_connector::trellis::plugin::types::{Capabilities, RevocationReason};
    let declared = Capabilities::ISSUE | Capabilities::RENEW;
    assert!(declared.contains(Capabilities::RENEW) && !declared.contains(Capabilities::REVOKE));
    assert!(matches!(RevocationReason::AaCompromise, RevocationReason::AaCompromise));
    let pending = IssueOutcome::Pending(PendingIssue {
        reference: "order/1".into(),
        retry_after_seconds: Some(3),
        status_message: "validating".into(),
    });
    assert!(matches!(pending, IssueOutcome::Pending(_)));
    let decision = issuance_policy::exports::trellis::plugin::policy::Decision::Allow(Some(90));
    assert!(matches!(decision, issuance_policy::exports::trellis::plugin::policy::Decision::Allow(Some(90))));
}
