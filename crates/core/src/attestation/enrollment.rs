//! AK enrollment (TPM2_MakeCredential / TPM2_ActivateCredential), in two calls:
//!
//! 1. `POST /api/iot/devices/{id}/enroll` with a nonce of purpose `ak_enrollment`, the EK
//!    certificate (and any intermediates), the EK public area and the AK public area. The
//!    verifier plugin checks the EK chain against the workspace's trust roots, the EK
//!    certificate against the EK public area, the manufacturer against the policy, and the AK's
//!    attributes; it wraps a 32-byte secret the host drew in a credential-activation challenge
//!    for that EK and AK name. The host keeps only the secret's SHA-256, for 5 minutes.
//! 2. `POST /api/iot/devices/{id}/enroll/activate` with the secret the device's TPM recovered
//!    (TPM2_ActivateCredential succeeds only in the TPM holding that EK, for an AK with that
//!    name). One try: the pending enrollment is taken whatever the answer. A match binds the AK
//!    to the device; only evidence signed by it is accepted afterwards.

use serde_json::json;
use sha2::{Digest, Sha256};

use super::AttestationDeps;
use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::error::Result;
use crate::plugins::{CallTarget, EnrollmentRequest, PluginRef};
use crate::unit_of_work::Target;

use super::devices::{self, Device, DISABLED, ENROLLED};
use super::{base64_member, nonces, AttestationError, TPM2};

/// How long a challenge waits for the device's answer.
pub const ACTIVATION_WINDOW_MS: i64 = 5 * 60 * 1000;

/// The enrollment request body.
#[derive(Debug, Default, Clone)]
pub struct EnrollmentInput {
    pub nonce: Option<String>,
    /// DER (base64) or PEM.
    pub ek_certificate: Option<String>,
    pub ek_chain: Vec<String>,
    /// TPMT_PUBLIC, base64.
    pub ek_public: Option<String>,
    pub ak_public: Option<String>,
}

/// A pending enrollment (stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingEnrollment {
    pub device_id: i64,
    pub workspace_id: String,
    pub secret_sha256: String,
    pub ak_public: Vec<u8>,
    pub ak_name: Vec<u8>,
    pub ek_public: Vec<u8>,
    pub ek_certificate: Option<Vec<u8>>,
    pub ek_chain: Vec<Vec<u8>>,
    pub ek_manufacturer: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
}

/// What the device passes to TPM2_ActivateCredential.
#[derive(Debug, Clone)]
pub struct Challenge {
    pub credential_blob: Vec<u8>,
    pub encrypted_secret: Vec<u8>,
    pub ak_name: Vec<u8>,
    pub ek_manufacturer: Option<String>,
    pub expires_at: i64,
}

fn required(field: &str, value: Option<String>) -> std::result::Result<String, AttestationError> {
    value.filter(|v| !v.trim().is_empty()).ok_or_else(|| AttestationError::MissingField(field.to_owned()))
}

/// Step 1: checks EK and AK through the verifier plugin and returns the activation challenge.
pub async fn start(
    ctx: &AttestationDeps,
    caller: &Caller,
    device_id: i64,
    input: EnrollmentInput,
) -> Result<Challenge> {
    caller.require(Scope::AttestationWrite)?;
    let device = devices::find(ctx, &caller.workspace_id, device_id).await?;
    let nonce = required("nonce", input.nonce)?;
    let ek_public = base64_member("ekPublic", &required("ekPublic", input.ek_public)?)?;
    let ak_public = base64_member("akPublic", &required("akPublic", input.ak_public)?)?;
    let ek_certificate = input
        .ek_certificate
        .filter(|c| !c.trim().is_empty())
        .map(|c| super::certificate_der("ekCertificate", &c))
        .transpose()?;
    let ek_chain = input
        .ek_chain
        .iter()
        .map(|c| super::certificate_der("ekChain", c))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if ek_chain.len() > 8 {
        return Err(AttestationError::invalid("ekChain", "at most 8 intermediates").into());
    }
    nonces::consume(ctx, &caller.workspace_id, device_id, &nonce, nonces::AK_ENROLLMENT).await?;
    if device.status == DISABLED {
        return Err(AttestationError::EnrollmentFailed(vec!["device_disabled: the device is disabled".into()]).into());
    }
    check_pinned_ek(&device, &ek_public)?;
    let policy = ctx
        .store
        .list_attestation_policies(&caller.workspace_id)
        .await?
        .into_iter()
        .find(|p| p.enabled && p.matches(device.device_type.as_deref()));
    let mut secret = vec![0u8; 32];
    ctx.entropy.fill(&mut secret);
    let mut entropy = vec![0u8; 64];
    ctx.entropy.fill(&mut entropy);
    let request = EnrollmentRequest {
        ek_certificate: ek_certificate.clone(),
        ek_chain: ek_chain.clone(),
        ek_public: ek_public.clone(),
        ak_public: ak_public.clone(),
        trust_anchors: super::trust::anchors(ctx, &caller.workspace_id).await?,
        policy: policy.as_ref().map(|p| p.to_json()),
        secret: secret.clone(),
        entropy,
        now: ctx.now_millis() / 1000,
    };
    let mut target = CallTarget::new(&caller.workspace_id, PluginRef::Serving(TPM2.into()), json!({}))
        .for_record(&device_id.to_string());
    target.context.request_id = caller.request_id.clone();
    let verdict = ctx.plugins.host().verifier_enroll(&target, &request).await?.normalized();
    let at = ctx.now_millis();
    if !verdict.passed {
        let failures: Vec<String> = verdict.failures.iter().map(|f| format!("{}: {}", f.code, f.message)).collect();
        let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
        change.audit("device.enrollment_failed", Target::new("device", device_id), json!({ "failures": failures }));
        change.commit().await?;
        return Err(AttestationError::EnrollmentFailed(failures).into());
    }
    let (Some(ak_name), Some(challenge)) = (verdict.ak_name, verdict.challenge) else {
        return Err(AttestationError::EnrollmentFailed(vec!["verifier_incomplete: no challenge".into()]).into());
    };
    let pending = PendingEnrollment {
        device_id,
        workspace_id: caller.workspace_id.to_string(),
        secret_sha256: hex::encode(Sha256::digest(&secret)),
        ak_public,
        ak_name: ak_name.clone(),
        ek_public,
        ek_certificate,
        ek_chain,
        ek_manufacturer: verdict.ek_manufacturer.clone(),
        created_at: at,
        expires_at: at + ACTIVATION_WINDOW_MS,
    };
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    change.tx().put_enrollment(&pending).await?;
    change.audit(
        "device.enrollment_started",
        Target::new("device", device_id),
        json!({ "akName": hex::encode(&ak_name), "ekManufacturer": verdict.ek_manufacturer }),
    );
    change.commit().await?;
    Ok(Challenge {
        credential_blob: challenge.credential_blob,
        encrypted_secret: challenge.encrypted_secret,
        ak_name,
        ek_manufacturer: pending.ek_manufacturer,
        expires_at: pending.expires_at,
    })
}

