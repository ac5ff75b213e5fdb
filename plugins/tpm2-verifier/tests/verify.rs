//! `verify` on evidence from a real software TPM (tests/vectors, made by make-vectors.sh): the
//! happy paths pass, and each tamper fails with its own code, in the documented order.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use serde_json::json;
use support::*;
use trellis_plugin_sdk::bindings::attestation_verifier::exports::trellis::plugin::verifier::OpaqueEvidence;

#[test]
fn the_swtpm_quote_certify_and_event_log_pass() {
    let verdict = verify(happy());
    assert!(verdict.passed, "{:?}", verdict.failures);
    assert_eq!(verdict.trust_score, 100);
    assert_eq!(verdict.ek_manufacturer.as_deref(), Some("id:00001014"));
    // Every PCR of the policy (sha1 and sha256, 0-4 and 7) verified, with its value.
    let expected = pcrs("pcrs.txt");
    assert_eq!(verdict.verified_pcrs.len(), expected.len());
    for pcr in &expected {
        assert!(
            verdict.verified_pcrs.iter().any(|v| v.bank == pcr.bank && v.index == pcr.index && v.digest == pcr.digest),
            "{pcr:?} not reported as verified"
        );
    }
    // The quote's clock, for the host to keep: endorsement-hierarchy AK, so real counters.
    let quote = vector("quote_rsa.attest");
    let clock = verdict.clock.expect("the quote's clock");
    let at = 2 + 4 + 2 + 34 + 2 + 32;
    assert_eq!(clock.clock, u64::from_be_bytes(quote[at..at + 8].try_into().unwrap()));
    assert_eq!(clock.reset_count, u32::from_be_bytes(quote[at + 8..at + 12].try_into().unwrap()));
    assert!(clock.safe);
}

#[test]
fn ecdsa_and_rsapss_aks_pass_too() {
    for ak in ["ecc", "pss"] {
        let verdict = verify(request_for(ak));
        assert!(verdict.passed, "{ak}: {:?}", verdict.failures);
        // No bound key here (the certification is by the RSA AK): quote and secure boot.
        assert_eq!(verdict.trust_score, 80, "{ak}");
    }
}

#[test]
fn lenient_bank_names_and_0x_prefixes_are_accepted() {
    let mut request = happy();
    set_policy(&mut request, |p| {
        let sha256 = p["expectedPcrs"]["SHA256"].take();
        p["expectedPcrs"].as_object_mut().unwrap().remove("SHA256");
        let prefixed: serde_json::Map<_, _> = sha256
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), json!(format!("0x{}", v.as_str().unwrap().to_uppercase()))))
            .collect();
        p["expectedPcrs"]["sha-256"] = json!(prefixed);
    });
    for pcr in &mut tpm2(&mut request).pcrs {
        pcr.bank = pcr.bank.to_lowercase();
    }
    let verdict = verify(request);
    assert!(verdict.passed, "{:?}", verdict.failures);
    assert!(verdict.verified_pcrs.iter().all(|p| p.bank == "SHA1" || p.bank == "SHA256"));
}

// --- the quote --------------------------------------------------------------------------------

#[test]
fn a_wrong_magic_fails_quote_magic_invalid() {
    let mut request = happy();
    tpm2(&mut request).quote[3] ^= 0x01;
    let failures = fails_only(request, "quote_magic_invalid");
    assert_eq!(failures, ["quote_magic_invalid: 0xff544346, not TPM_GENERATED_VALUE"]);
}

#[test]
fn a_certify_presented_as_a_quote_fails_quote_type_invalid() {
    let mut request = happy();
    let e = tpm2(&mut request);
    e.quote = vector("certify.attest");
    e.quote_signature = vector("certify.sig");
    let failures = fails_only(request, "quote_type_invalid");
    assert_eq!(failures, ["quote_type_invalid: TPM_ST_ATTEST_CERTIFY (0x8017), not a quote"]);
}

#[test]
fn trailing_bytes_fail_as_malformed() {
    let mut request = happy();
    tpm2(&mut request).quote.push(0);
    fails_only(request, "quote_malformed");

    let mut request = happy();
    tpm2(&mut request).quote_signature.push(0);
    fails_only(request, "quote_signature_malformed");

    let mut request = happy();
    tpm2(&mut request).quote.truncate(150);
    fails_only(request, "quote_malformed");
}

