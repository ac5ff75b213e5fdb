//! The parsers and both calls against hostile input: every truncation and trailing byte of the
//! real swtpm structures is refused by the strict parsers, and thousands of random mutations
//! (bit flips, truncations, insertions, length fields set to 0 or 0xFFFF, random buffers) never
//! panic, and a mutated quote or signature never passes. Deterministic (a fixed xorshift seed),
//! so a failure reproduces.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use support::*;
use trellis_plugin_tpm2_verifier::eventlog::{secure_boot_state, EventLog, VariableData};
use trellis_plugin_tpm2_verifier::tpm::{
    Attest, PcrSelection, Signature, TpmPublic, TPM_ST_ATTEST_CERTIFY, TPM_ST_ATTEST_QUOTE,
};
use trellis_plugin_tpm2_verifier::{crypto, ekcert, tpm::HashAlg};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    /// One random mutation of `input`.
    fn mutate(&mut self, input: &[u8]) -> Vec<u8> {
        let mut out = input.to_vec();
        let len = out.len();
        match self.next() % 7 {
            0 if len > 0 => {
                let i = self.below(len);
                out[i] ^= 1 << self.below(8);
            }
            1 if len > 0 => {
                for _ in 0..=self.below(8) {
                    let i = self.below(len);
                    out[i] = self.next() as u8;
                }
            }
            2 => out.truncate(self.below(len)),
            3 => {
                let i = self.below(len + 1);
                let n = 1 + self.below(4);
                let extra = self.bytes(n);
                out.splice(i..i, extra);
            }
            4 if len > 1 => {
                let i = self.below(len - 1);
                let v = if self.next().is_multiple_of(2) { 0xff } else { 0x00 };
                out[i] = v;
                out[i + 1] = v;
            }
            5 if len > 0 => {
                let i = self.below(len);
                let j = i + self.below(len - i);
                out.drain(i..j);
            }
            _ => {
                let n = self.below(2 * len.max(8));
                out = self.bytes(n);
            }
        }
        out
    }
}

/// Every strict prefix and one trailing byte are refused; the whole parses.
fn strict(name: &str, bytes: &[u8], parses: impl Fn(&[u8]) -> bool) {
    assert!(parses(bytes), "{name}: the vector itself parses");
    for cut in 0..bytes.len() {
        assert!(!parses(&bytes[..cut]), "{name}: truncated to {cut} bytes parsed");
    }
    for extra in [0x00, 0xff] {
        let mut longer = bytes.to_vec();
        longer.push(extra);
        assert!(!parses(&longer), "{name}: a trailing byte parsed");
    }
}

#[test]
fn the_tpm_parsers_are_strict_on_every_truncation_and_trailing_byte() {
    for name in ["ak_rsa.tpmt", "ak_ecc.tpmt", "ak_pss.tpmt", "ek_rsa.tpmt", "ek_ecc.tpmt", "key.tpmt"] {
        strict(name, &vector(name), |b| TpmPublic::parse(b).is_ok());
    }
    for name in ["quote_rsa.attest", "quote_ecc.attest", "quote_sb0.attest"] {
        strict(name, &vector(name), |b| Attest::parse(b, TPM_ST_ATTEST_QUOTE).is_ok());
    }
    for name in ["certify.attest", "certify_ak.attest"] {
        strict(name, &vector(name), |b| Attest::parse(b, TPM_ST_ATTEST_CERTIFY).is_ok());
    }
    for name in ["quote_rsa.sig", "quote_ecc.sig", "quote_pss.sig", "certify.sig"] {
        strict(name, &vector(name), |b| Signature::parse(b).is_ok());
    }
    // The quote's TPML_PCR_SELECTION (after magic, type, two TPM2Bs, clock info, firmware).
    let quote = vector("quote_rsa.attest");
    let selection = &quote[4 + 2 + 36 + 34 + 17 + 8..quote.len() - 34];
    strict("pcrSelect", selection, |b| PcrSelection::parse(b).is_ok());
    assert_eq!(PcrSelection::parse(selection).unwrap().pairs().count(), 12);
    // The event log: a trailing byte is refused (a log cut at an event boundary is a shorter
    // log, so truncation is covered by the replay checks instead).
    for name in ["eventlog.bin", "eventlog_sb0.bin"] {
        let mut log = vector(name);
        assert!(EventLog::parse(&log).is_ok());
        log.push(0);
        assert!(EventLog::parse(&log).is_err(), "{name}: trailing byte");
    }
}

