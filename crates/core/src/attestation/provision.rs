//! Attestation-gated issuance (`attest-and-provision`, spec §4.3), the ungated record endpoints
//! (`attest`, `attest-tpm`) and the device's attestation history.
//!
//! attest-and-provision, in order: required members (400 `missing_field` naming it) → the
//! nonce (consumed exactly once; the §3.4 refusals) → device state and enrollment → the policy
//! (an explicit `policyId` wins, else the first enabled policy whose `deviceType` matches) →
//! the evidence and CSR decoded → the verifier plugin → issuance through the CA, template and
//! issuance policies. From the nonce on, every failure is recorded (`trustScore` 0) and emits
//! `attestation.failed`; a verifier refusal is 403 `attestation_failed` with its `failures`.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::AttestationDeps;
use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::error::{Error, Result};
use crate::events::{AttestationFailed, Event};
use crate::issuance::{self, IssueInput, Issued};
use crate::plugins::{
    BoundCsr, CallTarget, EnrolledDevice, Evidence, PcrValue, PluginRef, Tpm2Certification, Tpm2Evidence, Verdict,
    VerifyRequest,
};
use crate::unit_of_work::Target;
use trellis_pki::x509::pem_encode;

use super::devices::{self, Device, ATTESTED, DISABLED, FAILED};
use super::policies::{self, Policy, BANKS};
use super::{base64_member, nonces, AttestationError, TPM2};

pub const KIND_PROVISION: &str = "provision";
pub const KIND_TPM: &str = "tpm";
pub const KIND_RECORDED: &str = "recorded";

/// A stored attestation (spec §2.6).
#[derive(Debug, Clone, PartialEq)]
pub struct AttestationRecord {
    pub id: i64,
    pub workspace_id: String,
    pub device_id: i64,
    /// `provision` (attest-and-provision), `tpm` (attest-tpm), `recorded` (attest).
    pub kind: String,
    pub policy_id: Option<i64>,
    pub passed: bool,
    pub trust_score: i64,
    pub failures: Vec<String>,
    /// Bank → index → hex, as `expectedPcrs`.
    pub verified_pcrs: Value,
    pub ek_manufacturer: Option<String>,
    pub certificate_id: Option<i64>,
    pub nonce: Option<String>,
    pub claims: Value,
    pub created_at: i64,
}

impl AttestationRecord {
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "deviceId": self.device_id,
            "kind": self.kind,
            "policyId": self.policy_id,
            "passed": self.passed,
            "trustScore": self.trust_score,
            "failures": self.failures,
            "verifiedPcrs": self.verified_pcrs,
            "ekManufacturer": self.ek_manufacturer,
            "certificateId": self.certificate_id,
            "nonce": self.nonce,
            "claims": self.claims,
            "createdAt": crate::clock::rfc3339(self.created_at),
        })
    }
}

/// The attest-and-provision body.
#[derive(Debug, Default, Clone)]
pub struct ProvisionInput {
    /// Integer or numeric string.
    pub ca_id: Option<Value>,
    pub template_id: Option<String>,
    pub csr: Option<String>,
    pub validity_days: Option<i64>,
    pub policy_id: Option<i64>,
    pub evidence: Option<Value>,
}

/// A successful attest-and-provision.
#[derive(Debug, Clone)]
pub struct Provisioned {
    pub issued: Issued,
    pub policy_id: i64,
    pub verified_pcrs: Value,
    pub ek_manufacturer: Option<String>,
}

/// `[{bank, index, digest}]` as `{bank: {index: hex}}`.
pub fn pcr_map(values: &[PcrValue]) -> Value {
    let mut map: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for v in values {
        map.entry(v.bank.clone()).or_default().insert(v.index.to_string(), hex::encode(&v.digest));
    }
    json!(map)
}

fn member<'a>(evidence: &'a Value, name: &str) -> Option<&'a str> {
    evidence.get(name).and_then(Value::as_str).filter(|s| !s.trim().is_empty())
}

