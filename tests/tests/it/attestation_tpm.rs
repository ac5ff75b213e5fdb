//! TPM attestation end to end on a real software TPM: each test starts its own swtpm (EK
//! certificate from swtpm_setup's local CA, whose root the test trusts), boots it by extending a
//! synthetic UEFI event log into its PCRs, and drives it with the `trellis-agent` binary against
//! the running service. The happy path enrolls the AK and provisions a certificate whose chain
//! `openssl verify` accepts; every other test breaks one thing (the evidence the agent prints,
//! the TPM's state, the policy, the nonce) and expects the matching refusal: 403
//! `{"error": "attestation_failed", "failures": ["code: detail", …]}` (or the enrollment
//! refusals, or the §3.4 400 nonce codes). Two enrollment tests build the enroll request by hand
//! from parts read with tpm2-tools, to swap one of them.

use std::path::PathBuf;
use std::process::{Command, Output};

use base64::Engine as _;
use serde_json::{json, Value};
use trellis_tests::swtpm::{EventLog, SwTpm};
use trellis_tests::{Client, Response, Server};

use crate::cas::{internal_intermediate, internal_root, Openssl};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The agent under test: `TRELLIS_AGENT_BIN`, else target/debug/trellis-agent.
fn agent_binary() -> PathBuf {
    if let Ok(path) = std::env::var("TRELLIS_AGENT_BIN") {
        return PathBuf::from(path);
    }
    let path = trellis_tests::target_dir().join("debug").join("trellis-agent");
    assert!(path.exists(), "{} is missing: `cargo build -p trellis-agent` (`make test` does this)", path.display());
    path
}

/// A service, a software TPM booted with an event log, a device for it and an internal CA.
struct Rig {
    server: Server,
    admin: Client,
    api_key: String,
    tpm: SwTpm,
    /// The agent's state (the AK blobs) and the test's files.
    work: tempfile::TempDir,
    device: i64,
    /// The internal root CA and the intermediate under it that issues.
    root: i64,
    ca: i64,
    /// What was extended into the TPM at boot (and is sent as `eventLog`).
    boot: EventLog,
}

impl Rig {
    /// A booted TPM (`boot` extended into its PCRs) trusted through its local CA's root.
    async fn start(boot: EventLog) -> Rig {
        Rig::launch(boot, true).await
    }

    /// `trusted`: the TPM's local CA root is a trust root; otherwise an unrelated vendor's is.
    async fn launch(boot: EventLog, trusted: bool) -> Rig {
        let tpm = std::thread::spawn(SwTpm::start);
        let server = Server::start();
        let tpm = tpm.join().unwrap_or_else(|_| panic!("swtpm did not start"));
        tpm.extend(&boot);
        let admin = server.admin().await;
        let key = admin
            .post(
                "/api/api-keys",
                json!({ "name": "agent", "scopes": ["attestation:read", "attestation:write", "certificates:read", "certificates:write"] }),
            )
            .await;
        assert_eq!(key.status, 201, "{}", key.body);
        let api_key = key.body["data"]["key"].as_str().unwrap_or_default().to_owned();
        let work = tempfile::tempdir().expect("tempdir");
        std::fs::write(work.path().join("eventlog.bin"), &boot.bytes).expect("event log");
        let device = admin
            .post("/api/iot/devices", json!({ "name": "gateway-1", "deviceType": "gateway", "serial": "SN-0001" }))
            .await;
        assert_eq!(device.status, 201, "{}", device.body);
        let device = device.body["data"]["id"].as_i64().unwrap_or_default();
        let root = internal_root(&admin, "Device Root").await;
        let ca = internal_intermediate(&admin, "Device Issuing CA", root).await;
        let rig = Rig { server, admin, api_key, tpm, work, device, root, ca, boot };
        if trusted {
            rig.trust(&rig.tpm.root_pem()).await;
        } else {
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params.distinguished_name.push(rcgen::DnType::CommonName, "Another TPM Vendor Root");
            let key = rcgen::KeyPair::generate().expect("key");
            rig.trust(&params.self_signed(&key).expect("root").pem()).await;
        }
        rig
    }

    /// Secure boot on, the default policy, the AK enrolled: ready to attest.
    async fn ready() -> Rig {
        let rig = Rig::start(EventLog::firmware(true)).await;
        rig.policy(json!({})).await;
        rig.enroll().await;
        rig
    }

    async fn trust(&self, pem: &str) {
        let res = self.admin.post("/api/attestation/trust-roots", json!({ "certificate": pem })).await;
        assert_eq!(res.status, 201, "{}", res.body);
    }

