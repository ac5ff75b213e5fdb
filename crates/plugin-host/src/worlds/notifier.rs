//! The `integration` world (export `notifier`): typed calls for 0.1 and 0.2 components.

use trellis_core::plugins::{Delivery, Event, TestReport};
use wasmtime::component::InstancePre;

use super::{export_call, v0_1, v0_2, Call, Ctx, Described};
use crate::bindings;
use crate::call::CallState;

/// An integration component, by the contract version it was built against.
pub(crate) enum NotifierPre {
    V0_1(bindings::v0_1::integration_world::IntegrationPre<CallState>),
    V0_2(bindings::v0_2::integration_world::IntegrationPre<CallState>),
}

impl NotifierPre {
    pub(crate) fn new(version: &semver::Version, pre: InstancePre<CallState>) -> wasmtime::Result<NotifierPre> {
        Ok(if version.minor >= 2 {
            NotifierPre::V0_2(bindings::v0_2::integration_world::IntegrationPre::new(pre)?)
        } else {
            NotifierPre::V0_1(bindings::v0_1::integration_world::IntegrationPre::new(pre)?)
        })
    }

    pub(crate) fn describe(&self) -> Call<Described> {
        match self {
            NotifierPre::V0_1(pre) => export_call!(pre, trellis_plugin_notifier, |api, store| {
                Ok(Ok(v0_1::described(api.call_describe(&mut *store).await?)))
            }),
            NotifierPre::V0_2(pre) => export_call!(pre, trellis_plugin_notifier, |api, store| {
                Ok(Ok(v0_2::described(api.call_describe(&mut *store).await?)))
            }),
        }
    }

    pub(crate) fn validate_config(&self, config: String) -> Call<()> {
        match self {
            NotifierPre::V0_1(pre) => export_call!(pre, trellis_plugin_notifier, |api, store| {
                Ok(api.call_validate_config(&mut *store, &config).await?.map_err(v0_1::reported))
            }),
            NotifierPre::V0_2(pre) => export_call!(pre, trellis_plugin_notifier, |api, store| {
                Ok(api.call_validate_config(&mut *store, &config).await?.map_err(v0_2::reported))
            }),
        }
    }

    pub(crate) fn test(&self, ctx: &Ctx<'_>) -> Call<TestReport> {
        let config = ctx.config();
        match self {
            NotifierPre::V0_1(pre) => {
                let context = v0_1::context(ctx);
                export_call!(pre, trellis_plugin_notifier, |api, store| {
                    let result = api.call_test(&mut *store, &context, &config).await?;
                    Ok(result.map(v0_1::report).map_err(v0_1::reported))
                })
            }
            NotifierPre::V0_2(pre) => {
                let context = v0_2::context(ctx);
                export_call!(pre, trellis_plugin_notifier, |api, store| {
                    let result = api.call_test(&mut *store, &context, &config).await?;
                    Ok(result.map(v0_2::report).map_err(v0_2::reported))
                })
            }
        }
    }

    pub(crate) fn notify(&self, ctx: &Ctx<'_>, event: &Event) -> Call<Delivery> {
        let config = ctx.config();
        match self {
            NotifierPre::V0_1(pre) => {
                let (context, event) = (v0_1::context(ctx), v0_1::event(event));
                export_call!(pre, trellis_plugin_notifier, |api, store| {
                    let result = api.call_notify(&mut *store, &context, &config, &event).await?;
                    Ok(result.map(v0_1::delivery).map_err(v0_1::reported))
                })
            }
            NotifierPre::V0_2(pre) => {
                let (context, event) = (v0_2::context(ctx), v0_2::event(event));
                export_call!(pre, trellis_plugin_notifier, |api, store| {
                    let result = api.call_notify(&mut *store, &context, &config, &event).await?;
                    Ok(result.map(v0_2::delivery).map_err(v0_2::reported))
                })
            }
        }
    }
}
