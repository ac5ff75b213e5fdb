//! The registry of installed versions: which versions of which plugin are loaded, which one is
//! active, the rollback history, workspace bindings and operator grants. Pure data: no wasm
//! runs here, and every operation is one short critical section under the runtime's lock.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tokio::sync::OnceCell;
use trellis_core::plugins::{
    CallTarget, ComponentSource, InstallError, InstalledVersion, PluginError, PluginInfo, PluginKind, PluginRef,
    PluginSummary,
};

use crate::worlds::{ConnectorPre, NotifierPre, PolicyPre, VerifierPre, WorldPre};

/// One installed version, typed by its world; compiled at install, or (a version registered
/// from the database at start) on its first call.
pub(crate) struct LoadedPlugin {
    /// Shared: every call that resolves the plugin hands it out (`PluginHost::serving`).
    pub(crate) info: Arc<PluginInfo>,
    pub(crate) sha256: String,
    pub(crate) size: usize,
    /// The contract version the component was built against.
    pub(crate) wit_version: semver::Version,
    pub(crate) kind: PluginKind,
    /// The compiled component bound to its world's exports; see `PluginRuntime::compiled`.
    pub(crate) pre: OnceCell<WorldPre>,
    /// Where a deferred version's bytes come from (`None`: compiled at install).
    pub(crate) source: Option<Arc<dyn ComponentSource>>,
    /// `id@version`, for logs and metrics.
    pub(crate) label: Arc<str>,
    /// The trust-store key that signed the component (set by the domain after its checks).
    pub(crate) signer: std::sync::Mutex<Option<String>>,
}

impl LoadedPlugin {
    fn wrong_kind(&self, expected: PluginKind) -> PluginError {
        PluginError::WrongKind { plugin: self.info.id.clone(), expected, actual: self.kind }
    }

    /// The compiled world; calls reach it through `PluginRuntime::resolve`, which compiles a
    /// deferred version first.
    pub(crate) fn world(&self) -> Result<&WorldPre, PluginError> {
        self.pre.get().ok_or_else(|| PluginError::Internal(format!("plugin {} is not compiled yet", self.label)))
    }

    pub(crate) fn connector(&self) -> Result<&ConnectorPre, PluginError> {
        match self.world()? {
            WorldPre::Connector(pre) => Ok(pre),
            _ => Err(self.wrong_kind(PluginKind::CaConnector)),
        }
    }

    pub(crate) fn notifier(&self) -> Result<&NotifierPre, PluginError> {
        match self.world()? {
            WorldPre::Notifier(pre) => Ok(pre),
            _ => Err(self.wrong_kind(PluginKind::Integration)),
        }
    }

    pub(crate) fn verifier(&self) -> Result<&VerifierPre, PluginError> {
        match self.world()? {
            WorldPre::Verifier(pre) => Ok(pre),
            _ => Err(self.wrong_kind(PluginKind::AttestationVerifier)),
        }
    }

    pub(crate) fn policy(&self) -> Result<&PolicyPre, PluginError> {
        match self.world()? {
            WorldPre::Policy(pre) => Ok(pre),
            _ => Err(self.wrong_kind(PluginKind::IssuancePolicy)),
        }
    }

    /// Whether calls carry a record (contract 0.2 on): state and keys are then scoped to it;
    /// 0.1 components keep the workspace-wide scope they were written for.
    pub(crate) fn scopes_by_record(&self) -> bool {
        self.wit_version.major > 0 || self.wit_version.minor >= 2
    }

    pub(crate) fn describe(&self, active: bool) -> InstalledVersion {
        InstalledVersion {
            info: PluginInfo::clone(&self.info),
            sha256: self.sha256.clone(),
            size_bytes: self.size,
            wit_version: self.wit_version.to_string(),
            active,
            signer_key_id: self.signer.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            signature_warning: None,
        }
    }
}

struct PluginEntry {
    versions: BTreeMap<semver::Version, Arc<LoadedPlugin>>,
    active: Option<semver::Version>,
    /// Previously active versions, most recent last, for rollback.
    history: Vec<semver::Version>,
}

