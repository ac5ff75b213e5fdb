//! Service configuration: an optional TOML file, overridden by `TRELLIS_*` environment
//! variables, parsed once at start into a validated [`Config`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use trellis_store::redact_url;

pub const DEFAULT_DATABASE_URL: &str = "sqlite://./data/trellis.db";
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("config file {path} is not valid TOML: {message}")]
    Parse { path: String, message: String },
    #[error("{name}: {message}")]
    Invalid { name: &'static str, message: String },
}

/// Everything the file may set. Every field is optional; environment variables win.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct FileConfig {
    pub listen: Option<String>,
    pub public_url: Option<String>,
    pub acme_http01_listen: Option<String>,
    pub database_url: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub master_key_file: Option<PathBuf>,
    pub body_limit_bytes: Option<usize>,
    pub secure_cookies: Option<bool>,
    pub login_max_failures: Option<u32>,
    pub login_window_secs: Option<u64>,
    pub log_format: Option<String>,
    pub plugin_dir: Option<PathBuf>,
    pub plugin_allow_private_networks: Option<bool>,
    pub plugin_record_private_networks: Option<bool>,
    pub plugin_ca_bundle: Option<PathBuf>,
    pub plugin_cache_dir: Option<PathBuf>,
    pub plugin_max_concurrent_calls: Option<usize>,
    pub plugin_max_calls_per_workspace: Option<usize>,
    pub plugin_signatures: Option<String>,
    pub first_party_plugin_dir: Option<PathBuf>,
    pub expiry_scan_interval_secs: Option<u64>,
    pub renewal_interval_secs: Option<u64>,
    pub issuance_poll_interval_secs: Option<u64>,
    pub trusted_proxies: Option<String>,
    pub request_timeout_secs: Option<u64>,
    pub outbox_retention_days: Option<u64>,
    pub max_connections: Option<usize>,
    pub max_concurrent_requests: Option<usize>,
    pub pki_max_concurrent_requests: Option<usize>,
    pub metrics_listen: Option<String>,
    pub webhook_allow_private_networks: Option<bool>,
    pub webhook_ca_bundle: Option<PathBuf>,
    pub webhook_disable_after_hours: Option<u64>,
    pub delivery_worker: Option<bool>,
    pub delivery_lease_secs: Option<u64>,
    pub delivery_max_in_flight: Option<usize>,
    pub delivery_per_target_in_flight: Option<usize>,
    pub discovery_allow_private_networks: Option<bool>,
    pub discovery_tls_concurrency: Option<usize>,
    pub discovery_tls_timeout_ms: Option<u64>,
    pub discovery_stale_secs: Option<u64>,
    pub discovery_max_scans_per_workspace: Option<u64>,
    pub discovery_endpoints_per_hour: Option<u64>,
    pub ca_health_interval_secs: Option<u64>,
    pub password_login: Option<bool>,
    /// `[oidc]`, with its `[[oidc.role_mappings]]`.
    pub oidc: Option<FileOidc>,
}

/// The `[oidc]` table; `TRELLIS_OIDC_*` variables win over it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct FileOidc {
    pub issuer: Option<String>,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    pub client_secret_file: Option<PathBuf>,
    pub scopes: Option<String>,
    pub display_name: Option<String>,
    pub ca_bundle: Option<PathBuf>,
    pub groups_claim: Option<String>,
    pub jwks_min_refresh_secs: Option<u64>,
    pub clock_skew_secs: Option<u64>,
    #[serde(default)]
    pub role_mappings: Vec<FileRoleMapping>,
}

/// `[[oidc.role_mappings]] group = "pki-admins", workspace = "ops", role = "owner"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRoleMapping {
    pub group: String,
    /// A workspace id, or else its name.
    pub workspace: String,
    pub role: String,
}

/// OpenID Connect sign-in, validated.
#[derive(Clone, Debug)]
pub struct OidcSettings {
    pub provider: trellis_core::auth::oidc::OidcConfig,
    /// Extra trust anchors (PEM) for the IdP's TLS (`TRELLIS_OIDC_CA_BUNDLE`).
    pub ca_bundle: Option<PathBuf>,
}

/// Operator overrides of one plugin kind's per-call limits
/// (`TRELLIS_PLUGIN_<KIND>_{MEMORY_MB,CPU_MS,WALL_MS}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PluginLimitOverrides {
    pub memory_mb: Option<u64>,
    pub cpu_ms: Option<u64>,
    pub wall_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Pretty,
}