#[test]
fn a_sha1_signature_for_a_sha256_ak_fails_the_scheme_check() {
    // TPMT_SIGNATURE: sigAlg RSASSA (0014), hash SHA256 (000b) relabelled SHA1 (0004).
    let mut request = happy();
    let sig = &mut tpm2(&mut request).quote_signature;
    assert_eq!(&sig[..4], &[0x00, 0x14, 0x00, 0x0b]);
    sig[3] = 0x04;
    let failures = fails_only(request, "quote_signature_scheme_mismatch");
    assert_eq!(failures, ["quote_signature_scheme_mismatch: signature RSASSA/SHA1, the AK signs with RSASSA/SHA256"]);

    // An RSAPSS signature (a real one, by the PSS AK) where the enrolled AK signs RSASSA.
    let mut request = happy();
    tpm2(&mut request).quote_signature = vector("quote_pss.sig");
    fails_only(request, "quote_signature_scheme_mismatch");

    // A signature algorithm the verifier never accepts.
    let mut request = happy();
    tpm2(&mut request).quote_signature = vec![0x00, 0x1a, 0x00, 0x0b, 0, 0, 0, 0];
    fails_only(request, "quote_signature_scheme_mismatch");
}

#[test]
fn a_signature_by_another_key_fails_quote_signature_invalid() {
    // The device enrolled a second RSASSA-SHA256 AK; the quote is by the first.
    let mut request = happy();
    request.device = device("rsa2");
    fails_only(request, "quote_signature_invalid");

    // Same for ECDSA: the ECC AK's quote presented with the ECC AK's signature over another quote.
    let mut request = request_for("ecc");
    tpm2(&mut request).quote = vector("quote_rsa.attest");
    fails_only(request, "quote_signature_invalid");
}

#[test]
fn a_changed_byte_in_the_signature_or_the_signed_quote_fails_quote_signature_invalid() {
    let mut request = happy();
    let sig = &mut tpm2(&mut request).quote_signature;
    let last = sig.len() - 1;
    sig[last] ^= 0x01;
    fails_only(request, "quote_signature_invalid");

    // The clock, the signed PCR selection, the digest: each is covered by the signature.
    for offset in [80, 110, 140] {
        let mut request = happy();
        tpm2(&mut request).quote[offset] ^= 0x01;
        let verdict = verify(request);
        assert!(!verdict.passed);
        assert!(
            codes(&verdict) == ["quote_signature_invalid"] || codes(&verdict) == ["quote_malformed"],
            "offset {offset}: {:?}",
            verdict.failures
        );
    }

    let mut request = request_for("ecc");
    let sig = &mut tpm2(&mut request).quote_signature;
    let last = sig.len() - 1;
    sig[last] ^= 0x01;
    fails_only(request, "quote_signature_invalid");
}

#[test]
fn another_nonce_fails_quote_nonce_mismatch() {
    let mut request = happy();
    request.nonce[0] ^= 0xff;
    assert_eq!(fails_only(request, "quote_nonce_mismatch"), ["quote_nonce_mismatch: extraData is not the nonce"]);

    // The host's nonce must be the contract's 32 bytes (an empty one never matches).
    let mut request = happy();
    request.nonce = Vec::new();
    fails_only(request, "quote_nonce_mismatch");
}

// --- PCRs -------------------------------------------------------------------------------------

#[test]
fn a_relabelled_selection_fails_pcr_selection_mismatch() {
    // CVE-2024-29039 class: the values of quoted PCR 4 claimed for PCR 5 (the concatenation,
    // hence a digest recomputed from it, is unchanged).
    let mut request = happy();
    for pcr in &mut tpm2(&mut request).pcrs {
        if pcr.bank == "SHA256" && pcr.index == 4 {
            pcr.index = 5;
        }
    }
    let failures = fails_only(request, "pcr_selection_mismatch");
    assert_eq!(
        failures,
        [
            "pcr_selection_mismatch: SHA256 PCR 5 supplied but not quoted",
            "pcr_selection_mismatch: SHA256 PCR 4 quoted but not supplied"
        ]
    );

    // A bank relabelled: the SHA1 values claimed as a bank the quote does not cover.
    let mut request = happy();
    for pcr in &mut tpm2(&mut request).pcrs {
        if pcr.bank == "SHA1" {
            pcr.bank = "SHA384".into();
            pcr.digest.resize(48, 0);
        }
    }
    fails_only(request, "pcr_selection_mismatch");

    // A value missing, one supplied twice, an extra one.
    let mut request = happy();
    tpm2(&mut request).pcrs.pop();
    fails_only(request, "pcr_selection_mismatch");
    let mut request = happy();
    let first = tpm2(&mut request).pcrs[0].clone();
    tpm2(&mut request).pcrs.push(first);
    fails_only(request, "pcr_selection_mismatch");
    let mut request = happy();
    tpm2(&mut request).pcrs.push(PcrValue { bank: "SHA256".into(), index: 10, digest: vec![0; 32] });
    fails_only(request, "pcr_selection_mismatch");
}

