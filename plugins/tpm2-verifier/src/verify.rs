//! Step 2: verify TPM 2.0 evidence for an enrolled AK against an attestation policy, in a fixed
//! order, failing closed. The quote is trusted only once its structure, scheme, signature and
//! nonce check out (any failure there ends the verification); the PCR values only once they
//! match the signed selection and recompute the signed digest (otherwise nothing that reads
//! them runs).

use std::collections::BTreeMap;

use subtle::ConstantTimeEq;
use trellis_plugin_sdk::verifier::{
    Evidence, Failure, PcrValue, Tpm2Certification, Tpm2Evidence, TpmClock, VerifyRequest,
};
use trellis_plugin_sdk::PluginError;

use crate::checks::{check_ak, check_ek_certificate, Ak};
use crate::codes;
use crate::crypto;
use crate::eventlog::{secure_boot_state, EventLog, SecureBootFinding};
use crate::policy::Policy;
use crate::tpm::{
    alg, attr, curve, Attest, AttestError, Attested, Bank, ClockInfo, HashAlg, KeyDetail, PcrSelection, Signature,
    SignatureError, TpmPublic, PCR_COUNT, TPM_ST_ATTEST_CERTIFY, TPM_ST_ATTEST_QUOTE,
};
use crate::wire::hex;

/// The nonce size the contract fixes.
pub const NONCE_SIZE: usize = 32;

/// Score parts: a verified quote from an AK whose EK chains to a trust anchor, a TPM-bound CSR
/// key, secure boot verified from the event log.
const SCORE_QUOTE: u8 = 60;
const SCORE_BOUND_KEY: u8 = 20;
const SCORE_SECURE_BOOT: u8 = 20;

/// What verification found, before it becomes the SDK's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VerifyOutcome {
    /// Every failed check, in the order checked.
    pub failures: Vec<Failure>,
    /// The PCR values the policy expects and found equal.
    pub verified_pcrs: Vec<PcrValue>,
    /// From the EK certificate.
    pub ek_manufacturer: Option<String>,
    /// 0 to 100 (reported as 0 unless passed).
    pub trust_score: u8,
    /// The quote's clock, once its signature verified.
    pub clock: Option<TpmClock>,
}

impl VerifyOutcome {
    fn fail(&mut self, code: &str, detail: impl Into<String>) {
        let failure = Failure::new(code, detail);
        if !self.failures.contains(&failure) {
            self.failures.push(failure);
        }
    }
}

