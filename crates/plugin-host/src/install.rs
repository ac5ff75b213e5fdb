//! Installing a component: checks that it is a component, compiles it (or loads it from the
//! cache), reads which world and contract version it exports, binds it to that version's
//! typed exports, asks it to describe itself and validates the answer. Also the plugin
//! directory: install on start and watch for files dropped in.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;

use crate::bindings::{CONNECTOR_EXPORT, NOTIFIER_EXPORT, POLICY_EXPORT, VERIFIER_EXPORT};
use crate::registry::LoadedPlugin;
use crate::runtime::PluginRuntime;
use crate::worlds::{served, Described, WorldPre, SERVED_VERSIONS};
use tokio::sync::OnceCell;
use trellis_core::plugins::DeferredVersion;

use crate::{Activation, CallTarget, InstallError, InstalledVersion, PluginError, PluginInfo, PluginKind, PluginRef};

/// What the host says it supports, in refusals: `0.1.x, 0.2.x`.
fn supported_versions() -> String {
    SERVED_VERSIONS.iter().map(|(major, minor)| format!("{major}.{minor}.x")).collect::<Vec<_>>().join(", ")
}

impl PluginRuntime {
    /// Validates, compiles (or loads from the cache) and registers a component.
    ///
    /// Refuses non-components, components importing what the host does not provide,
    /// unserved WIT versions, bad metadata and duplicate id+version.
    pub(crate) async fn install_component(
        &self,
        wasm: &[u8],
        activation: Activation,
    ) -> Result<InstalledVersion, PluginError> {
        if wasm.len() < 8 || wasm.get(..4) != Some(b"\0asm") {
            return Err(InstallError::NotAComponent { detail: " (no wasm header)".into() }.into());
        }
        // Components carry version 0x0d and layer 1; core modules version 1, layer 0.
        if wasm.get(6..8) != Some(&[0x01, 0x00]) {
            return Err(InstallError::NotAComponent { detail: " (this is a core wasm module)".into() }.into());
        }
        let sha256 = hex::encode(Sha256::digest(wasm));
        if let Some((id, version)) = self.read_registry().installed_digest(&sha256) {
            return Err(InstallError::DuplicateVersion { id, version: version.to_string() }.into());
        }

        let (pre, wit_version) = self.compile(wasm.to_vec(), &sha256).await?;
        let kind = pre.kind();
        let mut loaded = LoadedPlugin {
            info: Arc::new(placeholder_info(kind)),
            sha256,
            size: wasm.len(),
            wit_version,
            label: Arc::from(format!("(installing {})", "component")),
            kind,
            pre: OnceCell::new_with(Some(pre)),
            source: None,
            signer: std::sync::Mutex::new(None),
        };
        let target = CallTarget::new("", PluginRef::Id(String::new()), serde_json::Value::Null);
        let described = self
            .invoke(&loaded, &target, loaded.world()?.describe())
            .await
            .map_err(|err| InstallError::DescribeFailed(Box::new(err)))?
            .value;
        let info = validate_info(described, kind)?;
        loaded.label = Arc::from(format!("{}@{}", info.id, info.version));
        loaded.info = Arc::new(info);
        let loaded = Arc::new(loaded);

        let active = self.write_registry().insert(loaded.clone(), |active| match activation {
            Activation::Always => true,
            Activation::Never => false,
            Activation::IfNewer => active.is_none_or(|active| loaded.info.version > *active),
        })?;
        tracing::info!(plugin = %loaded.label, sha256 = %loaded.sha256, wit = %loaded.wit_version, active, "plugin installed");
        Ok(loaded.describe(active))
    }