/// The first enrollment pins the device's EK: a later one (a new AK) must come from the same
/// TPM, so a device key cannot move the device to a TPM of its choosing. Only a manager's
/// audited reset (`devices::reset_enrollment`) unpins it.
fn check_pinned_ek(device: &devices::Device, ek_public: &[u8]) -> Result<()> {
    match device.ek_public.as_deref() {
        Some(pinned) if pinned != ek_public => Err(AttestationError::EnrollmentFailed(vec![
            "ek_changed: the device is enrolled with another endorsement key; an owner must reset its \
             enrollment (POST /api/iot/devices/{id}/reset-enrollment) before it can enroll another TPM"
                .into(),
        ])
        .into()),
        _ => Ok(()),
    }
}

/// Step 2: the device's recovered secret; a match binds the AK.
pub async fn activate(
    ctx: &AttestationDeps,
    caller: &Caller,
    device_id: i64,
    secret: Option<String>,
) -> Result<Device> {
    caller.require(Scope::AttestationWrite)?;
    let mut device = devices::find(ctx, &caller.workspace_id, device_id).await?;
    let secret = base64_member("secret", &required("secret", secret)?)?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let at = change.at();
    let pending = change.tx().take_enrollment(&caller.workspace_id, device_id).await?;
    let refusal = match &pending {
        None => Some("no enrollment is waiting for this device; start one with POST …/enroll"),
        Some(p) if p.expires_at <= at => Some("the enrollment challenge expired; start again"),
        Some(p) => {
            let digest = hex::encode(Sha256::digest(&secret));
            (!crate::crypto::constant_time_eq(digest.as_bytes(), p.secret_sha256.as_bytes()))
                .then_some("the secret does not match the challenge")
        }
    };
    if let Some(reason) = refusal {
        change.audit("device.activation_failed", Target::new("device", device_id), json!({ "reason": reason }));
        change.commit().await?;
        return Err(AttestationError::ActivationFailed(reason.into()).into());
    }
    let Some(pending) = pending else {
        return Err(AttestationError::ActivationFailed("no enrollment".into()).into());
    };
    // Re-checked here: the device may have been enrolled by another challenge meanwhile.
    check_pinned_ek(&device, &pending.ek_public)?;
    device.ak_public = Some(pending.ak_public);
    device.ak_name = Some(pending.ak_name);
    device.ek_public = Some(pending.ek_public);
    device.ek_certificate = pending.ek_certificate;
    device.ek_chain = pending.ek_chain;
    device.ek_manufacturer = pending.ek_manufacturer;
    device.last_clock = None;
    device.enrolled_at = Some(at);
    device.status = ENROLLED;
    device.updated_at = at;
    change.tx().update_device(&device).await?;
    change.audit(
        "device.enrolled",
        Target::new("device", device_id),
        json!({ "akName": device.ak_name.as_deref().map(hex::encode), "ekManufacturer": device.ek_manufacturer }),
    );
    change.commit().await?;
    Ok(device)
}