/// Verifies `request`. Errors only for a policy that does not validate.
pub fn verify(request: &VerifyRequest) -> Result<VerifyOutcome, PluginError> {
    let policy = Policy::from_json(&request.policy)?;
    let mut out = VerifyOutcome::default();
    let evidence = match &request.evidence {
        Evidence::Tpm2(evidence) => evidence,
        Evidence::Other { format, .. } => {
            out.fail(codes::EVIDENCE_FORMAT_UNSUPPORTED, format!("{format:?} (tpm2 only)"));
            return Ok(out);
        }
        _ => {
            out.fail(codes::EVIDENCE_FORMAT_UNSUPPORTED, "tpm2 only");
            return Ok(out);
        }
    };

    // 1. The enrolled AK: the only key evidence may be signed with, checked again.
    let mut ak_failures = Vec::new();
    let ak = check_ak(&request.device.ak_public, &mut ak_failures);
    let (Some(ak), true) = (ak, ak_failures.is_empty()) else {
        out.failures.extend(ak_failures);
        return Ok(out);
    };
    if !request.device.ak_name.is_empty() && request.device.ak_name != ak.name {
        out.fail(
            codes::AK_NAME_MISMATCH,
            format!("enrolled {}, public area's {}", hex(&request.device.ak_name), hex(&ak.name)),
        );
        return Ok(out);
    }

    // 2. The EK certificate against the anchors trusted now (validity dates were checked at
    //    enrollment), and the policy's manufacturers.
    let identity = check_ek_certificate(
        request.device.ek_certificate.as_deref(),
        &request.device.ek_chain,
        &request.trust_anchors,
        None,
        &mut out.failures,
    );
    out.ek_manufacturer = identity.as_ref().and_then(|i| i.manufacturer.clone());
    if identity.is_some() && !policy.allows_manufacturer(out.ek_manufacturer.as_deref()) {
        let detail = out.ek_manufacturer.clone().unwrap_or_else(|| "no manufacturer in the EK certificate".to_owned());
        out.fail(codes::EK_MANUFACTURER_NOT_ALLOWED, detail);
    }

    // 3. The quote: magic, type, structure, signature scheme, signature, nonce.
    let Some((attest, hash)) = check_quote(evidence, &ak, &request.nonce, &mut out) else {
        return Ok(out);
    };
    let Attested::Quote { selection, pcr_digest } = &attest.attested else {
        out.fail(codes::QUOTE_TYPE_INVALID, "not a quote");
        return Ok(out);
    };

    // 4. PCRs: the supplied values must be exactly the signed selection and recompute the
    //    signed digest; then they are compared with the policy.
    let values = check_pcr_values(evidence, selection, pcr_digest, hash, &mut out);
    if let Some(values) = &values {
        for (bank, expected) in &policy.expected_pcrs {
            for (index, want) in expected {
                match values.get(&(*bank, *index)) {
                    None => out.fail(codes::PCR_MISSING, format!("{} PCR {index}", bank.name())),
                    Some(got) if bool::from(got.ct_eq(want)) => out.verified_pcrs.push(PcrValue {
                        bank: bank.name().to_owned(),
                        index: *index,
                        digest: got.clone(),
                    }),
                    Some(_) => out.fail(codes::PCR_MISMATCH, format!("{} PCR {index}", bank.name())),
                }
            }
        }
    }
    for bank in &policy.required_pcr_banks {
        let indexes = selection.indexes(*bank);
        if indexes.is_empty() {
            out.fail(codes::PCR_BANK_MISSING, bank.name());
            continue;
        }
        for index in &policy.required_pcrs {
            if !indexes.contains(index) {
                out.fail(codes::PCR_MISSING, format!("{} PCR {index}", bank.name()));
            }
        }
    }

    // 5. Freshness: the nonce's age (wall time from the host), then the TPM clock against the
    //    device's last passing attestation.
    match request.now.checked_sub(request.nonce_issued_at) {
        Some(age) if age < 0 => out.fail(codes::ATTESTATION_TOO_OLD, format!("nonce issued {} s after now", -age)),
        Some(age) if age > policy.max_attestation_age_seconds => out.fail(
            codes::ATTESTATION_TOO_OLD,
            format!("{age} s since the nonce was issued, at most {} s", policy.max_attestation_age_seconds),
        ),
        Some(_) => {}
        None => out.fail(codes::ATTESTATION_TOO_OLD, "time overflow"),
    }
    if let Some(last) = &request.device.last_clock {
        if let Some(detail) = clock_regression(&attest.clock_info, last) {
            out.fail(codes::CLOCK_REGRESSION, detail);
        }
    }
    // TPM 2.0 Part 1 §36.7 (TPMS_CLOCK_INFO.safe): NO means the clock may have been reported
    // before (e.g. after a non-orderly shutdown) and moved back since, so this quote's time
    // cannot be ordered against earlier ones and the regression check above proves nothing.
    if !attest.clock_info.safe {
        out.fail(
            codes::CLOCK_NOT_SAFE,
            format!(
                "clockInfo.safe is NO (resetCount {}, clock {} ms): the TPM was not shut down in order",
                attest.clock_info.reset_count, attest.clock_info.clock
            ),
        );
    }

    // 6. The CSR key's certification by the same AK.
    let bound = check_bound_key(request, evidence, &policy, &ak, &mut out);

    // 7. Secure boot from the event log, replayed to the quoted (and verified) PCRs.
    let secure_boot = policy.require_secure_boot
        && match &values {
            Some(values) => check_secure_boot(evidence, selection, values, &mut out),
            None => false,
        };

    let trusted = identity.as_ref().is_some_and(|i| i.trusted);
    if out.failures.is_empty() && trusted {
        out.trust_score =
            SCORE_QUOTE + if bound { SCORE_BOUND_KEY } else { 0 } + if secure_boot { SCORE_SECURE_BOOT } else { 0 };
    }
    Ok(out)
}