/// Validated configuration.
#[derive(Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// The service's public base URL (`TRELLIS_PUBLIC_URL`): CRL and OCSP URLs in certificates
    /// the internal CA issues point at it. Default `http://<listen address>`.
    pub public_url: String,
    /// Where the ACME HTTP-01 challenge listener binds (`TRELLIS_ACME_HTTP01_LISTEN`); none
    /// when unset, and connectors then see HTTP-01 as unsupported.
    pub acme_http01_listen: Option<SocketAddr>,
    /// The ACME server's challenge validator: `TRELLIS_ACME_VALIDATION_HTTP_PORT` (80),
    /// `TRELLIS_ACME_VALIDATION_TLS_PORT` (443), `TRELLIS_ACME_DNS_RESOLVER` (host:port; the
    /// system's when unset), `TRELLIS_ACME_VALIDATION_ALLOW` (private networks it may reach).
    pub acme_validation: trellis_egress::acme::ValidatorConfig,
    /// The ACME server's limits: `TRELLIS_ACME_ORDERS_PER_HOUR` (300 per account, and so per
    /// EAB key), `TRELLIS_ACME_PENDING_AUTHORIZATIONS` (1000 per account).
    pub acme_orders_per_hour: i64,
    pub acme_pending_authorizations: i64,
    /// How long a challenge POST waits for its validation (`TRELLIS_ACME_CHALLENGE_WAIT_MS`,
    /// 2000; 0 answers `processing` at once).
    pub acme_challenge_wait: Duration,
    pub database_url: String,
    pub data_dir: PathBuf,
    /// Master key given directly (`TRELLIS_MASTER_KEY`); otherwise `master_key_file` is used.
    pub master_key: Option<String>,
    pub master_key_file: PathBuf,
    pub body_limit_bytes: usize,
    pub secure_cookies: bool,
    pub login_max_failures: u32,
    pub login_window: Duration,
    pub log_format: LogFormat,
    pub admin_email: Option<String>,
    pub admin_password: Option<String>,
    pub plugin_dir: Option<PathBuf>,
    pub plugin_allow_private_networks: bool,
    /// Records may allow private destinations for their own calls (`TRELLIS_PLUGIN_RECORD_PRIVATE_NETWORKS`).
    pub plugin_record_private_networks: bool,
    /// Extra trust anchors (PEM) for plugins' outbound TLS.
    pub plugin_ca_bundle: Option<PathBuf>,
    /// Compiled-code cache; default `<data dir>/plugin-cache` (or `target/plugin-cache` in a build tree).
    pub plugin_cache_dir: Option<PathBuf>,
    /// `TRELLIS_PLUGIN_SIGNATURES`: `require`, `warn` (default) or `off`.
    pub plugin_signatures: trellis_core::plugins::signatures::SignatureMode,
    pub plugin_max_concurrent_calls: Option<usize>,
    /// One workspace's share of the plugin call slots (default a quarter).
    pub plugin_max_calls_per_workspace: Option<usize>,
    /// `[ca-connector, integration, attestation-verifier, issuance-policy]` limit overrides.
    pub plugin_limits: [PluginLimitOverrides; 4],
    /// Where first-party plugin components are looked up on the very first start.
    pub first_party_plugin_dir: Option<PathBuf>,
    /// Reverse proxies whose `X-Forwarded-For` is believed: `(network, prefix length)`.
    pub trusted_proxies: Vec<(std::net::IpAddr, u8)>,
    pub request_timeout: Duration,
    pub max_concurrent_requests: usize,
    /// Requests to the public `/pki` endpoints handled at once, a pool apart from the API's
    /// (`TRELLIS_PKI_MAX_CONCURRENT_REQUESTS`, default 256).
    pub pki_max_concurrent_requests: usize,
    /// Where `/metrics` is served instead of the API listener (`TRELLIS_METRICS_LISTEN`).
    pub metrics_listen: Option<SocketAddr>,
    /// Open TCP connections at most; beyond, new ones wait in the kernel's backlog.
    pub max_connections: usize,
    /// Delivered outbox events older than this are deleted (undelivered ones never).
    pub outbox_retention: Duration,
    /// How often the expiry scanner emits certificate.expiring / certificate.expired events.
    pub expiry_scan_interval: Duration,
    /// How often the renewal worker renews due auto-renewing certificates.
    pub renewal_interval: Duration,
    /// How often the issuance poller asks CAs about pending orders
    /// (`TRELLIS_ISSUANCE_POLL_INTERVAL_SECS`, default 15; each order also waits for its own next
    /// poll time).
    pub issuance_poll_interval: Duration,
    /// Webhook deliveries may go to private, loopback and link-local addresses
    /// (`TRELLIS_WEBHOOK_ALLOW_PRIVATE_NETWORKS`; default: the plugin setting).
    pub webhook_allow_private_networks: bool,
    /// Extra trust anchors (PEM) for webhook receivers (`TRELLIS_WEBHOOK_CA_BUNDLE`; default:
    /// the plugin bundle).
    pub webhook_ca_bundle: Option<PathBuf>,
    /// Run the delivery worker in this process (`TRELLIS_DELIVERY_WORKER`, default true).
    pub delivery_worker: bool,
    /// The delivery worker's settings.
    pub delivery: trellis_core::webhooks::worker::WorkerSettings,
    /// `tls_endpoints` scans may probe private, loopback and link-local addresses
    /// (`TRELLIS_DISCOVERY_ALLOW_PRIVATE_NETWORKS`, default false; metadata addresses never).
    pub discovery_allow_private_networks: bool,
    /// How scans probe and when a silent scan is taken over (`TRELLIS_DISCOVERY_TLS_CONCURRENCY`,
    /// `TRELLIS_DISCOVERY_TLS_TIMEOUT_MS`, `TRELLIS_DISCOVERY_STALE_SECS`), and the per-workspace
    /// caps (`TRELLIS_DISCOVERY_MAX_SCANS_PER_WORKSPACE`, `TRELLIS_DISCOVERY_ENDPOINTS_PER_HOUR`).
    pub discovery: trellis_core::discovery::DiscoverySettings,
    /// How often every CA is probed in the background (`TRELLIS_CA_HEALTH_INTERVAL_SECS`,
    /// default 900; 0 turns the check off).
    pub ca_health_interval: Option<Duration>,
    /// `TRELLIS_PASSWORD_LOGIN` (default true); when false only instance administrators
    /// (break-glass) may sign in with a password.
    pub password_login: bool,
    /// OpenID Connect sign-in, when `TRELLIS_OIDC_ISSUER` (or `[oidc] issuer`) is set.
    pub oidc: Option<OidcSettings>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("acme_http01_listen", &self.acme_http01_listen)
            .field("metrics_listen", &self.metrics_listen)
            .field("database_url", &redact_url(&self.database_url))
            .field("data_dir", &self.data_dir)
            .field("master_key", &self.master_key.as_ref().map(|_| "<redacted>"))
            .field("master_key_file", &self.master_key_file)
            .field("body_limit_bytes", &self.body_limit_bytes)
            .field("secure_cookies", &self.secure_cookies)
            .field("login_max_failures", &self.login_max_failures)
            .field("login_window", &self.login_window)
            .field("plugin_dir", &self.plugin_dir)
            .field("plugin_allow_private_networks", &self.plugin_allow_private_networks)
            .field("plugin_record_private_networks", &self.plugin_record_private_networks)
            .field("plugin_signatures", &self.plugin_signatures)
            .field("password_login", &self.password_login)
            .field("oidc", &self.oidc)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Loads from `file` (if given) and the process environment.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let file_config = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
                toml::from_str(&text)
                    .map_err(|err| ConfigError::Parse { path: path.display().to_string(), message: err.to_string() })?
            }
            None => FileConfig::default(),
        };
        Self::from_sources(file_config, |name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    /// Merges file settings with environment variables (looked up through `env`) and validates.
    pub fn from_sources(file: FileConfig, env: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let listen_text = env("TRELLIS_LISTEN").or(file.listen).unwrap_or_else(|| DEFAULT_LISTEN.into());
        let listen = listen_text.parse::<SocketAddr>().map_err(|_| ConfigError::Invalid {
            name: "TRELLIS_LISTEN",
            message: format!("`{listen_text}` is not an address like 127.0.0.1:8080"),
        })?;
        let database_url =
            env("TRELLIS_DATABASE_URL").or(file.database_url).unwrap_or_else(|| DEFAULT_DATABASE_URL.into());
        if !(database_url.starts_with("sqlite:")
            || database_url.starts_with("postgres://")
            || database_url.starts_with("postgresql://"))
        {
            return Err(ConfigError::Invalid {
                name: "TRELLIS_DATABASE_URL",
                message: "must start with sqlite:, postgres:// or postgresql://".into(),
            });
        }
        let data_dir = env("TRELLIS_DATA_DIR")
            .map(PathBuf::from)
            .or(file.data_dir)
            .unwrap_or_else(|| default_data_dir(&database_url));
        let master_key_file = env("TRELLIS_MASTER_KEY_FILE")
            .map(PathBuf::from)
            .or(file.master_key_file)
            .unwrap_or_else(|| data_dir.join("master.key"));
        let body_limit_bytes =
            parse_env(&env, "TRELLIS_BODY_LIMIT_BYTES")?.or(file.body_limit_bytes).unwrap_or(1024 * 1024);
        if body_limit_bytes < 1024 {
            return Err(ConfigError::Invalid {
                name: "TRELLIS_BODY_LIMIT_BYTES",
                message: "must be at least 1024".into(),
            });
        }
        let login_max_failures =
            parse_env(&env, "TRELLIS_LOGIN_MAX_FAILURES")?.or(file.login_max_failures).unwrap_or(5);
        let login_window_secs =
            parse_env(&env, "TRELLIS_LOGIN_WINDOW_SECS")?.or(file.login_window_secs).unwrap_or(15 * 60);
        if login_max_failures == 0 || login_window_secs == 0 {
            return Err(ConfigError::Invalid {
                name: "TRELLIS_LOGIN_MAX_FAILURES",
                message: "login rate limit and window must be positive".into(),
            });
        }
        let log_format = match env("TRELLIS_LOG_FORMAT").or(file.log_format).as_deref() {
            None | Some("json") => LogFormat::Json,
            Some("pretty") => LogFormat::Pretty,
            Some(other) => {
                return Err(ConfigError::Invalid {
                    name: "TRELLIS_LOG_FORMAT",
                    message: format!("`{other}` is neither json nor pretty"),
                })
            }
        };
        let plugin_signatures = match env("TRELLIS_PLUGIN_SIGNATURES").or(file.plugin_signatures) {
            None => trellis_core::plugins::signatures::SignatureMode::default(),
            Some(text) => trellis_core::plugins::signatures::SignatureMode::parse(text.trim()).ok_or_else(|| {
                ConfigError::Invalid {
                    name: "TRELLIS_PLUGIN_SIGNATURES",
                    message: format!("`{text}` is none of require, warn, off"),
                }
            })?,
        };
        let admin_email = env("TRELLIS_ADMIN_EMAIL");
        let admin_password = env("TRELLIS_ADMIN_PASSWORD");
        if admin_email.is_some() != admin_password.is_some() {
            return Err(ConfigError::Invalid {
                name: "TRELLIS_ADMIN_EMAIL",
                message: "TRELLIS_ADMIN_EMAIL and TRELLIS_ADMIN_PASSWORD must be set together".into(),
            });
        }
        let expiry_scan_secs: u64 =
            parse_env(&env, "TRELLIS_EXPIRY_SCAN_INTERVAL_SECS")?.or(file.expiry_scan_interval_secs).unwrap_or(300);
        if expiry_scan_secs == 0 {
            return Err(ConfigError::Invalid {
                name: "TRELLIS_EXPIRY_SCAN_INTERVAL_SECS",
                message: "must be at least 1".into(),
            });
        }
        let renewal_secs: u64 =
            parse_env(&env, "TRELLIS_RENEWAL_INTERVAL_SECS")?.or(file.renewal_interval_secs).unwrap_or(600);
        if renewal_secs == 0 {
            return Err(ConfigError::Invalid {
                name: "TRELLIS_RENEWAL_INTERVAL_SECS",
                message: "must be at least 1".into(),
            });
        }
        let issuance_poll_secs: u64 =
            parse_env(&env, "TRELLIS_ISSUANCE_POLL_INTERVAL_SECS")?.or(file.issuance_poll_interval_secs).unwrap_or(15);
        if issuance_poll_secs == 0 {
            return Err(ConfigError::Invalid {
                name: "TRELLIS_ISSUANCE_POLL_INTERVAL_SECS",
                message: "must be at least 1".into(),
            });
        }
        let plugin_ca_bundle = env("TRELLIS_PLUGIN_CA_BUNDLE").map(PathBuf::from).or(file.plugin_ca_bundle);
        if let Some(path) = &plugin_ca_bundle {
            if !path.is_file() {
                return Err(ConfigError::Invalid {
                    name: "TRELLIS_PLUGIN_CA_BUNDLE",
                    message: format!("{} is not a readable PEM file", path.display()),
                });
            }
        }
        let plugin_max_concurrent_calls: Option<usize> =
            parse_env(&env, "TRELLIS_PLUGIN_MAX_CONCURRENT_CALLS")?.or(file.plugin_max_concurrent_calls);
        if plugin_max_concurrent_calls == Some(0) {
            return Err(ConfigError::Invalid {
                name: "TRELLIS_PLUGIN_MAX_CONCURRENT_CALLS",
                message: "must be at least 1".into(),
            });
        }
        let plugin_max_calls_per_workspace: Option<usize> =
            parse_env(&env, "TRELLIS_PLUGIN_MAX_CALLS_PER_WORKSPACE")?.or(file.plugin_max_calls_per_workspace);
        if plugin_max_calls_per_workspace == Some(0) {
            return Err(ConfigError::Invalid {
                name: "TRELLIS_PLUGIN_MAX_CALLS_PER_WORKSPACE",
                message: "must be at least 1".into(),
            });
        }
        let plugin_limits = [
            plugin_limits(&env, "CA_CONNECTOR")?,
            plugin_limits(&env, "INTEGRATION")?,
            plugin_limits(&env, "ATTESTATION_VERIFIER")?,
            plugin_limits(&env, "ISSUANCE_POLICY")?,
        ];
        let trusted_proxies = match env("TRELLIS_TRUSTED_PROXIES").or(file.trusted_proxies) {
            None => Vec::new(),
            Some(text) => parse_networks(&text)
                .map_err(|message| ConfigError::Invalid { name: "TRELLIS_TRUSTED_PROXIES", message })?,
        };
        let request_timeout_secs: u64 =
            parse_env(&env, "TRELLIS_REQUEST_TIMEOUT_SECS")?.or(file.request_timeout_secs).unwrap_or(150);
        if request_timeout_secs == 0 {
            return Err(ConfigError::Invalid {
                name: "TRELLIS_REQUEST_TIMEOUT_SECS",
                message: "must be at least 1".into(),
            });
        }
        let max_concurrent_requests: usize =
            parse_env(&env, "TRELLIS_MAX_CONCURRENT_REQUESTS")?.or(file.max_concurrent_requests).unwrap_or(1024);
        if max_concurrent_requests == 0 {
            return Err(ConfigError::Invalid {
                name: "TRELLIS_MAX_CONCURRENT_REQUESTS",
                message: "must be at least 1".into(),
            });
        }
        let pki_max_concurrent_requests: usize =
            parse_env(&env, "TRELLIS_PKI_MAX_CONCURRENT_REQUESTS")?.or(file.pki_max_concurrent_requests).unwrap_or(256);
        if pki_max_concurrent_requests == 0 {
            return Err(ConfigError::Invalid {
                name: "TRELLIS_PKI_MAX_CONCURRENT_REQUESTS",
                message: "must be at least 1".into(),
            });
        }
        let metrics_listen = match env("TRELLIS_METRICS_LISTEN").or(file.metrics_listen) {
            Some(text) if !text.trim().is_empty() => {
                Some(text.trim().parse::<SocketAddr>().map_err(|_| ConfigError::Invalid {
                    name: "TRELLIS_METRICS_LISTEN",
                    message: format!("`{text}` is not an address like 127.0.0.1:9090"),
                })?)
            }
            _ => None,
        };
        let outbox_retention_days: u64 =
            parse_env(&env, "TRELLIS_OUTBOX_RETENTION_DAYS")?.or(file.outbox_retention_days).unwrap_or(30);
        if outbox_retention_days == 0 {
            return Err(ConfigError::Invalid {
                name: "TRELLIS_OUTBOX_RETENTION_DAYS",
                message: "must be at least 1".into(),
            });
        }
        let acme_http01_listen = match env("TRELLIS_ACME_HTTP01_LISTEN").or(file.acme_http01_listen) {
            Some(text) if !text.trim().is_empty() => {
                Some(text.trim().parse::<SocketAddr>().map_err(|_| ConfigError::Invalid {
                    name: "TRELLIS_ACME_HTTP01_LISTEN",
                    message: format!("`{text}` is not an address like 0.0.0.0:80"),
                })?)
            }
            _ => None,
        };
        let acme_dns_resolver = match env("TRELLIS_ACME_DNS_RESOLVER") {
            Some(text) if !text.trim().is_empty() => {
                let text = text.trim();
                let parsed = text
                    .parse::<SocketAddr>()
                    .or_else(|_| text.parse::<std::net::IpAddr>().map(|ip| SocketAddr::new(ip, 53)));
                Some(parsed.map_err(|_| ConfigError::Invalid {
                    name: "TRELLIS_ACME_DNS_RESOLVER",
                    message: format!("`{text}` is not an address like 10.0.0.53:53"),
                })?)
            }
            _ => None,
        };
        let acme_validation = trellis_egress::acme::ValidatorConfig {
            http_port: parse_env(&env, "TRELLIS_ACME_VALIDATION_HTTP_PORT")?.unwrap_or(80),
            tls_port: parse_env(&env, "TRELLIS_ACME_VALIDATION_TLS_PORT")?.unwrap_or(443),
            dns_resolver: acme_dns_resolver,
            allow: trellis_egress::acme::parse_networks(&env("TRELLIS_ACME_VALIDATION_ALLOW").unwrap_or_default())
                .map_err(|message| ConfigError::Invalid { name: "TRELLIS_ACME_VALIDATION_ALLOW", message })?,
        };
        let acme_orders_per_hour: i64 = parse_env(&env, "TRELLIS_ACME_ORDERS_PER_HOUR")?.unwrap_or(300);
        let acme_pending_authorizations: i64 = parse_env(&env, "TRELLIS_ACME_PENDING_AUTHORIZATIONS")?.unwrap_or(1000);
        if acme_orders_per_hour < 1 || acme_pending_authorizations < 1 {
            return Err(ConfigError::Invalid {
                name: "TRELLIS_ACME_ORDERS_PER_HOUR",
                message: "the ACME limits must be at least 1".into(),
            });
        }
        let acme_challenge_wait_ms: u64 = parse_env(&env, "TRELLIS_ACME_CHALLENGE_WAIT_MS")?.unwrap_or(2000);
        if acme_challenge_wait_ms > 60_000 {
            return Err(ConfigError::Invalid {
                name: "TRELLIS_ACME_CHALLENGE_WAIT_MS",
                message: "at most 60000 (a client's request should not wait longer for its validation)".into(),
            });
        }
        let max_connections: usize =
            parse_env(&env, "TRELLIS_MAX_CONNECTIONS")?.or(file.max_connections).unwrap_or(4096);
        if max_connections == 0 {
            return Err(ConfigError::Invalid { name: "TRELLIS_MAX_CONNECTIONS", message: "must be at least 1".into() });
        }
        let public_url = match env("TRELLIS_PUBLIC_URL").or(file.public_url) {
            Some(text) if !text.trim().is_empty() => {
                let text = text.trim().trim_end_matches('/').to_owned();
                let valid = (text.starts_with("http://") || text.starts_with("https://"))
                    && text.len() > "https://".len()
                    && !text.contains(char::is_whitespace);
                if !valid {
                    return Err(ConfigError::Invalid {
                        name: "TRELLIS_PUBLIC_URL",
                        message: format!("`{text}` is not an http:// or https:// base URL"),
                    });
                }
                text
            }
            _ => format!("http://{listen}"),
        };
        let plugin_allow_private_networks: bool = parse_env(&env, "TRELLIS_PLUGIN_ALLOW_PRIVATE_NETWORKS")?
            .or(file.plugin_allow_private_networks)
            .unwrap_or(false);
        let webhook_ca_bundle = env("TRELLIS_WEBHOOK_CA_BUNDLE")
            .map(PathBuf::from)
            .or(file.webhook_ca_bundle)
            .or_else(|| plugin_ca_bundle.clone());
        if let Some(path) = &webhook_ca_bundle {
            if !path.is_file() {
                return Err(ConfigError::Invalid {
                    name: "TRELLIS_WEBHOOK_CA_BUNDLE",
                    message: format!("{} is not a readable PEM file", path.display()),
                });
            }
        }
        let mut delivery = trellis_core::webhooks::worker::WorkerSettings::default();
        let at_least_one = |name: &'static str, value: u64| {
            if value == 0 {
                Err(ConfigError::Invalid { name, message: "must be at least 1".into() })
            } else {
                Ok(value)
            }
        };
        if let Some(secs) = parse_env::<u64>(&env, "TRELLIS_DELIVERY_LEASE_SECS")?.or(file.delivery_lease_secs) {
            delivery.lease = Duration::from_secs(at_least_one("TRELLIS_DELIVERY_LEASE_SECS", secs)?);
        }
        if let Some(n) = parse_env::<usize>(&env, "TRELLIS_DELIVERY_MAX_IN_FLIGHT")?.or(file.delivery_max_in_flight) {
            delivery.max_in_flight = at_least_one("TRELLIS_DELIVERY_MAX_IN_FLIGHT", n as u64)? as usize;
        }
        if let Some(n) =
            parse_env::<usize>(&env, "TRELLIS_DELIVERY_PER_TARGET_IN_FLIGHT")?.or(file.delivery_per_target_in_flight)
        {
            delivery.per_target_in_flight = at_least_one("TRELLIS_DELIVERY_PER_TARGET_IN_FLIGHT", n as u64)? as usize;
        }
        if let Some(hours) =
            parse_env::<u64>(&env, "TRELLIS_WEBHOOK_DISABLE_AFTER_HOURS")?.or(file.webhook_disable_after_hours)
        {
            delivery.disable_after =
                Duration::from_secs(at_least_one("TRELLIS_WEBHOOK_DISABLE_AFTER_HOURS", hours)?.saturating_mul(3600));
        }
        let mut discovery = trellis_core::discovery::DiscoverySettings::default();
        if let Some(n) =
            parse_env::<usize>(&env, "TRELLIS_DISCOVERY_TLS_CONCURRENCY")?.or(file.discovery_tls_concurrency)
        {
            discovery.tls.concurrency = at_least_one("TRELLIS_DISCOVERY_TLS_CONCURRENCY", n as u64)?.min(256) as usize;
        }
        if let Some(ms) = parse_env::<u64>(&env, "TRELLIS_DISCOVERY_TLS_TIMEOUT_MS")?.or(file.discovery_tls_timeout_ms)
        {
            discovery.tls.timeout = Duration::from_millis(at_least_one("TRELLIS_DISCOVERY_TLS_TIMEOUT_MS", ms)?);
        }
        if let Some(secs) = parse_env::<u64>(&env, "TRELLIS_DISCOVERY_STALE_SECS")?.or(file.discovery_stale_secs) {
            discovery.stale_after = Duration::from_secs(at_least_one("TRELLIS_DISCOVERY_STALE_SECS", secs)?);
        }
        if let Some(n) = parse_env::<u64>(&env, "TRELLIS_DISCOVERY_MAX_SCANS_PER_WORKSPACE")?
            .or(file.discovery_max_scans_per_workspace)
        {
            discovery.max_scans_per_workspace =
                usize::try_from(at_least_one("TRELLIS_DISCOVERY_MAX_SCANS_PER_WORKSPACE", n)?).unwrap_or(usize::MAX);
        }
        if let Some(n) =
            parse_env::<u64>(&env, "TRELLIS_DISCOVERY_ENDPOINTS_PER_HOUR")?.or(file.discovery_endpoints_per_hour)
        {
            discovery.endpoints_per_hour =
                usize::try_from(at_least_one("TRELLIS_DISCOVERY_ENDPOINTS_PER_HOUR", n)?).unwrap_or(usize::MAX);
        }
        let password_login: bool = parse_env(&env, "TRELLIS_PASSWORD_LOGIN")?.or(file.password_login).unwrap_or(true);
        let oidc = oidc_settings(&env, file.oidc.unwrap_or_default(), &public_url)?;
        if !password_login && oidc.is_none() {
            return Err(ConfigError::Invalid {
                name: "TRELLIS_PASSWORD_LOGIN",
                message:
                    "password sign-in can be turned off only when OpenID Connect is configured (TRELLIS_OIDC_ISSUER)"
                        .into(),
            });
        }
        let ca_health_secs: u64 =
            parse_env(&env, "TRELLIS_CA_HEALTH_INTERVAL_SECS")?.or(file.ca_health_interval_secs).unwrap_or(900);
        Ok(Config {
            password_login,
            oidc,
            discovery_allow_private_networks: parse_env(&env, "TRELLIS_DISCOVERY_ALLOW_PRIVATE_NETWORKS")?
                .or(file.discovery_allow_private_networks)
                .unwrap_or(false),
            discovery,
            ca_health_interval: (ca_health_secs > 0).then(|| Duration::from_secs(ca_health_secs)),
            webhook_allow_private_networks: parse_env(&env, "TRELLIS_WEBHOOK_ALLOW_PRIVATE_NETWORKS")?
                .or(file.webhook_allow_private_networks)
                .unwrap_or(plugin_allow_private_networks),
            webhook_ca_bundle,
            delivery_worker: parse_env(&env, "TRELLIS_DELIVERY_WORKER")?.or(file.delivery_worker).unwrap_or(true),
            delivery,
            public_url,
            max_connections,
            outbox_retention: Duration::from_secs(outbox_retention_days.saturating_mul(86_400)),
            request_timeout: Duration::from_secs(request_timeout_secs),
            max_concurrent_requests,
            pki_max_concurrent_requests,
            metrics_listen,
            trusted_proxies,
            plugin_ca_bundle,
            plugin_cache_dir: env("TRELLIS_PLUGIN_CACHE_DIR").map(PathBuf::from).or(file.plugin_cache_dir),
            plugin_signatures,
            plugin_max_concurrent_calls,
            plugin_max_calls_per_workspace,
            plugin_limits,
            first_party_plugin_dir: env("TRELLIS_FIRST_PARTY_PLUGIN_DIR")
                .map(PathBuf::from)
                .or(file.first_party_plugin_dir),
            expiry_scan_interval: Duration::from_secs(expiry_scan_secs),
            renewal_interval: Duration::from_secs(renewal_secs),
            issuance_poll_interval: Duration::from_secs(issuance_poll_secs),
            listen,
            acme_http01_listen,
            acme_validation,
            acme_orders_per_hour,
            acme_pending_authorizations,
            acme_challenge_wait: Duration::from_millis(acme_challenge_wait_ms),
            database_url,
            data_dir,
            master_key: env("TRELLIS_MASTER_KEY"),
            master_key_file,
            body_limit_bytes,
            secure_cookies: parse_env(&env, "TRELLIS_SECURE_COOKIES")?.or(file.secure_cookies).unwrap_or(false),
            login_max_failures,
            login_window: Duration::from_secs(login_window_secs),
            log_format,
            admin_email,
            admin_password,
            plugin_dir: env("TRELLIS_PLUGIN_DIR").map(PathBuf::from).or(file.plugin_dir),
            plugin_allow_private_networks,
            plugin_record_private_networks: parse_env(&env, "TRELLIS_PLUGIN_RECORD_PRIVATE_NETWORKS")?
                .or(file.plugin_record_private_networks)
                .unwrap_or(false),
        })
    }
}

