//! Attestation policies (spec §2.3, §4.3): what a device's quote must show. Validated as a whole
//! on create and after every PATCH; every problem is listed in the 400's `details.problems`.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::AttestationDeps;
use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::error::Result;
use crate::unit_of_work::Target;

use super::AttestationError;

/// PCR banks and their digest sizes.
pub const BANKS: &[(&str, usize)] = &[("SHA1", 20), ("SHA256", 32), ("SHA384", 48), ("SHA512", 64), ("SM3_256", 32)];
pub const DEFAULT_REQUIRED_PCRS: [u32; 6] = [0, 1, 2, 3, 4, 7];
pub const DEFAULT_MAX_AGE_SECONDS: i64 = 300;
/// The oldest evidence a policy may accept (one day).
pub const MAX_AGE_LIMIT_SECONDS: i64 = 86_400;
const FIELDS: &[&str] = &[
    "name",
    "description",
    "deviceType",
    "expectedPcrs",
    "requiredPcrBanks",
    "requiredPcrs",
    "allowedEkManufacturers",
    "maxAttestationAgeSeconds",
    "requireBoundCsrKey",
    "requireSecureBoot",
    "enabled",
];

/// A policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub id: i64,
    pub workspace_id: String,
    pub name: String,
    pub description: Option<String>,
    pub device_type: Option<String>,
    /// Bank → PCR index (as a string) → lowercase hex digest.
    pub expected_pcrs: BTreeMap<String, BTreeMap<String, String>>,
    pub required_pcr_banks: Vec<String>,
    pub required_pcrs: Vec<u32>,
    pub allowed_ek_manufacturers: Vec<String>,
    pub max_attestation_age_seconds: i64,
    pub require_bound_csr_key: bool,
    pub require_secure_boot: bool,
    pub enabled: bool,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Policy {
    /// The policy as §2.3 shows it (and as the verifier plugin receives it).
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "deviceType": self.device_type,
            "expectedPcrs": self.expected_pcrs,
            "requiredPcrBanks": self.required_pcr_banks,
            "requiredPcrs": self.required_pcrs,
            "allowedEkManufacturers": self.allowed_ek_manufacturers,
            "maxAttestationAgeSeconds": self.max_attestation_age_seconds,
            "requireBoundCsrKey": self.require_bound_csr_key,
            "requireSecureBoot": self.require_secure_boot,
            "enabled": self.enabled,
            "createdAt": crate::clock::rfc3339(self.created_at),
            "updatedAt": crate::clock::rfc3339(self.updated_at),
        })
    }

    /// Whether the policy applies to a device of `device_type` (a policy without a type applies
    /// to every device).
    pub fn matches(&self, device_type: Option<&str>) -> bool {
        match &self.device_type {
            None => true,
            Some(wanted) => device_type == Some(wanted.as_str()),
        }
    }
}

/// Collects problems, then fails with all of them.
struct Problems(Vec<Value>);

impl Problems {
    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(json!({ "field": field.into(), "message": message.into() }));
    }
}

fn digest_size(bank: &str) -> Option<usize> {
    BANKS.iter().find(|(name, _)| *name == bank).map(|(_, size)| *size)
}