/// Steps 3: the quote is trusted after this returns `Some` (with the signing hash).
fn check_quote(evidence: &Tpm2Evidence, ak: &Ak, nonce: &[u8], out: &mut VerifyOutcome) -> Option<(Attest, HashAlg)> {
    let attest = match Attest::parse(&evidence.quote, TPM_ST_ATTEST_QUOTE) {
        Ok(a) => a,
        Err(AttestError::Magic(m)) => {
            out.fail(codes::QUOTE_MAGIC_INVALID, format!("0x{m:08x}, not TPM_GENERATED_VALUE"));
            return None;
        }
        Err(AttestError::Type(t)) => {
            out.fail(codes::QUOTE_TYPE_INVALID, format!("{}, not a quote", attest_type_name(t)));
            return None;
        }
        Err(AttestError::Malformed(e)) => {
            out.fail(codes::QUOTE_MALFORMED, e.to_string());
            return None;
        }
    };
    let hash = check_signature(
        &evidence.quote,
        &evidence.quote_signature,
        ak,
        out,
        [codes::QUOTE_SIGNATURE_MALFORMED, codes::QUOTE_SIGNATURE_SCHEME_MISMATCH, codes::QUOTE_SIGNATURE_INVALID],
    )?;
    out.clock = Some(clock(&attest.clock_info));
    if nonce.len() != NONCE_SIZE {
        out.fail(codes::QUOTE_NONCE_MISMATCH, format!("the host's nonce is {} bytes, not {NONCE_SIZE}", nonce.len()));
        return None;
    }
    if !bool::from(attest.extra_data.ct_eq(nonce)) {
        out.fail(codes::QUOTE_NONCE_MISMATCH, "extraData is not the nonce");
        return None;
    }
    Some((attest, hash))
}

/// Parses a TPMT_SIGNATURE, requires the AK's scheme and verifies it over `message` as received.
/// `codes` are the malformed, scheme-mismatch and invalid codes of the caller.
fn check_signature(
    message: &[u8],
    signature: &[u8],
    ak: &Ak,
    out: &mut VerifyOutcome,
    codes: [&str; 3],
) -> Option<HashAlg> {
    let [malformed, mismatch, invalid] = codes;
    let ak_scheme = (ak.public.scheme.scheme, ak.public.scheme.hash.unwrap_or(alg::NULL));
    let describe = |(s, h): (u16, u16)| format!("{}/{}", alg::name(s), alg::name(h));
    let signature = match Signature::parse(signature) {
        Ok(s) => s,
        Err(SignatureError::Unsupported(a)) => {
            out.fail(mismatch, format!("signature {}, the AK signs with {}", alg::name(a), describe(ak_scheme)));
            return None;
        }
        Err(SignatureError::Malformed(e)) => {
            out.fail(malformed, e.to_string());
            return None;
        }
    };
    if signature.scheme() != ak_scheme {
        out.fail(
            mismatch,
            format!("signature {}, the AK signs with {}", describe(signature.scheme()), describe(ak_scheme)),
        );
        return None;
    }
    let (Some(key), Some(hash)) = (&ak.key, HashAlg::from_id(ak_scheme.1)) else {
        out.fail(invalid, "the AK cannot verify");
        return None;
    };
    if let Err(e) = crypto::verify_tpm_signature(key, &signature, message) {
        out.fail(invalid, e);
        return None;
    }
    Some(hash)
}

