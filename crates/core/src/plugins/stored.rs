//! Plugin rows as the store keeps them (the persistence port's vocabulary).

/// A stored version without its bytes.
#[derive(Debug, Clone)]
pub struct StoredPluginVersion {
    pub plugin_id: String,
    pub version: String,
    pub sha256: String,
    /// What the component described at install, as JSON.
    pub info: serde_json::Value,
    pub wit_version: String,
    pub size_bytes: i64,
    /// The trust-store key that signed the component at install (none: unsigned, or installed
    /// in `warn`/`off` mode without a trusted signature).
    pub signer_key_id: Option<String>,
}

/// A stored plugin's lifecycle state.
#[derive(Debug, Clone)]
pub struct StoredPlugin {
    pub plugin_id: String,
    pub kind: String,
    pub active_version: Option<String>,
    pub previous_versions: Vec<String>,
    pub granted_hosts: Vec<String>,
}

/// A stored workspace binding.
#[derive(Debug, Clone)]
pub struct StoredBinding {
    pub workspace_id: String,
    pub kind: String,
    pub service_type: String,
    pub plugin_id: String,
}

/// What an install writes.
pub struct NewPluginVersion<'a> {
    pub plugin_id: &'a str,
    pub kind: &'a str,
    pub version: &'a str,
    pub sha256: &'a str,
    pub bytes: &'a [u8],
    pub wit_version: &'a str,
    pub info: &'a serde_json::Value,
    pub installed_by: &'a str,
    pub at: i64,
    pub signer_key_id: Option<&'a str>,
}
