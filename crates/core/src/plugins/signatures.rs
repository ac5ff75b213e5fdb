//! Signed plugins: the instance's trust store of publisher keys (ed25519) and the check of a
//! component's signature, in the WebAssembly tool-conventions format (`Signatures.md`, the
//! `wasmsign2` crate): embedded as the first custom section `signature`, or detached and
//! uploaded beside the component.
//!
//! A key is trusted for a scope: plugin id prefixes and kinds. `TRELLIS_PLUGIN_SIGNATURES`
//! chooses what an install does with a component that is not signed by a trusted key in scope:
//! `require` refuses it (each reason its own code), `warn` installs it with a warning (and no
//! signer), `off` does not look. The signature is checked before the component is compiled;
//! the scope needs the id and kind the component describes, so it is checked right after, before
//! anything is stored or activated.
//!
//! The repository's development key (`keys/INSECURE-dev-plugin-signing.*`) is never trusted by
//! default: its secret half is public. An operator who wants the first-party builds accepted in
//! `require` mode adds its public key (docs/plugin-operators.md).

use std::io::Cursor;

use crate::audit::Audit;
use crate::caller::Caller;
use crate::error::{Entity, Error, Result};
use crate::events::{Event, PluginVersionDeactivated};
use crate::plugins::service::PluginDeps;
use crate::plugins::{InstallError, PluginError, PluginInfo, PluginKind};
use crate::unit_of_work::Target;
use crate::validation;

/// What an install does about signatures (`TRELLIS_PLUGIN_SIGNATURES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SignatureMode {
    /// Only components signed by a trusted key whose scope covers them are installed.
    Require,
    /// Every component that passes the other checks is installed; one that `require` would
    /// refuse is installed without a signer, and the answer, the log and the audit row say why.
    /// The default, so that an upgrade changes nothing for running instances; production sets
    /// `require` (docs/plugin-operators.md).
    #[default]
    Warn,
    /// Signatures are not looked at (no signer is recorded).
    Off,
}

impl SignatureMode {
    pub fn parse(text: &str) -> Option<SignatureMode> {
        match text {
            "require" => Some(SignatureMode::Require),
            "warn" => Some(SignatureMode::Warn),
            "off" => Some(SignatureMode::Off),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SignatureMode::Require => "require",
            SignatureMode::Warn => "warn",
            SignatureMode::Off => "off",
        }
    }
}

/// A publisher key of the trust store.
#[derive(Debug, Clone, PartialEq)]
pub struct SigningKey {
    /// The key's wasmsign2 default key id (HMAC-SHA256("key_id", public key), 12 bytes) in
    /// lowercase hex: what a signature made with `trellis-plugin-sign` carries.
    pub key_id: String,
    pub name: String,
    /// The ed25519 public key, PEM (SubjectPublicKeyInfo).
    pub public_key_pem: String,
    /// Plugin ids the key may sign: an id matches when it starts with one of them (`io.trellis.`).
    /// Empty: no id.
    pub id_prefixes: Vec<String>,
    /// Kinds the key may sign. Empty: every kind.
    pub kinds: Vec<PluginKind>,
    pub created_at: i64,
    pub created_by: String,
    pub revoked_at: Option<i64>,
}

impl SigningKey {
    pub fn is_revoked(&self) -> bool {
        self.revoked_at.is_some()
    }

    /// Whether the key may sign this plugin.
    pub fn covers(&self, id: &str, kind: PluginKind) -> bool {
        self.id_prefixes.iter().any(|prefix| id.starts_with(prefix.as_str()))
            && (self.kinds.is_empty() || self.kinds.contains(&kind))
    }
}

/// What an administrator adds.
#[derive(Debug, Clone)]
pub struct NewSigningKey {
    pub name: String,
    /// PEM, DER, or wasmsign2's raw form (0x01 followed by the 32 key bytes).
    pub public_key: Vec<u8>,
    pub id_prefixes: Vec<String>,
    pub kinds: Vec<String>,
}