impl PluginEntry {
    fn active(&self) -> Option<&Arc<LoadedPlugin>> {
        self.active.as_ref().and_then(|v| self.versions.get(v))
    }

    fn kind(&self) -> Option<PluginKind> {
        self.versions.values().next().map(|p| p.kind)
    }
}

#[derive(Default)]
pub(crate) struct Registry {
    plugins: BTreeMap<String, PluginEntry>,
    /// (workspace, kind, served type) → plugin id.
    bindings: HashMap<(String, PluginKind, String), String>,
    /// Operator-granted outbound hosts per plugin id.
    grants: HashMap<String, Vec<String>>,
    /// sha256 of every installed component, for fast duplicate refusal.
    digests: HashMap<String, (String, semver::Version)>,
}

impl Registry {
    /// The id and version already installed with these bytes.
    pub(crate) fn installed_digest(&self, sha256: &str) -> Option<(String, semver::Version)> {
        self.digests.get(sha256).cloned()
    }

    pub(crate) fn grants(&self, plugin_id: &str) -> Vec<String> {
        self.grants.get(plugin_id).cloned().unwrap_or_default()
    }

    /// Adds a loaded version; activates it as `activate` says. Returns whether it is active.
    pub(crate) fn insert(
        &mut self,
        loaded: Arc<LoadedPlugin>,
        activate: impl FnOnce(Option<&semver::Version>) -> bool,
    ) -> Result<bool, PluginError> {
        let id = loaded.info.id.clone();
        let version = loaded.info.version.clone();
        let entry = self.plugins.entry(id.clone()).or_insert_with(|| PluginEntry {
            versions: BTreeMap::new(),
            active: None,
            history: Vec::new(),
        });
        if entry.versions.contains_key(&version) {
            return Err(InstallError::DuplicateVersion { id, version: version.to_string() }.into());
        }
        if let Some(existing) = entry.kind().filter(|kind| *kind != loaded.kind) {
            return Err(InstallError::InvalidMetadata(format!(
                "plugin {id} is installed as a {existing} plugin; this component is a {}",
                loaded.kind
            ))
            .into());
        }
        entry.versions.insert(version.clone(), loaded.clone());
        if activate(entry.active.as_ref()) {
            if let Some(previous) = entry.active.replace(version.clone()) {
                entry.history.push(previous);
            }
        }
        let active = entry.active.as_ref() == Some(&version);
        self.digests.insert(loaded.sha256.clone(), (id, version));
        Ok(active)
    }

    /// Swaps every compiled version for an uncompiled copy that compiles from `source` on its
    /// next call; calls in flight hold the compiled one until they end.
    pub(crate) fn release_compiled(&mut self, source: &Arc<dyn ComponentSource>) -> usize {
        let mut released = 0;
        for entry in self.plugins.values_mut() {
            for loaded in entry.versions.values_mut() {
                if loaded.pre.initialized() {
                    let signer = loaded.signer.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    *loaded = Arc::new(LoadedPlugin {
                        info: loaded.info.clone(),
                        sha256: loaded.sha256.clone(),
                        size: loaded.size,
                        wit_version: loaded.wit_version.clone(),
                        kind: loaded.kind,
                        pre: OnceCell::new(),
                        source: Some(source.clone()),
                        label: loaded.label.clone(),
                        signer: std::sync::Mutex::new(signer),
                    });
                    released += 1;
                }
            }
        }
        released
    }

