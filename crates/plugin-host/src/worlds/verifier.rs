//! The `attestation-verifier` world. Contract 0.2 verifies in two steps (`enroll`, then
//! `verify`); a 0.1 verifier has only `verify`, over a flat evidence record the host builds
//! from the enrolled device, and answers enrollment as not supported.

use trellis_core::plugins::{EnrollmentRequest, EnrollmentVerdict, ReportedError, Verdict, VerifyRequest};
use wasmtime::component::InstancePre;

use super::{answer, export_call, v0_1, v0_2, Call, Ctx, Described};
use crate::bindings;
use crate::call::CallState;

/// A verifier component, by the contract version it was built against.
pub(crate) enum VerifierPre {
    V0_1(bindings::v0_1::verifier_world::AttestationVerifierPre<CallState>),
    V0_2(bindings::v0_2::verifier_world::AttestationVerifierPre<CallState>),
}

impl VerifierPre {
    pub(crate) fn new(version: &semver::Version, pre: InstancePre<CallState>) -> wasmtime::Result<VerifierPre> {
        Ok(if version.minor >= 2 {
            VerifierPre::V0_2(bindings::v0_2::verifier_world::AttestationVerifierPre::new(pre)?)
        } else {
            VerifierPre::V0_1(bindings::v0_1::verifier_world::AttestationVerifierPre::new(pre)?)
        })
    }

    pub(crate) fn describe(&self) -> Call<Described> {
        match self {
            VerifierPre::V0_1(pre) => export_call!(pre, trellis_plugin_verifier, |api, store| {
                Ok(Ok(v0_1::described(api.call_describe(&mut *store).await?)))
            }),
            VerifierPre::V0_2(pre) => export_call!(pre, trellis_plugin_verifier, |api, store| {
                Ok(Ok(v0_2::described(api.call_describe(&mut *store).await?)))
            }),
        }
    }

    pub(crate) fn validate_config(&self, config: String) -> Call<()> {
        match self {
            VerifierPre::V0_1(pre) => export_call!(pre, trellis_plugin_verifier, |api, store| {
                Ok(api.call_validate_config(&mut *store, &config).await?.map_err(v0_1::reported))
            }),
            VerifierPre::V0_2(pre) => export_call!(pre, trellis_plugin_verifier, |api, store| {
                Ok(api.call_validate_config(&mut *store, &config).await?.map_err(v0_2::reported))
            }),
        }
    }

    pub(crate) fn enroll(&self, ctx: &Ctx<'_>, request: &EnrollmentRequest) -> Call<EnrollmentVerdict> {
        match self {
            VerifierPre::V0_1(_) => answer(Err(ReportedError::NotSupported {
                message: "AK enrollment needs a verifier built against trellis:plugin@0.2".into(),
            })),
            VerifierPre::V0_2(pre) => {
                let (context, config, request) = (v0_2::context(ctx), ctx.config(), v0_2::enrollment_request(request));
                export_call!(pre, trellis_plugin_verifier, |api, store| {
                    let result = api.call_enroll(&mut *store, &context, &config, &request).await?;
                    Ok(result.map(v0_2::enrollment_verdict).map_err(v0_2::reported))
                })
            }
        }
    }

    pub(crate) fn verify(&self, ctx: &Ctx<'_>, request: &VerifyRequest) -> Call<Verdict> {
        let config = ctx.config();
        match self {
            VerifierPre::V0_1(pre) => {
                let request = v0_1::verify_request(request);
                export_call!(pre, trellis_plugin_verifier, |api, store| {
                    let result = api.call_verify(&mut *store, &config, &request).await?;
                    Ok(result.map(v0_1::verdict).map_err(v0_1::reported))
                })
            }
            VerifierPre::V0_2(pre) => {
                let (context, request) = (v0_2::context(ctx), v0_2::verify_request(request));
                export_call!(pre, trellis_plugin_verifier, |api, store| {
                    let result = api.call_verify(&mut *store, &context, &config, &request).await?;
                    Ok(result.map(v0_2::verdict).map_err(v0_2::reported))
                })
            }
        }
    }
}