/// The evidence object of docs/api.md decoded for the verifier.
fn decode_evidence(evidence: &Value) -> std::result::Result<Tpm2Evidence, AttestationError> {
    let bytes = |name: &str| -> std::result::Result<Option<Vec<u8>>, AttestationError> {
        member(evidence, name).map(|text| base64_member(&format!("evidence.{name}"), text)).transpose()
    };
    let quote = bytes("quoteBlob")?.ok_or_else(|| AttestationError::MissingField("evidence.quoteBlob".into()))?;
    let quote_signature =
        bytes("quoteSignature")?.ok_or_else(|| AttestationError::MissingField("evidence.quoteSignature".into()))?;
    let mut pcrs = Vec::new();
    match evidence.get("pcrs") {
        None | Some(Value::Null) => return Err(AttestationError::MissingField("evidence.pcrs".into())),
        Some(Value::Object(banks)) => {
            for (bank, values) in banks {
                let size =
                    BANKS.iter().find(|(name, _)| name == bank).map(|(_, s)| *s).ok_or_else(|| {
                        AttestationError::invalid(&format!("evidence.pcrs.{bank}"), "is not a PCR bank")
                    })?;
                let values = values.as_object().ok_or_else(|| {
                    AttestationError::invalid(&format!("evidence.pcrs.{bank}"), "must map indexes to hex digests")
                })?;
                for (index, digest) in values {
                    let field = format!("evidence.pcrs.{bank}.{index}");
                    let index: u32 = index
                        .parse()
                        .ok()
                        .filter(|i| *i <= 23)
                        .ok_or_else(|| AttestationError::invalid(&field, "PCR indexes are 0 to 23"))?;
                    let digest = digest
                        .as_str()
                        .and_then(|h| hex::decode(h.trim()).ok())
                        .filter(|d| d.len() == size)
                        .ok_or_else(|| {
                        AttestationError::invalid(&field, format!("must be a {size}-byte digest in hex"))
                    })?;
                    pcrs.push(PcrValue { bank: bank.clone(), index, digest });
                }
            }
        }
        Some(_) => {
            return Err(AttestationError::invalid("evidence.pcrs", "must be {\"SHA256\": {\"0\": \"<hex>\", …}}"))
        }
    }
    let certification = match (bytes("certifyBlob")?, bytes("certifySignature")?, bytes("csrKeyPublic")?) {
        (None, None, None) => None,
        (Some(attest), Some(signature), Some(certified_key_public)) => {
            Some(Tpm2Certification { attest, signature, certified_key_public })
        }
        _ => {
            return Err(AttestationError::invalid(
                "evidence.certifyBlob",
                "certifyBlob, certifySignature and csrKeyPublic come together",
            ))
        }
    };
    Ok(Tpm2Evidence { quote, quote_signature, pcrs, certification, event_log: bytes("eventLog")? })
}

/// The CSR (PEM), signature verified, as the verifier gets it.
/// The CSR the verifier checks against TPM2_Certify, read by the one CSR reader issuance uses.
fn bound_csr(pem: &str) -> std::result::Result<BoundCsr, AttestationError> {
    let csr = trellis_pki::csr::parse_pem(pem).map_err(|err| AttestationError::invalid("csr", err.to_string()))?;
    Ok(BoundCsr { der: csr.der, public_key: csr.public_key_info })
}

fn choose_policy(all: Vec<Policy>, explicit: Option<i64>, device: &Device) -> std::result::Result<Policy, Error> {
    if let Some(id) = explicit {
        let policy = all.into_iter().find(|p| p.id == id).ok_or(AttestationError::PolicyNotFound)?;
        if !policy.enabled {
            return Err(AttestationError::Failed(vec![format!("policy_disabled: policy {id} is disabled")]).into());
        }
        // A device may name a policy, never one written for another kind of device.
        if !policy.matches(device.device_type.as_deref()) {
            return Err(AttestationError::Failed(vec![format!(
                "policy_not_applicable: policy {id} does not apply to device type {}",
                device.device_type.as_deref().unwrap_or("(none)")
            )])
            .into());
        }
        return Ok(policy);
    }
    all.into_iter().find(|p| p.enabled && p.matches(device.device_type.as_deref())).ok_or_else(|| {
        AttestationError::Failed(vec![format!(
            "no_policy: no enabled attestation policy applies to device type {}",
            device.device_type.as_deref().unwrap_or("(none)")
        )])
        .into()
    })
}