/// A publisher key parsed from any of the forms wasmsign2 reads; the id is its default key id.
pub fn parse_public_key(bytes: &[u8]) -> Result<(String, String)> {
    let key = wasmsign2::PublicKey::from_any(bytes).map_err(|_| {
        Error::invalid_field("publicKey", "must be an ed25519 public key (PEM \"BEGIN PUBLIC KEY\", DER or raw)")
    })?;
    Ok((key_id_of(&key), key.to_pem()))
}

fn key_id_of(key: &wasmsign2::PublicKey) -> String {
    let with_id = key.clone().attach_default_key_id();
    hex::encode(with_id.key_id().map(Vec::as_slice).unwrap_or_default())
}

/// Who signed a component, as the trust store sees it, before the scope is checked.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedSigner {
    pub key: SigningKey,
}

/// Checks the signature of `wasm` (embedded, or `detached`) against the trust store's keys,
/// revoked ones included (so that a revoked key is named as such, not as unknown).
///
/// Refusals: no signature (`plugin.unsigned`); a key the store knows signed it but the bytes
/// changed since (`plugin.signature_invalid`, also for a malformed signature); no key of the
/// store signed it (`plugin.signature_unknown_key`); the key that signed it is revoked
/// (`plugin.signature_key_revoked`). A signature without a key id that no key verifies counts
/// as an unknown key: which key it claims cannot be told.
pub fn verify(
    wasm: &[u8],
    detached: Option<&[u8]>,
    keys: &[SigningKey],
) -> std::result::Result<VerifiedSigner, InstallError> {
    let info = match detached {
        Some(signature) => wasmsign2::signature_info_from_detached(signature),
        None => wasmsign2::signature_info_from_reader(&mut Cursor::new(wasm), None),
    };
    let info = match info {
        Ok(info) if info.is_signed() => info,
        Ok(_) | Err(wasmsign2::WSError::NoSignatures) => return Err(InstallError::Unsigned),
        Err(err) => {
            return Err(InstallError::SignatureInvalid { detail: format!("the signature cannot be read ({err})") })
        }
    };
    // A detached signature must come with unsigned bytes: an embedded one would be ignored
    // and could mislead whoever reads the file later.
    if detached.is_some() && wasmsign2::signature_info_from_reader(&mut Cursor::new(wasm), None).is_ok() {
        return Err(InstallError::SignatureInvalid {
            detail: "the component embeds a signature and a detached one was sent too; send one".into(),
        });
    }
    for key in keys {
        let Ok(public) = wasmsign2::PublicKey::from_pem(&key.public_key_pem) else {
            tracing::error!(key_id = %key.key_id, "a stored plugin signing key does not parse; skipping it");
            continue;
        };
        if public.verify(&mut Cursor::new(wasm), detached).is_ok() {
            if key.is_revoked() {
                return Err(InstallError::SigningKeyRevoked { key_id: key.key_id.clone() });
            }
            return Ok(VerifiedSigner { key: key.clone() });
        }
    }
    let claimed: Vec<String> = info.key_ids().iter().map(hex::encode).collect();
    if let Some(known) = keys.iter().find(|key| claimed.contains(&key.key_id)) {
        return Err(InstallError::SignatureInvalid {
            detail: format!(
                "the signature names key {} of the trust store but does not match these bytes (changed after signing?)",
                known.key_id
            ),
        });
    }
    Err(InstallError::UnknownSigningKey {
        key_ids: if claimed.is_empty() { "none given".into() } else { claimed.join(", ") },
    })
}

/// Checks that the signer's scope covers the plugin the component describes.
pub fn check_scope(signer: &VerifiedSigner, info: &PluginInfo) -> std::result::Result<(), InstallError> {
    if signer.key.covers(&info.id, info.kind) {
        return Ok(());
    }
    Err(InstallError::SigningKeyOutOfScope {
        key_id: signer.key.key_id.clone(),
        plugin: info.id.clone(),
        kind: info.kind,
    })
}

