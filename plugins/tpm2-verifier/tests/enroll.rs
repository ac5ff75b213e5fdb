//! `enroll` on swtpm's EK certificates and keys (tests/vectors): the chain to swtpm_setup's
//! local CA, the EK/certificate match, manufacturers, AK attributes, and the MakeCredential
//! challenge, whose known answers (mc_rsa.cred, mc_ecc.cred) a real tpm2_activatecredential on
//! swtpm turned back into the secret when the vectors were made (activation.txt).

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use serde_json::json;
use support::*;

#[test]
fn the_swtpm_ek_chains_to_the_local_ca_and_the_challenge_is_the_one_swtpm_activated() {
    let verdict = enroll(enrollment());
    assert!(verdict.passed, "{:?}", verdict.failures);
    assert_eq!(verdict.ak_name, Some(vector("ak_rsa.name")), "Name as tpm2_createak computed it");
    assert_eq!(verdict.ek_manufacturer.as_deref(), Some("id:00001014"));
    assert_eq!(verdict.challenge.as_ref().map(pair), Some(credential_file("mc_rsa.cred")));
    let activation = String::from_utf8(vector("activation.txt")).unwrap();
    assert!(activation
        .contains("verifier make_credential (RSA-2048 EK, mc_rsa.cred) -> tpm2_activatecredential: recovered"));
}

#[test]
fn an_ecc_p384_ek_gets_the_ecdh_challenge_swtpm_activated() {
    let mut request = enrollment();
    request.ek_certificate = Some(vector("ek_ecc_cert.nv"));
    request.ek_public = vector("ek_ecc.tpmt");
    let verdict = enroll(request);
    assert!(verdict.passed, "{:?}", verdict.failures);
    let challenge = verdict.challenge.unwrap();
    assert_eq!(pair(&challenge), credential_file("mc_ecc.cred"));
    // TPMS_ECC_POINT of the ephemeral key: two 48-byte coordinates.
    assert_eq!(challenge.encrypted_secret.len(), 2 + 48 + 2 + 48);
    let activation = String::from_utf8(vector("activation.txt")).unwrap();
    assert!(activation
        .contains("verifier make_credential (ECC P-384 EK, mc_ecc.cred) -> tpm2_activatecredential: recovered"));
}

#[test]
fn the_challenge_follows_the_entropy_and_only_the_entropy() {
    let a = enroll(enrollment()).challenge.unwrap();
    let b = enroll(enrollment()).challenge.unwrap();
    assert_eq!(pair(&a), pair(&b), "same inputs, same challenge");
    let mut request = enrollment();
    request.entropy[0] ^= 1;
    let c = enroll(request).challenge.unwrap();
    assert_ne!(a.encrypted_secret, c.encrypted_secret);
    assert_ne!(a.credential_blob, c.credential_blob);
}

#[test]
fn a_wrong_root_fails_ek_cert_untrusted() {
    let mut request = enrollment();
    request.trust_anchors = vec![TrustAnchor { certificate_der: vector("other_root.der"), manufacturer: None }];
    let verdict = enroll(request);
    assert_eq!(enroll_codes(&verdict), ["ek_cert_untrusted"]);
    assert!(verdict.challenge.is_none());
    // The AK's Name is still reported (its public area parsed), and the manufacturer.
    assert_eq!(verdict.ak_name, Some(vector("ak_rsa.name")));
    assert_eq!(verdict.ek_manufacturer.as_deref(), Some("id:00001014"));
}

#[test]
fn the_path_needs_the_intermediate_unless_it_is_an_anchor() {
    let mut request = enrollment();
    request.ek_chain.clear();
    assert_eq!(enroll_codes(&enroll(request)), ["ek_cert_untrusted"]);

    // The operator trusts the intermediate itself.
    let mut request = enrollment();
    request.ek_chain.clear();
    request.trust_anchors = vec![TrustAnchor { certificate_der: vector("intermediate.der"), manufacturer: None }];
    assert!(enroll(request).passed);

    // Intermediates concatenated in one element (an NV chain index), with junk elements around.
    let mut request = enrollment();
    let mut nv = vector("other_root.der");
    nv.extend(vector("intermediate.der"));
    nv.extend([0xff; 40]);
    request.ek_chain = vec![b"garbage".to_vec(), nv];
    assert!(enroll(request).passed);

    // The root alone in the chain does not make it an anchor.
    let mut request = enrollment();
    request.ek_chain.push(vector("root.der"));
    request.trust_anchors = vec![TrustAnchor { certificate_der: vector("other_root.der"), manufacturer: None }];
    assert_eq!(enroll_codes(&enroll(request)), ["ek_cert_untrusted"]);
}