#[test]
fn a_changed_value_fails_pcr_digest_mismatch() {
    let mut request = happy();
    tpm2(&mut request).pcrs[1].digest[0] ^= 0x01;
    assert_eq!(
        fails_only(request, "pcr_digest_mismatch"),
        ["pcr_digest_mismatch: SHA256 of the supplied values is not the quoted pcrDigest"]
    );
}

#[test]
fn a_value_off_policy_fails_pcr_mismatch_and_is_not_reported_verified() {
    let mut request = happy();
    set_policy(&mut request, |p| p["expectedPcrs"]["SHA256"]["0"] = json!("00".repeat(32)));
    let verdict = verify(request);
    assert_eq!(verdict.failures, ["pcr_mismatch: SHA256 PCR 0"]);
    assert_eq!(verdict.verified_pcrs.len(), 11);
    assert!(!verdict.verified_pcrs.iter().any(|p| p.bank == "SHA256" && p.index == 0));
}

#[test]
fn a_missing_bank_or_pcr_fails() {
    let mut request = happy();
    set_policy(&mut request, |p| p["requiredPcrBanks"] = json!(["SHA256", "SHA384"]));
    assert_eq!(fails_only(request, "pcr_bank_missing"), ["pcr_bank_missing: SHA384"]);

    let mut request = happy();
    set_policy(&mut request, |p| p["requiredPcrs"] = json!([0, 1, 2, 3, 4, 7, 8]));
    assert_eq!(fails_only(request, "pcr_missing"), ["pcr_missing: SHA1 PCR 8", "pcr_missing: SHA256 PCR 8"]);

    let mut request = happy();
    set_policy(&mut request, |p| p["expectedPcrs"]["SHA256"]["9"] = json!("00".repeat(32)));
    assert_eq!(fails_only(request, "pcr_missing"), ["pcr_missing: SHA256 PCR 9"]);
}

// --- freshness --------------------------------------------------------------------------------

#[test]
fn a_stale_attestation_fails_attestation_too_old() {
    let mut request = happy();
    request.nonce_issued_at = request.now - 301;
    assert_eq!(
        fails_only(request, "attestation_too_old"),
        ["attestation_too_old: 301 s since the nonce was issued, at most 300 s"]
    );
    let mut request = happy();
    request.nonce_issued_at = request.now - 300;
    assert!(verify(request).passed);
    let mut request = happy();
    request.nonce_issued_at = request.now + 10;
    fails_only(request, "attestation_too_old");
}

#[test]
fn the_tpm_clock_may_not_go_back() {
    // The second quote was taken after a TPM reset (resetCount + 1).
    let first = vector("quote_rsa.attest");
    let at = 2 + 4 + 2 + 34 + 2 + 32;
    let clock = |q: &[u8]| TpmClock {
        clock: u64::from_be_bytes(q[at..at + 8].try_into().unwrap()),
        reset_count: u32::from_be_bytes(q[at + 8..at + 12].try_into().unwrap()),
        restart_count: u32::from_be_bytes(q[at + 12..at + 16].try_into().unwrap()),
        safe: q[at + 16] == 1,
    };
    let first_clock = clock(&first);
    let second_clock = clock(&vector("quote_sb0.attest"));
    assert_eq!(second_clock.reset_count, first_clock.reset_count + 1, "a real TPM reset between the quotes");

    // Replaying the older quote after the newer one was seen: resetCount went back.
    let mut request = happy();
    request.device.last_clock = Some(second_clock);
    let failures = fails_only(request, "clock_regression");
    assert!(failures[0].starts_with("clock_regression: resetCount"), "{failures:?}");

    // Within one reset: restartCount, then clock.
    let mut request = happy();
    request.device.last_clock = Some(TpmClock { restart_count: first_clock.restart_count + 1, ..first_clock });
    fails_only(request, "clock_regression");
    let mut request = happy();
    request.device.last_clock = Some(TpmClock { clock: first_clock.clock + 1, ..first_clock });
    assert_eq!(
        fails_only(request, "clock_regression"),
        [format!("clock_regression: clock {} ms < last {} ms", first_clock.clock, first_clock.clock + 1)]
    );

    // The same clock, an earlier one, and the later quote after a reset (its clock restarted,
    // its restartCount back to 0) are all fine.
    for last in [first_clock, TpmClock { clock: first_clock.clock.saturating_sub(1000), ..first_clock }] {
        let mut request = happy();
        request.device.last_clock = Some(last);
        assert!(verify(request).passed);
    }
    let mut request = sb0_happy();
    set_policy(&mut request, |p| p["requireSecureBoot"] = json!(false));
    request.device.last_clock = Some(TpmClock { restart_count: 5, ..first_clock });
    let verdict = verify(request);
    assert!(verdict.passed, "{:?}", verdict.failures);
    assert_eq!(verdict.clock.map(clock_tuple), Some(clock_tuple(second_clock)));
}