fn attest_type_name(t: u16) -> String {
    match t {
        0x8014 => "TPM_ST_ATTEST_NV (0x8014)".to_owned(),
        0x8015 => "TPM_ST_ATTEST_COMMAND_AUDIT (0x8015)".to_owned(),
        0x8016 => "TPM_ST_ATTEST_SESSION_AUDIT (0x8016)".to_owned(),
        TPM_ST_ATTEST_CERTIFY => "TPM_ST_ATTEST_CERTIFY (0x8017)".to_owned(),
        TPM_ST_ATTEST_QUOTE => "TPM_ST_ATTEST_QUOTE (0x8018)".to_owned(),
        0x8019 => "TPM_ST_ATTEST_TIME (0x8019)".to_owned(),
        0x801a => "TPM_ST_ATTEST_CREATION (0x801a)".to_owned(),
        0x801c => "TPM_ST_ATTEST_NV_DIGEST (0x801c)".to_owned(),
        other => format!("type 0x{other:04x}"),
    }
}

fn clock(c: &ClockInfo) -> TpmClock {
    TpmClock { clock: c.clock, reset_count: c.reset_count, restart_count: c.restart_count, safe: c.safe }
}

/// Regression against the last passing attestation: resetCount never decreases; within one
/// reset, restartCount never decreases; within one restart, clock never decreases. (A TPM
/// Reset sets restartCount to 0 and may move clock back; that is not a regression.)
fn clock_regression(now: &ClockInfo, last: &TpmClock) -> Option<String> {
    if now.reset_count < last.reset_count {
        return Some(format!("resetCount {} < last {}", now.reset_count, last.reset_count));
    }
    if now.reset_count == last.reset_count {
        if now.restart_count < last.restart_count {
            return Some(format!("restartCount {} < last {}", now.restart_count, last.restart_count));
        }
        if now.restart_count == last.restart_count && now.clock < last.clock {
            return Some(format!("clock {} ms < last {} ms", now.clock, last.clock));
        }
    }
    None
}

/// The supplied PCR values, keyed by (bank, index), when they are exactly the signed selection
/// and recompute the signed digest; `None` (with failures) otherwise.
fn check_pcr_values(
    evidence: &Tpm2Evidence,
    selection: &PcrSelection,
    pcr_digest: &[u8],
    hash: HashAlg,
    out: &mut VerifyOutcome,
) -> Option<BTreeMap<(Bank, u32), Vec<u8>>> {
    let before = out.failures.len();
    let mut values: BTreeMap<(Bank, u32), Vec<u8>> = BTreeMap::new();
    for pcr in &evidence.pcrs {
        let Some(bank) = Bank::from_name(&pcr.bank) else {
            out.fail(codes::PCR_SELECTION_MISMATCH, format!("unknown bank {:?} supplied", pcr.bank));
            continue;
        };
        let label = format!("{} PCR {}", bank.name(), pcr.index);
        if pcr.index >= PCR_COUNT {
            out.fail(codes::PCR_SELECTION_MISMATCH, format!("{label} supplied: no such PCR"));
        } else if pcr.digest.len() != bank.size() {
            out.fail(codes::PCR_SELECTION_MISMATCH, format!("{label} supplied with {} bytes", pcr.digest.len()));
        } else if values.insert((bank, pcr.index), pcr.digest.clone()).is_some() {
            out.fail(codes::PCR_SELECTION_MISMATCH, format!("{label} supplied twice"));
        } else if !selection.indexes(bank).contains(&pcr.index) {
            out.fail(codes::PCR_SELECTION_MISMATCH, format!("{label} supplied but not quoted"));
        }
    }
    for (bank, index) in selection.pairs() {
        if !values.contains_key(&(bank, index)) {
            out.fail(codes::PCR_SELECTION_MISMATCH, format!("{} PCR {index} quoted but not supplied", bank.name()));
        }
    }
    if out.failures.len() > before {
        return None;
    }
    let mut concatenated = Vec::new();
    for key in selection.pairs() {
        concatenated.extend(values.get(&key).map(Vec::as_slice).unwrap_or_default());
    }
    let computed = hash.digest(&[&concatenated]);
    if !bool::from(computed.ct_eq(pcr_digest)) {
        out.fail(
            codes::PCR_DIGEST_MISMATCH,
            format!("{} of the supplied values is not the quoted pcrDigest", hash.name()),
        );
        return None;
    }
    Some(values)
}