fn parse_kinds(kinds: &[String]) -> Result<Vec<PluginKind>> {
    kinds
        .iter()
        .map(|kind| {
            PluginKind::parse(kind).ok_or_else(|| {
                Error::invalid_field(
                    "kinds",
                    "entries are ca-connector, integration, attestation-verifier or issuance-policy",
                )
            })
        })
        .collect()
}

fn check_prefixes(prefixes: &[String]) -> Result<()> {
    if prefixes.is_empty() || prefixes.len() > 32 {
        return Err(Error::invalid_field("idPrefixes", "must list 1 to 32 plugin id prefixes (e.g. \"com.example.\")"));
    }
    for prefix in prefixes {
        let ok = !prefix.is_empty()
            && prefix.len() <= 64
            && prefix.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-' | '_'));
        if !ok {
            return Err(Error::invalid_field(
                "idPrefixes",
                "entries are 1-64 characters of a-z, 0-9, '.', '-', '_' (a plugin id's beginning)",
            ));
        }
    }
    Ok(())
}

/// Adds a publisher key (instance administrators).
pub async fn add_key(ctx: &PluginDeps, caller: &Caller, new: NewSigningKey) -> Result<SigningKey> {
    caller.require_instance_admin()?;
    add_key_as(ctx, &Audit::of(caller), Some(&caller.workspace_id), new).await
}

/// Adds a publisher key on behalf of `actor` (the CLI's system actor, or an administrator).
pub async fn add_key_as(
    ctx: &PluginDeps,
    actor: &Audit,
    audit_workspace: Option<&str>,
    new: NewSigningKey,
) -> Result<SigningKey> {
    let name = validation::bounded_text("name", &new.name, 200)?;
    if name.is_empty() {
        return Err(Error::invalid_field("name", "must not be empty"));
    }
    check_prefixes(&new.id_prefixes)?;
    let kinds = parse_kinds(&new.kinds)?;
    let (key_id, public_key_pem) = parse_public_key(&new.public_key)?;
    let mut change = ctx.change(actor.clone(), audit_workspace).await?;
    let key = SigningKey {
        key_id,
        name,
        public_key_pem,
        id_prefixes: new.id_prefixes,
        kinds,
        created_at: change.at(),
        created_by: actor.principal.id.clone(),
        revoked_at: None,
    };
    if !change.tx().plugins().insert_plugin_signing_key(&key).await? {
        return Err(Error::Conflict(format!("the trust store already holds key {}", key.key_id)));
    }
    let details = serde_json::json!({
        "name": key.name,
        "idPrefixes": key.id_prefixes,
        "kinds": key.kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
    });
    change.audit("plugin_key.added", Target::new("plugin_key", &key.key_id), details);
    change.commit().await?;
    Ok(key)
}

/// The trust store, revoked keys included (instance administrators).
pub async fn list_keys(ctx: &PluginDeps, caller: &Caller) -> Result<Vec<SigningKey>> {
    caller.require_instance_admin()?;
    Ok(ctx.store.reads().list_plugin_signing_keys().await?)
}

/// What a revocation did.
#[derive(Debug, Clone, PartialEq)]
pub struct Revocation {
    pub key: SigningKey,
    /// `(plugin id, version)` of every version the key signed; the active ones among them are no
    /// longer active, and none of them can be activated again.
    pub deactivated: Vec<(String, String)>,
}

/// Revokes a key (instance administrators).
pub async fn revoke_key(ctx: &PluginDeps, caller: &Caller, key_id: &str) -> Result<Revocation> {
    caller.require_instance_admin()?;
    revoke_key_as(ctx, &Audit::of(caller), Some(&caller.workspace_id), key_id).await
}