/// A comma-separated list of addresses and CIDR networks (`10.0.0.5, 10.1.0.0/16, ::1`).
/// `TRELLIS_OIDC_*` over the `[oidc]` table; none when no issuer is set.
fn oidc_settings(
    env: &impl Fn(&str) -> Option<String>,
    file: FileOidc,
    public_url: &str,
) -> Result<Option<OidcSettings>, ConfigError> {
    let Some(issuer) = env("TRELLIS_OIDC_ISSUER").or(file.issuer).map(|i| i.trim().to_owned()) else {
        return Ok(None);
    };
    let invalid = |name: &'static str, message: String| ConfigError::Invalid { name, message };
    let url =
        url::Url::parse(&issuer).map_err(|_| invalid("TRELLIS_OIDC_ISSUER", format!("`{issuer}` is not a URL")))?;
    if !matches!(url.scheme(), "https" | "http") || url.query().is_some() || url.fragment().is_some() {
        return Err(invalid(
            "TRELLIS_OIDC_ISSUER",
            format!(
                "`{issuer}` must be an https:// URL without query or fragment (http:// only for a loopback test IdP)"
            ),
        ));
    }
    let client_id = env("TRELLIS_OIDC_CLIENT_ID")
        .or(file.client_id)
        .ok_or_else(|| invalid("TRELLIS_OIDC_CLIENT_ID", "is required with TRELLIS_OIDC_ISSUER".into()))?;
    let secret_file = env("TRELLIS_OIDC_CLIENT_SECRET_FILE").map(PathBuf::from).or(file.client_secret_file);
    let client_secret = match (env("TRELLIS_OIDC_CLIENT_SECRET").or(file.client_secret), secret_file) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "TRELLIS_OIDC_CLIENT_SECRET",
                "set TRELLIS_OIDC_CLIENT_SECRET or TRELLIS_OIDC_CLIENT_SECRET_FILE, not both".into(),
            ))
        }
        (Some(secret), None) => secret,
        (None, Some(path)) => std::fs::read_to_string(&path)
            .map_err(|err| {
                invalid("TRELLIS_OIDC_CLIENT_SECRET_FILE", format!("cannot read {}: {err}", path.display()))
            })?
            .trim()
            .to_owned(),
        (None, None) => {
            return Err(invalid(
                "TRELLIS_OIDC_CLIENT_SECRET",
                "is required with TRELLIS_OIDC_ISSUER (Trellis is a confidential client)".into(),
            ))
        }
    };
    if client_secret.is_empty() {
        return Err(invalid("TRELLIS_OIDC_CLIENT_SECRET", "is empty".into()));
    }
    let mut scopes: Vec<String> = env("TRELLIS_OIDC_SCOPES")
        .or(file.scopes)
        .unwrap_or_else(|| "openid email profile".into())
        .split([' ', ','])
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if !scopes.iter().any(|s| s == "openid") {
        scopes.insert(0, "openid".into());
    }
    let ca_bundle = env("TRELLIS_OIDC_CA_BUNDLE").map(PathBuf::from).or(file.ca_bundle);
    if let Some(path) = &ca_bundle {
        if !path.is_file() {
            return Err(invalid("TRELLIS_OIDC_CA_BUNDLE", format!("{} is not a readable PEM file", path.display())));
        }
    }
    let mut role_mappings = Vec::new();
    for (index, mapping) in file.role_mappings.into_iter().enumerate() {
        let role = trellis_core::auth::Role::parse(mapping.role.trim()).ok_or_else(|| {
            invalid(
                "oidc.role_mappings",
                format!("mapping {}: role `{}` is not owner, member or viewer", index + 1, mapping.role),
            )
        })?;
        if mapping.group.trim().is_empty() || mapping.workspace.trim().is_empty() {
            return Err(invalid(
                "oidc.role_mappings",
                format!("mapping {}: group and workspace must be set", index + 1),
            ));
        }
        role_mappings.push(trellis_core::auth::oidc::RoleMapping {
            group: mapping.group.trim().to_owned(),
            workspace: mapping.workspace.trim().to_owned(),
            role,
        });
    }
    let jwks_min_refresh_secs: u64 =
        parse_env(env, "TRELLIS_OIDC_JWKS_MIN_REFRESH_SECS")?.or(file.jwks_min_refresh_secs).unwrap_or(60);
    let clock_skew_secs: u64 = parse_env(env, "TRELLIS_OIDC_CLOCK_SKEW_SECS")?.or(file.clock_skew_secs).unwrap_or(60);
    if clock_skew_secs > 600 {
        return Err(invalid("TRELLIS_OIDC_CLOCK_SKEW_SECS", "must be at most 600".into()));
    }
    Ok(Some(OidcSettings {
        provider: trellis_core::auth::oidc::OidcConfig {
            issuer,
            client_id,
            client_secret,
            scopes,
            display_name: env("TRELLIS_OIDC_DISPLAY_NAME")
                .or(file.display_name)
                .unwrap_or_else(|| "Single sign-on".into()),
            groups_claim: env("TRELLIS_OIDC_GROUPS_CLAIM").or(file.groups_claim).unwrap_or_else(|| "groups".into()),
            redirect_uri: format!("{public_url}/api/auth/oidc/callback"),
            post_logout_redirect_uri: format!("{public_url}/"),
            role_mappings,
            clock_skew: Duration::from_secs(clock_skew_secs),
            jwks_min_refresh: Duration::from_secs(jwks_min_refresh_secs),
        },
        ca_bundle,
    }))
}