/// Validates a whole policy document (defaults applied to absent members).
fn parse(doc: &Map<String, Value>, problems: &mut Problems) -> Option<Policy> {
    for key in doc.keys() {
        if !FIELDS.contains(&key.as_str()) && !["id", "createdAt", "updatedAt"].contains(&key.as_str()) {
            problems.add(key.clone(), "is not a policy member");
        }
    }
    let string = |problems: &mut Problems, field: &str, max: usize| -> Option<Option<String>> {
        match doc.get(field) {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(s)) if s.chars().count() <= max && !s.chars().any(char::is_control) => {
                Some(Some(s.trim().to_owned()).filter(|s| !s.is_empty()))
            }
            Some(_) => {
                problems.add(field, format!("must be a string of at most {max} characters"));
                None
            }
        }
    };
    let boolean = |problems: &mut Problems, field: &str, default: bool| -> bool {
        match doc.get(field) {
            None | Some(Value::Null) => default,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                problems.add(field, "must be true or false");
                default
            }
        }
    };
    let name = string(problems, "name", 200).flatten();
    if name.is_none() && !problems.0.iter().any(|p| p["field"] == "name") {
        problems.add("name", "is required");
    }
    let description = string(problems, "description", 2000).flatten();
    let device_type = string(problems, "deviceType", 200).flatten();

    let mut expected_pcrs = BTreeMap::new();
    match doc.get("expectedPcrs") {
        None | Some(Value::Null) => problems.add("expectedPcrs", "is required: {\"SHA256\": {\"0\": \"<hex>\", …}}"),
        Some(Value::Object(banks)) => {
            for (bank, values) in banks {
                let Some(size) = digest_size(bank) else {
                    problems.add(
                        format!("expectedPcrs.{bank}"),
                        "is not a PCR bank (SHA1, SHA256, SHA384, SHA512, SM3_256)",
                    );
                    continue;
                };
                let Value::Object(values) = values else {
                    problems.add(format!("expectedPcrs.{bank}"), "must map PCR indexes to hex digests");
                    continue;
                };
                let mut parsed = BTreeMap::new();
                for (index, digest) in values {
                    let field = format!("expectedPcrs.{bank}.{index}");
                    let valid_index = index.parse::<u32>().ok().filter(|i| *i <= 23 && i.to_string() == *index);
                    if valid_index.is_none() {
                        problems.add(&field, "PCR indexes are the strings \"0\" to \"23\"");
                        continue;
                    }
                    match digest.as_str().map(str::trim) {
                        Some(hex) if hex.len() == size * 2 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
                            parsed.insert(index.clone(), hex.to_ascii_lowercase());
                        }
                        _ => problems.add(
                            &field,
                            format!("must be a {size}-byte {bank} digest in hex ({} characters)", size * 2),
                        ),
                    }
                }
                expected_pcrs.insert(bank.clone(), parsed);
            }
        }
        Some(_) => problems.add("expectedPcrs", "must be an object: bank → {index: hex digest}"),
    }

    let required_pcr_banks = match doc.get("requiredPcrBanks") {
        None | Some(Value::Null) => vec!["SHA256".to_owned()],
        Some(Value::Array(items)) => {
            let mut banks = Vec::new();
            for item in items {
                match item.as_str().filter(|b| digest_size(b).is_some()) {
                    Some(bank) if !banks.iter().any(|b: &String| b == bank) => banks.push(bank.to_owned()),
                    Some(_) => {}
                    None => problems.add(
                        "requiredPcrBanks",
                        format!("{item} is not a PCR bank (SHA1, SHA256, SHA384, SHA512, SM3_256)"),
                    ),
                }
            }
            banks
        }
        Some(_) => {
            problems.add("requiredPcrBanks", "must be a list of bank names");
            Vec::new()
        }
    };
    let required_pcrs = match doc.get("requiredPcrs") {
        None | Some(Value::Null) => DEFAULT_REQUIRED_PCRS.to_vec(),
        Some(Value::Array(items)) => {
            let mut pcrs = Vec::new();
            for item in items {
                match item.as_u64().filter(|i| *i <= 23) {
                    Some(i) => {
                        let i = i as u32;
                        if !pcrs.contains(&i) {
                            pcrs.push(i);
                        }
                    }
                    None => problems.add("requiredPcrs", format!("{item} is not a PCR index (0 to 23)")),
                }
            }
            pcrs.sort_unstable();
            pcrs
        }
        Some(_) => {
            problems.add("requiredPcrs", "must be a list of PCR indexes");
            Vec::new()
        }
    };
    let allowed_ek_manufacturers = match doc.get("allowedEkManufacturers") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|item| match item.as_str().map(str::trim).filter(|s| !s.is_empty() && s.len() <= 64) {
                Some(s) => Some(s.to_owned()),
                None => {
                    problems.add("allowedEkManufacturers", format!("{item} is not a manufacturer (e.g. id:49424D00)"));
                    None
                }
            })
            .collect(),
        Some(_) => {
            problems.add("allowedEkManufacturers", "must be a list of manufacturer ids");
            Vec::new()
        }
    };
    let max_age = match doc.get("maxAttestationAgeSeconds") {
        None | Some(Value::Null) => DEFAULT_MAX_AGE_SECONDS,
        Some(value) => match value.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64) {
            Some(secs) if (1..=MAX_AGE_LIMIT_SECONDS).contains(&secs) => secs,
            _ => {
                problems
                    .add("maxAttestationAgeSeconds", format!("must be an integer from 1 to {MAX_AGE_LIMIT_SECONDS}"));
                DEFAULT_MAX_AGE_SECONDS
            }
        },
    };
    let require_bound_csr_key = boolean(problems, "requireBoundCsrKey", true);
    let require_secure_boot = boolean(problems, "requireSecureBoot", true);
    let enabled = boolean(problems, "enabled", true);
    if !problems.0.is_empty() {
        return None;
    }
    Some(Policy {
        id: 0,
        workspace_id: String::new(),
        name: name.unwrap_or_default(),
        description,
        device_type,
        expected_pcrs,
        required_pcr_banks,
        required_pcrs,
        allowed_ek_manufacturers,
        max_attestation_age_seconds: max_age,
        require_bound_csr_key,
        require_secure_boot,
        enabled,
        created_at: 0,
        updated_at: 0,
    })
}