/// Step 6. True when a certification was verified and binds the CSR's key.
fn check_bound_key(
    request: &VerifyRequest,
    evidence: &Tpm2Evidence,
    policy: &Policy,
    ak: &Ak,
    out: &mut VerifyOutcome,
) -> bool {
    let (certification, csr) = match (&evidence.certification, &request.csr) {
        (Some(c), Some(csr)) => (c, csr),
        (c, csr) => {
            if policy.require_bound_csr_key {
                if csr.is_none() {
                    out.fail(codes::BOUND_KEY_MISSING, "no CSR to bind");
                }
                if c.is_none() {
                    out.fail(codes::BOUND_KEY_MISSING, "no TPM2_Certify of the CSR key");
                }
            }
            return false;
        }
    };
    let before = out.failures.len();
    let Some(certified) = check_certification(certification, ak, &request.nonce, out) else {
        return false;
    };
    let problems = [
        (!certified.has(attr::SIGN), "not a signing key"),
        (certified.has(attr::RESTRICTED), "restricted"),
        (!certified.has(attr::FIXED_TPM), "not fixedTPM"),
        (!certified.has(attr::FIXED_PARENT), "not fixedParent"),
        (!certified.has(attr::SENSITIVE_DATA_ORIGIN), "not sensitiveDataOrigin (imported key)"),
    ];
    for (failed, problem) in problems {
        if failed {
            out.fail(codes::BOUND_KEY_ATTRIBUTES_INVALID, problem);
        }
    }
    match &certified.detail {
        KeyDetail::Rsa { key_bits, .. } if usize::from(*key_bits) < crypto::MIN_RSA_BITS => {
            out.fail(codes::BOUND_KEY_ATTRIBUTES_INVALID, format!("RSA-{key_bits}"));
        }
        KeyDetail::Ecc { curve: c, .. } if !matches!(*c, curve::NIST_P256 | curve::NIST_P384) => {
            out.fail(codes::BOUND_KEY_ATTRIBUTES_INVALID, format!("ECC curve 0x{c:04x}"));
        }
        _ => {}
    }
    let csr_key = match crypto::material_from_spki(&csr.public_key) {
        Ok(k) => Some(k),
        Err(e) => {
            out.fail(codes::CSR_KEY_MALFORMED, e);
            None
        }
    };
    match (csr_key, crypto::material_from_public(&certified)) {
        (Some(csr_key), Ok(tpm_key)) if csr_key == tpm_key => {}
        (Some(csr_key), Ok(tpm_key)) => out.fail(
            codes::CSR_KEY_MISMATCH,
            format!("the CSR's {} key is not the certified {} key", csr_key.describe(), tpm_key.describe()),
        ),
        (_, Err(e)) => out.fail(codes::CERTIFIED_KEY_MALFORMED, e),
        (None, _) => {}
    }
    out.failures.len() == before
}