fn parse_networks(text: &str) -> Result<Vec<(std::net::IpAddr, u8)>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            let (address, prefix) = item.split_once('/').unwrap_or((item, ""));
            let address: std::net::IpAddr =
                address.parse().map_err(|_| format!("`{item}` is not an IP address or CIDR network"))?;
            let max = if address.is_ipv4() { 32 } else { 128 };
            let prefix = if prefix.is_empty() {
                max
            } else {
                prefix.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(|| format!("`{item}`: bad prefix length"))?
            };
            Ok((address, prefix))
        })
        .collect()
}

/// `TRELLIS_PLUGIN_<kind>_{MEMORY_MB,CPU_MS,WALL_MS}`: positive integers when set.
fn plugin_limits(env: &impl Fn(&str) -> Option<String>, kind: &str) -> Result<PluginLimitOverrides, ConfigError> {
    let names: [&'static str; 3] = match kind {
        "CA_CONNECTOR" => [
            "TRELLIS_PLUGIN_CA_CONNECTOR_MEMORY_MB",
            "TRELLIS_PLUGIN_CA_CONNECTOR_CPU_MS",
            "TRELLIS_PLUGIN_CA_CONNECTOR_WALL_MS",
        ],
        "INTEGRATION" => [
            "TRELLIS_PLUGIN_INTEGRATION_MEMORY_MB",
            "TRELLIS_PLUGIN_INTEGRATION_CPU_MS",
            "TRELLIS_PLUGIN_INTEGRATION_WALL_MS",
        ],
        _ => [
            "TRELLIS_PLUGIN_ATTESTATION_VERIFIER_MEMORY_MB",
            "TRELLIS_PLUGIN_ATTESTATION_VERIFIER_CPU_MS",
            "TRELLIS_PLUGIN_ATTESTATION_VERIFIER_WALL_MS",
        ],
    };
    let mut values = [None; 3];
    for (value, name) in values.iter_mut().zip(names) {
        let parsed: Option<u64> = parse_env(env, name)?;
        if parsed == Some(0) {
            return Err(ConfigError::Invalid { name, message: "must be at least 1".into() });
        }
        *value = parsed;
    }
    Ok(PluginLimitOverrides { memory_mb: values[0], cpu_ms: values[1], wall_ms: values[2] })
}