fn validate(doc: &Value) -> std::result::Result<Policy, AttestationError> {
    let mut problems = Problems(Vec::new());
    let Value::Object(map) = doc else {
        return Err(AttestationError::InvalidPolicy(
            json!({ "problems": [{ "field": "", "message": "the body must be a JSON object" }] }),
        ));
    };
    parse(map, &mut problems).ok_or_else(|| AttestationError::InvalidPolicy(json!({ "problems": problems.0 })))
}

pub async fn find(ctx: &AttestationDeps, workspace_id: &str, id: i64) -> Result<Policy> {
    Ok(ctx.store.find_attestation_policy(workspace_id, id).await?.ok_or(AttestationError::PolicyNotFound)?)
}

/// The workspace's policies, oldest first; with `device_type`, those that apply to it.
pub async fn list(ctx: &AttestationDeps, caller: &Caller, device_type: Option<&str>) -> Result<Vec<Policy>> {
    caller.require(Scope::AttestationRead)?;
    let all = ctx.store.list_attestation_policies(&caller.workspace_id).await?;
    Ok(match device_type {
        None => all,
        Some(t) => all.into_iter().filter(|p| p.device_type.as_deref() == Some(t)).collect(),
    })
}

pub async fn get(ctx: &AttestationDeps, caller: &Caller, id: i64) -> Result<Policy> {
    caller.require(Scope::AttestationRead)?;
    find(ctx, &caller.workspace_id, id).await
}

pub async fn create(ctx: &AttestationDeps, caller: &Caller, body: &Value) -> Result<Policy> {
    caller.require(Scope::AttestationManage)?;
    let mut policy = validate(body)?;
    policy.workspace_id = caller.workspace_id.to_string();
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    policy.created_at = change.at();
    policy.updated_at = change.at();
    let policy = change.tx().insert_attestation_policy(&policy).await?;
    change.audit("attestation_policy.created", Target::new("attestation_policy", policy.id), policy.to_json());
    change.commit().await?;
    Ok(policy)
}