    /// Picks the active version serving `target`. The `Arc` keeps that version alive for the
    /// whole call even if it is deactivated or removed meanwhile.
    pub(crate) fn resolve(&self, target: &CallTarget, kind: PluginKind) -> Result<Arc<LoadedPlugin>, PluginError> {
        let id = match &target.plugin {
            PluginRef::Id(id) => id.clone(),
            PluginRef::Serving(service_type) => {
                let key = (target.context.workspace_id.clone(), kind, service_type.clone());
                match self.bindings.get(&key) {
                    // A binding to a plugin whose active version no longer serves the type (the
                    // type moved to another plugin in an upgrade: the commercial CAs went from
                    // ca-probe to acme) would send the records' calls to a plugin that refuses
                    // them; the type then resolves as if unbound.
                    Some(id) if !self.stopped_serving(id, service_type) => id.clone(),
                    _ => self.default_serving(kind, service_type)?,
                }
            }
        };
        let entry = self.plugins.get(&id).ok_or_else(|| PluginError::NotFound { id: id.clone() })?;
        entry.active().cloned().ok_or_else(|| PluginError::NotFound { id: format!("{id} (no active version)") })
    }

    /// Whether plugin `id` has an active version and it does not serve `service_type`.
    fn stopped_serving(&self, id: &str, service_type: &str) -> bool {
        self.plugins
            .get(id)
            .and_then(PluginEntry::active)
            .is_some_and(|active| !active.info.serves.iter().any(|s| s == service_type))
    }

    /// Without a binding, the only installed plugin serving the type.
    fn default_serving(&self, kind: PluginKind, service_type: &str) -> Result<String, PluginError> {
        let candidates: Vec<&String> = self
            .plugins
            .iter()
            .filter(|(_, e)| {
                e.active().is_some_and(|p| p.kind == kind && p.info.serves.iter().any(|s| s == service_type))
            })
            .map(|(id, _)| id)
            .collect();
        match candidates.as_slice() {
            [only] => Ok((*only).clone()),
            [] => Err(PluginError::NotBound { kind, service_type: service_type.to_owned() }),
            many => Err(PluginError::AmbiguousBinding {
                kind,
                service_type: service_type.to_owned(),
                candidates: many.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
            }),
        }
    }

    fn entry_mut(&mut self, id: &str) -> Result<&mut PluginEntry, PluginError> {
        self.plugins.get_mut(id).ok_or_else(|| PluginError::NotFound { id: id.to_owned() })
    }

    /// Records the key that signed a version.
    pub(crate) fn set_signer(
        &mut self,
        id: &str,
        version: &semver::Version,
        signer: Option<String>,
    ) -> Result<(), PluginError> {
        let entry = self.entry_mut(id)?;
        let loaded =
            entry.versions.get(version).ok_or_else(|| PluginError::NotFound { id: format!("{id}@{version}") })?;
        *loaded.signer.lock().unwrap_or_else(|p| p.into_inner()) = signer;
        Ok(())
    }

    /// Makes `version` active; returns false when it already was.
    pub(crate) fn activate(&mut self, id: &str, version: &semver::Version) -> Result<bool, PluginError> {
        let entry = self.entry_mut(id)?;
        if !entry.versions.contains_key(version) {
            return Err(PluginError::NotFound { id: format!("{id}@{version}") });
        }
        if entry.active.as_ref() == Some(version) {
            return Ok(false);
        }
        if let Some(previous) = entry.active.replace(version.clone()) {
            entry.history.push(previous);
        }
        Ok(true)
    }

    /// Re-activates the most recent previous version still installed.
    pub(crate) fn rollback(&mut self, id: &str) -> Result<semver::Version, PluginError> {
        let entry = self.entry_mut(id)?;
        while let Some(previous) = entry.history.pop() {
            if entry.versions.contains_key(&previous) && entry.active.as_ref() != Some(&previous) {
                entry.active = Some(previous.clone());
                return Ok(previous);
            }
        }
        Err(PluginError::NoPreviousVersion { id: id.to_owned() })
    }

