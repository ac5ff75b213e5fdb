//! The `ca-connector` world: typed calls for 0.1 and 0.2 components. Operations 0.1 lacks are
//! answered by the host as a 0.1 connector would have meant them: `setup` has nothing to do,
//! `poll-issue` and `fetch-certificate` are not supported, the CA chain is empty and there is
//! no renewal suggestion.

use trellis_core::plugins::{
    CertificatePage, CertificateRef, IssueOutcome, IssueRequest, IssuedCertificate, RenewalWindow, ReportedError,
    RevokeRequest, TestReport,
};
use wasmtime::component::InstancePre;

use super::{answer, export_call, v0_1, v0_2, Call, Ctx, Described};
use crate::bindings;
use crate::call::CallState;

/// A connector component, by the contract version it was built against.
pub(crate) enum ConnectorPre {
    V0_1(bindings::v0_1::ca_world::CaConnectorPre<CallState>),
    V0_2(bindings::v0_2::ca_world::CaConnectorPre<CallState>),
}

fn not_in_0_1<T: Send + 'static>(operation: &str) -> Call<T> {
    answer(Err(ReportedError::NotSupported {
        message: format!("{operation} needs a connector built against trellis:plugin@0.2"),
    }))
}

impl ConnectorPre {
    pub(crate) fn new(version: &semver::Version, pre: InstancePre<CallState>) -> wasmtime::Result<ConnectorPre> {
        Ok(if version.minor >= 2 {
            ConnectorPre::V0_2(bindings::v0_2::ca_world::CaConnectorPre::new(pre)?)
        } else {
            ConnectorPre::V0_1(bindings::v0_1::ca_world::CaConnectorPre::new(pre)?)
        })
    }

    pub(crate) fn describe(&self) -> Call<Described> {
        match self {
            ConnectorPre::V0_1(pre) => export_call!(pre, trellis_plugin_connector, |api, store| {
                Ok(Ok(v0_1::described(api.call_describe(&mut *store).await?)))
            }),
            ConnectorPre::V0_2(pre) => export_call!(pre, trellis_plugin_connector, |api, store| {
                Ok(Ok(v0_2::described(api.call_describe(&mut *store).await?)))
            }),
        }
    }

    pub(crate) fn validate_config(&self, config: String) -> Call<()> {
        match self {
            ConnectorPre::V0_1(pre) => export_call!(pre, trellis_plugin_connector, |api, store| {
                Ok(api.call_validate_config(&mut *store, &config).await?.map_err(v0_1::reported))
            }),
            ConnectorPre::V0_2(pre) => export_call!(pre, trellis_plugin_connector, |api, store| {
                Ok(api.call_validate_config(&mut *store, &config).await?.map_err(v0_2::reported))
            }),
        }
    }

    pub(crate) fn setup(&self, ctx: &Ctx<'_>) -> Call<()> {
        let config = ctx.config();
        match self {
            ConnectorPre::V0_1(_) => answer(Ok(())),
            ConnectorPre::V0_2(pre) => {
                let context = v0_2::context(ctx);
                export_call!(pre, trellis_plugin_connector, |api, store| {
                    Ok(api.call_setup(&mut *store, &context, &config).await?.map_err(v0_2::reported))
                })
            }
        }
    }

    pub(crate) fn test_connection(&self, ctx: &Ctx<'_>) -> Call<TestReport> {
        let config = ctx.config();
        match self {
            ConnectorPre::V0_1(pre) => {
                let context = v0_1::context(ctx);
                export_call!(pre, trellis_plugin_connector, |api, store| {
                    let result = api.call_test_connection(&mut *store, &context, &config).await?;
                    Ok(result.map(v0_1::report).map_err(v0_1::reported))
                })
            }
            ConnectorPre::V0_2(pre) => {
                let context = v0_2::context(ctx);
                export_call!(pre, trellis_plugin_connector, |api, store| {
                    let result = api.call_test_connection(&mut *store, &context, &config).await?;
                    Ok(result.map(v0_2::report).map_err(v0_2::reported))
                })
            }
        }
    }

    pub(crate) fn issue(&self, ctx: &Ctx<'_>, request: &IssueRequest) -> Call<IssueOutcome> {
        let config = ctx.config();
        match self {
            ConnectorPre::V0_1(pre) => {
                let (context, request) = (v0_1::context(ctx), v0_1::issue_request(request));
                export_call!(pre, trellis_plugin_connector, |api, store| {
                    let result = api.call_issue(&mut *store, &context, &config, &request).await?;
                    Ok(result.map_err(v0_1::reported).and_then(v0_1::issued))
                })
            }
            ConnectorPre::V0_2(pre) => {
                let (context, request) = (v0_2::context(ctx), v0_2::issue_request(request));
                export_call!(pre, trellis_plugin_connector, |api, store| {
                    let result = api.call_issue(&mut *store, &context, &config, &request).await?;
                    Ok(result.map_err(v0_2::reported).and_then(v0_2::outcome))
                })
            }
        }
    }

