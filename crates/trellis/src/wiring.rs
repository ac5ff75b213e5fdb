//! Builds the process: opens the store, the master key and the plugin runtime, and hands
//! the domain its ports in one [`Context`].

use std::sync::Arc;

use thiserror::Error;
use trellis_core::auth::oidc::Provider;
use trellis_core::clock::{OsEntropy, SharedClock};
use trellis_core::crypto::{CryptoError, MasterKey};
use trellis_core::pki::InternalPki;
use trellis_core::plugins::challenges::ChallengeAnswers;
use trellis_core::plugins::PluginError;
use trellis_core::ports::StoreError;
use trellis_core::{Context, Settings, SharedContext};
use trellis_egress::oidc::HostIdp;
use trellis_egress::webhook::{HostOutbound, OutboundConfig};
use trellis_http::HttpSettings;
use trellis_plugin_host::tls_probe::{HostTlsProber, TlsProbeConfig};
use trellis_store::{DbChallengeAnswers, Store};

use crate::config::Config;
use crate::plugin_workers;

#[derive(Debug, Error)]
pub enum StartError {
    #[error("master key: {0}")]
    MasterKey(#[from] CryptoError),
    #[error("database: {0}")]
    Store(#[from] StoreError),
    #[error("plugin runtime: {0}")]
    Plugins(#[from] PluginError),
    #[error("outbound client: {0}")]
    Outbound(String),
}

/// The domain's share of the configuration.
pub fn settings(config: &Config) -> Settings {
    Settings {
        admin_email: config.admin_email.clone(),
        admin_password: config.admin_password.clone(),
        login_max_failures: config.login_max_failures,
        login_window: config.login_window,
        discovery: config.discovery,
        password_login_disabled: !config.password_login,
        acme: trellis_core::acme::AcmeSettings {
            public_url: config.public_url.clone(),
            orders_per_hour: config.acme_orders_per_hour,
            pending_authorizations: config.acme_pending_authorizations,
            challenge_answer_wait: config.acme_challenge_wait,
            ..trellis_core::acme::AcmeSettings::default()
        },
    }
}

/// The HTTP layer's share of the configuration.
pub fn http_settings(config: &Config) -> HttpSettings {
    HttpSettings {
        body_limit_bytes: config.body_limit_bytes,
        secure_cookies: config.secure_cookies,
        trusted_proxies: config.trusted_proxies.clone(),
        request_timeout: config.request_timeout,
        max_concurrent_requests: config.max_concurrent_requests,
        pki_max_concurrent_requests: config.pki_max_concurrent_requests,
        metrics_on_api: config.metrics_listen.is_none(),
    }
}

/// Opens everything a command needs and returns the shared context.
pub async fn open(config: &Config, clock: SharedClock) -> Result<SharedContext, StartError> {
    Ok(open_service(config, clock).await?.ctx)
}

/// What `serve` runs: the context, and the HTTP-01 answers its challenge listener serves when
/// `TRELLIS_ACME_HTTP01_LISTEN` is set.
pub struct Service {
    pub ctx: SharedContext,
    pub http01_answers: Option<Arc<dyn ChallengeAnswers>>,
}

/// Opens the store, the master key and the plugin runtime.
pub async fn open_service(config: &Config, clock: SharedClock) -> Result<Service, StartError> {
    let entropy: trellis_core::clock::SharedEntropy = Arc::new(OsEntropy);
    let master_key = match &config.master_key {
        Some(text) => MasterKey::parse(text)?,
        None => MasterKey::load_or_create(&config.master_key_file, entropy.as_ref())?,
    };
    let store = Store::open(&config.database_url).await?;
    let http01_answers = config
        .acme_http01_listen
        .map(|_| Arc::new(DbChallengeAnswers::new(store.clone())) as Arc<dyn ChallengeAnswers>);
    let shared_store: Arc<dyn trellis_core::ports::Store> = Arc::new(store.clone());
    let pki = Arc::new(InternalPki::new(
        Arc::new(shared_store.clone()),
        master_key.clone(),
        clock.clone(),
        entropy.clone(),
        &config.public_url,
    ));
    let plugins = plugin_workers::start_runtime(
        config,
        &store,
        clock.clone(),
        master_key.clone(),
        http01_answers.clone(),
        pki.clone(),
    )?;
    let outbound = HostOutbound::new(OutboundConfig {
        allow_private_networks: config.webhook_allow_private_networks,
        ca_bundle: config.webhook_ca_bundle.clone(),
        ..OutboundConfig::default()
    })
    .map_err(StartError::Outbound)?;
    let prober = HostTlsProber::new(TlsProbeConfig { allow_private_networks: config.discovery_allow_private_networks })
        .map_err(StartError::Outbound)?;
    let mut context = Context::new(settings(config), shared_store, clock, entropy, master_key, plugins);
    if let Some(oidc) = &config.oidc {
        let transport = HostIdp::new(oidc.ca_bundle.as_deref(), std::time::Duration::from_secs(10))
            .map_err(StartError::Outbound)?;
        context = context.with_oidc(Arc::new(Provider::new(oidc.provider.clone(), Arc::new(transport))));
    }
    let validator =
        trellis_egress::acme::HostValidator::new(config.acme_validation.clone()).map_err(StartError::Outbound)?;
    context = context.with_acme(Arc::new(trellis_store::DbAcme::new(store.clone())), Arc::new(validator));
    let ctx = Arc::new(
        context.with_pki(pki).with_outbound(Arc::new(outbound)).with_tls_prober(Arc::new(prober)).with_domain_claims(
            Arc::new(trellis_store::DbDomainClaims::new(store.clone())),
            Arc::new(trellis_core::domain_claims::NoResolver),
        ),
    );
    Ok(Service { ctx, http01_answers })
}