/// The data directory defaults to the directory holding the SQLite file, else `./data`.
fn default_data_dir(database_url: &str) -> PathBuf {
    let Some(path) = database_url.strip_prefix("sqlite://").or_else(|| database_url.strip_prefix("sqlite:")) else {
        return PathBuf::from("./data");
    };
    let path = path.split('?').next().unwrap_or(path);
    match Path::new(path).parent() {
        Some(parent) if !parent.as_os_str().is_empty() && path != ":memory:" => parent.to_path_buf(),
        _ => PathBuf::from("./data"),
    }
}

fn parse_env<T: std::str::FromStr>(
    env: &impl Fn(&str) -> Option<String>,
    name: &'static str,
) -> Result<Option<T>, ConfigError> {
    match env(name) {
        None => Ok(None),
        Some(text) => text
            .trim()
            .parse::<T>()
            .map(Some)
            .map_err(|_| ConfigError::Invalid { name, message: format!("`{text}` is not a valid value") }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_sources(FileConfig::default(), |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_are_the_embedded_sqlite_setup() {
        let config = load(&[]).unwrap();
        assert_eq!(config.database_url, DEFAULT_DATABASE_URL);
        assert_eq!(config.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(config.data_dir, PathBuf::from("./data"));
        assert_eq!(config.master_key_file, PathBuf::from("./data/master.key"));
        assert_eq!(config.body_limit_bytes, 1024 * 1024);
    }

    #[test]
    fn trusted_proxies_are_addresses_or_networks() {
        let config = load(&[("TRELLIS_TRUSTED_PROXIES", "10.0.0.5, 10.1.0.0/16,::1")]).unwrap();
        assert_eq!(config.trusted_proxies.len(), 3);
        assert_eq!(config.trusted_proxies[1].1, 16);
        let err = load(&[("TRELLIS_TRUSTED_PROXIES", "10.0.0.0/40")]).unwrap_err();
        assert!(err.to_string().starts_with("TRELLIS_TRUSTED_PROXIES"), "{err}");
        let err = load(&[("TRELLIS_TRUSTED_PROXIES", "proxy.example")]).unwrap_err();
        assert!(err.to_string().starts_with("TRELLIS_TRUSTED_PROXIES"), "{err}");
    }

    #[test]
    fn pki_pool_and_metrics_listener_are_validated() {
        let config = load(&[]).unwrap();
        assert_eq!((config.pki_max_concurrent_requests, config.metrics_listen), (256, None));
        let config =
            load(&[("TRELLIS_PKI_MAX_CONCURRENT_REQUESTS", "8"), ("TRELLIS_METRICS_LISTEN", "127.0.0.1:9090")])
                .unwrap();
        assert_eq!(config.pki_max_concurrent_requests, 8);
        assert_eq!(config.metrics_listen.map(|a| a.port()), Some(9090));
        let err = load(&[("TRELLIS_PKI_MAX_CONCURRENT_REQUESTS", "0")]).unwrap_err();
        assert!(err.to_string().starts_with("TRELLIS_PKI_MAX_CONCURRENT_REQUESTS"), "{err}");
        let err = load(&[("TRELLIS_METRICS_LISTEN", "metrics")]).unwrap_err();
        assert!(err.to_string().starts_with("TRELLIS_METRICS_LISTEN"), "{err}");
    }

    #[test]
    fn plugin_settings_are_validated_not_ignored() {
        let err = load(&[("TRELLIS_PLUGIN_INTEGRATION_CPU_MS", "fast")]).unwrap_err();
        assert!(err.to_string().starts_with("TRELLIS_PLUGIN_INTEGRATION_CPU_MS"), "{err}");
        let err = load(&[("TRELLIS_PLUGIN_MAX_CONCURRENT_CALLS", "0")]).unwrap_err();
        assert!(err.to_string().starts_with("TRELLIS_PLUGIN_MAX_CONCURRENT_CALLS"), "{err}");
        let err = load(&[("TRELLIS_PLUGIN_CA_BUNDLE", "/nonexistent/bundle.pem")]).unwrap_err();
        assert!(err.to_string().starts_with("TRELLIS_PLUGIN_CA_BUNDLE"), "{err}");
        let err = load(&[("TRELLIS_PLUGIN_ALLOW_PRIVATE_NETWORKS", "maybe")]).unwrap_err();
        assert!(err.to_string().starts_with("TRELLIS_PLUGIN_ALLOW_PRIVATE_NETWORKS"), "{err}");
        let config = load(&[("TRELLIS_PLUGIN_ATTESTATION_VERIFIER_WALL_MS", "2500")]).unwrap();
        assert_eq!(config.plugin_limits[2].wall_ms, Some(2500));
    }

    #[test]
    fn bad_values_name_the_variable() {
        let err = load(&[("TRELLIS_LISTEN", "nowhere")]).unwrap_err();
        assert!(err.to_string().starts_with("TRELLIS_LISTEN"), "{err}");
        let err = load(&[("TRELLIS_DATABASE_URL", "mysql://x")]).unwrap_err();
        assert!(err.to_string().starts_with("TRELLIS_DATABASE_URL"), "{err}");
        let err = load(&[("TRELLIS_ACME_HTTP01_LISTEN", ":80")]).unwrap_err();
        assert!(err.to_string().starts_with("TRELLIS_ACME_HTTP01_LISTEN"), "{err}");
        assert_eq!(load(&[]).unwrap().acme_http01_listen, None);
        let config = load(&[("TRELLIS_ACME_HTTP01_LISTEN", "0.0.0.0:80")]).unwrap();
        assert_eq!(config.acme_http01_listen.map(|a| a.port()), Some(80));
        let err = load(&[("TRELLIS_ADMIN_EMAIL", "a@b.c")]).unwrap_err();
        assert!(err.to_string().contains("together"), "{err}");
    }

    #[test]
    fn oidc_settings_are_validated_and_the_secret_redacted() {
        assert!(load(&[]).unwrap().oidc.is_none());
        let base = [
            ("TRELLIS_OIDC_ISSUER", "https://idp.example/realms/x"),
            ("TRELLIS_OIDC_CLIENT_ID", "trellis"),
            ("TRELLIS_OIDC_CLIENT_SECRET", "hunter2"),
            ("TRELLIS_PUBLIC_URL", "https://trellis.example"),
        ];
        let config = load(&base).unwrap();
        let oidc = config.oidc.clone().unwrap().provider;
        assert_eq!(oidc.redirect_uri, "https://trellis.example/api/auth/oidc/callback");
        assert_eq!(oidc.scopes, ["openid", "email", "profile"]);
        assert_eq!(oidc.groups_claim, "groups");
        assert!(!format!("{config:?}").contains("hunter2"));
        let err = load(&base[..2]).unwrap_err();
        assert!(err.to_string().starts_with("TRELLIS_OIDC_CLIENT_SECRET"), "{err}");
        let err = load(&[("TRELLIS_PASSWORD_LOGIN", "false")]).unwrap_err();
        assert!(err.to_string().starts_with("TRELLIS_PASSWORD_LOGIN"), "{err}");
        let err = load(&[("TRELLIS_OIDC_ISSUER", "ftp://idp"), base[1], base[2]]).unwrap_err();
        assert!(err.to_string().starts_with("TRELLIS_OIDC_ISSUER"), "{err}");
        let file: FileConfig = toml::from_str(
            "[oidc]\nissuer = \"https://idp.example\"\nclient_id = \"c\"\nclient_secret = \"s\"\n\n[[oidc.role_mappings]]\ngroup = \"pki-admins\"\nworkspace = \"ops\"\nrole = \"owner\"\n",
        )
        .unwrap();
        let config = Config::from_sources(file, |_| None).unwrap();
        let mappings = config.oidc.unwrap().provider.role_mappings;
        assert_eq!(mappings.len(), 1);
        assert_eq!(mappings[0].role, trellis_core::auth::Role::Owner);
    }

    #[test]
    fn database_password_is_redacted() {
        let config = load(&[("TRELLIS_DATABASE_URL", "postgres://trellis:hunter2@db.internal/trellis")]).unwrap();
        let printed = format!("{config:?}");
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(printed.contains("db.internal"), "{printed}");
    }
}
