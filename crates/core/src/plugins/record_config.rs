//! The configuration of a record a plugin serves (a CA, an external integration, an issuance
//! policy): secret members sealed at rest under the master key, masked in every response,
//! withheld members never sent to the plugin, and the plugin's `invalid-config` as a 400.
//!
//! A secret member is one the serving plugin declares (`secret-fields`) or one of the
//! well-known credential names below, whatever the plugin says: a plugin that forgets to
//! declare `apiKey` does not get it stored in the clear.
//!
//! Each sealed member is bound to its record and pointer ([`Owner`]); a client never sends a
//! sealed value ([`refuse_client_sealed`]), and a kept secret never follows the record to a new
//! destination ([`refuse_kept_secrets_for_new_destinations`]).

use serde_json::{json, Map, Value};

use crate::clock::Entropy;
use crate::crypto::MasterKey;
use crate::error::{Error, Result};
use crate::plugins::{PluginError, PluginInfo, ReportedError};

/// What responses show instead of a secret. Sending it back in an update keeps the secret.
pub const MASK: &str = "********";

const SEALED: &str = "$sealed";

/// Top-level members that are secrets for every record type, as JSON pointers.
const WELL_KNOWN: &[&str] = &[
    "/apiKey",
    "/apiSecret",
    "/apiToken",
    "/token",
    "/accessToken",
    "/authToken",
    "/secretAccessKey",
    "/sessionToken",
    "/clientSecret",
    "/password",
    "/privateKey",
    "/privateKeyPem",
    "/eabHmacKey",
    "/hmacKey",
    "/secret",
    "/routingKey",
    "/webhookUrl",
];

/// The secret members of a record served by `info`, as JSON pointers, and whether each is
/// withheld from the plugin.
pub fn secret_pointers(info: &PluginInfo) -> Vec<(String, bool)> {
    let mut pointers: Vec<(String, bool)> =
        info.secret_fields.iter().map(|f| (f.pointer.clone(), f.withheld)).collect();
    for pointer in WELL_KNOWN {
        if !pointers.iter().any(|(p, _)| p == pointer) {
            pointers.push(((*pointer).to_owned(), false));
        }
    }
    pointers
}

/// The record a configuration belongs to. Each sealed member is bound to it and to the
/// member's pointer (the AEAD's associated data), so a sealed value copied into another member,
/// another record or another workspace does not open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub workspace_id: String,
    /// `certificate_authority`, `integration`, `issuance_policy`.
    pub kind: &'static str,
    pub id: String,
}

impl Owner {
    pub fn new(workspace_id: &str, kind: &'static str, id: impl ToString) -> Self {
        Owner { workspace_id: workspace_id.to_owned(), kind, id: id.to_string() }
    }
}

/// Marks a seal bound to its record ([`Owner`]); a seal without it was made before seals were
/// bound to records and is bound to (workspace, pointer) only.
const RECORD_BOUND: &str = "r1:";

fn context(owner: &Owner, pointer: &str) -> Vec<u8> {
    // A JSON array: no member can run into the next, whatever characters ids hold.
    json!(["trellis:record-config:v2", owner.workspace_id, owner.kind, owner.id, pointer]).to_string().into_bytes()
}

/// The binding of seals made before seals were bound to records (read only: every write
/// re-seals under [`context`]).
fn legacy_context(workspace_id: &str, pointer: &str) -> Vec<u8> {
    format!("trellis:record-config:{workspace_id}:{pointer}").into_bytes()
}

fn is_sealed(value: &Value) -> bool {
    value.as_object().is_some_and(|o| o.len() == 1 && o.contains_key(SEALED))
}