    pub(crate) fn poll_issue(&self, ctx: &Ctx<'_>, reference: &str, request: &IssueRequest) -> Call<IssueOutcome> {
        match self {
            ConnectorPre::V0_1(_) => not_in_0_1("poll-issue"),
            ConnectorPre::V0_2(pre) => {
                let (context, config) = (v0_2::context(ctx), ctx.config());
                let (reference, request) = (reference.to_owned(), v0_2::issue_request(request));
                export_call!(pre, trellis_plugin_connector, |api, store| {
                    let result = api.call_poll_issue(&mut *store, &context, &config, &reference, &request).await?;
                    Ok(result.map_err(v0_2::reported).and_then(v0_2::outcome))
                })
            }
        }
    }

    pub(crate) fn fetch_certificate(&self, ctx: &Ctx<'_>, ca_reference: &str) -> Call<IssuedCertificate> {
        match self {
            ConnectorPre::V0_1(_) => not_in_0_1("fetch-certificate"),
            ConnectorPre::V0_2(pre) => {
                let (context, config, reference) = (v0_2::context(ctx), ctx.config(), ca_reference.to_owned());
                export_call!(pre, trellis_plugin_connector, |api, store| {
                    let result = api.call_fetch_certificate(&mut *store, &context, &config, &reference).await?;
                    Ok(result.map_err(v0_2::reported).and_then(v0_2::issued))
                })
            }
        }
    }

    pub(crate) fn ca_chain(&self, ctx: &Ctx<'_>) -> Call<Vec<Vec<u8>>> {
        match self {
            ConnectorPre::V0_1(_) => answer(Ok(Vec::new())),
            ConnectorPre::V0_2(pre) => {
                let (context, config) = (v0_2::context(ctx), ctx.config());
                export_call!(pre, trellis_plugin_connector, |api, store| {
                    let result = api.call_ca_chain(&mut *store, &context, &config).await?;
                    Ok(result.map_err(v0_2::reported).and_then(v0_2::chain))
                })
            }
        }
    }

    pub(crate) fn revoke(&self, ctx: &Ctx<'_>, request: &RevokeRequest) -> Call<()> {
        let config = ctx.config();
        match self {
            ConnectorPre::V0_1(pre) => {
                let (context, request) = (v0_1::context(ctx), v0_1::revoke_request(request));
                export_call!(pre, trellis_plugin_connector, |api, store| {
                    Ok(api.call_revoke(&mut *store, &context, &config, &request).await?.map_err(v0_1::reported))
                })
            }
            ConnectorPre::V0_2(pre) => {
                let (context, request) = (v0_2::context(ctx), v0_2::revoke_request(request));
                export_call!(pre, trellis_plugin_connector, |api, store| {
                    Ok(api.call_revoke(&mut *store, &context, &config, &request).await?.map_err(v0_2::reported))
                })
            }
        }
    }

    pub(crate) fn list_certificates(&self, ctx: &Ctx<'_>, cursor: Option<String>, limit: u32) -> Call<CertificatePage> {
        let config = ctx.config();
        match self {
            ConnectorPre::V0_1(pre) => {
                let context = v0_1::context(ctx);
                let page = bindings::v0_1::ca::PageRequest { cursor, limit };
                export_call!(pre, trellis_plugin_connector, |api, store| {
                    let result = api.call_list_certificates(&mut *store, &context, &config, &page).await?;
                    Ok(result.map_err(v0_1::reported).and_then(v0_1::page))
                })
            }
            ConnectorPre::V0_2(pre) => {
                let context = v0_2::context(ctx);
                let page = bindings::v0_2::wit_types::PageRequest { cursor, limit };
                export_call!(pre, trellis_plugin_connector, |api, store| {
                    let result = api.call_list_certificates(&mut *store, &context, &config, &page).await?;
                    Ok(result.map_err(v0_2::reported).and_then(v0_2::page))
                })
            }
        }
    }

    pub(crate) fn renewal_info(&self, ctx: &Ctx<'_>, certificate: &CertificateRef) -> Call<Option<RenewalWindow>> {
        match self {
            ConnectorPre::V0_1(_) => answer(Ok(None)),
            ConnectorPre::V0_2(pre) => {
                let (context, config) = (v0_2::context(ctx), ctx.config());
                let certificate = v0_2::certificate_ref(certificate);
                export_call!(pre, trellis_plugin_connector, |api, store| {
                    let result = api.call_renewal_info(&mut *store, &context, &config, &certificate).await?;
                    Ok(result.map_err(v0_2::reported).and_then(|window| window.map(v0_2::renewal_window).transpose()))
                })
            }
        }
    }
}