#[test]
fn a_quote_with_an_unsafe_clock_fails_clock_not_safe() {
    // Taken after swtpm restarted without TPM2_Shutdown: clockInfo.safe = NO, signed by the AK.
    let unsafe_quote = vector("quote_unsafe.attest");
    assert_eq!(unsafe_quote[2 + 4 + 2 + 34 + 2 + 32 + 16], 0, "the vector's clockInfo.safe is NO");
    let mut request = happy();
    set_policy(&mut request, |p| {
        *p = policy_for(&pcrs("pcrs_unsafe.txt"));
        p["requireSecureBoot"] = json!(false);
    });
    let e = tpm2(&mut request);
    e.quote = unsafe_quote;
    e.quote_signature = vector("quote_unsafe.sig");
    e.pcrs = pcrs("pcrs_unsafe.txt");
    e.event_log = None;
    let failures = fails_only(request, "clock_not_safe");
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].starts_with("clock_not_safe: clockInfo.safe is NO"), "{failures:?}");
}

// --- the CSR key ------------------------------------------------------------------------------

#[test]
fn a_certification_without_the_nonce_fails_certify_nonce_mismatch() {
    // A real TPM2_Certify of the CSR's key by the enrolled AK, but over tpm2_certify's fixed
    // extraData: it could have been made at any time, so it proves nothing now.
    let mut request = happy();
    let c = tpm2(&mut request).certification.as_mut().unwrap();
    c.attest = vector("certify_stale.attest");
    c.signature = vector("certify_stale.sig");
    assert_eq!(fails_only(request, "certify_nonce_mismatch"), ["certify_nonce_mismatch: extraData is not the nonce"]);
}

#[test]
fn a_certify_of_another_key_than_the_csrs_fails() {
    // The certification is of key; the CSR is for other_key.
    let mut request = happy();
    request.csr.as_mut().unwrap().public_key = vector("other_key_spki.der");
    assert_eq!(
        fails_only(request, "csr_key_mismatch"),
        ["csr_key_mismatch: the CSR's ECC P-256 key is not the certified ECC P-256 key"]
    );

    // The certified public area swapped for the CSR's key: the attested Name no longer matches.
    let mut request = happy();
    request.csr.as_mut().unwrap().public_key = vector("other_key_spki.der");
    tpm2(&mut request).certification.as_mut().unwrap().certified_key_public = vector("other_key.tpmt");
    fails_only(request, "certify_name_mismatch");
}

#[test]
fn a_restricted_certified_key_fails_bound_key_attributes_invalid() {
    let mut request = happy();
    tpm2(&mut request).certification = Some(Tpm2Certification {
        attest: vector("certify_ak.attest"),
        signature: vector("certify_ak.sig"),
        certified_key_public: vector("ak_rsa.tpmt"),
    });
    request.csr.as_mut().unwrap().public_key = vector("ak_rsa_spki.der");
    assert_eq!(fails_only(request, "bound_key_attributes_invalid"), ["bound_key_attributes_invalid: restricted"]);
}