    /// Removes one version (not the active one, unless it is the last) or the whole plugin.
    pub(crate) fn remove(&mut self, id: &str, version: Option<&semver::Version>) -> Result<(), PluginError> {
        let entry = self.entry_mut(id)?;
        let removed: Vec<Arc<LoadedPlugin>> = match version {
            Some(version) => {
                if entry.active.as_ref() == Some(version) && entry.versions.len() > 1 {
                    return Err(PluginError::VersionActive { id: id.to_owned(), version: version.to_string() });
                }
                let removed = entry
                    .versions
                    .remove(version)
                    .ok_or_else(|| PluginError::NotFound { id: format!("{id}@{version}") })?;
                if entry.active.as_ref() == Some(version) {
                    entry.active = None;
                }
                entry.history.retain(|v| v != version);
                vec![removed]
            }
            None => entry.versions.values().cloned().collect(),
        };
        let now_empty = version.is_none() || entry.versions.is_empty();
        for plugin in &removed {
            self.digests.remove(&plugin.sha256);
        }
        if now_empty {
            self.plugins.remove(id);
            self.bindings.retain(|_, bound| bound != id);
            self.grants.remove(id);
        }
        Ok(())
    }

    /// Every registered version of every plugin.
    pub(crate) fn all_versions(&self) -> Vec<Arc<LoadedPlugin>> {
        self.plugins.values().flat_map(|entry| entry.versions.values().cloned()).collect()
    }

    pub(crate) fn list(&self) -> Vec<PluginSummary> {
        self.plugins.iter().map(|(id, entry)| self.summarize(id, entry)).collect()
    }

    pub(crate) fn show(&self, id: &str) -> Option<PluginSummary> {
        self.plugins.get(id).map(|entry| self.summarize(id, entry))
    }

    fn summarize(&self, id: &str, entry: &PluginEntry) -> PluginSummary {
        let newest = entry.versions.values().next_back();
        PluginSummary {
            id: id.to_owned(),
            kind: newest.map_or(PluginKind::Integration, |p| p.kind),
            name: newest.map(|p| p.info.name.clone()).unwrap_or_default(),
            active_version: entry.active.as_ref().map(ToString::to_string),
            versions: entry
                .versions
                .values()
                .rev()
                .map(|p| p.describe(entry.active.as_ref() == Some(&p.info.version)))
                .collect(),
            granted_hosts: self.grants(id),
            previous_versions: entry.history.iter().map(ToString::to_string).collect(),
        }
    }

    pub(crate) fn bind(
        &mut self,
        workspace_id: &str,
        kind: PluginKind,
        service_type: &str,
        plugin_id: &str,
    ) -> Result<(), PluginError> {
        let entry = self.plugins.get(plugin_id).ok_or_else(|| PluginError::NotFound { id: plugin_id.to_owned() })?;
        let actual = entry.kind();
        if actual != Some(kind) {
            return Err(PluginError::WrongKind {
                plugin: plugin_id.to_owned(),
                expected: kind,
                actual: actual.unwrap_or(kind),
            });
        }
        self.bindings.insert((workspace_id.to_owned(), kind, service_type.to_owned()), plugin_id.to_owned());
        Ok(())
    }

    pub(crate) fn unbind(&mut self, workspace_id: &str, kind: PluginKind, service_type: &str) {
        self.bindings.remove(&(workspace_id.to_owned(), kind, service_type.to_owned()));
    }

    pub(crate) fn grant_hosts(&mut self, plugin_id: &str, hosts: Vec<String>) -> Result<(), PluginError> {
        if !self.plugins.contains_key(plugin_id) {
            return Err(PluginError::NotFound { id: plugin_id.to_owned() });
        }
        self.grants.insert(plugin_id.to_owned(), hosts);
        Ok(())
    }

    pub(crate) fn restore_activation(
        &mut self,
        id: &str,
        active: Option<&semver::Version>,
        history: &[semver::Version],
    ) -> Result<(), PluginError> {
        let entry = self.entry_mut(id)?;
        entry.active = active.filter(|v| entry.versions.contains_key(*v)).cloned();
        entry.history = history.iter().filter(|v| entry.versions.contains_key(*v)).cloned().collect();
        Ok(())
    }

    pub(crate) fn replace_bindings(&mut self, bindings: Vec<(String, PluginKind, String, String)>) {
        self.bindings =
            bindings.into_iter().map(|(ws, kind, service_type, id)| ((ws, kind, service_type), id)).collect();
    }
}