#[test]
fn an_anchor_restricted_to_another_manufacturer_does_not_vouch() {
    let mut request = enrollment();
    request.trust_anchors[0].manufacturer = Some("id:49465800".into());
    let verdict = enroll(request);
    assert_eq!(enroll_codes(&verdict), ["ek_cert_untrusted"]);
    assert!(verdict.failures[0].contains("only vouches for id:49465800"), "{:?}", verdict.failures);

    let mut request = enrollment();
    request.trust_anchors[0].manufacturer = Some("ID:00001014".into());
    assert!(enroll(request).passed);
}

#[test]
fn vendor_padding_and_nv_headers_around_the_ek_certificate_are_tolerated() {
    let der = vector("ek_rsa_cert.nv");
    let mut padded = der.clone();
    padded.resize(1600, 0xff);
    let mut headed = vec![0x10, 0x01, 0x00];
    headed.extend(u16::try_from(der.len()).unwrap().to_be_bytes());
    headed.extend(&der);
    for cert in [padded, headed] {
        let mut request = enrollment();
        request.ek_certificate = Some(cert);
        let verdict = enroll(request);
        assert!(verdict.passed, "{:?}", verdict.failures);
        assert_eq!(verdict.challenge.as_ref().map(pair), Some(credential_file("mc_rsa.cred")));
    }
}

#[test]
fn a_missing_or_unreadable_ek_certificate_fails() {
    let mut request = enrollment();
    request.ek_certificate = None;
    assert_eq!(enroll(request).failures, ["ek_cert_missing:"]);

    let mut request = enrollment();
    request.ek_certificate = Some(vec![0x30, 0x03, 0x02, 0x01]);
    assert_eq!(enroll_codes(&enroll(request)), ["ek_cert_malformed"]);
}

#[test]
fn an_ek_public_area_of_another_key_fails_ek_public_mismatch() {
    let mut request = enrollment();
    request.ek_public = vector("other_ek_rsa.tpmt");
    let verdict = enroll(request);
    assert_eq!(
        verdict.failures,
        ["ek_public_mismatch: the EK certificate's RSA-2048 key is not the EK public area's RSA-2048 key"]
    );

    // The ECC certificate with the RSA EK.
    let mut request = enrollment();
    request.ek_certificate = Some(vector("ek_ecc_cert.nv"));
    assert_eq!(enroll_codes(&enroll(request)), ["ek_public_mismatch"]);

    let mut request = enrollment();
    request.ek_public.push(0);
    assert_eq!(enroll_codes(&enroll(request)), ["ek_public_malformed"]);
}

#[test]
fn an_ek_that_cannot_protect_a_credential_fails_ek_public_unsupported() {
    // The certificate's key, but claimed as a signing key (attributes are not in the cert).
    let mut request = enrollment();
    let attributes = 2 + 2;
    request.ek_public[attributes + 1] |= 0x04; // sign (0x00040000)
    assert_eq!(enroll_codes(&enroll(request)), ["ek_public_unsupported"]);
}

#[test]
fn manufacturers_outside_the_policy_fail() {
    let mut request = enrollment();
    request.policy = Some(json!({"allowedEkManufacturers": ["id:49465800"]}).to_string());
    assert_eq!(enroll(request).failures, ["ek_manufacturer_not_allowed: id:00001014"]);

    // No policy, or an empty list: any manufacturer.
    for policy in [None, Some(json!({"allowedEkManufacturers": []}).to_string())] {
        let mut request = enrollment();
        request.policy = policy;
        assert!(enroll(request).passed);
    }

    let mut request = enrollment();
    request.policy = Some("{\"allowedEkManufacturers\": [\"IFX\"]}".into());
    assert!(try_enroll(request).is_err(), "an unusable policy is an error");
}