#[test]
fn certify_tampers_fail_with_certify_codes() {
    let mut request = happy();
    tpm2(&mut request).certification.as_mut().unwrap().attest[0] = 0;
    fails_only(request, "certify_magic_invalid");

    let mut request = happy();
    let c = tpm2(&mut request).certification.as_mut().unwrap();
    c.attest = vector("quote_rsa.attest");
    c.signature = vector("quote_rsa.sig");
    fails_only(request, "certify_type_invalid");

    let mut request = happy();
    tpm2(&mut request).certification.as_mut().unwrap().attest.push(0);
    fails_only(request, "certify_malformed");

    let mut request = happy();
    let sig = &mut tpm2(&mut request).certification.as_mut().unwrap().signature;
    sig[10] ^= 1;
    fails_only(request, "certify_signature_invalid");

    let mut request = happy();
    tpm2(&mut request).certification.as_mut().unwrap().signature[3] = 0x04;
    fails_only(request, "certify_signature_scheme_mismatch");

    let mut request = happy();
    tpm2(&mut request).certification.as_mut().unwrap().signature.push(0);
    fails_only(request, "certify_signature_malformed");

    let mut request = happy();
    tpm2(&mut request).certification.as_mut().unwrap().certified_key_public.push(0);
    fails_only(request, "certified_key_malformed");

    let mut request = happy();
    request.csr.as_mut().unwrap().public_key = b"not a key".to_vec();
    fails_only(request, "csr_key_malformed");
}

#[test]
fn a_missing_certification_or_csr_fails_bound_key_missing_when_required() {
    let mut request = happy();
    request.csr = None;
    assert_eq!(fails_only(request, "bound_key_missing"), ["bound_key_missing: no CSR to bind"]);
    let mut request = happy();
    tpm2(&mut request).certification = None;
    assert_eq!(fails_only(request, "bound_key_missing"), ["bound_key_missing: no TPM2_Certify of the CSR key"]);

    // Not required: fine, but it scores lower.
    let mut request = happy();
    request.csr = None;
    set_policy(&mut request, |p| p["requireBoundCsrKey"] = json!(false));
    let verdict = verify(request);
    assert!(verdict.passed);
    assert_eq!(verdict.trust_score, 80);
}

// --- secure boot ------------------------------------------------------------------------------

/// The quote taken after the TPM reset, with the secure-boot-off log, and a policy expecting
/// exactly those PCRs: only secure boot can fail. (No bound key: the certification carries
/// nonce.bin, not this quote's nonce.)
fn sb0_happy() -> VerifyRequest {
    let mut request = happy();
    request.nonce = vector("nonce_sb0.bin");
    let mut policy = policy_for(&pcrs("pcrs_sb0.txt"));
    policy["requireBoundCsrKey"] = json!(false);
    request.policy = policy.to_string();
    request.csr = None;
    tpm2(&mut request).certification = None;
    let e = tpm2(&mut request);
    e.quote = vector("quote_sb0.attest");
    e.quote_signature = vector("quote_sb0.sig");
    e.pcrs = pcrs("pcrs_sb0.txt");
    e.event_log = Some(vector("eventlog_sb0.bin"));
    request
}

#[test]
fn secure_boot_off_fails_secure_boot_disabled() {
    assert_eq!(fails_only(sb0_happy(), "secure_boot_disabled"), ["secure_boot_disabled: SecureBoot = 0"]);
    let mut request = sb0_happy();
    set_policy(&mut request, |p| p["requireSecureBoot"] = json!(false));
    let verdict = verify(request);
    assert!(verdict.passed);
    assert_eq!(verdict.trust_score, 60, "the quote alone");
}

#[test]
fn a_log_that_does_not_replay_to_the_quote_fails_eventlog_replay_mismatch() {
    // The secure-boot-off log against the secure-boot-on quote: PCR 7 (and 4) differ.
    let mut request = happy();
    tpm2(&mut request).event_log = Some(vector("eventlog_sb0.bin"));
    let failures = fails_only(request, "eventlog_replay_mismatch");
    assert!(failures.contains(&"eventlog_replay_mismatch: SHA256 PCR 7".to_owned()), "{failures:?}");
    assert!(failures.contains(&"eventlog_replay_mismatch: SHA1 PCR 7".to_owned()), "{failures:?}");

    // The last event dropped: the log no longer explains PCR 4.
    let mut request = happy();
    let log = vector("eventlog.bin");
    let last_event = 4 + 4 + 4 + (2 + 20) + (2 + 32) + 4 + b"Exit Boot Services Invocation".len();
    tpm2(&mut request).event_log = Some(log[..log.len() - last_event].to_vec());
    assert_eq!(
        fails_only(request, "eventlog_replay_mismatch"),
        ["eventlog_replay_mismatch: SHA1 PCR 4", "eventlog_replay_mismatch: SHA256 PCR 4"]
    );
}

