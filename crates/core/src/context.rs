//! The services' shared dependencies, built once at start and passed to every domain call.

use std::sync::Arc;

use crate::audit::Audit;
use crate::auth::LoginLimiter;
use crate::clock::{SharedClock, SharedEntropy};
use crate::crypto::MasterKey;
use crate::discovery::tls::{NoProber, TlsProber};
use crate::error::Result;
use crate::pki::PkiPort;
use crate::plugins::service::PluginService;
use crate::ports::{Store, Tx};
use crate::ttl_cache::TtlMap;
use crate::unit_of_work::UnitOfWork;
use crate::webhooks::transport::{NoTransport, WebhookTransport};

/// What the use cases need of the configuration (the binary loads and validates it).
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Bootstrap administrator, created on start when no user exists.
    pub admin_email: Option<String>,
    pub admin_password: Option<String>,
    /// Failed logins per account within `login_window` before 429.
    pub login_max_failures: u32,
    pub login_window: std::time::Duration,
    /// Discovery scans: how `tls_endpoints` scans probe, when a silent scan is taken over.
    pub discovery: crate::discovery::DiscoverySettings,
    /// `TRELLIS_PASSWORD_LOGIN=false`: only instance administrators (the break-glass accounts)
    /// may sign in with a password; everyone else signs in through the IdP.
    pub password_login_disabled: bool,
    /// The ACME server: public URL, limits.
    pub acme: crate::acme::AcmeSettings,
}

/// Holds each area's settings once, split out of [`Settings`] at construction: what the areas'
/// shares carry.
pub struct Context {
    pub store: Arc<dyn Store>,
    pub clock: SharedClock,
    pub entropy: SharedEntropy,
    pub master_key: MasterKey,
    pub login_limiter: Arc<LoginLimiter>,
    /// What authentication reads of the settings, shared with every [`Context::auth_deps`].
    pub auth_settings: Arc<crate::auth::AuthSettings>,
    /// How discovery scans probe and when a silent scan is taken over ([`Context::discovery_deps`]).
    pub discovery_settings: crate::discovery::DiscoverySettings,
    /// The ACME server's settings, shared with every [`Context::acme_deps`].
    pub acme_settings: Arc<crate::acme::AcmeSettings>,
    /// The plugin runtime (one engine per process) and its lifecycle lock.
    pub plugins: PluginService,
    /// The internal PKI (CRL, CA chain and OCSP answers, its ledger backlog), as a port; the
    /// plugin runtime reaches the same service as `pki-core`.
    pub pki: Option<Arc<dyn PkiPort>>,
    /// Outbound HTTP for webhook deliveries (SSRF-vetted); refuses everything by default.
    pub outbound: Arc<dyn WebhookTransport>,
    /// TLS connections of `tls_endpoints` discovery scans (egress-vetted); reaches nothing by default.
    pub tls_prober: Arc<dyn TlsProber>,
    /// Which domains each workspace may have ACME challenge answers presented for.
    pub domain_claims: Arc<dyn crate::domain_claims::DomainClaims>,
    /// TXT lookups for domain claim verification; none by default.
    pub txt_resolver: Arc<dyn crate::domain_claims::TxtResolver>,
    /// The OpenID Connect identity provider, when one is configured.
    pub oidc: Option<Arc<crate::auth::oidc::Provider>>,
    /// The ACME server's storage (none: the `/acme` endpoints answer 404).
    pub acme: Option<Arc<dyn crate::acme::AcmeStore>>,
    /// Validates ACME challenges under the egress rules; validates nothing by default.
    pub acme_validator: Arc<dyn crate::acme::ChallengeValidator>,
    /// Rows every issuance or API-key request reads, kept briefly (see [`ReadCaches`]).
    pub cached: Arc<ReadCaches>,
}

/// Rows read on every API-key request and every issuance, and changed rarely: each read costs
/// a hand-off to SQLite's connection thread (docs/benchmarks.md, "Issuance against OpenBao").
/// Staleness is bounded as [`crate::ttl_cache`] says: a change through this replica is seen at
/// once (its use case forgets the row after committing), another replica's within
/// [`crate::ttl_cache::TTL_MS`].
#[derive(Default)]
pub struct ReadCaches {
    /// API keys as authentication reads them, by digest (see [`crate::auth::KeyGrant`]).
    pub api_keys: Arc<TtlMap<String, crate::auth::KeyGrant>>,
    /// CA records as issuance reads them, by workspace and id.
    pub cas: Arc<TtlMap<(String, i64), crate::cas::CertificateAuthority>>,
    /// Each workspace's issuance policies, in order, as issuance reads them.
    pub policies: Arc<TtlMap<String, Vec<crate::issuance::policies::IssuancePolicy>>>,
}

