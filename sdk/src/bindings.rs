//! Raw wit-bindgen bindings of `trellis:plugin@0.2.0` (the WIT embedded in this crate,
//! `wit/`). Plugin authors never use them; they are public only because the export macros
//! expand inside plugin crates.
#![allow(unsafe_code, missing_docs, clippy::all)]
#![doc(hidden)]

/// The host imports and the shared types, generated once and reused by both worlds.
pub mod imports {
    wit_bindgen::generate!({
        path: "wit",
        world: "trellis:plugin/host-imports@0.2.0",
        generate_all,
        runtime_path: "::trellis_plugin_sdk::__private::wit_bindgen::rt",
        type_section_suffix: "trellis-imports",
    });
}

pub mod ca_connector {
    wit_bindgen::generate!({
        path: "wit",
        world: "trellis:plugin/ca-connector@0.2.0",
        with: {
            "trellis:plugin/types@0.2.0": crate::bindings::imports::trellis::plugin::types,
            "trellis:plugin/logging@0.2.0": crate::bindings::imports::trellis::plugin::logging,
            "trellis:plugin/state@0.2.0": crate::bindings::imports::trellis::plugin::state,
            "trellis:plugin/keystore@0.2.0": crate::bindings::imports::trellis::plugin::keystore,
            "trellis:plugin/challenge-solver@0.2.0": crate::bindings::imports::trellis::plugin::challenge_solver,
            "trellis:plugin/pki-core@0.2.0": crate::bindings::imports::trellis::plugin::pki_core,
            "wasi:http/types@0.2.12": crate::bindings::imports::wasi::http::types,
            "wasi:http/outgoing-handler@0.2.12": crate::bindings::imports::wasi::http::outgoing_handler,
            "wasi:io/poll@0.2.12": crate::bindings::imports::wasi::io::poll,
            "wasi:io/error@0.2.12": crate::bindings::imports::wasi::io::error,
            "wasi:io/streams@0.2.12": crate::bindings::imports::wasi::io::streams,
            "wasi:clocks/monotonic-clock@0.2.12": crate::bindings::imports::wasi::clocks::monotonic_clock,
        },
        pub_export_macro: true,
        default_bindings_module: "::trellis_plugin_sdk::bindings::ca_connector",
        runtime_path: "::trellis_plugin_sdk::__private::wit_bindgen::rt",
        type_section_suffix: "trellis-ca-connector",
    });
}

pub mod issuance_policy {
    wit_bindgen::generate!({
        path: "wit",
        world: "trellis:plugin/issuance-policy@0.2.0",
        with: {
            "trellis:plugin/types@0.2.0": crate::bindings::imports::trellis::plugin::types,
            "trellis:plugin/logging@0.2.0": crate::bindings::imports::trellis::plugin::logging,
        },
        pub_export_macro: true,
        default_bindings_module: "::trellis_plugin_sdk::bindings::issuance_policy",
        runtime_path: "::trellis_plugin_sdk::__private::wit_bindgen::rt",
        type_section_suffix: "trellis-issuance-policy",
    });
}

pub mod attestation_verifier {
    wit_bindgen::generate!({
        path: "wit",
        world: "trellis:plugin/attestation-verifier@0.2.0",
        with: {
            "trellis:plugin/types@0.2.0": crate::bindings::imports::trellis::plugin::types,
            "trellis:plugin/logging@0.2.0": crate::bindings::imports::trellis::plugin::logging,
        },
        pub_export_macro: true,
        default_bindings_module: "::trellis_plugin_sdk::bindings::attestation_verifier",
        runtime_path: "::trellis_plugin_sdk::__private::wit_bindgen::rt",
        type_section_suffix: "trellis-attestation-verifier",
    });
}

pub mod integration {
    wit_bindgen::generate!({
        path: "wit",
        world: "trellis:plugin/integration@0.2.0",
        with: {
            "trellis:plugin/types@0.2.0": crate::bindings::imports::trellis::plugin::types,
            "trellis:plugin/logging@0.2.0": crate::bindings::imports::trellis::plugin::logging,
            "trellis:plugin/state@0.2.0": crate::bindings::imports::trellis::plugin::state,
            "wasi:http/types@0.2.12": crate::bindings::imports::wasi::http::types,
            "wasi:http/outgoing-handler@0.2.12": crate::bindings::imports::wasi::http::outgoing_handler,
            "wasi:io/poll@0.2.12": crate::bindings::imports::wasi::io::poll,
            "wasi:io/error@0.2.12": crate::bindings::imports::wasi::io::error,
            "wasi:io/streams@0.2.12": crate::bindings::imports::wasi::io::streams,
            "wasi:clocks/monotonic-clock@0.2.12": crate::bindings::imports::wasi::clocks::monotonic_clock,
        },
        pub_export_macro: true,
        default_bindings_module: "::trellis_plugin_sdk::bindings::integration",
        runtime_path: "::trellis_plugin_sdk::__private::wit_bindgen::rt",
        type_section_suffix: "trellis-integration",
    });
}
