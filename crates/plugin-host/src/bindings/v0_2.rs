//! wasmtime bindings for `trellis:plugin@0.2.0` (`wit/v0.2`). The connector world imports
//! every host interface, so its bindings generate them all; the other worlds reuse them, so one
//! set of host implementations (`host_v0_2`) serves all four.

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

pub(crate) mod policy_world {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.2",
        world: "issuance-policy",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "trellis:plugin/types": crate::bindings::v0_2::ca_world::trellis::plugin::types,
            "trellis:plugin/logging": crate::bindings::v0_2::ca_world::trellis::plugin::logging,
        },
    });
}

pub(crate) mod verifier_world {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.2",
        world: "attestation-verifier",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "trellis:plugin/types": crate::bindings::v0_2::ca_world::trellis::plugin::types,
            "trellis:plugin/logging": crate::bindings::v0_2::ca_world::trellis::plugin::logging,
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
pub(crate) use policy_world::exports::trellis::plugin::policy;
pub(crate) use verifier_world::exports::trellis::plugin::verifier;
