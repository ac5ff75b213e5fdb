//! The failure codes, stable: the host returns them verbatim in the API's `failures[]`
//! (`code: detail`). README.md says what each means.

// Enrollment: the EK.
pub const EK_CERT_MISSING: &str = "ek_cert_missing";
pub const EK_CERT_MALFORMED: &str = "ek_cert_malformed";
pub const EK_CERT_EXPIRED: &str = "ek_cert_expired";
pub const EK_CERT_UNTRUSTED: &str = "ek_cert_untrusted";
pub const EK_PUBLIC_MALFORMED: &str = "ek_public_malformed";
pub const EK_PUBLIC_MISMATCH: &str = "ek_public_mismatch";
pub const EK_PUBLIC_UNSUPPORTED: &str = "ek_public_unsupported";
pub const EK_MANUFACTURER_NOT_ALLOWED: &str = "ek_manufacturer_not_allowed";

// The AK (enrollment, and again for the enrolled AK at every verification).
pub const AK_PUBLIC_MALFORMED: &str = "ak_public_malformed";
pub const AK_ATTRIBUTES_INVALID: &str = "ak_attributes_invalid";
pub const AK_KEY_WEAK: &str = "ak_key_weak";
pub const AK_NAME_MISMATCH: &str = "ak_name_mismatch";

// Verification: the quote.
pub const EVIDENCE_FORMAT_UNSUPPORTED: &str = "evidence_format_unsupported";
pub const QUOTE_MAGIC_INVALID: &str = "quote_magic_invalid";
pub const QUOTE_TYPE_INVALID: &str = "quote_type_invalid";
pub const QUOTE_MALFORMED: &str = "quote_malformed";
pub const QUOTE_SIGNATURE_MALFORMED: &str = "quote_signature_malformed";
pub const QUOTE_SIGNATURE_SCHEME_MISMATCH: &str = "quote_signature_scheme_mismatch";
pub const QUOTE_SIGNATURE_INVALID: &str = "quote_signature_invalid";
pub const QUOTE_NONCE_MISMATCH: &str = "quote_nonce_mismatch";

// Verification: PCRs.
pub const PCR_SELECTION_MISMATCH: &str = "pcr_selection_mismatch";
pub const PCR_DIGEST_MISMATCH: &str = "pcr_digest_mismatch";
pub const PCR_MISMATCH: &str = "pcr_mismatch";
pub const PCR_MISSING: &str = "pcr_missing";
pub const PCR_BANK_MISSING: &str = "pcr_bank_missing";

// Verification: freshness.
pub const ATTESTATION_TOO_OLD: &str = "attestation_too_old";
pub const CLOCK_REGRESSION: &str = "clock_regression";
pub const CLOCK_NOT_SAFE: &str = "clock_not_safe";

// Verification: the CSR key's certification.
pub const BOUND_KEY_MISSING: &str = "bound_key_missing";
pub const CERTIFY_MAGIC_INVALID: &str = "certify_magic_invalid";
pub const CERTIFY_TYPE_INVALID: &str = "certify_type_invalid";
pub const CERTIFY_MALFORMED: &str = "certify_malformed";
pub const CERTIFY_SIGNATURE_MALFORMED: &str = "certify_signature_malformed";
pub const CERTIFY_SIGNATURE_SCHEME_MISMATCH: &str = "certify_signature_scheme_mismatch";
pub const CERTIFY_SIGNATURE_INVALID: &str = "certify_signature_invalid";
pub const CERTIFIED_KEY_MALFORMED: &str = "certified_key_malformed";
pub const CERTIFY_NAME_MISMATCH: &str = "certify_name_mismatch";
pub const CERTIFY_NONCE_MISMATCH: &str = "certify_nonce_mismatch";
pub const BOUND_KEY_ATTRIBUTES_INVALID: &str = "bound_key_attributes_invalid";
pub const CSR_KEY_MALFORMED: &str = "csr_key_malformed";
pub const CSR_KEY_MISMATCH: &str = "csr_key_mismatch";