    /// A policy for gateways expecting PCRs 0-4 and 7 as the boot log replays them, with
    /// `overrides` merged in; returns its id.
    async fn policy(&self, overrides: Value) -> i64 {
        let expected: serde_json::Map<String, Value> =
            [0, 1, 2, 3, 4, 7].iter().map(|i| (i.to_string(), json!(self.boot.sha256_hex(*i)))).collect();
        let mut body = json!({ "name": "gateways", "deviceType": "gateway", "expectedPcrs": { "SHA256": expected } });
        if let (Some(body), Value::Object(overrides)) = (body.as_object_mut(), overrides) {
            body.extend(overrides);
        }
        let res = self.admin.post("/api/attestation/policies", body).await;
        assert_eq!(res.status, 201, "{}", res.body);
        res.body["id"].as_i64().unwrap_or_default()
    }

    /// `trellis-agent` with this rig's TPM, state directory and service.
    fn agent(&self, state: &str, args: &[&str]) -> Output {
        Command::new(agent_binary())
            .args(args)
            .env("TRELLIS_AGENT_TCTI", self.tpm.tcti())
            .env("TRELLIS_AGENT_STATE", self.work.path().join(state))
            .env("TRELLIS_URL", &self.server.base_url)
            .env("TRELLIS_API_KEY", &self.api_key)
            // anyhow would append a backtrace (with braces) to the service's JSON in errors.
            .env("RUST_BACKTRACE", "0")
            .output()
            .expect("trellis-agent runs")
    }