    /// Registers a version an earlier install validated (the database's) without compiling it;
    /// [`PluginRuntime::compiled`] compiles it on its first call.
    pub(crate) fn install_deferred_version(&self, version: DeferredVersion) -> Result<InstalledVersion, PluginError> {
        let wit_version = semver::Version::parse(&version.wit_version).ok().filter(served).ok_or_else(|| {
            InstallError::IncompatibleWitVersion { found: version.wit_version.clone(), supported: supported_versions() }
        })?;
        // Validated when it was first installed; the database keeps what that install stored.
        let info = version.info;
        let loaded = Arc::new(LoadedPlugin {
            label: Arc::from(format!("{}@{}", info.id, info.version)),
            kind: info.kind,
            info: Arc::new(info),
            sha256: version.sha256,
            size: version.size_bytes,
            wit_version,
            pre: OnceCell::new(),
            source: Some(version.source),
            signer: std::sync::Mutex::new(version.signer_key_id),
        });
        let active = self.write_registry().insert(loaded.clone(), |_| false)?;
        Ok(loaded.describe(active))
    }

    /// The version's world, compiling a deferred version on its first call (once, whatever
    /// the number of concurrent first calls). A failure fails this call; the next call tries
    /// again.
    pub(crate) async fn compiled<'a>(&self, plugin: &'a LoadedPlugin) -> Result<&'a WorldPre, PluginError> {
        plugin
            .pre
            .get_or_try_init(|| async {
                let unloadable = |reason: String| PluginError::Unloadable { plugin: plugin.label.to_string(), reason };
                let source =
                    plugin.source.as_ref().ok_or_else(|| unloadable("neither code nor a source for it".into()))?;
                let started = std::time::Instant::now();
                let bytes = source.component(&plugin.sha256).await.map_err(|err| unloadable(err.to_string()))?;
                if hex::encode(Sha256::digest(&bytes)) != plugin.sha256 {
                    return Err(unloadable(format!("the stored component does not match its digest {}", plugin.sha256)));
                }
                let hits_before = self.artefact_stats().map(|s| s.hits);
                let (pre, wit_version) =
                    self.compile(bytes, &plugin.sha256).await.map_err(|err| unloadable(err.to_string()))?;
                // Another first call may load concurrently; the counter moving is evidence enough
                // for a log line.
                let from_cache = self.artefact_stats().map(|s| s.hits) > hits_before;
                if pre.kind() != plugin.kind || wit_version != plugin.wit_version {
                    return Err(unloadable(format!(
                        "the stored component is a {} {wit_version} component, not the {} {} its version row says",
                        pre.kind(),
                        plugin.kind,
                        plugin.wit_version
                    )));
                }
                tracing::info!(plugin = %plugin.label, elapsed_ms = started.elapsed().as_millis() as u64, from_cache, "plugin loaded on its first call");
                Ok(pre)
            })
            .await
    }

    /// Compiles (or loads from the cache) a component, checks what it imports and exports, and
    /// binds it to its world's typed exports.
    async fn compile(&self, bytes: Vec<u8>, sha256: &str) -> Result<(WorldPre, semver::Version), PluginError> {
        let component = self.component(bytes, sha256.to_owned()).await?;

        let unsupported = self.unsupported_imports(&component);
        if !unsupported.is_empty() {
            return Err(InstallError::UnsupportedImports { imports: unsupported.join(", ") }.into());
        }
        let (kind, wit_version) = self.exported_world(&component)?;
        if let Some(refusal) = forbidden_imports(kind, &self.import_names(&component)) {
            return Err(refusal.into());
        }
        let instance_pre = self
            .linker()
            .instantiate_pre(&component)
            .map_err(|err| InstallError::UnsupportedImports { imports: format!("{err:#}") })?;
        let pre =
            WorldPre::new(kind, &wit_version, instance_pre).map_err(|err| InstallError::IncompatibleWitVersion {
                found: format!("{wit_version} with mismatching types ({err:#})"),
                supported: supported_versions(),
            })?;
        Ok((pre, wit_version))
    }

    /// The compiled component: from an authenticated artefact of the cache, else compiled (and
    /// the artefact written). `bytes` must be the component whose digest is `sha256`.
    async fn component(&self, bytes: Vec<u8>, sha256: String) -> Result<Component, PluginError> {
        let runtime = self.clone();
        // Compilation is CPU-bound (hundreds of ms per MB, ~10 s for an 18 MB Python guest), and
        // so is reading and checking an artefact: keep both off the async workers.
        tokio::task::spawn_blocking(move || {
            let engine = runtime.engine();
            if let Some(component) = runtime.artefacts().and_then(|cache| cache.load(engine, &sha256)) {
                return Ok(component);
            }
            let started = std::time::Instant::now();
            let component =
                Component::new(engine, &bytes).map_err(|err| InstallError::CompileFailed(format!("{err:#}")))?;
            tracing::info!(sha256 = %sha256, size_bytes = bytes.len(), elapsed_ms = started.elapsed().as_millis() as u64, "plugin component compiled");
            if let Some(cache) = runtime.artefacts() {
                cache.store(&sha256, &component);
            }
            Ok(component)
        })
        .await
        .map_err(|err| PluginError::Internal(format!("compile task: {err}")))?
    }

    /// Compiles into the cache every registered version that has no artefact yet, one at a
    /// time, without keeping the compiled code: the first call then loads it in milliseconds
    /// instead of compiling on the request path, and idle memory does not grow. Returns how
    /// many were compiled.
    pub(crate) async fn precompile_deferred(&self) -> usize {
        let Some(cache) = self.artefacts() else { return 0 };
        let pending: Vec<Arc<LoadedPlugin>> = self
            .read_registry()
            .all_versions()
            .into_iter()
            .filter(|v| !v.pre.initialized() && v.source.is_some() && !cache.contains(&v.sha256))
            .collect();
        let mut compiled = 0;
        for plugin in pending {
            let Some(source) = plugin.source.as_ref() else { continue };
            let bytes = match source.component(&plugin.sha256).await {
                Ok(bytes) if hex::encode(Sha256::digest(&bytes)) == plugin.sha256 => bytes,
                Ok(_) => {
                    tracing::error!(plugin = %plugin.label, "stored component does not match its digest; not precompiling it");
                    continue;
                }
                Err(err) => {
                    tracing::warn!(plugin = %plugin.label, error = %err, "cannot read a stored component to precompile it");
                    continue;
                }
            };
            match self.component(bytes, plugin.sha256.clone()).await {
                Ok(_) => compiled += 1,
                Err(err) => {
                    tracing::warn!(plugin = %plugin.label, code = err.code(), error = %err, "precompiling a plugin failed")
                }
            }
        }
        if compiled > 0 {
            tracing::info!(compiled, "plugins precompiled into the cache in the background");
        }
        compiled
    }

    /// Installs every `*.wasm` file in `dir` (sorted by name). Already-installed bytes and
    /// versions count as success. Returns one result per file.
    pub async fn install_directory(&self, dir: &Path) -> Vec<(PathBuf, Result<Option<InstalledVersion>, PluginError>)> {
        let mut files = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
                .collect::<Vec<_>>(),
            Err(err) => {
                return vec![(
                    dir.to_owned(),
                    Err(PluginError::Internal(format!("cannot read {}: {err}", dir.display()))),
                )];
            }
        };
        files.sort();
        let mut results = Vec::with_capacity(files.len());
        for path in files {
            let result = match tokio::fs::read(&path).await {
                Ok(bytes) => match self.install_component(&bytes, Activation::IfNewer).await {
                    Ok(installed) => Ok(Some(installed)),
                    Err(PluginError::Install(InstallError::DuplicateVersion { .. })) => Ok(None),
                    Err(err) => Err(err),
                },
                Err(err) => Err(PluginError::Internal(format!("cannot read {}: {err}", path.display()))),
            };
            results.push((path, result));
        }
        results
    }

    /// Watches `dir` (`TRELLIS_PLUGIN_DIR`): a `*.wasm` file dropped or replaced there is
    /// installed within `interval`. Refusals are logged once per file version.
    pub fn spawn_directory_watcher(&self, dir: PathBuf, interval: Duration) -> tokio::task::JoinHandle<()> {
        let runtime = self.clone();
        tokio::spawn(async move {
            let mut seen: HashMap<PathBuf, (SystemTime, u64)> = HashMap::new();
            let mut ticker = tokio::time::interval(interval);
            loop {
                ticker.tick().await;
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for entry in entries.filter_map(Result::ok) {
                    let path = entry.path();
                    if path.extension().is_none_or(|e| e != "wasm") {
                        continue;
                    }
                    let Ok(meta) = entry.metadata() else { continue };
                    let stamp = (meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len());
                    if seen.get(&path) == Some(&stamp) {
                        continue;
                    }
                    seen.insert(path.clone(), stamp);
                    let Ok(bytes) = tokio::fs::read(&path).await else {
                        continue;
                    };
                    match runtime.install_component(&bytes, Activation::IfNewer).await {
                        Ok(v) => {
                            tracing::info!(file = %path.display(), plugin = %v.info.id, version = %v.info.version, "installed plugin from watched directory")
                        }
                        Err(PluginError::Install(InstallError::DuplicateVersion { .. })) => {}
                        Err(err) => {
                            tracing::warn!(file = %path.display(), code = err.code(), error = %err, "plugin in watched directory refused")
                        }
                    }
                }
            }
        })
    }

    /// The one Trellis world the component exports, and the contract version it was built for.
    fn exported_world(&self, component: &Component) -> Result<(PluginKind, semver::Version), InstallError> {
        let ty = component.component_type();
        let mut names = Vec::new();
        let mut found = None;
        for (name, _) in ty.exports(self.engine()) {
            names.push(name.to_owned());
            let (interface, version) = name.split_once('@').unwrap_or((name, ""));
            let kind = match interface {
                CONNECTOR_EXPORT => PluginKind::CaConnector,
                NOTIFIER_EXPORT => PluginKind::Integration,
                VERIFIER_EXPORT => PluginKind::AttestationVerifier,
                POLICY_EXPORT => PluginKind::IssuancePolicy,
                _ => continue,
            };
            let version = semver::Version::parse(version).map_err(|_| InstallError::IncompatibleWitVersion {
                found: name.to_owned(),
                supported: supported_versions(),
            })?;
            if let Some((_, _, first)) = &found {
                return Err(InstallError::InvalidMetadata(format!(
                    "component exports both {first} and {name}; a component implements exactly one Trellis world"
                )));
            }
            found = Some((kind, version, name.to_owned()));
        }
        let Some((kind, version, name)) = found else {
            return Err(InstallError::UnknownWorld {
                exports: if names.is_empty() { "none".into() } else { names.join(", ") },
            });
        };
        if !served(&version) {
            return Err(InstallError::IncompatibleWitVersion { found: name, supported: supported_versions() });
        }
        Ok((kind, version))
    }

    fn import_names(&self, component: &Component) -> Vec<String> {
        component.component_type().imports(self.engine()).map(|(name, _)| name.to_owned()).collect()
    }

    fn unsupported_imports(&self, component: &Component) -> Vec<String> {
        const KNOWN: [&str; 8] = [
            "wasi:cli/",
            "wasi:io/",
            "wasi:clocks/",
            "wasi:random/",
            "wasi:filesystem/",
            "wasi:sockets/",
            "wasi:http/",
            "trellis:plugin/",
        ];
        self.import_names(component)
            .into_iter()
            .filter(|name| !KNOWN.iter().any(|prefix| name.starts_with(prefix)))
            .collect()
    }
}

