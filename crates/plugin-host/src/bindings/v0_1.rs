//! wasmtime bindings for `trellis:plugin@0.1.0` (`wit/`), one module per world. Frozen: 0.1
//! components keep loading against exactly these.
//! The shared interfaces (`types`, `logging`, `state`) are generated once, in `integration`,
//! and reused by the other worlds so one set of host implementations serves all three.

#![allow(clippy::all, missing_docs)]

pub(crate) mod integration_world {
    wasmtime::component::bindgen!({
        path: "../../wit",
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

pub(crate) mod ca_world {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "ca-connector",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
            "trellis:plugin/types": crate::bindings::v0_1::integration_world::trellis::plugin::types,
            "trellis:plugin/logging": crate::bindings::v0_1::integration_world::trellis::plugin::logging,
            "trellis:plugin/state": crate::bindings::v0_1::integration_world::trellis::plugin::state,
        },
    });
}

pub(crate) mod verifier_world {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "attestation-verifier",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "trellis:plugin/types": crate::bindings::v0_1::integration_world::trellis::plugin::types,
            "trellis:plugin/logging": crate::bindings::v0_1::integration_world::trellis::plugin::logging,
            "trellis:plugin/state": crate::bindings::v0_1::integration_world::trellis::plugin::state,
        },
    });
}

pub(crate) use ca_world::exports::trellis::plugin::connector as ca;
pub(crate) use integration_world::exports::trellis::plugin::notifier as integration;
pub(crate) use integration_world::trellis::plugin::logging;
pub(crate) use integration_world::trellis::plugin::state;
pub(crate) use integration_world::trellis::plugin::types as wit_types;
pub(crate) use verifier_world::exports::trellis::plugin::verifier;
