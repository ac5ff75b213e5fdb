//! Runtime configuration: limits per plugin kind, admission, egress policy, cache.

use std::path::PathBuf;
use std::time::Duration;

use crate::PluginKind;

/// Limits applied to every single call of a plugin of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// Linear memory a call may grow to, in bytes.
    pub memory_bytes: usize,
    /// Time the guest may spend running wasm code (epoch deadline).
    pub cpu_time: Duration,
    /// Wall-clock time for the whole call, including time blocked in host calls and outbound HTTP.
    pub wall_time: Duration,
    /// Log lines (structured plus stdout/stderr) a call may emit before further lines are dropped.
    pub max_log_lines: u32,
}

/// Limits per plugin kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindLimits {
    pub ca_connector: CallLimits,
    pub integration: CallLimits,
    pub attestation_verifier: CallLimits,
    pub issuance_policy: CallLimits,
}

impl KindLimits {
    /// The limits for one kind.
    pub fn for_kind(&self, kind: PluginKind) -> CallLimits {
        match kind {
            PluginKind::CaConnector => self.ca_connector,
            PluginKind::Integration => self.integration,
            PluginKind::AttestationVerifier => self.attestation_verifier,
            PluginKind::IssuancePolicy => self.issuance_policy,
        }
    }

    /// The same limits for every kind (tests, benchmarks).
    pub fn uniform(limits: CallLimits) -> KindLimits {
        KindLimits { ca_connector: limits, integration: limits, attestation_verifier: limits, issuance_policy: limits }
    }

    fn max_memory(&self) -> usize {
        [self.ca_connector, self.integration, self.attestation_verifier, self.issuance_policy]
            .iter()
            .map(|limits| limits.memory_bytes)
            .max()
            .unwrap_or(0)
    }
}

impl Default for KindLimits {
    fn default() -> KindLimits {
        KindLimits {
            // ACME orders poll the CA; allow the longest wall time.
            ca_connector: CallLimits {
                memory_bytes: 128 << 20,
                cpu_time: Duration::from_secs(5),
                wall_time: Duration::from_secs(120),
                max_log_lines: 500,
            },
            integration: CallLimits {
                memory_bytes: 64 << 20,
                cpu_time: Duration::from_secs(2),
                wall_time: Duration::from_secs(30),
                max_log_lines: 200,
            },
            // Pure computation: short wall time, more CPU for signature checks.
            attestation_verifier: CallLimits {
                memory_bytes: 64 << 20,
                cpu_time: Duration::from_secs(5),
                wall_time: Duration::from_secs(10),
                max_log_lines: 200,
            },
            // A decision on every issuance: small and quick.
            issuance_policy: CallLimits {
                memory_bytes: 32 << 20,
                cpu_time: Duration::from_millis(500),
                wall_time: Duration::from_secs(2),
                max_log_lines: 50,
            },
        }
    }
}

/// Outbound HTTP policy knobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressConfig {
    /// Allow private, loopback, link-local and CGNAT destinations
    /// (`TRELLIS_PLUGIN_ALLOW_PRIVATE_NETWORKS`). Cloud metadata addresses stay refused regardless.
    pub allow_private_networks: bool,
    /// Let a record's own settings allow private destinations for that record's calls
    /// (`TRELLIS_PLUGIN_RECORD_PRIVATE_NETWORKS`): the operator delegates the choice per record.
    pub allow_record_private_networks: bool,
    /// PEM bundle of extra CAs trusted for plugin TLS, on top of the system roots
    /// (`TRELLIS_PLUGIN_CA_BUNDLE`).
    pub ca_bundle: Option<PathBuf>,
    /// Whether to load the system trust store (turned off by tests for hermeticity).
    pub use_system_roots: bool,
    /// TCP connect timeout (also bounds DNS resolution).
    pub connect_timeout: Duration,
    /// Time to the response head.
    pub first_byte_timeout: Duration,
    /// Largest response body a plugin may receive.
    pub max_response_bytes: u64,
}