    fn agent_ok(&self, state: &str, args: &[&str]) -> Value {
        let out = self.agent(state, args);
        assert!(out.status.success(), "trellis-agent {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&out.stdout)))
    }

    /// Runs `trellis-agent enroll` and expects the device to be enrolled.
    async fn enroll(&self) {
        let device = self.device.to_string();
        let chain = self.tpm.intermediate_path().display().to_string();
        let enrolled = self.agent_ok("agent", &["enroll", "--device", &device, "--ek-chain", &chain]);
        assert_eq!(enrolled["status"], "enrolled", "{enrolled}");
    }

    async fn nonce(&self, device: i64, purpose: &str) -> String {
        let res = self
            .admin
            .post(
                &format!("/api/iot/devices/{device}/attestation/challenge"),
                json!({ "purpose": purpose, "ttlSeconds": 3600 }),
            )
            .await;
        assert_eq!(res.status, 200, "{}", res.body);
        res.body["nonce"].as_str().unwrap_or_default().to_owned()
    }

    /// `trellis-agent evidence` for `nonce` (the AK of `state`, extra agent flags): the
    /// attest-and-provision body, not submitted.
    fn body_for(&self, state: &str, nonce: &str, extra: &[&str]) -> Value {
        let log = self.work.path().join("eventlog.bin").display().to_string();
        let mut args = vec!["evidence", "--nonce", nonce, "--cn", "gateway-1.example.com", "--event-log", &log];
        args.extend_from_slice(extra);
        let printed = self.agent_ok(state, &args);
        json!({ "caId": self.ca, "templateId": "device", "csr": printed["csr"], "evidence": printed["evidence"] })
    }

    /// Evidence for a fresh nonce of this device, from the enrolled AK.
    async fn body(&self) -> Value {
        let nonce = self.nonce(self.device, "attestation").await;
        self.body_for("agent", &nonce, &[])
    }

    async fn submit(&self, body: Value) -> Response {
        self.admin.post(&format!("/api/iot/devices/{}/attest-and-provision", self.device), body).await
    }
}

/// Asserts the verifier's refusal: 403 attestation_failed with a `code: detail` failure.
fn assert_refused(res: &Response, code: &str) {
    assert_eq!(res.status, 403, "{}", res.body);
    assert_eq!(res.body["error"], "attestation_failed", "{}", res.body);
    let failures = res.body["failures"].as_array().cloned().unwrap_or_default();
    assert!(failures.iter().all(|f| f.as_str().is_some_and(|f| f.contains(": ") || f.ends_with(':'))), "{failures:?}");
    assert!(
        failures.iter().any(|f| f.as_str().is_some_and(|f| f.starts_with(&format!("{code}:")))),
        "expected a `{code}:` failure, got {failures:?}"
    );
}

fn assert_nonce_refused(res: &Response, code: &str) {
    assert_eq!((res.status, res.body["error"].as_str()), (400, Some(code)), "{}", res.body);
}

/// A base64 member of the evidence, decoded, changed by `f`, encoded again.
fn tamper(body: &mut Value, member: &str, f: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = B64.decode(body["evidence"][member].as_str().unwrap_or_default()).expect("base64 member");
    f(&mut bytes);
    body["evidence"][member] = json!(B64.encode(bytes));
}

/// The service's JSON answer inside an agent's error message (`POST …: 403 Forbidden: {…}`).
fn agent_refusal(out: &Output) -> Value {
    assert!(!out.status.success(), "the agent succeeded: {}", String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let json = stderr.find('{').map(|start| &stderr[start..]).unwrap_or_default();
    let end = json.rfind('}').map(|end| end + 1).unwrap_or(0);
    serde_json::from_str(&json[..end]).unwrap_or_else(|_| panic!("no service answer in: {stderr}"))
}

fn has_failure(answer: &Value, code: &str) -> bool {
    answer["failures"].as_array().is_some_and(|f| f.iter().any(|f| f.as_str().is_some_and(|f| f.starts_with(code))))
}

// ---- the happy path --------------------------------------------------------------------------

#[tokio::test]
async fn a_tpm_device_enrolls_attests_and_gets_a_certificate_that_verifies() {
    let rig = Rig::ready().await;
    let device = rig.admin.get(&format!("/api/iot/devices/{}", rig.device)).await.body["data"].clone();
    assert_eq!(device["status"], "enrolled", "{device}");
    assert_eq!(device["ekManufacturer"], "id:00001014", "swtpm's EK certificate names IBM's vendor id: {device}");
    assert!(device["akName"].as_str().is_some_and(|n| n.len() == 68 && n.starts_with("000b")), "{device}");

    // provision: nonce, TPM key, certify, quote, CSR signed in the TPM, submitted.
    let out = rig.work.path().join("issued");
    let (device_id, ca) = (rig.device.to_string(), rig.ca.to_string());
    let log = rig.work.path().join("eventlog.bin").display().to_string();
    let issued = rig.agent_ok(
        "agent",
        &[
            "provision",
            "--device",
            &device_id,
            "--ca",
            &ca,
            "--template",
            "device",
            "--cn",
            "gateway-1.example.com",
            "--event-log",
            &log,
            "--out",
            &out.display().to_string(),
        ],
    );
    assert_eq!(issued["attestation"]["ekManufacturer"], "id:00001014", "{issued}");
    assert_eq!(issued["attestation"]["verifiedPcrs"]["SHA256"]["7"], rig.boot.sha256_hex(7), "{issued}");
    let certificate_id = issued["certificateId"].as_i64().unwrap_or_default();
    assert!(certificate_id > 0, "{issued}");

    // The chain verifies up to the root the service publishes, and the certificate's key is the
    // TPM key the agent kept.
    let openssl = Openssl::new();
    let root = Client::new(&rig.server, None).get(&format!("/pki/{}/ca", rig.root)).await;
    assert_eq!(root.status, 200);
    let root = openssl.write("root.pem", &root.bytes);
    let (cert, chain) = (out.join("cert.pem").display().to_string(), out.join("chain.pem").display().to_string());
    let chain_pem = std::fs::read_to_string(&chain).unwrap_or_default();
    assert!(chain_pem.contains("BEGIN CERTIFICATE"), "the chain holds the issuing CA: {chain_pem}");
    let (ok, text) = openssl.verify(&["-CAfile", &root, "-untrusted", &chain, &cert]);
    assert!(ok, "openssl verify: {text}");
    let spki_pem = openssl.ok(&["x509", "-in", &cert, "-noout", "-pubkey"]);
    let spki_der = B64.decode(spki_pem.lines().filter(|l| !l.starts_with("-----")).collect::<String>()).expect("SPKI");
    let tpm_key = std::fs::read(out.join("key.pub")).expect("key.pub");
    // TPM2B_PUBLIC of an ECC key ends with x and y, each a TPM2B of 32 bytes.
    let (x, y) = (&tpm_key[tpm_key.len() - 66..tpm_key.len() - 34], &tpm_key[tpm_key.len() - 32..]);
    assert_eq!(&spki_der[spki_der.len() - 65..], [&[4u8][..], x, y].concat().as_slice());
    assert!(std::fs::metadata(out.join("key.priv")).is_ok_and(|m| m.len() > 0));

    // Recorded: the attestation passed with full trust, the device is attested, the
    // certificate is in the inventory.
    let history = rig.admin.get(&format!("/api/iot/devices/{}/attestations", rig.device)).await.body;
    assert_eq!(
        (history[0]["passed"].as_bool(), history[0]["trustScore"].as_i64()),
        (Some(true), Some(100)),
        "{history}"
    );
    assert_eq!(history[0]["certificateId"], certificate_id);
    let device = rig.admin.get(&format!("/api/iot/devices/{}", rig.device)).await.body["data"].clone();
    assert_eq!(device["status"], "attested", "{device}");
    let cert = rig.admin.get(&format!("/api/certificates/{certificate_id}")).await;
    assert_eq!(cert.body["data"]["commonName"], "gateway-1.example.com", "{}", cert.body);
}

// ---- nonces (§3.4) ---------------------------------------------------------------------------

#[tokio::test]
async fn a_replayed_nonce_is_refused() {
    let rig = Rig::ready().await;
    let body = rig.body().await;
    let first = rig.submit(body.clone()).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_nonce_refused(&rig.submit(body).await, "nonce_already_used");
}

#[tokio::test]
async fn a_quote_over_another_nonce_is_refused() {
    let rig = Rig::ready().await;
    let mut body = rig.body().await;
    body["evidence"]["nonce"] = json!(rig.nonce(rig.device, "attestation").await);
    assert_refused(&rig.submit(body).await, "quote_nonce_mismatch");
}

#[tokio::test]
async fn an_expired_nonce_is_refused() {
    let rig = Rig::ready().await;
    let body = rig.body().await;
    let nonce = body["evidence"]["nonce"].as_str().unwrap_or_default().to_owned();
    rig.server.sql(&format!("UPDATE attestation_nonces SET expires_at = issued_at - 1 WHERE nonce = '{nonce}'"));
    assert_nonce_refused(&rig.submit(body).await, "nonce_expired");
}

#[tokio::test]
async fn another_devices_nonce_is_refused() {
    let rig = Rig::ready().await;
    let other =
        rig.admin.post("/api/iot/devices", json!({ "name": "other", "deviceType": "gateway", "serial": "SN-2" })).await;
    let other = other.body["data"]["id"].as_i64().unwrap_or_default();
    let nonce = rig.nonce(other, "attestation").await;
    let body = rig.body_for("agent", &nonce, &[]);
    assert_nonce_refused(&rig.submit(body).await, "nonce_device_mismatch");
}

#[tokio::test]
async fn an_enrollment_nonce_is_refused_for_attestation() {
    let rig = Rig::ready().await;
    let nonce = rig.nonce(rig.device, "ak_enrollment").await;
    let body = rig.body_for("agent", &nonce, &[]);
    assert_nonce_refused(&rig.submit(body).await, "nonce_purpose_mismatch");
}

#[tokio::test]
async fn an_attestation_older_than_the_policy_allows_is_refused() {
    let rig = Rig::start(EventLog::firmware(true)).await;
    rig.policy(json!({ "maxAttestationAgeSeconds": 60 })).await;
    rig.enroll().await;
    let body = rig.body().await;
    // The service has no injectable clock for `serve`: the nonce's issue time is moved two
    // minutes back instead (its expiry stays an hour ahead).
    let nonce = body["evidence"]["nonce"].as_str().unwrap_or_default().to_owned();
    rig.server.sql(&format!("UPDATE attestation_nonces SET issued_at = issued_at - 120000 WHERE nonce = '{nonce}'"));
    assert_refused(&rig.submit(body).await, "attestation_too_old");
}

// ---- the quote ---------------------------------------------------------------------------------

#[tokio::test]
async fn a_quote_by_a_key_that_is_not_the_enrolled_ak_is_refused() {
    let rig = Rig::ready().await;
    // A second AK on the same TPM, under the same EK, never activated for this device.
    let device = rig.device.to_string();
    let chain = rig.tpm.intermediate_path().display().to_string();
    rig.agent_ok("other", &["enroll", "--device", &device, "--ek-chain", &chain, "--challenge-only"]);
    let nonce = rig.nonce(rig.device, "attestation").await;
    let body = rig.body_for("other", &nonce, &[]);
    assert_refused(&rig.submit(body).await, "quote_signature_invalid");
}

#[tokio::test]
async fn a_bit_flip_in_the_quote_signature_is_refused() {
    let rig = Rig::ready().await;
    let mut body = rig.body().await;
    tamper(&mut body, "quoteSignature", |sig| {
        if let Some(last) = sig.last_mut() {
            *last ^= 1;
        }
    });
    assert_refused(&rig.submit(body).await, "quote_signature_invalid");
}

#[tokio::test]
async fn a_quote_without_the_tpm_magic_is_refused() {
    let rig = Rig::ready().await;
    let mut body = rig.body().await;
    tamper(&mut body, "quoteBlob", |quote| quote[3] ^= 0xff);
    assert_refused(&rig.submit(body).await, "quote_magic_invalid");
}

#[tokio::test]
async fn a_certification_presented_as_the_quote_is_refused() {
    let rig = Rig::ready().await;
    let mut body = rig.body().await;
    body["evidence"]["quoteBlob"] = body["evidence"]["certifyBlob"].clone();
    body["evidence"]["quoteSignature"] = body["evidence"]["certifySignature"].clone();
    assert_refused(&rig.submit(body).await, "quote_type_invalid");
}

#[tokio::test]
async fn trailing_bytes_after_the_quote_are_refused() {
    let rig = Rig::ready().await;
    let mut body = rig.body().await;
    tamper(&mut body, "quoteBlob", |quote| quote.push(0));
    assert_refused(&rig.submit(body).await, "quote_malformed");
}

#[tokio::test]
async fn a_sha1_signature_for_a_sha256_ak_is_refused() {
    let rig = Rig::ready().await;
    let mut body = rig.body().await;
    // TPMT_SIGNATURE: sigAlg (RSASSA 0x0014), hashAlg 0x000b → 0x0004 (SHA-1).
    tamper(&mut body, "quoteSignature", |sig| {
        assert_eq!(&sig[..4], [0x00, 0x14, 0x00, 0x0b]);
        sig[3] = 0x04;
    });
    assert_refused(&rig.submit(body).await, "quote_signature_scheme_mismatch");
}

// ---- PCRs --------------------------------------------------------------------------------------

#[tokio::test]
async fn relabelled_pcr_values_are_refused() {
    let rig = Rig::ready().await;
    let mut body = rig.body().await;
    // PCR 7's value presented as PCR 8's: the concatenation (hence the digest) is unchanged,
    // only the label differs from the signed selection (CVE-2024-29039 class).
    let bank = body["evidence"]["pcrs"]["SHA256"].as_object_mut().expect("SHA256 values");
    let value = bank.remove("7").expect("PCR 7 quoted");
    bank.insert("8".into(), value);
    assert_refused(&rig.submit(body).await, "pcr_selection_mismatch");
}

#[tokio::test]
async fn a_tampered_pcr_value_is_refused() {
    let rig = Rig::ready().await;
    let mut body = rig.body().await;
    let value = body["evidence"]["pcrs"]["SHA256"]["4"].as_str().unwrap_or_default().to_owned();
    let (first, rest) = value.split_at(1);
    let flipped = format!("{}{rest}", if first == "0" { "1" } else { "0" });
    body["evidence"]["pcrs"]["SHA256"]["4"] = json!(flipped);
    assert_refused(&rig.submit(body).await, "pcr_digest_mismatch");
}

#[tokio::test]
async fn a_pcr_value_off_policy_is_refused() {
    let rig = Rig::start(EventLog::firmware(true)).await;
    rig.policy(json!({ "requireSecureBoot": false })).await;
    rig.enroll().await;
    // Something measured into PCR 2 after boot that the policy does not expect.
    rig.tpm.tpm2("tpm2_pcrextend", &[&format!("2:sha256={}", "ab".repeat(32))]);
    let res = rig.submit(rig.body().await).await;
    assert_refused(&res, "pcr_mismatch");
    assert!(res.body["failures"].to_string().contains("PCR 2"), "{}", res.body);
}

#[tokio::test]
async fn a_required_bank_that_was_not_quoted_is_refused() {
    let rig = Rig::start(EventLog::firmware(true)).await;
    rig.policy(json!({ "requiredPcrBanks": ["SHA1", "SHA256"] })).await;
    rig.enroll().await;
    assert_refused(&rig.submit(rig.body().await).await, "pcr_bank_missing");
}

#[tokio::test]
async fn a_required_pcr_that_was_not_quoted_is_refused() {
    let rig = Rig::ready().await;
    let nonce = rig.nonce(rig.device, "attestation").await;
    let body = rig.body_for("agent", &nonce, &["--pcrs", "sha256:0,1,2,3,4"]);
    assert_refused(&rig.submit(body).await, "pcr_missing");
}

// ---- the CSR key's certification ------------------------------------------------------------

#[tokio::test]
async fn a_certification_made_for_another_nonce_is_refused() {
    // A genuine TPM2_Certify by the enrolled AK of a key in this TPM, with its CSR, but made for
    // another attestation's nonce: before certify's extraData was checked, it passed beside this
    // quote. (The CSR key check itself is covered by the verifier's unit tests.)
    let rig = Rig::ready().await;
    let mut body = rig.body().await;
    let other = rig.body_for("agent", &rig.nonce(rig.device, "attestation").await, &[]);
    for member in ["certifyBlob", "certifySignature", "csrKeyPublic"] {
        body["evidence"][member] = other["evidence"][member].clone();
    }
    body["csr"] = other["csr"].clone();
    let res = rig.submit(body).await;
    assert_refused(&res, "certify_nonce_mismatch");
    assert_eq!(res.body["failures"].as_array().map(Vec::len), Some(1), "only the nonce is wrong: {}", res.body);
}

#[tokio::test]
async fn a_restricted_csr_key_is_refused() {
    let rig = Rig::ready().await;
    let nonce = rig.nonce(rig.device, "attestation").await;
    let attributes = "fixedtpm|fixedparent|sensitivedataorigin|userwithauth|sign|restricted";
    let body = rig.body_for("agent", &nonce, &["--key-attributes", attributes]);
    let res = rig.submit(body).await;
    assert_refused(&res, "bound_key_attributes_invalid");
    assert!(res.body["failures"].to_string().contains("restricted"), "{}", res.body);
}

#[tokio::test]
async fn a_csr_key_that_can_leave_the_tpm_is_refused() {
    let rig = Rig::ready().await;
    let nonce = rig.nonce(rig.device, "attestation").await;
    let body = rig.body_for("agent", &nonce, &["--key-attributes", "sensitivedataorigin|userwithauth|sign"]);
    let res = rig.submit(body).await;
    assert_refused(&res, "bound_key_attributes_invalid");
    assert!(res.body["failures"].to_string().contains("fixedTPM"), "{}", res.body);
}

// ---- secure boot -------------------------------------------------------------------------------

#[tokio::test]
async fn an_event_log_that_does_not_replay_to_the_quoted_pcrs_is_refused() {
    let rig = Rig::ready().await;
    let mut body = rig.body().await;
    // The log of another boot (secure boot off: other PCR 7 events) than the one measured.
    body["evidence"]["eventLog"] = json!(B64.encode(EventLog::firmware(false).bytes));
    assert_refused(&rig.submit(body).await, "eventlog_replay_mismatch");
}

#[tokio::test]
async fn secure_boot_disabled_is_refused() {
    let rig = Rig::start(EventLog::firmware(false)).await;
    rig.policy(json!({})).await;
    rig.enroll().await;
    assert_refused(&rig.submit(rig.body().await).await, "secure_boot_disabled");
}

// ---- policies ----------------------------------------------------------------------------------

#[tokio::test]
async fn a_disabled_policy_is_refused() {
    let rig = Rig::ready().await;
    let disabled = rig.policy(json!({ "name": "retired", "enabled": false })).await;
    let mut body = rig.body().await;
    body["policyId"] = json!(disabled);
    assert_refused(&rig.submit(body).await, "policy_disabled");
}

#[tokio::test]
async fn another_workspaces_policy_is_not_found() {
    let rig = Rig::ready().await;
    let (stranger, _) = rig.server.new_user("stranger@example.com").await;
    let theirs = stranger.post("/api/attestation/policies", json!({ "name": "theirs", "expectedPcrs": {} })).await;
    assert_eq!(theirs.status, 201, "{}", theirs.body);
    let mut body = rig.body().await;
    body["policyId"] = theirs.body["id"].clone();
    let res = rig.submit(body).await;
    assert_eq!((res.status, res.body.clone()), (404, json!({ "error": "Policy not found" })));
}

// ---- enrollment --------------------------------------------------------------------------------

#[tokio::test]
async fn an_ek_certificate_from_an_untrusted_vendor_is_refused() {
    let rig = Rig::launch(EventLog::firmware(true), false).await;
    rig.policy(json!({})).await;
    let device = rig.device.to_string();
    let chain = rig.tpm.intermediate_path().display().to_string();
    let answer = agent_refusal(&rig.agent("agent", &["enroll", "--device", &device, "--ek-chain", &chain]));
    assert_eq!(answer["error"], "enrollment_failed", "{answer}");
    assert!(has_failure(&answer, "ek_cert_untrusted:"), "{answer}");
}

#[tokio::test]
async fn an_ek_manufacturer_outside_the_policy_is_refused() {
    let rig = Rig::start(EventLog::firmware(true)).await;
    rig.policy(json!({ "allowedEkManufacturers": ["id:49465800"] })).await;
    let device = rig.device.to_string();
    let chain = rig.tpm.intermediate_path().display().to_string();
    let answer = agent_refusal(&rig.agent("agent", &["enroll", "--device", &device, "--ek-chain", &chain]));
    assert_eq!(answer["error"], "enrollment_failed", "{answer}");
    assert!(has_failure(&answer, "ek_manufacturer_not_allowed:"), "{answer}");
    let device = rig.admin.get(&format!("/api/iot/devices/{}", rig.device)).await.body["data"].clone();
    assert_eq!((device["status"].as_str(), device["akName"].is_null()), (Some("registered"), true), "{device}");
}

#[tokio::test]
async fn a_wrong_activation_secret_is_refused() {
    let rig = Rig::start(EventLog::firmware(true)).await;
    rig.policy(json!({})).await;
    let device = rig.device.to_string();
    let chain = rig.tpm.intermediate_path().display().to_string();
    let challenge = rig.agent_ok("agent", &["enroll", "--device", &device, "--ek-chain", &chain, "--challenge-only"]);
    assert!(challenge["credentialBlob"].is_string() && challenge["encryptedSecret"].is_string(), "{challenge}");
    let path = format!("/api/iot/devices/{}/enroll/activate", rig.device);
    let res = rig.admin.post(&path, json!({ "secret": B64.encode([7u8; 32]) })).await;
    assert_eq!((res.status, res.body["error"].as_str()), (403, Some("activation_failed")), "{}", res.body);
    let device = rig.admin.get(&format!("/api/iot/devices/{}", rig.device)).await.body["data"].clone();
    assert_eq!((device["status"].as_str(), device["akName"].is_null()), (Some("registered"), true), "{device}");
    // One try per challenge: the right secret no longer helps.
    let again = rig.admin.post(&path, json!({ "secret": B64.encode([7u8; 32]) })).await;
    assert_eq!(again.body["error"], "activation_failed", "{}", again.body);
}

/// `POST …/enroll` made by hand from the TPM's own parts (read with tpm2-tools), so that one of
/// them can be swapped: the EK certificate (DER), the EK and AK public areas (TPMT_PUBLIC).
async fn enroll_by_hand(rig: &Rig, ek_public: &[u8], ak_public: &[u8]) -> Response {
    let cert = rig.work.path().join("ek.der").display().to_string();
    rig.tpm.tpm2("tpm2_nvread", &["0x01c00002", "-o", &cert]);
    let nonce = rig.nonce(rig.device, "ak_enrollment").await;
    let body = json!({
        "nonce": nonce,
        "ekCertificate": B64.encode(std::fs::read(&cert).expect("EK certificate")),
        "ekChain": [std::fs::read_to_string(rig.tpm.intermediate_path()).expect("intermediate")],
        "ekPublic": B64.encode(ek_public),
        "akPublic": B64.encode(ak_public),
    });
    rig.admin.post(&format!("/api/iot/devices/{}/enroll", rig.device), body).await
}

/// The TPMT_PUBLIC of a persistent key (tpm2-tools writes TPM2B_PUBLIC: the size is dropped).
fn persistent_public(rig: &Rig, handle: &str) -> Vec<u8> {
    let path = rig.work.path().join(format!("{handle}.pub")).display().to_string();
    rig.tpm.tpm2("tpm2_readpublic", &["-c", handle, "-o", &path]);
    std::fs::read(&path).expect("public area")[2..].to_vec()
}

fn assert_enrollment_refused(res: &Response, code: &str) {
    assert_eq!((res.status, res.body["error"].as_str()), (403, Some("enrollment_failed")), "{}", res.body);
    assert!(has_failure(&res.body, &format!("{code}:")), "expected a `{code}:` failure: {}", res.body);
}

#[tokio::test]
async fn an_unrestricted_key_presented_as_the_ak_is_refused() {
    let rig = Rig::start(EventLog::firmware(true)).await;
    rig.policy(json!({})).await;
    // A TPM signing key that could sign anything (a forged TPMS_ATTEST included): the agent's
    // CSR key, made for a throwaway nonce, with an AK in its state to certify it.
    let device = rig.device.to_string();
    let chain = rig.tpm.intermediate_path().display().to_string();
    rig.agent_ok("agent", &["enroll", "--device", &device, "--ek-chain", &chain, "--challenge-only"]);
    let out = rig.work.path().join("key");
    rig.agent_ok(
        "agent",
        &["evidence", "--nonce", &"00".repeat(32), "--cn", "x.example.com", "--out", &out.display().to_string()],
    );
    let unrestricted = std::fs::read(out.join("key.pub")).expect("key.pub")[2..].to_vec();
    let res = enroll_by_hand(&rig, &persistent_public(&rig, "0x81010001"), &unrestricted).await;
    assert_enrollment_refused(&res, "ak_attributes_invalid");
    assert!(res.body["failures"].to_string().contains("restricted"), "{}", res.body);
}

#[tokio::test]
async fn an_ek_certificate_of_another_ek_is_refused() {
    let rig = Rig::start(EventLog::firmware(true)).await;
    rig.policy(json!({})).await;
    let device = rig.device.to_string();
    let chain = rig.tpm.intermediate_path().display().to_string();
    rig.agent_ok("agent", &["enroll", "--device", &device, "--ek-chain", &chain, "--challenge-only"]);
    let ak = std::fs::read(rig.work.path().join("agent/ak.pub")).expect("ak.pub")[2..].to_vec();
    // The RSA EK's certificate with the TPM's other EK (ECC P-384, persisted at 0x81010016).
    let res = enroll_by_hand(&rig, &persistent_public(&rig, "0x81010016"), &ak).await;
    assert_enrollment_refused(&res, "ek_public_mismatch");
    // The matching EK passes the same route (the refusal was the mismatch, nothing else).
    let ok = enroll_by_hand(&rig, &persistent_public(&rig, "0x81010001"), &ak).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert!(ok.body["credentialBlob"].is_string(), "{}", ok.body);
}

// ---- the TPM's clock -----------------------------------------------------------------------------

#[tokio::test]
async fn an_older_quote_after_a_newer_one_is_refused() {
    let rig = Rig::ready().await;
    let older = rig.body().await;
    let newer = rig.body().await;
    let res = rig.submit(newer).await;
    assert_eq!(res.status, 200, "{}", res.body);
    // Both nonces were fresh, but the TPM's clock in the older quote goes back against the
    // device's last attestation.
    assert_refused(&rig.submit(older).await, "clock_regression");
}

#[tokio::test]
async fn a_tpm_reset_between_attestations_is_accepted() {
    let rig = Rig::ready().await;
    let res = rig.submit(rig.body().await).await;
    assert_eq!(res.status, 200, "{}", res.body);
    // A reboot: TPM2_Init and Startup(CLEAR) (resetCount + 1, restartCount and PCRs back to 0,
    // the clock may restart), then the same firmware measured again.
    // An orderly one: the OS sends TPM2_Shutdown(CLEAR) first, so the clock stays safe.
    rig.tpm.tpm2("tpm2_shutdown", &["-c"]);
    power_cycle(&rig);
    let res = rig.submit(rig.body().await).await;
    assert_eq!(res.status, 200, "{}", res.body);
}

/// TPM2_Init and Startup(CLEAR) on the rig's swtpm, then the same firmware measured again.
fn power_cycle(rig: &Rig) {
    let ctrl = format!("127.0.0.1:{}", rig.tpm.port + 1);
    let init = Command::new("swtpm_ioctl").args(["--tcp", &ctrl, "-i"]).output().expect("swtpm_ioctl (swtpm-tools)");
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    rig.tpm.tpm2("tpm2_startup", &["-c"]);
    rig.tpm.extend(&rig.boot);
}

#[tokio::test]
async fn a_quote_after_a_power_loss_is_refused_for_its_unsafe_clock() {
    let rig = Rig::ready().await;
    let res = rig.submit(rig.body().await).await;
    assert_eq!(res.status, 200, "{}", res.body);
    // No TPM2_Shutdown before the reset: clockInfo.safe is NO, the clock may have gone back
    // past a value already reported, so the quote cannot be ordered against the last one.
    power_cycle(&rig);
    let res = rig.submit(rig.body().await).await;
    assert_refused(&res, "clock_not_safe");
}

// ---- issue 21, finding 1: what a device key cannot change ------------------------------------

/// Enrollment pins the first EK: another enrollment must come from the same TPM (a new AK is
/// fine) until an owner resets the device's enrollment, which is audited.
#[tokio::test]
async fn enrollment_pins_the_first_ek_until_an_owner_resets_it() {
    let rig = Rig::ready().await;
    let ak = std::fs::read(rig.work.path().join("agent/ak.pub")).expect("ak.pub")[2..].to_vec();
    // The TPM's other EK (ECC P-384): refused for being another EK before anything else is judged.
    let other = enroll_by_hand(&rig, &persistent_public(&rig, "0x81010016"), &ak).await;
    assert_enrollment_refused(&other, "ek_changed");
    assert!(other.body["failures"].to_string().contains("reset-enrollment"), "says what to do: {}", other.body);
    let same = enroll_by_hand(&rig, &persistent_public(&rig, "0x81010001"), &ak).await;
    assert_eq!(same.status, 200, "the same EK may enroll again: {}", same.body);
    let reset = rig.admin.post(&format!("/api/iot/devices/{}/reset-enrollment", rig.device), json!({})).await;
    assert_eq!(reset.status, 200, "{}", reset.body);
    assert_eq!(
        (reset.body["data"]["status"].as_str(), reset.body["data"]["akName"].is_null()),
        (Some("registered"), true)
    );
    // Unpinned: the other EK is now judged on its own (its certificate is the RSA EK's).
    let judged = enroll_by_hand(&rig, &persistent_public(&rig, "0x81010016"), &ak).await;
    assert_enrollment_refused(&judged, "ek_public_mismatch");
}

/// A device may name its policy, never one written for another kind of device.
#[tokio::test]
async fn a_named_policy_must_apply_to_the_device_type() {
    let rig = Rig::ready().await;
    let camera_policy = rig.policy(json!({ "name": "cameras", "deviceType": "camera" })).await;
    let mut body = rig.body().await;
    body["policyId"] = json!(camera_policy);
    assert_refused(&rig.submit(body).await, "policy_not_applicable");
    assert_eq!(rig.admin.get("/api/certificates").await.body["total"], 0, "nothing was issued");
}