pub type SharedContext = Arc<Context>;

impl Context {
    pub fn new(
        settings: Settings,
        store: Arc<dyn Store>,
        clock: SharedClock,
        entropy: SharedEntropy,
        master_key: MasterKey,
        plugins: PluginService,
    ) -> Self {
        let Settings {
            admin_email,
            admin_password,
            login_max_failures,
            login_window,
            discovery,
            password_login_disabled,
            acme,
        } = settings;
        let login_limiter = Arc::new(LoginLimiter::new(login_max_failures, login_window));
        let auth_settings =
            Arc::new(crate::auth::AuthSettings { admin_email, admin_password, password_login_disabled });
        Context {
            discovery_settings: discovery,
            store,
            clock,
            entropy,
            master_key,
            login_limiter,
            auth_settings,
            acme_settings: Arc::new(acme),
            plugins,
            pki: None,
            outbound: Arc::new(NoTransport),
            tls_prober: Arc::new(NoProber),
            domain_claims: crate::domain_claims::InMemoryDomainClaims::shared(),
            txt_resolver: Arc::new(crate::domain_claims::NoResolver),
            oidc: None,
            acme: None,
            acme_validator: Arc::new(crate::acme::NoValidator),
            cached: Arc::default(),
        }
    }

    /// Serves CRLs and OCSP from `pki`.
    pub fn with_pki(mut self, pki: Arc<dyn PkiPort>) -> Self {
        self.pki = Some(pki);
        self
    }

    /// Delivers webhooks through `outbound`.
    pub fn with_outbound(mut self, outbound: Arc<dyn WebhookTransport>) -> Self {
        self.outbound = outbound;
        self
    }

    /// Probes TLS endpoints (discovery scans) through `prober`.
    pub fn with_tls_prober(mut self, prober: Arc<dyn TlsProber>) -> Self {
        self.tls_prober = prober;
        self
    }

    /// Keeps domain claims in `claims` and verifies them through `resolver`.
    pub fn with_domain_claims(
        mut self,
        claims: Arc<dyn crate::domain_claims::DomainClaims>,
        resolver: Arc<dyn crate::domain_claims::TxtResolver>,
    ) -> Self {
        self.domain_claims = claims;
        self.txt_resolver = resolver;
        self
    }

    /// Signs people in through `provider` (OpenID Connect).
    pub fn with_oidc(mut self, provider: Arc<crate::auth::oidc::Provider>) -> Self {
        self.oidc = Some(provider);
        self
    }

    /// Serves ACME directories from `store`, validating challenges through `validator`.
    pub fn with_acme(
        mut self,
        store: Arc<dyn crate::acme::AcmeStore>,
        validator: Arc<dyn crate::acme::ChallengeValidator>,
    ) -> Self {
        // Every POST reads the directory and the signing account: both come from a short-lived
        // cache in front of the store (acme/cache.rs says how stale another replica's change
        // may be).
        self.acme = Some(Arc::new(crate::acme::cache::CachedAcmeStore::new(store, self.clock.clone())));
        self.acme_validator = validator;
        self
    }

    /// The webhooks area's share: its storage port, the outbound transport, the plugin runtime,
    /// the master key, the clock and entropy.
    pub fn webhook_deps(&self) -> crate::webhooks::worker::WebhookDeps {
        crate::webhooks::worker::WebhookDeps {
            store: Arc::new(self.store.clone()),
            transport: self.outbound.clone(),
            plugins: self.plugins.clone(),
            master_key: self.master_key.clone(),
            clock: self.clock.clone(),
            entropy: self.entropy.clone(),
        }
    }

    /// Issuance's share: its storage port, the CA registry's share, the plugin runtime, the
    /// policy cache, the master key, the clock and entropy.
    pub fn issuance_deps(&self) -> crate::issuance::IssuanceDeps {
        crate::issuance::IssuanceDeps {
            store: self.store.clone(),
            cas: self.ca_deps(),
            plugins: self.plugins.clone(),
            policies_cache: self.cached.policies.clone(),
            master_key: self.master_key.clone(),
            clock: self.clock.clone(),
            entropy: self.entropy.clone(),
        }
    }

    /// The ACME server's share: its store, validator and settings, issuance's and lifecycle's
    /// shares, the store's issuance view, the runtime, the key, the clock and entropy.
    pub fn acme_deps(&self) -> crate::acme::AcmeDeps {
        let lifecycle = self.lifecycle_deps();
        crate::acme::AcmeDeps {
            acme: self.acme.clone(),
            acme_validator: self.acme_validator.clone(),
            settings: self.acme_settings.clone(),
            store: self.store.clone(),
            issuance: lifecycle.issuance.clone(),
            lifecycle,
            plugins: self.plugins.clone(),
            master_key: self.master_key.clone(),
            clock: self.clock.clone(),
            entropy: self.entropy.clone(),
        }
    }