#[test]
fn ak_attributes_are_checked() {
    // An unrestricted signing key as the AK.
    let mut request = enrollment();
    request.ak_public = vector("key.tpmt");
    let verdict = enroll(request);
    assert_eq!(verdict.failures, ["ak_attributes_invalid: not restricted"]);
    assert!(verdict.ak_name.is_some());

    // The EK (a restricted decryption key) as the AK.
    let mut request = enrollment();
    request.ak_public = vector("ek_rsa.tpmt");
    let failures = enroll(request).failures;
    assert!(failures.contains(&"ak_attributes_invalid: not a signing key".to_owned()), "{failures:?}");
    assert!(failures.contains(&"ak_attributes_invalid: decrypt set".to_owned()), "{failures:?}");

    // Attribute bits cleared one at a time (TPMA_OBJECT at offset 4).
    for (bit, problem) in [(0x02u32, "not fixedTPM"), (0x10, "not fixedParent"), (0x20, "not sensitiveDataOrigin")] {
        let mut request = enrollment();
        let mut attributes = u32::from_be_bytes(request.ak_public[4..8].try_into().unwrap());
        attributes &= !bit;
        request.ak_public[4..8].copy_from_slice(&attributes.to_be_bytes());
        assert_eq!(enroll(request).failures, [format!("ak_attributes_invalid: {problem}")]);
    }

    // No explicit scheme: RSA scheme (after authPolicy and symmetric NULL) set to TPM_ALG_NULL,
    // its hash removed.
    let mut request = enrollment();
    let ak = &request.ak_public;
    let policy_len = usize::from(u16::from_be_bytes([ak[8], ak[9]]));
    let scheme = 10 + policy_len + 2;
    assert_eq!(&ak[scheme..scheme + 4], &[0x00, 0x14, 0x00, 0x0b], "RSASSA SHA256");
    let mut changed = ak[..scheme].to_vec();
    changed.extend([0x00, 0x10]);
    changed.extend(&ak[scheme + 4..]);
    request.ak_public = changed;
    assert_eq!(enroll(request).failures, ["ak_attributes_invalid: no explicit signing scheme (TPM_ALG_NULL)"]);

    // A SHA-1 scheme is weak.
    let mut request = enrollment();
    request.ak_public[scheme + 3] = 0x04;
    assert_eq!(enroll(request).failures, ["ak_key_weak: SHA1 signing scheme"]);

    // Trailing bytes: malformed, and then there is no Name.
    let mut request = enrollment();
    request.ak_public.push(0);
    let verdict = enroll(request);
    assert_eq!(enroll_codes(&verdict), ["ak_public_malformed"]);
    assert!(verdict.ak_name.is_none());
}

#[test]
fn the_ecdsa_and_rsapss_aks_enroll() {
    for ak in ["ecc", "pss"] {
        let mut request = enrollment();
        request.ak_public = vector(&format!("ak_{ak}.tpmt"));
        let verdict = enroll(request);
        assert!(verdict.passed, "{ak}: {:?}", verdict.failures);
        assert_eq!(verdict.ak_name, Some(vector(&format!("ak_{ak}.name"))));
    }
}

#[test]
fn certificates_not_valid_now_fail_ek_cert_expired() {
    let mut request = enrollment();
    request.now = 0;
    let codes = enroll_codes(&enroll(request));
    assert_eq!(codes.first().map(String::as_str), Some("ek_cert_expired"), "{codes:?}");
}

#[test]
fn host_inputs_that_break_the_contract_are_errors() {
    let mut request = enrollment();
    request.entropy.truncate(63);
    assert!(try_enroll(request).is_err());
    let mut request = enrollment();
    request.secret = Vec::new();
    assert!(try_enroll(request).is_err());
    let mut request = enrollment();
    request.secret = vec![1; 33];
    assert!(try_enroll(request).is_err(), "more than the EK's SHA-256 name digest");
}

#[test]
fn path_building_skips_a_same_named_intermediate_of_another_key() {
    // TPM B's intermediate has the same subject (CN=swtpm-localca) and another key.
    let mut request = enrollment();
    request.ek_chain = vec![vector("other_intermediate.der"), vector("intermediate.der")];
    assert!(enroll(request).passed);

    let mut request = enrollment();
    request.ek_chain = vec![vector("other_intermediate.der")];
    let verdict = enroll(request);
    assert_eq!(enroll_codes(&verdict), ["ek_cert_untrusted"]);
    assert!(verdict.failures[0].contains("not verified by CN=swtpm-localca"), "{:?}", verdict.failures);

    // Many same-named impostors exhaust the search's budget instead of the host's CPU.
    let mut request = enrollment();
    request.ek_chain = vec![vector("other_intermediate.der"); 200];
    request.ek_chain.push(vector("intermediate.der"));
    let verdict = enroll(request);
    assert_eq!(enroll_codes(&verdict), ["ek_cert_untrusted"]);
    assert!(verdict.failures[0].contains("too many candidate issuers"), "{:?}", verdict.failures);
    assert!(verdict.failures[0].len() < 1_000, "a bounded detail: {}", verdict.failures[0]);
}