async fn verify(
    ctx: &AttestationDeps,
    caller: &Caller,
    device: &Device,
    policy: &Policy,
    evidence: Tpm2Evidence,
    nonce: &nonces::Nonce,
    csr: Option<BoundCsr>,
) -> Result<Verdict> {
    let (Some(ak_public), Some(ak_name)) = (device.ak_public.clone(), device.ak_name.clone()) else {
        return Err(AttestationError::Failed(vec![
            "device_not_enrolled: enroll the device's attestation key first (POST …/enroll)".into(),
        ])
        .into());
    };
    let request = VerifyRequest {
        evidence: Evidence::Tpm2(evidence),
        policy: policy.to_json(),
        nonce: hex::decode(&nonce.nonce).unwrap_or_default(),
        nonce_issued_at: nonce.issued_at / 1000,
        now: ctx.now_millis() / 1000,
        device: EnrolledDevice {
            ak_public,
            ak_name,
            ek_certificate: device.ek_certificate.clone(),
            ek_chain: device.ek_chain.clone(),
            last_clock: device.last_clock,
        },
        csr,
        trust_anchors: super::trust::anchors(ctx, &caller.workspace_id).await?,
    };
    let mut target = CallTarget::new(&caller.workspace_id, PluginRef::Serving(TPM2.into()), json!({}))
        .for_record(&device.id.to_string());
    target.context.request_id = caller.request_id.clone();
    Ok(ctx.plugins.host().verify(&target, &request).await?.normalized())
}

fn failure_strings(err: &Error) -> Vec<String> {
    match err.area::<AttestationError>() {
        Some(AttestationError::Failed(failures)) => failures.clone(),
        Some(other) => vec![format!("{}: {}", other.code(), attestation_detail(other))],
        None => vec![format!("{}: {err}", err.code().to_ascii_lowercase())],
    }
}

fn attestation_detail(err: &AttestationError) -> String {
    match err {
        AttestationError::MissingField(field) => format!("{field} is required"),
        AttestationError::InvalidRequest { field, message } => format!("{field} {message}"),
        other => other.to_string(),
    }
}

/// Records a failed attestation (trust 0) with its `attestation.failed` event.
async fn record_failure(
    ctx: &AttestationDeps,
    caller: &Caller,
    device_id: i64,
    kind: &str,
    policy_id: Option<i64>,
    nonce: Option<&str>,
    failures: Vec<String>,
) -> Result<()> {
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let at = change.at();
    let record = AttestationRecord {
        id: 0,
        workspace_id: caller.workspace_id.to_string(),
        device_id,
        kind: kind.into(),
        policy_id,
        passed: false,
        trust_score: 0,
        failures: failures.clone(),
        verified_pcrs: json!({}),
        ek_manufacturer: None,
        certificate_id: None,
        nonce: nonce.map(str::to_owned),
        claims: json!({}),
        created_at: at,
    };
    let record = change.tx().insert_attestation_record(&record).await?;
    change.tx().set_device_attestation(&caller.workspace_id, device_id, FAILED, at, None).await?;
    let event =
        Event::AttestationFailed(AttestationFailed { device_id, attestation_id: record.id, policy_id, failures });
    change.audit("attestation.failed", Target::new("device", device_id), event.data()?).emit(event);
    change.commit().await?;
    metrics::counter!("trellis_attestations_total", "kind" => kind.to_owned(), "outcome" => "failed").increment(1);
    Ok(())
}