/// The certification's structure, AK signature, nonce and name; the certified public area on
/// success.
fn check_certification(
    certification: &Tpm2Certification,
    ak: &Ak,
    nonce: &[u8],
    out: &mut VerifyOutcome,
) -> Option<TpmPublic> {
    let attest = match Attest::parse(&certification.attest, TPM_ST_ATTEST_CERTIFY) {
        Ok(a) => a,
        Err(AttestError::Magic(m)) => {
            out.fail(codes::CERTIFY_MAGIC_INVALID, format!("0x{m:08x}, not TPM_GENERATED_VALUE"));
            return None;
        }
        Err(AttestError::Type(t)) => {
            out.fail(codes::CERTIFY_TYPE_INVALID, format!("{}, not a certify", attest_type_name(t)));
            return None;
        }
        Err(AttestError::Malformed(e)) => {
            out.fail(codes::CERTIFY_MALFORMED, e.to_string());
            return None;
        }
    };
    check_signature(
        &certification.attest,
        &certification.signature,
        ak,
        out,
        [
            codes::CERTIFY_SIGNATURE_MALFORMED,
            codes::CERTIFY_SIGNATURE_SCHEME_MISMATCH,
            codes::CERTIFY_SIGNATURE_INVALID,
        ],
    )?;
    // Without the nonce a certification made at any time (of a key since moved out of reach,
    // or by a TPM whose AK was enrolled then) would pass with today's quote.
    if !bool::from(attest.extra_data.ct_eq(nonce)) {
        out.fail(codes::CERTIFY_NONCE_MISMATCH, "extraData is not the nonce");
        return None;
    }
    let certified = match TpmPublic::parse(&certification.certified_key_public) {
        Ok(p) => p,
        Err(e) => {
            out.fail(codes::CERTIFIED_KEY_MALFORMED, e.to_string());
            return None;
        }
    };
    let Attested::Certify { name, .. } = &attest.attested else {
        out.fail(codes::CERTIFY_TYPE_INVALID, "not a certify");
        return None;
    };
    if *name != certified.name() {
        out.fail(
            codes::CERTIFY_NAME_MISMATCH,
            format!("attested {}, the certified public area's {}", hex(name), hex(&certified.name())),
        );
        return None;
    }
    Some(certified)
}

/// Step 7. True when the log replays to every quoted PCR it covers, PCR 7 included, and says
/// secure boot was on.
fn check_secure_boot(
    evidence: &Tpm2Evidence,
    selection: &PcrSelection,
    values: &BTreeMap<(Bank, u32), Vec<u8>>,
    out: &mut VerifyOutcome,
) -> bool {
    let Some(bytes) = &evidence.event_log else {
        out.fail(codes::EVENTLOG_MISSING, "secure boot is required");
        return false;
    };
    let log = match EventLog::parse(bytes) {
        Ok(log) => log,
        Err(e) => {
            out.fail(codes::EVENTLOG_MALFORMED, e.to_string());
            return false;
        }
    };
    let before = out.failures.len();
    let mut pcr7_replayed = false;
    for bank in log.replayable_banks() {
        let (Some(hash), false) = (bank.hash(), selection.indexes(bank).is_empty()) else { continue };
        let replayed = match log.replay(hash) {
            Ok(r) => r,
            Err(e) => {
                out.fail(codes::EVENTLOG_MALFORMED, e.to_string());
                return false;
            }
        };
        for &index in selection.indexes(bank) {
            let quoted = values.get(&(bank, index));
            let expected = match replayed.get(&index) {
                Some(v) => v.clone(),
                // PCR 7 must be explained by the log even when it has no events for it.
                None if index == 7 => vec![0u8; bank.size()],
                None => continue,
            };
            if index == 7 {
                pcr7_replayed = true;
            }
            if quoted.map(|q| bool::from(q.ct_eq(&expected))) != Some(true) {
                out.fail(codes::EVENTLOG_REPLAY_MISMATCH, format!("{} PCR {index}", bank.name()));
            }
        }
    }
    if !pcr7_replayed {
        out.fail(codes::EVENTLOG_REPLAY_MISMATCH, "PCR 7 is not quoted in a bank the event log covers");
    }
    if out.failures.len() > before {
        return false;
    }
    match secure_boot_state(&log) {
        SecureBootFinding::Enabled => true,
        SecureBootFinding::Failed(code, detail) => {
            out.fail(code, detail);
            false
        }
    }
}