/// How an author removes an import from a component, per language: named in every refusal.
const BUILD_FLAGS: &str =
    "Python: build with componentize-py --stub-wasi; JavaScript: jco componentize --disable http \
     (or --disable all); Rust: drop the dependency or feature that pulls it in";

/// The imports a world may not use, refused at install (before anything is stored) with the
/// import named and how to build without it: in the pure worlds (attestation verifier,
/// issuance policy), everything that reaches out or keeps something: `wasi:sockets/*`
/// (componentize-py imports it unless `--stub-wasi`), `wasi:http/*` (componentize-js imports it
/// unless `--disable http`), plugin state, keystore, challenge solver, `pki-core`.
///
/// `wasi:sockets/*` and `wasi:filesystem/*` stay allowed in the worlds that may reach out
/// (connectors, integrations), granted nothing: every Rust guest built with std imports
/// `preopens` and `types`, and componentize-py 0.25 has no switch that stubs sockets without
/// stubbing `wasi:http` too, which these worlds need. The per-call WASI context grants no
/// directory and no network, so a socket call fails with access denied; plugins reach the
/// network only through `wasi:http`, under the egress policy.
pub(crate) fn forbidden_imports(kind: PluginKind, imports: &[String]) -> Option<InstallError> {
    const PURE_WORLDS: [(&str, &str); 6] = [
        ("wasi:sockets/", "a {kind} is pure computation: no sockets"),
        ("wasi:http/", "a {kind} is pure computation: no outbound requests"),
        ("trellis:plugin/state", "a {kind} is pure computation: no state"),
        ("trellis:plugin/keystore", "a {kind} is pure computation: no keys"),
        ("trellis:plugin/challenge-solver", "a {kind} is pure computation: no challenges"),
        ("trellis:plugin/pki-core", "a {kind} is pure computation: no internal PKI"),
    ];
    let pure = matches!(kind, PluginKind::AttestationVerifier | PluginKind::IssuancePolicy);
    let rules = PURE_WORLDS.iter().filter(|_| pure);
    let refused: Vec<String> = imports
        .iter()
        .filter_map(|name| {
            rules
                .clone()
                .find(|(prefix, _)| name.starts_with(prefix))
                .map(|(_, why)| format!("{name} ({})", why.replace("{kind}", kind.as_str())))
        })
        .collect();
    if refused.is_empty() {
        return None;
    }
    Some(InstallError::UnsupportedImports {
        imports: format!("{}, which a {kind} may not import; rebuild without it ({BUILD_FLAGS})", refused.join(", ")),
    })
}