#[test]
fn a_secure_boot_value_rewritten_under_its_digests_fails_eventlog_digest_mismatch() {
    // The SecureBoot byte flipped to 0 in the event data, digests untouched: the log still
    // replays, but the data no longer hashes to the digests.
    let mut request = happy();
    let mut log = vector("eventlog.bin");
    let name: Vec<u8> = "SecureBoot".encode_utf16().flat_map(u16::to_le_bytes).collect();
    let at = log.windows(name.len()).position(|w| w == name.as_slice()).unwrap() + name.len();
    assert_eq!(log[at], 1);
    log[at] = 0;
    tpm2(&mut request).event_log = Some(log);
    fails_only(request, "eventlog_digest_mismatch");
}

#[test]
fn a_missing_or_malformed_log_fails() {
    let mut request = happy();
    tpm2(&mut request).event_log = None;
    fails_only(request, "eventlog_missing");

    let mut request = happy();
    tpm2(&mut request).event_log.as_mut().unwrap().pop();
    fails_only(request, "eventlog_malformed");

    // Not required: no log needed.
    let mut request = happy();
    tpm2(&mut request).event_log = None;
    set_policy(&mut request, |p| p["requireSecureBoot"] = json!(false));
    assert!(verify(request).passed);
}

// --- the device and the EK --------------------------------------------------------------------

#[test]
fn an_ek_chain_no_longer_trusted_fails_ek_cert_untrusted() {
    let mut request = happy();
    request.trust_anchors = vec![TrustAnchor { certificate_der: vector("other_root.der"), manufacturer: None }];
    fails_only(request, "ek_cert_untrusted");

    let mut request = happy();
    request.trust_anchors.clear();
    assert_eq!(fails_only(request, "ek_cert_untrusted"), ["ek_cert_untrusted: the workspace has no trust anchors"]);

    // An anchor restricted to another vendor.
    let mut request = happy();
    request.trust_anchors[0].manufacturer = Some("id:49465800".into());
    fails_only(request, "ek_cert_untrusted");
}

#[test]
fn a_manufacturer_outside_the_policy_fails_ek_manufacturer_not_allowed() {
    let mut request = happy();
    set_policy(&mut request, |p| p["allowedEkManufacturers"] = json!(["id:49465800", "id:53544D20"]));
    assert_eq!(fails_only(request, "ek_manufacturer_not_allowed"), ["ek_manufacturer_not_allowed: id:00001014"]);
}

#[test]
fn the_enrolled_ak_is_checked_again() {
    let mut request = happy();
    request.device.ak_name[5] ^= 1;
    fails_only(request, "ak_name_mismatch");

    // An "AK" that is not restricted (an ordinary signing key could sign a forged quote).
    let mut request = happy();
    request.device.ak_public = vector("key.tpmt");
    request.device.ak_name = Vec::new();
    assert_eq!(fails_only(request, "ak_attributes_invalid"), ["ak_attributes_invalid: not restricted"]);

    let mut request = happy();
    request.device.ak_public.push(0);
    fails_only(request, "ak_public_malformed");
}

#[test]
fn other_evidence_formats_fail_and_a_bad_policy_is_an_error() {
    let mut request = happy();
    request.evidence = Evidence::Other(OpaqueEvidence { format: "dice".into(), data: vec![1] });
    fails_only(request, "evidence_format_unsupported");

    for policy in ["not json", "[]", r#"{"expectedPcrs": {"SHA256": {"7": "zz"}}}"#] {
        let mut request = happy();
        request.policy = policy.into();
        let error = try_verify(request).expect_err("an unusable policy is an error");
        assert!(format!("{error:?}").contains("policy_invalid"), "{error:?}");
    }
}

#[test]
fn several_independent_failures_are_all_reported_in_order() {
    let mut request = happy();
    set_policy(&mut request, |p| {
        p["expectedPcrs"]["SHA1"]["7"] = json!("00".repeat(20));
        p["allowedEkManufacturers"] = json!(["id:49465800"]);
    });
    request.nonce_issued_at = request.now - 1000;
    request.csr = None;
    let verdict = verify(request);
    assert_eq!(
        codes(&verdict),
        ["ek_manufacturer_not_allowed", "pcr_mismatch", "attestation_too_old", "bound_key_missing"]
    );
    // The signature verified, so the clock is reported even though the attestation failed.
    assert!(verdict.clock.is_some());
}