/// Partial update: the given members replace the stored ones (`expectedPcrs` as a whole), then
/// the result is validated as on create.
pub async fn update(ctx: &AttestationDeps, caller: &Caller, id: i64, patch: &Value) -> Result<Policy> {
    caller.require(Scope::AttestationManage)?;
    let current = find(ctx, &caller.workspace_id, id).await?;
    let Value::Object(patch) = patch else {
        return Err(AttestationError::InvalidPolicy(
            json!({ "problems": [{ "field": "", "message": "the body must be a JSON object" }] }),
        )
        .into());
    };
    let mut doc = match current.to_json() {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    for (key, value) in patch {
        doc.insert(key.clone(), value.clone());
    }
    let mut policy = validate(&Value::Object(doc))?;
    policy.id = current.id;
    policy.workspace_id = current.workspace_id.clone();
    policy.created_at = current.created_at;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    policy.updated_at = change.at();
    if !change.tx().update_attestation_policy(&policy).await? {
        return Err(AttestationError::PolicyNotFound.into());
    }
    change.audit("attestation_policy.updated", Target::new("attestation_policy", id), policy.to_json());
    change.commit().await?;
    Ok(policy)
}

pub async fn delete(ctx: &AttestationDeps, caller: &Caller, id: i64) -> Result<()> {
    caller.require(Scope::AttestationManage)?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    if !change.tx().delete_attestation_policy(&caller.workspace_id, id).await? {
        return Err(AttestationError::PolicyNotFound.into());
    }
    change.audit("attestation_policy.deleted", Target::new("attestation_policy", id), json!({}));
    change.commit().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(doc: Value) -> Vec<String> {
        match validate(&doc) {
            Ok(_) => Vec::new(),
            Err(AttestationError::InvalidPolicy(details)) => details["problems"]
                .as_array()
                .map(|p| p.iter().map(|p| p["field"].as_str().unwrap_or("").to_owned()).collect())
                .unwrap_or_default(),
            Err(other) => vec![other.to_string()],
        }
    }

    #[test]
    fn defaults_and_digest_sizes() {
        let policy = validate(&json!({ "name": "p", "expectedPcrs": { "SHA256": { "7": "AB".repeat(32) } } })).unwrap();
        assert_eq!(policy.required_pcr_banks, ["SHA256"]);
        assert_eq!(policy.required_pcrs, DEFAULT_REQUIRED_PCRS);
        assert_eq!(policy.max_attestation_age_seconds, 300);
        assert!(policy.require_bound_csr_key && policy.require_secure_boot && policy.enabled);
        assert_eq!(policy.expected_pcrs["SHA256"]["7"], "ab".repeat(32));
        assert_eq!(
            problems(json!({ "name": "p", "expectedPcrs": { "SHA256": { "7": "ab".repeat(20) } } })),
            ["expectedPcrs.SHA256.7"]
        );
        assert!(problems(json!({ "name": "p", "expectedPcrs": { "SHA1": { "0": "ab".repeat(20) } } })).is_empty());
        assert_eq!(problems(json!({ "name": "p", "expectedPcrs": { "MD5": {} } })), ["expectedPcrs.MD5"]);
        assert_eq!(
            problems(json!({ "name": "p", "expectedPcrs": { "SHA256": { "24": "ab".repeat(32) } } })),
            ["expectedPcrs.SHA256.24"]
        );
        assert_eq!(problems(json!({ "expectedPcrs": {} })), ["name"]);
        assert_eq!(problems(json!({ "name": "p" })), ["expectedPcrs"]);
        assert_eq!(problems(json!({ "name": "p", "expectedPcrs": {}, "requiredPcrs": [25] })), ["requiredPcrs"]);
        assert_eq!(
            problems(json!({ "name": "p", "expectedPcrs": {}, "maxAttestationAgeSeconds": 0 })),
            ["maxAttestationAgeSeconds"]
        );
        assert_eq!(problems(json!({ "name": "p", "expectedPcrs": {}, "colour": "red" })), ["colour"]);
    }
}