/// Revokes a key: it verifies nothing from now on, and every version it signed is deactivated
/// (the active ones lose their activation on every replica at its next sync; an activation or
/// rollback to any of them is refused). One audit row for the key, one `plugin.deactivated` row
/// per version, and one `plugin.version_deactivated` event per version in each workspace that
/// binds the plugin and in the revoking administrator's.
pub async fn revoke_key_as(
    ctx: &PluginDeps,
    actor: &Audit,
    audit_workspace: Option<&str>,
    key_id: &str,
) -> Result<Revocation> {
    let _lifecycle = ctx.plugins.lifecycle().lock().await;
    let keys = ctx.store.reads().list_plugin_signing_keys().await?;
    let mut key = keys.into_iter().find(|k| k.key_id == key_id).ok_or(Error::NotFound(Entity::PluginSigningKey))?;
    if key.is_revoked() {
        return Err(Error::Conflict(format!("key {key_id} is already revoked")));
    }
    let signed = ctx.store.reads().plugin_versions_signed_by(key_id).await?;
    let bindings = ctx.store.reads().list_plugin_bindings().await?;
    let runtime = ctx.plugins.host();
    let mut change = ctx.change(actor.clone(), audit_workspace).await?;
    let at = change.at();
    change.tx().plugins().revoke_plugin_signing_key(key_id, at).await?;
    key.revoked_at = Some(at);
    for (plugin_id, version) in &signed {
        let Some(summary) = runtime.show(plugin_id) else { continue };
        if summary.active_version.as_deref() == Some(version.as_str()) {
            // Deactivated here first, persisted with the key's revocation; other replicas follow
            // the database at their next sync.
            let history: Vec<semver::Version> =
                summary.previous_versions.iter().filter_map(|v| semver::Version::parse(v).ok()).collect();
            runtime.restore_activation(plugin_id, None, &history)?;
            change.tx().plugins().set_plugin_activation(plugin_id, None, &summary.previous_versions, at).await?;
        }
        let details = serde_json::json!({ "version": version, "keyId": key_id, "reason": "signing_key_revoked" });
        change.audit("plugin.deactivated", Target::new("plugin", plugin_id), details);
        // Every workspace that binds the plugin hears of it (their webhooks and notifiers), and
        // the revoking administrator's, if any: a revocation from the CLI has no workspace of its own.
        let workspaces: std::collections::BTreeSet<&str> = bindings
            .iter()
            .filter(|binding| &binding.plugin_id == plugin_id)
            .map(|binding| binding.workspace_id.as_str())
            .chain(audit_workspace)
            .collect();
        for workspace_id in workspaces {
            change.emit_in(
                workspace_id,
                Event::PluginVersionDeactivated(PluginVersionDeactivated {
                    plugin_id: plugin_id.clone(),
                    version: version.clone(),
                    key_id: key_id.to_owned(),
                    reason: "signing_key_revoked".into(),
                }),
            );
        }
    }
    let details = serde_json::json!({
        "name": key.name,
        "deactivatedVersions": signed.iter().map(|(id, v)| serde_json::json!({ "pluginId": id, "version": v })).collect::<Vec<_>>(),
    });
    change.audit("plugin_key.revoked", Target::new("plugin_key", key_id), details);
    change.commit().await?;
    Ok(Revocation { key, deactivated: signed })
}