    /// The shares of the work that spans areas: the CA registry's, the inventory's,
    /// discovery's and issuance's, with its own storage port, the runtime, the key and the clock.
    pub fn lifecycle_deps(&self) -> crate::lifecycle::LifecycleDeps {
        crate::lifecycle::LifecycleDeps {
            store: self.store.clone(),
            cas: self.ca_deps(),
            certificates: self.certificate_deps(),
            discovery: self.discovery_deps(),
            issuance: self.issuance_deps(),
            plugins: self.plugins.clone(),
            master_key: self.master_key.clone(),
            clock: self.clock.clone(),
        }
    }

    /// Attestation's share: its storage port, issuance's share, the plugin runtime, the clock
    /// and entropy.
    pub fn attestation_deps(&self) -> crate::attestation::AttestationDeps {
        crate::attestation::AttestationDeps {
            store: self.store.clone(),
            issuance: self.issuance_deps(),
            plugins: self.plugins.clone(),
            clock: self.clock.clone(),
            entropy: self.entropy.clone(),
        }
    }

    /// Authentication's share: its storage port and settings, the login limiter, the identity
    /// provider, the API-key cache, the master key, the clock and entropy.
    pub fn auth_deps(&self) -> crate::auth::AuthDeps {
        crate::auth::AuthDeps {
            store: self.store.clone(),
            settings: self.auth_settings.clone(),
            login_limiter: self.login_limiter.clone(),
            oidc: self.oidc.clone(),
            api_keys: self.cached.api_keys.clone(),
            master_key: self.master_key.clone(),
            clock: self.clock.clone(),
            entropy: self.entropy.clone(),
        }
    }

    /// Discovery's share: its storage port, the plugin runtime, the master key, the TLS prober,
    /// the discovery settings and the clock.
    pub fn discovery_deps(&self) -> crate::discovery::DiscoveryDeps {
        crate::discovery::DiscoveryDeps {
            store: self.store.clone(),
            plugins: self.plugins.clone(),
            master_key: self.master_key.clone(),
            tls_prober: self.tls_prober.clone(),
            settings: self.discovery_settings,
            clock: self.clock.clone(),
        }
    }

    /// The inventory's share: its storage port, the master key and the clock.
    pub fn certificate_deps(&self) -> crate::certificates::CertificateDeps {
        crate::certificates::CertificateDeps {
            store: self.store.clone(),
            master_key: self.master_key.clone(),
            clock: self.clock.clone(),
        }
    }

    /// The CA registry's share: its storage port, the plugin runtime, the internal PKI, the
    /// cache of CA records issuance reads, the master key, the clock and entropy.
    pub fn ca_deps(&self) -> crate::cas::service::CaDeps {
        crate::cas::service::CaDeps {
            store: self.store.clone(),
            plugins: self.plugins.clone(),
            pki: self.pki.clone(),
            cas_cache: self.cached.cas.clone(),
            master_key: self.master_key.clone(),
            clock: self.clock.clone(),
            entropy: self.entropy.clone(),
        }
    }

    /// The plugin registry's share: its storage port, the plugin runtime and the clock.
    pub fn plugin_deps(&self) -> crate::plugins::service::PluginDeps {
        crate::plugins::service::PluginDeps {
            store: Arc::new(self.store.clone()),
            plugins: self.plugins.clone(),
            clock: self.clock.clone(),
        }
    }

    /// The domain claims' share: the claims, the TXT resolver, the workspace directory, units
    /// of work for their audit rows, the clock and entropy.
    pub fn domain_claim_deps(&self) -> crate::domain_claims::DomainClaimDeps {
        crate::domain_claims::DomainClaimDeps {
            domain_claims: self.domain_claims.clone(),
            txt_resolver: self.txt_resolver.clone(),
            workspaces: Arc::new(self.store.clone()),
            changes: Arc::new(self.store.clone()),
            clock: self.clock.clone(),
            entropy: self.entropy.clone(),
        }
    }

    pub fn now_millis(&self) -> i64 {
        crate::clock::now_millis(self.clock.as_ref())
    }

    /// A fresh random identifier with a readable prefix, e.g. `ws_3f9c…`.
    pub fn new_id(&self, prefix: &str) -> String {
        crate::clock::new_id(self.entropy.as_ref(), prefix)
    }

    /// Opens a unit of work for a change made by `actor` in `workspace_id` (now).
    pub async fn change(&self, actor: Audit, workspace_id: Option<&str>) -> Result<UnitOfWork<'static, dyn Tx>> {
        let tx = self.store.begin().await?;
        Ok(UnitOfWork::owning(tx, actor, workspace_id, self.now_millis()))
    }
}
