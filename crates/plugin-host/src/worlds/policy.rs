//! The `issuance-policy` world (contract 0.2 on; 0.1 has no policies): a pure decision about
//! one issuance.

use trellis_core::plugins::{Decision, EvaluationRequest};
use wasmtime::component::InstancePre;

use super::{export_call, v0_2, Call, Ctx, Described};
use crate::bindings;
use crate::call::CallState;

/// A policy component.
pub(crate) struct PolicyPre(bindings::v0_2::policy_world::IssuancePolicyPre<CallState>);

impl PolicyPre {
    pub(crate) fn new(version: &semver::Version, pre: InstancePre<CallState>) -> wasmtime::Result<PolicyPre> {
        if version.major == 0 && version.minor < 2 {
            return Err(wasmtime::Error::msg("issuance policies exist from trellis:plugin@0.2"));
        }
        Ok(PolicyPre(bindings::v0_2::policy_world::IssuancePolicyPre::new(pre)?))
    }

    pub(crate) fn describe(&self) -> Call<Described> {
        export_call!(self.0, trellis_plugin_policy, |api, store| {
            Ok(Ok(v0_2::described(api.call_describe(&mut *store).await?)))
        })
    }

    pub(crate) fn validate_config(&self, config: String) -> Call<()> {
        export_call!(self.0, trellis_plugin_policy, |api, store| {
            Ok(api.call_validate_config(&mut *store, &config).await?.map_err(v0_2::reported))
        })
    }

    pub(crate) fn evaluate(&self, ctx: &Ctx<'_>, request: &EvaluationRequest) -> Call<Decision> {
        let (context, config, request) = (v0_2::context(ctx), ctx.config(), v0_2::evaluation_request(request));
        export_call!(self.0, trellis_plugin_policy, |api, store| {
            let result = api.call_evaluate(&mut *store, &context, &config, &request).await?;
            Ok(result.map(v0_2::decision).map_err(v0_2::reported))
        })
    }
}
