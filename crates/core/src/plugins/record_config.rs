//! The configuration of a record a plugin serves (a CA, an external integration, an issuance
//! policy): secret members sealed at rest under the master key, masked in every response,
//! withheld members never sent to the plugin, and the plugin's `invalid-config` as a 400.
//!
//! A secret member is one the serving plugin declares (`secret-fields`) or one of the
//! well-known credential names below, whatever the plugin says: a plugin that forgets to
//! declare `apiKey` does not get it stored in the clear.

use serde_json::{json, Map, Value};

use crate::clock::Entropy;
use crate::crypto::MasterKey;
use crate::error::{Error, Result};
use crate::plugins::{PluginError, PluginInfo, ReportedError};

/// What responses show instead of a secret. Sending it back in an update keeps the secret.
pub const MASK: &str = "********";

const SEALED: &str = "$sealed";

/// Top-level members that are secrets for every record type.
const WELL_KNOWN: &[&str] = &[
    "apiKey",
    "apiSecret",
    "apiToken",
    "token",
    "accessToken",
    "authToken",
    "secretAccessKey",
    "sessionToken",
    "clientSecret",
    "password",
    "privateKey",
    "privateKeyPem",
    "eabHmacKey",
    "hmacKey",
    "secret",
    "routingKey",
    "webhookUrl",
];

/// The secret members of a record served by `info`, as JSON pointers, and whether each is
/// withheld from the plugin.
pub fn secret_pointers(info: &PluginInfo) -> Vec<(String, bool)> {
    let mut pointers: Vec<(String, bool)> =
        info.secret_fields.iter().map(|f| (f.pointer.clone(), f.withheld)).collect();
    for name in WELL_KNOWN {
        let pointer = format!("/{name}");
        if !pointers.iter().any(|(p, _)| *p == pointer) {
            pointers.push((pointer, false));
        }
    }
    pointers
}

fn context(workspace_id: &str, pointer: &str) -> Vec<u8> {
    format!("trellis:record-config:{workspace_id}:{pointer}").into_bytes()
}

fn is_sealed(value: &Value) -> bool {
    value.as_object().is_some_and(|o| o.len() == 1 && o.contains_key(SEALED))
}

/// Seals the secret members of `config` for storage. A member sent as [`MASK`] keeps the value
/// it has in `previous` (an update that echoes a masked response changes nothing).
pub fn seal(
    config: Value,
    previous: Option<&Value>,
    pointers: &[(String, bool)],
    workspace_id: &str,
    key: &MasterKey,
    entropy: &dyn Entropy,
) -> Result<Value> {
    let mut config = match config {
        Value::Null => Value::Object(Map::new()),
        Value::Object(map) => Value::Object(map),
        _ => return Err(Error::invalid_field("config", "must be an object")),
    };
    for (pointer, _) in pointers {
        let Some(slot) = config.pointer_mut(pointer) else { continue };
        if slot.is_null() || is_sealed(slot) {
            continue;
        }
        if slot.as_str() == Some(MASK) {
            match previous.and_then(|p| p.pointer(pointer)).filter(|v| is_sealed(v)) {
                Some(old) => *slot = old.clone(),
                None => {
                    return Err(Error::invalid_field(
                        &pointer[1..],
                        "is the mask of a secret that is not set; send the secret itself",
                    ))
                }
            }
            continue;
        }
        let plaintext = serde_json::to_vec(slot).map_err(|err| Error::Internal(err.to_string()))?;
        *slot = json!({ SEALED: key.seal_bound(&plaintext, &context(workspace_id, pointer), entropy) });
    }
    Ok(config)
}