/// Refuses a configuration holding a `{"$sealed": …}` object anywhere: sealed values only
/// ever come from the store, and one sent by a client (copied from a database dump, another
/// record, another workspace) would otherwise be stored as if this service had sealed it.
pub fn refuse_client_sealed(member: &str, config: &Value) -> Result<()> {
    fn find(value: &Value, at: &str, found: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if map.contains_key(SEALED) {
                    found.push(at.to_owned());
                    return;
                }
                for (key, value) in map {
                    find(value, &format!("{at}/{}", key.replace('~', "~0").replace('/', "~1")), found);
                }
            }
            Value::Array(items) => {
                for (i, value) in items.iter().enumerate() {
                    find(value, &format!("{at}/{i}"), found);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    find(config, "", &mut found);
    if found.is_empty() {
        return Ok(());
    }
    let message = "a `$sealed` value comes only from the store: send the secret in the clear, or the mask to keep it";
    let details: Vec<Value> = found.iter().map(|field| json!({ "field": field, "message": message })).collect();
    Err(Error::validation_with(
        format!("Invalid {member}: {} holds {message}", found.join(", ")),
        json!({ member: details }),
    ))
}

/// What an update asks to store, with every secret in the clear: a secret member sent as
/// [`MASK`] stands for its value in `previous_clear` (an update that echoes a masked response
/// changes nothing). `previous_clear` is `None` for a create, or when the update gives the
/// record to another plugin (another type), whose secrets are not this one's.
pub fn resolve_masks(
    member: &str,
    config: Value,
    previous_clear: Option<&Value>,
    pointers: &[(String, bool)],
) -> Result<Value> {
    let mut config = match config {
        Value::Null => Value::Object(Map::new()),
        Value::Object(map) => Value::Object(map),
        _ => return Err(Error::invalid_field(member, "must be an object")),
    };
    refuse_client_sealed(member, &config)?;
    for (pointer, _) in pointers {
        let Some(slot) = config.pointer_mut(pointer) else { continue };
        if slot.as_str() != Some(MASK) {
            continue;
        }
        match previous_clear.and_then(|p| p.pointer(pointer)).filter(|v| !v.is_null()) {
            Some(old) => *slot = old.clone(),
            None => {
                return Err(Error::invalid_field(
                    &pointer[1..],
                    "is the mask of a secret that is not set; send the secret itself",
                ))
            }
        }
    }
    Ok(config)
}

/// Seals the secret members of `clear` (a configuration from [`resolve_masks`] or
/// [`unseal`]) for storage, bound to `owner`. A member whose value is the one `previous` (the
/// record's stored configuration) already holds sealed bound to `owner` keeps that ciphertext; a
/// seal of the older binding is made anew.
pub fn seal(
    clear: Value,
    previous: Option<&Value>,
    pointers: &[(String, bool)],
    owner: &Owner,
    key: &MasterKey,
    entropy: &dyn Entropy,
) -> Result<Value> {
    let mut config = match clear {
        Value::Null => Value::Object(Map::new()),
        Value::Object(map) => Value::Object(map),
        _ => return Err(Error::invalid_field("config", "must be an object")),
    };
    for (pointer, _) in pointers {
        let Some(slot) = config.pointer_mut(pointer) else { continue };
        if slot.is_null() {
            continue;
        }
        if is_sealed(slot) {
            return Err(Error::Internal(format!("a configuration member ({pointer}) is sealed twice")));
        }
        let plaintext = serde_json::to_vec(slot).map_err(|err| Error::Internal(err.to_string()))?;
        let context = context(owner, pointer);
        let unchanged = previous
            .and_then(|p| p.pointer(pointer))
            .filter(|old| is_sealed(old))
            .and_then(|old| old.get(SEALED).and_then(Value::as_str))
            .and_then(|old| old.strip_prefix(RECORD_BOUND).map(|bound| (old, bound)))
            .filter(|(_, bound)| key.open_bound(bound, &context).is_ok_and(|opened| opened == plaintext))
            .map(|(old, _)| old.to_owned());
        let sealed = match unchanged {
            Some(old) => old,
            None => format!("{RECORD_BOUND}{}", key.seal_bound(&plaintext, &context, entropy)),
        };
        *slot = json!({ SEALED: sealed });
    }
    Ok(config)
}

/// JSON Schema `format`s of a member that names where calls go.
const DESTINATION_FORMATS: &[&str] =
    &["uri", "url", "iri", "uri-reference", "iri-reference", "hostname", "idn-hostname", "ipv4", "ipv6"];

/// The pointers of the members `info`'s configuration schema declares with a destination
/// `format` (nested `properties` included).
fn declared_destinations(schema: &Value, at: &str, out: &mut Vec<String>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else { return };
    for (name, member) in properties {
        let pointer = format!("{at}/{}", name.replace('~', "~0").replace('/', "~1"));
        if member.get("format").and_then(Value::as_str).is_some_and(|f| DESTINATION_FORMATS.contains(&f)) {
            out.push(pointer.clone());
        }
        declared_destinations(member, &pointer, out);
    }
}

/// A destination as compared: a URL's origin (scheme, host, port), else the host name.
fn destination_of(text: &str) -> String {
    let text = text.trim();
    match url::Url::parse(text) {
        Ok(url) if url.host_str().is_some() => format!(
            "{}://{}:{}",
            url.scheme(),
            url.host_str().unwrap_or_default(),
            url.port_or_known_default().unwrap_or(0)
        ),
        _ => text.trim_end_matches('.').to_ascii_lowercase(),
    }
}

/// Every string of `value` that is an absolute URL with a host, by pointer.
fn urls_by_pointer(value: &Value, at: &str, out: &mut std::collections::BTreeMap<String, String>) {
    match value {
        Value::String(text) if url::Url::parse(text.trim()).is_ok_and(|u| u.host_str().is_some()) => {
            out.insert(at.to_owned(), destination_of(text));
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                urls_by_pointer(item, &format!("{at}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                urls_by_pointer(item, &format!("{at}/{}", key.replace('~', "~0").replace('/', "~1")), out);
            }
        }
        _ => {}
    }
}

/// Where a record's calls go: its own `url` (a CA's), the members its plugin's schema declares
/// as URIs or host names, and any member holding a URL (a plugin need not declare one: acme's
/// `dnsProvider.url`, a 0.1 plugin's `endpoint`), by pointer.
fn destinations(clear: &Value, url: Option<&str>, info: &PluginInfo) -> std::collections::BTreeMap<String, String> {
    let mut found = std::collections::BTreeMap::new();
    urls_by_pointer(clear, "", &mut found);
    let mut declared = Vec::new();
    declared_destinations(&info.config_schema, "", &mut declared);
    for pointer in declared {
        if let Some(text) = clear.pointer(&pointer).and_then(Value::as_str).filter(|t| !t.trim().is_empty()) {
            found.insert(pointer, destination_of(text));
        }
    }
    if let Some(url) = url.filter(|u| !u.trim().is_empty()) {
        // Not a JSON pointer of the configuration: the record's own member.
        found.insert("url".to_owned(), destination_of(url));
    }
    found
}

/// A stored secret goes only where it went before. An update that changes where the record's
/// calls go (its `url`, or a configuration member naming an endpoint or host: see
/// [`destinations`]; added or removed counts) must send every secret again: one it keeps,
/// by sending [`MASK`] (a PATCH sends it for every secret it does not name), is refused with
/// a 400 naming each secret to re-enter. Someone who may edit a record but never saw its
/// secrets thus cannot send them to a server of their choice. Withheld secrets never leave the
/// host, so they may stay.
#[allow(clippy::too_many_arguments)]
pub fn refuse_kept_secrets_for_new_destinations(
    member: &str,
    info: &PluginInfo,
    pointers: &[(String, bool)],
    update: &Value,
    after_clear: &Value,
    after_url: Option<&str>,
    before_clear: &Value,
    before_url: Option<&str>,
) -> Result<()> {
    let (after, before) = (destinations(after_clear, after_url, info), destinations(before_clear, before_url, info));
    if after == before {
        return Ok(());
    }
    let kept: Vec<&str> = pointers
        .iter()
        .filter(|(pointer, withheld)| !withheld && update.pointer(pointer).and_then(Value::as_str) == Some(MASK))
        .map(|(pointer, _)| pointer.as_str())
        .collect();
    if kept.is_empty() {
        return Ok(());
    }
    let moved: Vec<&str> = after
        .keys()
        .chain(before.keys())
        .filter(|k| after.get(*k) != before.get(*k))
        .map(String::as_str)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let names: Vec<&str> = kept.iter().map(|p| &p[1..]).collect();
    let details: Vec<Value> = kept
        .iter()
        .map(|pointer| {
            json!({ "field": &pointer[1..], "message": "send this secret again: the record's calls now go elsewhere" })
        })
        .collect();
    Err(Error::validation_with(
        format!(
            "Invalid {member}: the record's calls now go elsewhere ({}), so its stored secrets must be sent again: {} \
             (a kept secret is never sent to a new destination)",
            moved.join(", "),
            names.join(", ")
        ),
        json!({ member: details, "secrets": names, "changed": moved }),
    ))
}

/// A plugin's `invalid-config` as a 400 naming each problem under `details.<member>` (the
/// record's name for its configuration: `config`, or `configuration` for integrations).
pub fn invalid_config(err: PluginError, member: &str) -> Error {
    match err {
        PluginError::Reported { error: ReportedError::InvalidConfig { issues }, .. } => {
            let details: Vec<Value> =
                issues.iter().map(|issue| json!({ "field": issue.field, "message": issue.message })).collect();
            let summary: Vec<String> = issues
                .iter()
                .map(|i| if i.field.is_empty() { i.message.clone() } else { format!("{}: {}", i.field, i.message) })
                .collect();
            Error::validation_with(format!("Invalid {member}: {}", summary.join("; ")), json!({ member: details }))
        }
        other => other.into(),
    }
}

/// The configuration with secrets in the clear, for the host side (plugin calls, pki-core).
/// A seal made before seals were bound to records opens under its old binding (workspace,
/// pointer); the record's next write re-seals it bound to the record.
pub fn unseal(config: &Value, pointers: &[(String, bool)], owner: &Owner, key: &MasterKey) -> Result<Value> {
    let mut config = config.clone();
    for (pointer, _) in pointers {
        let Some(slot) = config.pointer_mut(pointer) else { continue };
        let Some(sealed) = slot.get(SEALED).and_then(Value::as_str).filter(|_| is_sealed(slot)) else { continue };
        let opened = match sealed.strip_prefix(RECORD_BOUND) {
            Some(bound) => key.open_bound(bound, &context(owner, pointer)),
            None => key.open_bound(sealed, &legacy_context(&owner.workspace_id, pointer)),
        };
        let plaintext = opened.map_err(|_| {
            Error::Internal(format!(
                "a sealed configuration member ({pointer}) of {} {} does not open here",
                owner.kind, owner.id
            ))
        })?;
        *slot = serde_json::from_slice(&plaintext).map_err(|err| Error::Internal(err.to_string()))?;
    }
    Ok(config)
}

/// What the plugin gets: the clear configuration minus withheld members.
pub fn for_plugin(clear: &Value, pointers: &[(String, bool)]) -> Value {
    without(clear, pointers, |withheld| withheld)
}

/// The configuration minus every secret member.
pub fn without_secrets(clear: &Value, pointers: &[(String, bool)]) -> Value {
    without(clear, pointers, |_| true)
}

fn without(clear: &Value, pointers: &[(String, bool)], remove: impl Fn(bool) -> bool) -> Value {
    let mut config = clear.clone();
    for (pointer, withheld) in pointers {
        if !remove(*withheld) {
            continue;
        }
        if let Some((parent, member)) = pointer.rsplit_once('/') {
            let parent = if parent.is_empty() { Some(&mut config) } else { config.pointer_mut(parent) };
            if let Some(Value::Object(map)) = parent {
                map.remove(member);
            }
        }
    }
    config
}

/// Schema annotation of a top-level configuration member that carries the record's type: a
/// plugin serving several types declares one (`"x-trellis-record-type": true`) and the host sets
/// it to the record's type in every call, whatever was stored (nothing is stored there).
pub const RECORD_TYPE_ANNOTATION: &str = "x-trellis-record-type";

/// The members of `info`'s configuration annotated [`RECORD_TYPE_ANNOTATION`].
pub fn record_type_members(info: &PluginInfo) -> Vec<String> {
    info.config_schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .iter()
                .filter(|(_, schema)| schema.get(RECORD_TYPE_ANNOTATION) == Some(&Value::Bool(true)))
                .map(|(name, _)| name.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// `config` with the record-type members of `info` set to `record_type`.
pub fn with_record_type(mut config: Value, info: &PluginInfo, record_type: &str) -> Value {
    if let Value::Object(map) = &mut config {
        for member in record_type_members(info) {
            map.insert(member, Value::String(record_type.to_owned()));
        }
    }
    config
}

/// `config` without the record-type members of `info` (what is stored).
pub fn without_record_type(mut config: Value, info: &PluginInfo) -> Value {
    if let Value::Object(map) = &mut config {
        for member in record_type_members(info) {
            map.remove(&member);
        }
    }
    config
}

/// The stored configuration as responses show it: every sealed member masked.
pub fn masked(config: &Value) -> Value {
    match config {
        Value::Object(_) if is_sealed(config) => Value::String(MASK.into()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), masked(v))).collect()),
        Value::Array(items) => Value::Array(items.iter().map(masked).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::OsEntropy;
    use crate::plugins::{Capabilities, PluginKind, SecretField};

    fn ca(id: i64) -> Owner {
        Owner::new("ws", "certificate_authority", id)
    }

    fn info(schema: Value, secret_fields: Vec<SecretField>) -> PluginInfo {
        PluginInfo {
            id: "fixture.ca".into(),
            version: semver::Version::new(0, 1, 0),
            kind: PluginKind::CaConnector,
            name: "fixture".into(),
            description: String::new(),
            serves: vec!["fixture".into()],
            config_schema: schema,
            secret_fields,
            capabilities: Capabilities::default(),
            default_issuer_patterns: Vec::new(),
            outbound_hosts: Vec::new(),
        }
    }

    #[test]
    fn secrets_are_sealed_masked_kept_and_withheld() {
        let key = MasterKey::from_bytes([7; 32]);
        let pointers = vec![("/apiKey".to_string(), false), ("/privateKeyPem".to_string(), true)];
        let config = json!({ "apiKey": "k-123", "privateKeyPem": "PEM", "region": "eu" });
        let clear = resolve_masks("config", config, None, &pointers).unwrap();
        let sealed = seal(clear, None, &pointers, &ca(1), &key, &OsEntropy).unwrap();
        assert!(!sealed.to_string().contains("k-123"));
        assert_eq!(masked(&sealed), json!({ "apiKey": MASK, "privateKeyPem": MASK, "region": "eu" }));
        let clear = unseal(&sealed, &pointers, &ca(1), &key).unwrap();
        assert_eq!(clear["apiKey"], "k-123");
        assert_eq!(for_plugin(&clear, &pointers), json!({ "apiKey": "k-123", "region": "eu" }));
        assert_eq!(without_secrets(&clear, &pointers), json!({ "region": "eu" }));
        // Echoing the mask keeps the secret.
        let again =
            resolve_masks("config", json!({ "apiKey": MASK, "region": "us" }), Some(&clear), &pointers).unwrap();
        assert_eq!(again["apiKey"], "k-123");
        let resealed = seal(again, Some(&sealed), &pointers, &ca(1), &key, &OsEntropy).unwrap();
        assert_eq!(resealed["apiKey"], sealed["apiKey"], "an unchanged secret keeps its ciphertext");
        assert_eq!(resealed["region"], "us");
        assert!(resolve_masks("config", json!({ "apiKey": MASK }), None, &pointers).is_err());
    }

    /// A sealed value is bound to its record and member: copied into another CA, another kind
    /// of record, another workspace or another member, it does not open (the real MasterKey).
    #[test]
    fn a_sealed_value_copied_elsewhere_does_not_open() {
        let key = MasterKey::from_bytes([9; 32]);
        let pointers = vec![("/apiKey".to_string(), false), ("/password".to_string(), false)];
        let sealed = seal(json!({ "apiKey": "k-123" }), None, &pointers, &ca(1), &key, &OsEntropy).unwrap();
        assert_eq!(unseal(&sealed, &pointers, &ca(1), &key).unwrap()["apiKey"], "k-123");
        for elsewhere in [ca(2), Owner::new("ws", "integration", 1), Owner::new("other", "certificate_authority", 1)] {
            assert!(unseal(&sealed, &pointers, &elsewhere, &key).is_err(), "opened under {elsewhere:?}");
        }
        let moved = json!({ "password": sealed["apiKey"].clone() });
        assert!(unseal(&moved, &pointers, &ca(1), &key).is_err(), "opened under another member");
    }

    /// Seals made before seals were bound to records (workspace and pointer only) still open
    /// for their workspace; the next write seals them bound to the record.
    #[test]
    fn legacy_seals_open_and_are_resealed_bound() {
        let key = MasterKey::from_bytes([3; 32]);
        let pointers = vec![("/apiKey".to_string(), false)];
        let old = key.seal_bound(br#""k-old""#, &legacy_context("ws", "/apiKey"), &OsEntropy);
        let stored = json!({ "apiKey": { SEALED: old } });
        let clear = unseal(&stored, &pointers, &ca(1), &key).unwrap();
        assert_eq!(clear["apiKey"], "k-old");
        assert!(unseal(&stored, &pointers, &Owner::new("other", "certificate_authority", 1), &key).is_err());
        let kept = resolve_masks("config", json!({ "apiKey": MASK }), Some(&clear), &pointers).unwrap();
        let resealed = seal(kept, Some(&stored), &pointers, &ca(1), &key, &OsEntropy).unwrap();
        assert!(resealed["apiKey"][SEALED].as_str().unwrap().starts_with(RECORD_BOUND), "{resealed}");
        assert!(unseal(&resealed, &pointers, &ca(2), &key).is_err());
    }

    #[test]
    fn a_client_sent_sealed_value_is_refused() {
        let pointers = vec![("/apiKey".to_string(), false)];
        for config in [
            json!({ "apiKey": { SEALED: "r1:AAAA" } }),
            json!({ "region": "eu", "nested": [{ SEALED: "AAAA", "x": 1 }] }),
        ] {
            let err = resolve_masks("config", config.clone(), None, &pointers).unwrap_err();
            assert_eq!(err.code(), "VALIDATION_ERROR", "{config}");
            assert!(err.to_string().contains("$sealed"), "{err}");
        }
    }

    #[test]
    fn kept_secrets_do_not_follow_a_new_destination() {
        let info = info(
            json!({ "properties": { "vault": { "format": "hostname" }, "auth": { "properties": { "sts": { "format": "uri" } } } } }),
            vec![SecretField { pointer: "/caKey".into(), withheld: true }],
        );
        let pointers = secret_pointers(&info);
        let before = json!({ "apiKey": "k", "password": "p", "caKey": "K", "endpoint": "https://pca.example.com/x",
            "vault": "vault.example.com", "auth": { "sts": "sts.example.com" } });
        let check = |update: Value, url_after: Option<&str>| {
            let after = resolve_masks("config", update.clone(), Some(&before), &pointers)?;
            refuse_kept_secrets_for_new_destinations(
                "config",
                &info,
                &pointers,
                &update,
                &after,
                url_after,
                &before,
                Some("https://ca.example.com"),
            )
        };
        let kept = json!({ "apiKey": MASK, "password": MASK, "caKey": MASK, "endpoint": "https://pca.example.com/x",
            "vault": "vault.example.com", "auth": { "sts": "sts.example.com" } });
        assert!(check(kept.clone(), Some("https://ca.example.com")).is_ok(), "nothing moved");
        assert!(check(kept.clone(), Some("https://CA.example.com:443/other/path")).is_ok(), "same origin");
        let err = check(kept.clone(), Some("https://elsewhere.example.net")).unwrap_err();
        let Error::Validation { details: Some(details), .. } = &err else { panic!("{err:?}") };
        assert_eq!(details["secrets"], json!(["apiKey", "password"]), "withheld secrets never leave: {details}");
        assert_eq!(details["changed"], json!(["url"]));
        assert!(check(kept.clone(), None).is_err(), "a removed url sends calls elsewhere too");
        assert!(check(kept.clone(), Some("http://ca.example.com")).is_err(), "another scheme");
        for (pointer, value) in [
            ("/endpoint", json!("https://attacker.example.net/x")),
            ("/vault", json!("attacker.example.net")),
            ("/auth", json!({ "sts": "attacker.example.net" })),
        ] {
            let mut moved = kept.clone();
            moved[&pointer[1..]] = value;
            let err = check(moved, Some("https://ca.example.com")).unwrap_err();
            assert!(err.to_string().contains("apiKey, password"), "{pointer}: {err}");
        }
        // Every secret sent again: accepted.
        let mut resent = kept.clone();
        resent["endpoint"] = json!("https://attacker.example.net/x");
        resent["apiKey"] = json!("k2");
        resent["password"] = json!("p2");
        assert!(check(resent, Some("https://ca.example.com")).is_ok());
    }
}