// Verification: secure boot from the event log.
pub const EVENTLOG_MISSING: &str = "eventlog_missing";
pub const EVENTLOG_MALFORMED: &str = "eventlog_malformed";
pub const EVENTLOG_DIGEST_MISMATCH: &str = "eventlog_digest_mismatch";
pub const EVENTLOG_UNEXPECTED_EVENT: &str = "eventlog_unexpected_event";
pub const EVENTLOG_REPLAY_MISMATCH: &str = "eventlog_replay_mismatch";
pub const SECURE_BOOT_DISABLED: &str = "secure_boot_disabled";
pub const SECURE_BOOT_STATE_UNKNOWN: &str = "secure_boot_state_unknown";

/// Every code, for documentation checks.
pub const ALL: &[&str] = &[
    EK_CERT_MISSING,
    EK_CERT_MALFORMED,
    EK_CERT_EXPIRED,
    EK_CERT_UNTRUSTED,
    EK_PUBLIC_MALFORMED,
    EK_PUBLIC_MISMATCH,
    EK_PUBLIC_UNSUPPORTED,
    EK_MANUFACTURER_NOT_ALLOWED,
    AK_PUBLIC_MALFORMED,
    AK_ATTRIBUTES_INVALID,
    AK_KEY_WEAK,
    AK_NAME_MISMATCH,
    EVIDENCE_FORMAT_UNSUPPORTED,
    QUOTE_MAGIC_INVALID,
    QUOTE_TYPE_INVALID,
    QUOTE_MALFORMED,
    QUOTE_SIGNATURE_MALFORMED,
    QUOTE_SIGNATURE_SCHEME_MISMATCH,
    QUOTE_SIGNATURE_INVALID,
    QUOTE_NONCE_MISMATCH,
    PCR_SELECTION_MISMATCH,
    PCR_DIGEST_MISMATCH,
    PCR_MISMATCH,
    PCR_MISSING,
    PCR_BANK_MISSING,
    ATTESTATION_TOO_OLD,
    CLOCK_REGRESSION,
    CLOCK_NOT_SAFE,
    BOUND_KEY_MISSING,
    CERTIFY_MAGIC_INVALID,
    CERTIFY_TYPE_INVALID,
    CERTIFY_MALFORMED,
    CERTIFY_SIGNATURE_MALFORMED,
    CERTIFY_SIGNATURE_SCHEME_MISMATCH,
    CERTIFY_SIGNATURE_INVALID,
    CERTIFIED_KEY_MALFORMED,
    CERTIFY_NAME_MISMATCH,
    CERTIFY_NONCE_MISMATCH,
    BOUND_KEY_ATTRIBUTES_INVALID,
    CSR_KEY_MALFORMED,
    CSR_KEY_MISMATCH,
    EVENTLOG_MISSING,
    EVENTLOG_MALFORMED,
    EVENTLOG_DIGEST_MISMATCH,
    EVENTLOG_UNEXPECTED_EVENT,
    EVENTLOG_REPLAY_MISMATCH,
    SECURE_BOOT_DISABLED,
    SECURE_BOOT_STATE_UNKNOWN,
];

#[cfg(test)]
mod tests {
    /// README.md documents every code, and documents no other.
    #[test]
    fn the_readme_lists_every_code() {
        let readme = include_str!("../README.md");
        let table = readme.split("## Failure codes").nth(1).unwrap_or_default();
        let documented: Vec<&str> =
            table.lines().filter_map(|l| l.strip_prefix("| `")).filter_map(|l| l.split('`').next()).collect();
        for code in super::ALL {
            assert!(documented.contains(code), "{code} is not in README.md's failure code table");
        }
        for code in &documented {
            assert!(super::ALL.contains(code), "README.md documents {code}, which the verifier never reports");
        }
        assert_eq!(documented.len(), super::ALL.len());
    }
}