impl Default for EgressConfig {
    fn default() -> EgressConfig {
        EgressConfig {
            allow_private_networks: false,
            allow_record_private_networks: false,
            ca_bundle: None,
            use_system_roots: true,
            connect_timeout: Duration::from_secs(5),
            first_byte_timeout: Duration::from_secs(20),
            max_response_bytes: 4 << 20,
        }
    }
}

/// The key that authenticates compiled artefacts in the cache (derived from the master key by
/// the binary). Its `Debug` never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct ArtefactKey([u8; 32]);

impl ArtefactKey {
    pub fn new(bytes: [u8; 32]) -> ArtefactKey {
        ArtefactKey(bytes)
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// The key kept in `dir/artefact.key` (32 bytes, 0600), drawn from `entropy` by the first
    /// runtime to ask: how every server and test started from one build tree shares its cache
    /// (`target/plugin-cache`), each having a master key of its own. Development and tests
    /// only: an installed service derives its key from the master key.
    pub fn from_key_file(
        dir: &std::path::Path,
        entropy: &dyn trellis_core::clock::Entropy,
    ) -> std::io::Result<ArtefactKey> {
        use std::io::Write as _;
        std::fs::create_dir_all(dir)?;
        let mut fresh = [0u8; 32];
        entropy.fill(&mut fresh);
        let path = dir.join("artefact.key");
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        match options.open(&path) {
            // Written through a temporary name would be nicer, but create_new already makes the
            // first writer win; a reader racing it sees a short file and retries below.
            Ok(mut file) => file.write_all(&fresh)?,
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(err) => return Err(err),
        }
        for _ in 0..50 {
            let bytes = std::fs::read(&path)?;
            if let Ok(key) = <[u8; 32]>::try_from(bytes.as_slice()) {
                return Ok(ArtefactKey::new(key));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Err(std::io::Error::other(format!("{} is not a 32-byte key", path.display())))
    }
}

impl std::fmt::Debug for ArtefactKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ArtefactKey(<redacted>)")
    }
}

/// Everything the plugin runtime needs to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Directory for compiled code; `None` (or no `cache_key`) disables the on-disk cache.
    pub cache_dir: Option<PathBuf>,
    /// Authenticates the cache's artefacts (see `artefacts`): files it does not verify are
    /// recompiled, never loaded.
    pub cache_key: Option<ArtefactKey>,
    /// Calls running at once; more calls wait (admission queue) instead of failing.
    pub max_concurrent_calls: usize,
    /// Calls one workspace may run at once: its fair share, so that one tenant's slow or
    /// numerous calls cannot take every slot from the others. Default a quarter of the total.
    pub max_calls_per_workspace: Option<usize>,
    /// How long a call may wait for a slot before failing with `plugin.overloaded`.
    pub admission_timeout: Duration,
    /// Per-kind call limits.
    pub limits: KindLimits,
    /// Outbound HTTP policy.
    pub egress: EgressConfig,
    /// Epoch tick; CPU budgets are enforced with this granularity.
    pub epoch_tick: Duration,
    /// Total bytes of state per plugin per workspace.
    pub state_quota_bytes: u64,
}

impl RuntimeConfig {
    /// Production defaults with the compiled-code cache under `data_dir/plugin-cache`.
    pub fn with_data_dir(data_dir: impl Into<PathBuf>) -> RuntimeConfig {
        RuntimeConfig { cache_dir: Some(data_dir.into().join("plugin-cache")), ..RuntimeConfig::without_cache() }
    }

    /// Production defaults without an on-disk cache.
    pub fn without_cache() -> RuntimeConfig {
        RuntimeConfig {
            cache_dir: None,
            cache_key: None,
            max_concurrent_calls: 256,
            max_calls_per_workspace: None,
            admission_timeout: Duration::from_secs(30),
            limits: KindLimits::default(),
            egress: EgressConfig::default(),
            epoch_tick: Duration::from_millis(10),
            state_quota_bytes: 1 << 20,
        }
    }

    pub(crate) fn workspace_share(&self) -> usize {
        self.max_calls_per_workspace.unwrap_or(self.max_concurrent_calls / 4).clamp(1, self.max_concurrent_calls.max(1))
    }

    pub(crate) fn max_memory_bytes(&self) -> usize {
        self.limits.max_memory()
    }
}
