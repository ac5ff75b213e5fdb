//! The attestation policy (spec §2.3), as the host passes it: a JSON object. Members this
//! verifier does not use (`id`, `name`, `deviceType`, …) are ignored; the ones it uses are
//! validated strictly, and a policy that does not validate fails the call
//! (`PluginError::InvalidInput`): it is never read as "no requirement".

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use trellis_plugin_sdk::PluginError;

use crate::ekcert::normalize_manufacturer;
use crate::tpm::{Bank, PCR_COUNT};
use crate::wire::unhex;

/// The policy members the verifier applies, with the spec's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// bank → index → expected value.
    pub expected_pcrs: BTreeMap<Bank, BTreeMap<u32, Vec<u8>>>,
    /// Default `["SHA256"]`.
    pub required_pcr_banks: Vec<Bank>,
    /// Default `[0,1,2,3,4,7]`; required in every required bank.
    pub required_pcrs: Vec<u32>,
    /// Normalised `id:XXXXXXXX`; empty: any manufacturer.
    pub allowed_ek_manufacturers: Vec<String>,
    /// Default 300.
    pub max_attestation_age_seconds: i64,
    /// Default true.
    pub require_bound_csr_key: bool,
    /// Default true.
    pub require_secure_boot: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    expected_pcrs: Option<BTreeMap<String, BTreeMap<String, String>>>,
    #[serde(default)]
    required_pcr_banks: Option<Vec<String>>,
    #[serde(default)]
    required_pcrs: Option<Vec<u32>>,
    #[serde(default)]
    allowed_ek_manufacturers: Option<Vec<String>>,
    #[serde(default)]
    max_attestation_age_seconds: Option<i64>,
    #[serde(default)]
    require_bound_csr_key: Option<bool>,
    #[serde(default)]
    require_secure_boot: Option<bool>,
}

fn invalid(detail: impl std::fmt::Display) -> PluginError {
    PluginError::invalid_input(format!("policy_invalid: {detail}"))
}

impl Policy {
    /// Reads and validates a policy document.
    pub fn from_json(value: &Value) -> Result<Policy, PluginError> {
        if !value.is_object() {
            return Err(invalid("the attestation policy is not a JSON object"));
        }
        let raw: Raw = serde_json::from_value(value.clone()).map_err(invalid)?;
        let mut expected_pcrs = BTreeMap::new();
        for (bank_name, registers) in raw.expected_pcrs.unwrap_or_default() {
            let bank = Bank::from_name(&bank_name).ok_or_else(|| invalid(format!("unknown PCR bank {bank_name:?}")))?;
            let entry: &mut BTreeMap<u32, Vec<u8>> = expected_pcrs.entry(bank).or_default();
            if !entry.is_empty() {
                return Err(invalid(format!("PCR bank {} given twice", bank.name())));
            }
            for (index, digest) in registers {
                let index: u32 = index
                    .parse()
                    .ok()
                    .filter(|i| *i < PCR_COUNT)
                    .ok_or_else(|| invalid(format!("{} PCR index {index:?} is not 0 to 23", bank.name())))?;
                let value =
                    unhex(digest.trim_start_matches("0x")).filter(|v| v.len() == bank.size()).ok_or_else(|| {
                        invalid(format!("{} PCR {index}: not a {}-byte hex digest", bank.name(), bank.size()))
                    })?;
                entry.insert(index, value);
            }
        }
        let required_pcr_banks = match raw.required_pcr_banks {
            None => vec![Bank::Sha256],
            Some(names) => {
                let mut banks = Vec::new();
                for name in names {
                    let bank = Bank::from_name(&name).ok_or_else(|| invalid(format!("unknown PCR bank {name:?}")))?;
                    if !banks.contains(&bank) {
                        banks.push(bank);
                    }
                }
                banks
            }
        };
        let required_pcrs = raw.required_pcrs.unwrap_or_else(|| vec![0, 1, 2, 3, 4, 7]);
        if let Some(bad) = required_pcrs.iter().find(|i| **i >= PCR_COUNT) {
            return Err(invalid(format!("requiredPcrs: {bad} is not 0 to 23")));
        }
        let mut allowed_ek_manufacturers = Vec::new();
        for m in raw.allowed_ek_manufacturers.unwrap_or_default() {
            let normalised = normalize_manufacturer(&m)
                .ok_or_else(|| invalid(format!("allowedEkManufacturers: {m:?} is not id:XXXXXXXX")))?;
            allowed_ek_manufacturers.push(normalised);
        }
        let max_attestation_age_seconds = raw.max_attestation_age_seconds.unwrap_or(300);
        if max_attestation_age_seconds < 0 {
            return Err(invalid("maxAttestationAgeSeconds is negative"));
        }
        Ok(Policy {
            expected_pcrs,
            required_pcr_banks,
            required_pcrs,
            allowed_ek_manufacturers,
            max_attestation_age_seconds,
            require_bound_csr_key: raw.require_bound_csr_key.unwrap_or(true),
            require_secure_boot: raw.require_secure_boot.unwrap_or(true),
        })
    }

    /// Whether the policy lets `manufacturer` (normalised) through.
    pub fn allows_manufacturer(&self, manufacturer: Option<&str>) -> bool {
        self.allowed_ek_manufacturers.is_empty()
            || manufacturer.is_some_and(|m| self.allowed_ek_manufacturers.iter().any(|a| a == m))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn defaults_follow_the_spec() {
        let p = Policy::from_json(&json!({"name": "x", "expectedPcrs": {}})).unwrap();
        assert_eq!(p.required_pcr_banks, vec![Bank::Sha256]);
        assert_eq!(p.required_pcrs, vec![0, 1, 2, 3, 4, 7]);
        assert_eq!(p.max_attestation_age_seconds, 300);
        assert!(p.require_bound_csr_key && p.require_secure_boot);
        assert!(p.allows_manufacturer(None));
    }

    #[test]
    fn invalid_members_fail_the_call() {
        for bad in [
            json!(null),
            json!([]),
            json!({"expectedPcrs": {"MD5": {}}}),
            json!({"expectedPcrs": {"SHA256": {"24": "00"}}}),
            json!({"expectedPcrs": {"SHA256": {"7": "abcd"}}}),
            json!({"expectedPcrs": {"SHA256": {}, "sha256": {"7": "00"}}}),
            json!({"requiredPcrBanks": ["SHA3"]}),
            json!({"requiredPcrs": [30]}),
            json!({"allowedEkManufacturers": ["IFX"]}),
            json!({"maxAttestationAgeSeconds": -1}),
            json!({"requireSecureBoot": "yes"}),
        ] {
            assert!(Policy::from_json(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn values_and_manufacturers_are_normalised() {
        let p = Policy::from_json(&json!({
            "expectedPcrs": {"sha256": {"7": format!("0x{}", "AB".repeat(32))}},
            "allowedEkManufacturers": ["id:4e544300", "00001014"],
        }))
        .unwrap();
        assert_eq!(p.expected_pcrs[&Bank::Sha256][&7], vec![0xab; 32]);
        assert!(p.allows_manufacturer(Some("id:00001014")));
        assert!(!p.allows_manufacturer(Some("id:49465800")));
        assert!(!p.allows_manufacturer(None));
    }
}
