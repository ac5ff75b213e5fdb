//! The `attestation-verifier` world, 0.1 only: the two-step 0.2 verifier comes with the
//! attestation issue, and 0.2 verifier components are refused at install until then.

use trellis_core::plugins::{Verdict, VerifyRequest};
use wasmtime::component::InstancePre;

use super::{export_call, v0_1, Call, Described};
use crate::bindings;
use crate::call::CallState;

/// A verifier component (contract 0.1).
pub(crate) enum VerifierPre {
    V0_1(bindings::v0_1::verifier_world::AttestationVerifierPre<CallState>),
}

impl VerifierPre {
    pub(crate) fn new(version: &semver::Version, pre: InstancePre<CallState>) -> wasmtime::Result<VerifierPre> {
        if version.minor >= 2 {
            return Err(wasmtime::Error::msg(
                "the 0.2 attestation-verifier world is not served by this host yet; build against 0.1",
            ));
        }
        Ok(VerifierPre::V0_1(bindings::v0_1::verifier_world::AttestationVerifierPre::new(pre)?))
    }

    pub(crate) fn describe(&self) -> Call<Described> {
        let VerifierPre::V0_1(pre) = self;
        export_call!(pre, trellis_plugin_verifier, |api, store| {
            Ok(Ok(v0_1::described(api.call_describe(&mut *store).await?)))
        })
    }

    pub(crate) fn validate_config(&self, config: String) -> Call<()> {
        let VerifierPre::V0_1(pre) = self;
        export_call!(pre, trellis_plugin_verifier, |api, store| {
            Ok(api.call_validate_config(&mut *store, &config).await?.map_err(v0_1::reported))
        })
    }

    pub(crate) fn verify(&self, config: String, request: &VerifyRequest) -> Call<Verdict> {
        let VerifierPre::V0_1(pre) = self;
        let request = v0_1::verify_request(request);
        export_call!(pre, trellis_plugin_verifier, |api, store| {
            let result = api.call_verify(&mut *store, &config, &request).await?;
            Ok(result.map(v0_1::verdict).map_err(v0_1::reported))
        })
    }
}