#[test]
fn the_names_of_the_swtpm_keys_are_what_tpm2_tools_computed() {
    for ak in ["rsa", "ecc", "pss", "rsa2"] {
        let public = TpmPublic::parse(&vector(&format!("ak_{ak}.tpmt"))).unwrap();
        assert_eq!(public.name(), vector(&format!("ak_{ak}.name")), "{ak}");
    }
    // And the certified key's Name is the one in the certification.
    let key = TpmPublic::parse(&vector("key.tpmt")).unwrap();
    let attest = Attest::parse(&vector("certify.attest"), TPM_ST_ATTEST_CERTIFY).unwrap();
    let trellis_plugin_tpm2_verifier::tpm::Attested::Certify { name, .. } = attest.attested else { panic!() };
    assert_eq!(name, key.name());
    // The tpm2-tools SPKI export and the public area are the same key.
    assert_eq!(crypto::material_from_spki(&vector("key_spki.der")), crypto::material_from_public(&key));
    let ak = TpmPublic::parse(&vector("ak_rsa.tpmt")).unwrap();
    assert_eq!(crypto::material_from_spki(&vector("ak_rsa_spki.der")), crypto::material_from_public(&ak));
    assert_eq!(HashAlg::Sha256.digest(&[b""]).len(), 32);
}

#[test]
fn random_mutations_never_panic_a_parser() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let inputs: Vec<Vec<u8>> = [
        "ak_rsa.tpmt",
        "ak_ecc.tpmt",
        "ek_ecc.tpmt",
        "quote_rsa.attest",
        "certify.attest",
        "quote_rsa.sig",
        "quote_ecc.sig",
        "eventlog.bin",
        "eventlog_sb0.bin",
        "ek_rsa_cert.nv",
        "ek_ecc_cert.nv",
        "intermediate.der",
        "key_spki.der",
    ]
    .iter()
    .map(|n| vector(n))
    .collect();
    let mut parsed = 0usize;
    for round in 0..20_000 {
        let input = &inputs[round % inputs.len()];
        let mutated = rng.mutate(input);
        let b = mutated.as_slice();
        parsed += usize::from(TpmPublic::parse(b).map(|p| p.name()).is_ok());
        parsed += usize::from(Attest::parse(b, TPM_ST_ATTEST_QUOTE).is_ok());
        parsed += usize::from(Attest::parse(b, TPM_ST_ATTEST_CERTIFY).is_ok());
        parsed += usize::from(Signature::parse(b).is_ok());
        parsed += usize::from(PcrSelection::parse(b).is_ok());
        parsed += usize::from(VariableData::parse(b).is_ok());
        if let Ok(log) = EventLog::parse(b) {
            parsed += 1;
            for bank in [HashAlg::Sha1, HashAlg::Sha256, HashAlg::Sha384] {
                let _ = log.replay(bank);
            }
            let _ = secure_boot_state(&log);
        }
        if let Ok(cert) = ekcert::parse_ek_certificate(b) {
            parsed += 1;
            let _ = ekcert::manufacturer(&cert.x509);
            let _ = crypto::material_from_parsed_spki(cert.x509.public_key());
        }
        let _ = ekcert::parse_certificates(b);
        let _ = crypto::material_from_spki(b);
    }
    // Mutations that keep a structure valid exist (a flipped value byte): the loop reached the
    // code past the parsers, not only their first checks.
    assert!(parsed > 1_000, "only {parsed} mutants parsed");
}

#[test]
fn mutated_evidence_never_panics_and_a_mutated_quote_or_signature_never_passes() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for round in 0..400 {
        let mut request = happy();
        let field = round % 6;
        let changed = {
            let e = tpm2(&mut request);
            let target: &mut Vec<u8> = match field {
                0 => &mut e.quote,
                1 => &mut e.quote_signature,
                2 => &mut e.certification.as_mut().unwrap().attest,
                3 => &mut e.certification.as_mut().unwrap().certified_key_public,
                4 => e.event_log.as_mut().unwrap(),
                _ => {
                    let i = rng.below(e.pcrs.len());
                    &mut e.pcrs[i].digest
                }
            };
            let mutated = rng.mutate(target);
            let changed = mutated != *target;
            *target = mutated;
            changed
        };
        let verdict = verify(request);
        // An event log may change where the PCRs do not cover it (event types are not
        // measured); everything else is signed or recomputed.
        if changed && field != 4 {
            assert!(!verdict.passed, "round {round}: a mutated field {field} passed");
        }
    }
}

#[test]
fn mutated_enrollments_never_panic_and_a_mutated_ak_never_gets_the_same_challenge() {
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    let baseline = enroll(enrollment()).challenge.map(|c| pair(&c));
    for round in 0..150 {
        let mut request = enrollment();
        match round % 5 {
            0 => request.ek_certificate = Some(rng.mutate(request.ek_certificate.as_ref().unwrap())),
            1 => request.ek_public = rng.mutate(&request.ek_public),
            2 => request.ak_public = rng.mutate(&request.ak_public),
            3 => request.ek_chain = vec![rng.mutate(&request.ek_chain[0])],
            _ => request.trust_anchors[0].certificate_der = rng.mutate(&request.trust_anchors[0].certificate_der),
        }
        // Any change to the AK's public area changes its Name, hence the challenge. (Not so for
        // the EK's: its authPolicy or attributes, say, do not enter MakeCredential, and only
        // the real EK can activate anyway.)
        let changed_key = round % 5 == 2 && request.ak_public != vector("ak_rsa.tpmt");
        let verdict = enroll(request);
        if changed_key && verdict.passed {
            assert_ne!(verdict.challenge.map(|c| pair(&c)), baseline, "round {round}");
        }
    }
}
