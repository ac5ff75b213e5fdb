//! wasmtime bindings for `trellis:plugin@0.2.0` (`wit/v0.2`). The connector world imports
//! every host interface, so its bindings generate them all; the integration world reuses
//! them, so one set of host implementations (`host_v0_2`) serves both.
//!
//! Not served yet: the `issuance-policy` world (issue 8 brings its domain) and the two-step
//! `attestation-verifier` (issue 10); components exporting them are refused at install with
//! `plugin.unknown_world`.

pub(crate) mod ca_world {
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

pub(crate) mod integration_world {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.2",
        world: "integration",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
            "trellis:plugin/types": crate::bindings::v0_2::ca_world::trellis::plugin::types,
            "trellis:plugin/logging": crate::bindings::v0_2::ca_world::trellis::plugin::logging,
            "trellis:plugin/state": crate::bindings::v0_2::ca_world::trellis::plugin::state,
        },
    });
}

pub(crate) use ca_world::exports::trellis::plugin::connector as ca;
pub(crate) use ca_world::trellis::plugin::challenge_solver;
pub(crate) use ca_world::trellis::plugin::keystore;
pub(crate) use ca_world::trellis::plugin::logging;
pub(crate) use ca_world::trellis::plugin::pki_core;
pub(crate) use ca_world::trellis::plugin::state;
pub(crate) use ca_world::trellis::plugin::types as wit_types;
pub(crate) use integration_world::exports::trellis::plugin::notifier as integration;

/// The worlds the host does not serve yet, bound here so the contract is known to parse and
/// bind before they are.
#[cfg(test)]
mod unserved {
    #![allow(dead_code)]

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

    #[test]
    fn the_unserved_0_2_worlds_bind() {
        use issuance_policy::exports::trellis::plugin::policy::Decision;
        assert!(matches!(Decision::Allow(Some(90)), Decision::Allow(Some(90))));
    }
}