fn placeholder_info(kind: PluginKind) -> PluginInfo {
    PluginInfo {
        id: String::new(),
        version: semver::Version::new(0, 0, 0),
        kind,
        name: String::new(),
        description: String::new(),
        serves: Vec::new(),
        config_schema: serde_json::Value::Null,
        secret_fields: Vec::new(),
        capabilities: Default::default(),
        default_issuer_patterns: Vec::new(),
        outbound_hosts: Vec::new(),
    }
}

fn validate_info(info: Described, world: PluginKind) -> Result<PluginInfo, InstallError> {
    let id_ok = (3..=64).contains(&info.id.len())
        && info.id.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-' | '_'))
        && info.id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    if !id_ok {
        return Err(InstallError::InvalidMetadata(format!(
            "id {:?} must be 3-64 characters of a-z, 0-9, '.', '-', '_'",
            info.id
        )));
    }
    let version = semver::Version::parse(&info.version)
        .map_err(|err| InstallError::InvalidMetadata(format!("version {:?} is not semver: {err}", info.version)))?;
    if info.kind != world {
        return Err(InstallError::InvalidMetadata(format!(
            "describe() says {} but the component exports the {world} world",
            info.kind
        )));
    }
    let config_schema: serde_json::Value = serde_json::from_str(&info.config_schema)
        .map_err(|err| InstallError::InvalidMetadata(format!("config-schema is not JSON: {err}")))?;
    if !config_schema.is_object() {
        return Err(InstallError::InvalidMetadata("config-schema must be a JSON object".into()));
    }
    if info.serves.is_empty() {
        return Err(InstallError::InvalidMetadata("serves must name at least one type".into()));
    }
    for field in &info.secret_fields {
        let pointer_ok = field.pointer.starts_with('/')
            && field.pointer.len() <= 256
            && field.pointer[1..].split('/').all(|segment| !segment.is_empty());
        if !pointer_ok {
            return Err(InstallError::InvalidMetadata(format!(
                "secret field {:?} is not a JSON pointer to an object member (e.g. \"/apiKey\")",
                field.pointer
            )));
        }
    }
    Ok(PluginInfo {
        id: info.id,
        version,
        kind: world,
        name: info.name,
        description: info.description,
        serves: info.serves,
        config_schema,
        secret_fields: info.secret_fields,
        capabilities: info.capabilities,
        default_issuer_patterns: info.default_issuer_patterns,
        outbound_hosts: info.outbound_hosts,
    })
}