/// `POST /api/iot/devices/{id}/attest-and-provision`.
pub async fn attest_and_provision(
    ctx: &AttestationDeps,
    caller: &Caller,
    device_id: i64,
    input: ProvisionInput,
) -> Result<Provisioned> {
    caller.require(Scope::AttestationWrite)?;
    let device = devices::find(ctx, &caller.workspace_id, device_id).await?;
    let missing = |field: &str| Error::from(AttestationError::MissingField(field.into()));
    let ca_id = input.ca_id.filter(|v| !v.is_null()).ok_or_else(|| missing("caId"))?;
    let template_id = input.template_id.filter(|t| !t.trim().is_empty()).ok_or_else(|| missing("templateId"))?;
    let csr_pem = input.csr.filter(|c| !c.trim().is_empty()).ok_or_else(|| missing("csr"))?;
    let evidence = input.evidence.filter(Value::is_object).ok_or_else(|| missing("evidence"))?;
    let nonce_text = member(&evidence, "nonce").ok_or_else(|| missing("evidence.nonce"))?.to_owned();
    member(&evidence, "quoteBlob").ok_or_else(|| missing("evidence.quoteBlob"))?;
    let ca_id = match &ca_id {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    }
    .filter(|id| *id > 0)
    .ok_or_else(|| Error::from(AttestationError::invalid("caId", "must be a CA id (integer)")))?;
    let validity_days = input
        .validity_days
        .map(|d| u32::try_from(d).ok().filter(|d| (1..=3650).contains(d)))
        .map(|d| d.ok_or_else(|| Error::from(AttestationError::invalid("validityDays", "must be 1 to 3650"))))
        .transpose()?;
    let nonce = nonces::consume(ctx, &caller.workspace_id, device_id, &nonce_text, nonces::ATTESTATION).await?;

    let mut policy_id = input.policy_id;
    let attempt = async {
        if device.status == DISABLED {
            return Err(AttestationError::Failed(vec!["device_disabled: the device is disabled".into()]).into());
        }
        let policy =
            choose_policy(ctx.store.list_attestation_policies(&caller.workspace_id).await?, input.policy_id, &device)?;
        policy_id = Some(policy.id);
        if device.ak_name.is_none() {
            return Err(AttestationError::Failed(vec![
                "device_not_enrolled: enroll the device's attestation key first (POST …/enroll)".into(),
            ])
            .into());
        }
        let evidence = decode_evidence(&evidence)?;
        let csr = bound_csr(&csr_pem)?;
        // Issuance gets the very DER the verifier checked, re-encoded, never the text again.
        let csr_pem = pem_encode("CERTIFICATE REQUEST", &csr.der);
        let verdict = verify(ctx, caller, &device, &policy, evidence, &nonce, Some(csr)).await?;
        if !verdict.passed {
            let failures = verdict.failures.iter().map(|f| format!("{}: {}", f.code, f.message)).collect();
            return Err(AttestationError::Failed(failures).into());
        }
        let issue = IssueInput {
            ca_id: Some(ca_id),
            csr: Some(csr_pem),
            template_id: Some(template_id.clone()),
            validity_days,
            ..IssueInput::default()
        };
        let issued = issuance::issue_attested(&ctx.issuance, caller, issue).await?;
        Ok::<_, Error>((policy, verdict, issued))
    }
    .await;
    let (policy, verdict, issued) = match attempt {
        Ok(done) => done,
        Err(err) => {
            record_failure(
                ctx,
                caller,
                device_id,
                KIND_PROVISION,
                policy_id,
                Some(&nonce.nonce),
                failure_strings(&err),
            )
            .await?;
            return Err(err);
        }
    };
    let verified_pcrs = pcr_map(&verdict.verified_pcrs);
    let ek_manufacturer = verdict.ek_manufacturer.clone().or_else(|| device.ek_manufacturer.clone());
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let at = change.at();
    let record = AttestationRecord {
        id: 0,
        workspace_id: caller.workspace_id.to_string(),
        device_id,
        kind: KIND_PROVISION.into(),
        policy_id: Some(policy.id),
        passed: true,
        trust_score: i64::from(verdict.trust_score),
        failures: Vec::new(),
        verified_pcrs: verified_pcrs.clone(),
        ek_manufacturer: ek_manufacturer.clone(),
        certificate_id: Some(issued.certificate.id),
        nonce: Some(nonce.nonce.clone()),
        claims: json!({}),
        created_at: at,
    };
    let record = change.tx().insert_attestation_record(&record).await?;
    change.tx().set_device_attestation(&caller.workspace_id, device_id, ATTESTED, at, verdict.clock).await?;
    change.audit(
        "attestation.passed",
        Target::new("device", device_id),
        json!({ "attestationId": record.id, "policyId": policy.id, "certificateId": issued.certificate.id }),
    );
    change.commit().await?;
    metrics::counter!("trellis_attestations_total", "kind" => KIND_PROVISION, "outcome" => "passed").increment(1);
    Ok(Provisioned { issued, policy_id: policy.id, verified_pcrs, ek_manufacturer })
}