/// Refuses to make `version` active again when the key that signed it is revoked (whatever the
/// mode: a revocation is the administrator's explicit word).
pub(crate) async fn check_activatable(ctx: &PluginDeps, plugin_id: &str, version: &str) -> Result<()> {
    let Some(signer) = ctx.store.reads().plugin_version_signer(plugin_id, version).await? else {
        return Ok(());
    };
    let keys = ctx.store.reads().list_plugin_signing_keys().await?;
    if keys.iter().any(|key| key.key_id == signer && key.is_revoked()) {
        return Err(PluginError::from(InstallError::SigningKeyRevoked { key_id: signer }).into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component() -> Vec<u8> {
        // A component header and one custom section: enough for wasmsign2, which hashes sections.
        let mut bytes = vec![0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
        bytes.extend_from_slice(&[0x00, 0x05, 0x04, b'n', b'a', b'm', b'e']);
        bytes
    }

    fn key_of(pair: &wasmsign2::KeyPair, prefixes: &[&str], revoked: bool) -> SigningKey {
        SigningKey {
            key_id: key_id_of(&pair.pk),
            name: "test".into(),
            public_key_pem: pair.pk.to_pem(),
            id_prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
            kinds: vec![PluginKind::Integration],
            created_at: 0,
            created_by: "test".into(),
            revoked_at: revoked.then_some(1),
        }
    }

    fn signed(pair: &wasmsign2::KeyPair, bytes: &[u8]) -> Vec<u8> {
        let module = wasmsign2::Module::deserialize(&mut Cursor::new(bytes)).unwrap();
        let key_id = pair.pk.clone().attach_default_key_id().key_id().cloned();
        let module = pair.sk.sign(module, key_id.as_ref()).unwrap();
        let mut out = Vec::new();
        module.serialize(&mut out).unwrap();
        out
    }

    #[test]
    fn every_refusal_has_its_own_code() {
        let pair = wasmsign2::KeyPair::generate();
        let other = wasmsign2::KeyPair::generate();
        let trusted = key_of(&pair, &["io.example."], false);
        let wasm = component();
        let code = |r: std::result::Result<VerifiedSigner, InstallError>| r.map(|_| "ok").unwrap_or_else(|e| e.code());

        assert_eq!(code(verify(&wasm, None, std::slice::from_ref(&trusted))), "plugin.unsigned");
        let good = signed(&pair, &wasm);
        assert_eq!(verify(&good, None, std::slice::from_ref(&trusted)).unwrap().key.key_id, trusted.key_id);
        assert_eq!(
            code(verify(&signed(&other, &wasm), None, std::slice::from_ref(&trusted))),
            "plugin.signature_unknown_key"
        );
        assert_eq!(code(verify(&good, None, &[key_of(&pair, &["io."], true)])), "plugin.signature_key_revoked");

        let mut changed = good.clone();
        let last = changed.len() - 1;
        changed[last] ^= 1;
        assert_eq!(code(verify(&changed, None, std::slice::from_ref(&trusted))), "plugin.signature_invalid");
    }

    #[test]
    fn detached_signatures_verify_the_unsigned_bytes() {
        let pair = wasmsign2::KeyPair::generate();
        let trusted = key_of(&pair, &["io.example."], false);
        let good = signed(&pair, &component());
        let module = wasmsign2::Module::deserialize(&mut Cursor::new(&good)).unwrap();
        let (unsigned, signature) = module.detach_signature().unwrap();
        let mut bytes = Vec::new();
        unsigned.serialize(&mut bytes).unwrap();
        assert!(verify(&bytes, Some(&signature), std::slice::from_ref(&trusted)).is_ok());
        assert_eq!(verify(&good, Some(&signature), &[trusted]).unwrap_err().code(), "plugin.signature_invalid");
    }

    #[test]
    fn scope_is_prefixes_and_kinds() {
        let pair = wasmsign2::KeyPair::generate();
        let key = key_of(&pair, &["io.example."], false);
        assert!(key.covers("io.example.slack", PluginKind::Integration));
        assert!(!key.covers("io.example.slack", PluginKind::CaConnector));
        assert!(!key.covers("io.trellis.slack", PluginKind::Integration));
        let any_kind = SigningKey { kinds: vec![], ..key };
        assert!(any_kind.covers("io.example.acme", PluginKind::CaConnector));
    }

    #[test]
    fn public_keys_parse_from_pem_and_get_wasmsign2_key_ids() {
        let pair = wasmsign2::KeyPair::generate();
        let (id, pem) = parse_public_key(pair.pk.to_pem().as_bytes()).unwrap();
        assert_eq!(id.len(), 24);
        assert_eq!(pem, pair.pk.to_pem());
        assert!(parse_public_key(b"not a key").is_err());
    }
}