/// A stored secret goes only where it went before: an update that keeps a secret by sending
/// [`MASK`] but points the record at another host (a URL in the configuration, or the record's
/// own `url`: `extra_before` / `extra_after`) is refused, so that someone who may edit a record
/// but never saw its secret cannot send it to a server of their choice.
pub fn refuse_kept_secrets_for_new_hosts(
    member: &str,
    update: &Value,
    before_clear: &Value,
    extra_before: &[String],
    extra_after: &[String],
) -> Result<()> {
    if !contains_mask(update) {
        return Ok(());
    }
    let hosts = |urls: Vec<String>| -> Vec<String> {
        let mut hosts: Vec<String> = urls
            .iter()
            .filter_map(|u| url::Url::parse(u).ok())
            .filter_map(|u| u.host_str().map(|h| format!("{h}:{}", u.port_or_known_default().unwrap_or(0))))
            .collect();
        hosts.sort();
        hosts.dedup();
        hosts
    };
    let mut after = crate::plugins::service::urls_in(update);
    after.extend(extra_after.iter().cloned());
    let mut before = crate::plugins::service::urls_in(before_clear);
    before.extend(extra_before.iter().cloned());
    let (after, before) = (hosts(after), hosts(before));
    if after.iter().any(|h| !before.contains(h)) {
        return Err(Error::validation_with(
            format!(
                "Invalid {member}: the record now points at another host, so its stored secrets must be sent \
                 again (a kept secret is never sent to a new host)"
            ),
            json!({ member: [{ "field": "", "message": "send every secret again when a URL changes" }] }),
        ));
    }
    Ok(())
}

fn contains_mask(value: &Value) -> bool {
    match value {
        Value::String(s) => s == MASK,
        Value::Array(items) => items.iter().any(contains_mask),
        Value::Object(map) => map.values().any(contains_mask),
        _ => false,
    }
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
pub fn unseal(config: &Value, pointers: &[(String, bool)], workspace_id: &str, key: &MasterKey) -> Result<Value> {
    let mut config = config.clone();
    for (pointer, _) in pointers {
        let Some(slot) = config.pointer_mut(pointer) else { continue };
        let Some(sealed) = slot.get(SEALED).and_then(Value::as_str).filter(|_| is_sealed(slot)) else { continue };
        let plaintext = key
            .open_bound(sealed, &context(workspace_id, pointer))
            .map_err(|_| Error::Internal(format!("a sealed configuration member ({pointer}) does not open")))?;
        *slot = serde_json::from_slice(&plaintext).map_err(|err| Error::Internal(err.to_string()))?;
    }
    Ok(config)
}

/// What the plugin gets: the clear configuration minus withheld members.
pub fn for_plugin(clear: &Value, pointers: &[(String, bool)]) -> Value {
    let mut config = clear.clone();
    for (pointer, withheld) in pointers {
        if !withheld {
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

    #[test]
    fn secrets_are_sealed_masked_kept_and_withheld() {
        let key = MasterKey::from_bytes([7; 32]);
        let pointers = vec![("/apiKey".to_string(), false), ("/privateKeyPem".to_string(), true)];
        let config = json!({ "apiKey": "k-123", "privateKeyPem": "PEM", "region": "eu" });
        let sealed = seal(config, None, &pointers, "ws", &key, &OsEntropy).unwrap();
        assert!(!sealed.to_string().contains("k-123"));
        assert_eq!(masked(&sealed), json!({ "apiKey": MASK, "privateKeyPem": MASK, "region": "eu" }));
        let clear = unseal(&sealed, &pointers, "ws", &key).unwrap();
        assert_eq!(clear["apiKey"], "k-123");
        assert_eq!(for_plugin(&clear, &pointers), json!({ "apiKey": "k-123", "region": "eu" }));
        // Echoing the mask keeps the secret; another workspace cannot open it.
        let again =
            seal(json!({ "apiKey": MASK, "region": "us" }), Some(&sealed), &pointers, "ws", &key, &OsEntropy).unwrap();
        assert_eq!(unseal(&again, &pointers, "ws", &key).unwrap()["apiKey"], "k-123");
        assert!(unseal(&sealed, &pointers, "other", &key).is_err());
        assert!(seal(json!({ "apiKey": MASK }), None, &pointers, "ws", &key, &OsEntropy).is_err());
    }
}