/// `POST /api/iot/devices/{id}/attest-tpm`: runs the nonce rules and (when the device is enrolled
/// and a policy applies) the verifier, and records the result without issuing or refusing.
pub async fn attest_tpm(
    ctx: &AttestationDeps,
    caller: &Caller,
    device_id: i64,
    policy_id: Option<i64>,
    evidence: Option<Value>,
) -> Result<AttestationRecord> {
    caller.require(Scope::AttestationWrite)?;
    let device = devices::find(ctx, &caller.workspace_id, device_id).await?;
    let evidence =
        evidence.filter(Value::is_object).ok_or_else(|| AttestationError::MissingField("evidence".into()))?;
    let nonce_text =
        member(&evidence, "nonce").ok_or_else(|| AttestationError::MissingField("evidence.nonce".into()))?.to_owned();
    member(&evidence, "quoteBlob").ok_or_else(|| AttestationError::MissingField("evidence.quoteBlob".into()))?;
    let decoded = decode_evidence(&evidence)?;
    let nonce = nonces::consume(ctx, &caller.workspace_id, device_id, &nonce_text, nonces::ATTESTATION).await?;
    let mut chosen = None;
    let outcome = async {
        let policy =
            choose_policy(ctx.store.list_attestation_policies(&caller.workspace_id).await?, policy_id, &device)?;
        chosen = Some(policy.id);
        verify(ctx, caller, &device, &policy, decoded, &nonce, None).await
    }
    .await;
    let (passed, trust, failures, pcrs, manufacturer, clock) = match outcome {
        Ok(v) => (
            v.passed,
            i64::from(v.trust_score),
            v.failures.iter().map(|f| format!("{}: {}", f.code, f.message)).collect(),
            pcr_map(&v.verified_pcrs),
            v.ek_manufacturer,
            v.clock,
        ),
        Err(err) if err.area::<AttestationError>() == Some(&AttestationError::PolicyNotFound) => return Err(err),
        Err(err) => (false, 0, failure_strings(&err), json!({}), None, None),
    };
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let at = change.at();
    let record = AttestationRecord {
        id: 0,
        workspace_id: caller.workspace_id.to_string(),
        device_id,
        kind: KIND_TPM.into(),
        policy_id: chosen,
        passed,
        trust_score: trust,
        failures,
        verified_pcrs: pcrs,
        ek_manufacturer: manufacturer,
        certificate_id: None,
        nonce: Some(nonce.nonce.clone()),
        claims: json!({}),
        created_at: at,
    };
    let record = change.tx().insert_attestation_record(&record).await?;
    if passed {
        change.tx().set_device_attestation(&caller.workspace_id, device_id, ATTESTED, at, clock).await?;
    }
    change.audit(
        "attestation.recorded",
        Target::new("device", device_id),
        json!({ "attestationId": record.id, "passed": passed }),
    );
    change.commit().await?;
    Ok(record)
}

/// `POST /api/iot/devices/{id}/attest`: records an attestation made elsewhere (another
/// verifier, a manual inspection); never gates anything. `passed` is required; `trustScore`
/// (0–100) defaults to 100 when passed and is 0 when not.
pub async fn attest(ctx: &AttestationDeps, caller: &Caller, device_id: i64, body: &Value) -> Result<AttestationRecord> {
    caller.require(Scope::AttestationWrite)?;
    devices::find(ctx, &caller.workspace_id, device_id).await?;
    let passed =
        body.get("passed").and_then(Value::as_bool).ok_or_else(|| AttestationError::MissingField("passed".into()))?;
    let trust = match body.get("trustScore") {
        None | Some(Value::Null) => 100,
        Some(v) => v
            .as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..=100.0).contains(f))
            .map(|f| f as i64)
            .ok_or_else(|| AttestationError::invalid("trustScore", "must be an integer from 0 to 100"))?,
    };
    let trust = if passed { trust } else { 0 };
    let failures: Vec<String> = match body.get("failures") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) if items.len() <= 100 => items
            .iter()
            .map(|i| i.as_str().filter(|s| s.len() <= 500).map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| AttestationError::invalid("failures", "must be strings of at most 500 characters"))?,
        Some(_) => return Err(AttestationError::invalid("failures", "must be a list of strings").into()),
    };
    let claims = match body.get("claims") {
        None | Some(Value::Null) => json!({}),
        Some(v @ Value::Object(_)) if v.to_string().len() <= 16 * 1024 => v.clone(),
        Some(_) => return Err(AttestationError::invalid("claims", "must be an object of at most 16 KiB").into()),
    };
    let policy_id = match body.get("policyId") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            policies::find(ctx, &caller.workspace_id, v.as_i64().ok_or(AttestationError::PolicyNotFound)?).await?.id,
        ),
    };
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let record = AttestationRecord {
        id: 0,
        workspace_id: caller.workspace_id.to_string(),
        device_id,
        kind: KIND_RECORDED.into(),
        policy_id,
        passed,
        trust_score: trust,
        failures,
        verified_pcrs: json!({}),
        ek_manufacturer: None,
        certificate_id: None,
        nonce: None,
        claims,
        created_at: change.at(),
    };
    let record = change.tx().insert_attestation_record(&record).await?;
    change.audit(
        "attestation.recorded",
        Target::new("device", device_id),
        json!({ "attestationId": record.id, "passed": passed }),
    );
    change.commit().await?;
    Ok(record)
}

/// The device's attestations, newest first.
pub async fn history(
    ctx: &AttestationDeps,
    caller: &Caller,
    device_id: i64,
    limit: i64,
) -> Result<Vec<AttestationRecord>> {
    caller.require(Scope::AttestationRead)?;
    devices::find(ctx, &caller.workspace_id, device_id).await?;
    Ok(ctx.store.list_attestation_records(&caller.workspace_id, device_id, limit.clamp(1, 100)).await?)
}
