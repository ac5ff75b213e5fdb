//! Device records: what the service knows of a TPM-equipped device (name, type, serial), and
//! what AK enrollment bound to it (AK public area and name, EK certificate and manufacturer).
//! Workspace-scoped; scopes `attestation:read` / `attestation:write`.

use serde_json::{json, Value};

use super::AttestationDeps;
use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::error::Result;
use crate::pagination::{Page, PageRequest};
use crate::plugins::TpmClock;
use crate::unit_of_work::Target;
use crate::validation::optional_text;

crate::state::state_enum! {
    /// A device's state: `registered` (no AK yet), `enrolled`, `attested` (last attestation
    /// passed), `failed` (last attestation failed), `disabled` (refuses attestation).
    pub enum DeviceStatus {
        Registered => "registered",
        Enrolled => "enrolled",
        Attested => "attested",
        Failed => "failed",
        Disabled => "disabled",
    }
}

pub const REGISTERED: DeviceStatus = DeviceStatus::Registered;
pub const ENROLLED: DeviceStatus = DeviceStatus::Enrolled;
pub const ATTESTED: DeviceStatus = DeviceStatus::Attested;
pub const FAILED: DeviceStatus = DeviceStatus::Failed;
pub const DISABLED: DeviceStatus = DeviceStatus::Disabled;

const MAX_TEXT: usize = 200;

/// A device.
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    pub id: i64,
    pub workspace_id: String,
    pub name: String,
    pub device_type: Option<String>,
    pub serial: Option<String>,
    pub description: Option<String>,
    pub status: DeviceStatus,
    pub ak_public: Option<Vec<u8>>,
    pub ak_name: Option<Vec<u8>>,
    pub ek_public: Option<Vec<u8>>,
    pub ek_certificate: Option<Vec<u8>>,
    pub ek_chain: Vec<Vec<u8>>,
    pub ek_manufacturer: Option<String>,
    pub last_clock: Option<TpmClock>,
    pub enrolled_at: Option<i64>,
    pub last_attested_at: Option<i64>,
    pub metadata: Value,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A create or PATCH body; `None` = absent.
#[derive(Debug, Default, Clone)]
pub struct DeviceInput {
    pub name: Option<String>,
    pub device_type: Option<Option<String>>,
    pub serial: Option<Option<String>>,
    pub description: Option<Option<String>>,
    pub metadata: Option<Value>,
    /// Only `disabled` and back (`enabled` restores the state enrollment gave it).
    pub status: Option<String>,
}

fn metadata(value: Value) -> Result<Value> {
    match value {
        Value::Object(_) if value.to_string().len() <= 16 * 1024 => Ok(value),
        Value::Null => Ok(json!({})),
        _ => Err(crate::error::Error::invalid_field("metadata", "must be an object of at most 16 KiB")),
    }
}

pub async fn find(ctx: &AttestationDeps, workspace_id: &str, id: i64) -> Result<Device> {
    ctx.store.find_device(workspace_id, id).await?.ok_or(crate::error::Error::NotFound(crate::error::Entity::Device))
}

pub async fn list(ctx: &AttestationDeps, caller: &Caller, page: PageRequest) -> Result<Page<Device>> {
    caller.require(Scope::AttestationRead)?;
    Ok(ctx.store.list_devices(&caller.workspace_id, page).await?)
}

pub async fn get(ctx: &AttestationDeps, caller: &Caller, id: i64) -> Result<Device> {
    caller.require(Scope::AttestationRead)?;
    find(ctx, &caller.workspace_id, id).await
}

pub async fn create(ctx: &AttestationDeps, caller: &Caller, input: DeviceInput) -> Result<Device> {
    caller.require(Scope::AttestationManage)?;
    let name = optional_text("name", input.name.as_deref(), MAX_TEXT)?
        .ok_or_else(|| crate::error::Error::invalid_field("name", "is required"))?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let at = change.at();
    let device = Device {
        id: 0,
        workspace_id: caller.workspace_id.to_string(),
        name,
        device_type: optional_text("deviceType", input.device_type.flatten().as_deref(), MAX_TEXT)?,
        serial: optional_text("serial", input.serial.flatten().as_deref(), MAX_TEXT)?,
        description: optional_text("description", input.description.flatten().as_deref(), MAX_TEXT)?,
        status: REGISTERED,
        ak_public: None,
        ak_name: None,
        ek_public: None,
        ek_certificate: None,
        ek_chain: Vec::new(),
        ek_manufacturer: None,
        last_clock: None,
        enrolled_at: None,
        last_attested_at: None,
        metadata: metadata(input.metadata.unwrap_or(Value::Null))?,
        created_at: at,
        updated_at: at,
    };
    let device = change.tx().insert_device(&device).await.map_err(|err| match err {
        crate::store_error::StoreError::Unique(_) => {
            crate::error::Error::Conflict("A device with this serial exists".into())
        }
        other => other.into(),
    })?;
    change.audit(
        "device.created",
        Target::new("device", device.id),
        json!({ "name": device.name, "deviceType": device.device_type, "serial": device.serial }),
    );
    change.commit().await?;
    Ok(device)
}

pub async fn update(ctx: &AttestationDeps, caller: &Caller, id: i64, input: DeviceInput) -> Result<Device> {
    caller.require(Scope::AttestationManage)?;
    let mut device = find(ctx, &caller.workspace_id, id).await?;
    if let Some(name) = input.name {
        device.name = optional_text("name", Some(name.as_str()), MAX_TEXT)?
            .ok_or_else(|| crate::error::Error::invalid_field("name", "must not be empty"))?;
    }
    if let Some(device_type) = input.device_type {
        device.device_type = optional_text("deviceType", device_type.as_deref(), MAX_TEXT)?;
    }
    if let Some(serial) = input.serial {
        device.serial = optional_text("serial", serial.as_deref(), MAX_TEXT)?;
    }
    if let Some(description) = input.description {
        device.description = optional_text("description", description.as_deref(), MAX_TEXT)?;
    }
    if let Some(value) = input.metadata {
        device.metadata = metadata(value)?;
    }
    match input.status.as_deref() {
        None => {}
        Some("disabled") => device.status = DISABLED,
        Some("enabled") if device.status == DISABLED => {
            device.status = if device.ak_name.is_some() { ENROLLED } else { REGISTERED };
        }
        Some("enabled") => {}
        Some(_) => return Err(crate::error::Error::invalid_field("status", "must be disabled or enabled")),
    }
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    device.updated_at = change.at();
    let updated = change.tx().update_device(&device).await.map_err(|err| match err {
        crate::store_error::StoreError::Unique(_) => {
            crate::error::Error::Conflict("A device with this serial exists".into())
        }
        other => other.into(),
    })?;
    if !updated {
        return Err(crate::error::Error::NotFound(crate::error::Entity::Device));
    }
    change.audit("device.updated", Target::new("device", id), json!({ "name": device.name, "status": device.status }));
    change.commit().await?;
    Ok(device)
}

pub async fn delete(ctx: &AttestationDeps, caller: &Caller, id: i64) -> Result<()> {
    caller.require(Scope::AttestationManage)?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    if !change.tx().delete_device(&caller.workspace_id, id).await? {
        return Err(crate::error::Error::NotFound(crate::error::Entity::Device));
    }
    change.audit("device.deleted", Target::new("device", id), json!({}));
    change.commit().await
}

/// Forgets the device's enrolled EK and AK (`POST /api/iot/devices/{id}/reset-enrollment`): the
/// only way to enroll it with another TPM, since enrollment pins the first EK. A manager's act,
/// audited with what was forgotten.
pub async fn reset_enrollment(ctx: &AttestationDeps, caller: &Caller, id: i64) -> Result<Device> {
    caller.require(Scope::AttestationManage)?;
    let mut device = find(ctx, &caller.workspace_id, id).await?;
    let forgotten = json!({
        "akName": device.ak_name.as_deref().map(hex::encode),
        "ekManufacturer": device.ek_manufacturer,
        "enrolledAt": device.enrolled_at.map(crate::clock::rfc3339),
    });
    device.ak_public = None;
    device.ak_name = None;
    device.ek_public = None;
    device.ek_certificate = None;
    device.ek_chain = Vec::new();
    device.ek_manufacturer = None;
    device.last_clock = None;
    device.enrolled_at = None;
    if device.status != DISABLED {
        device.status = REGISTERED;
    }
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    device.updated_at = change.at();
    change.tx().take_enrollment(&caller.workspace_id, id).await?;
    if !change.tx().update_device(&device).await? {
        return Err(crate::error::Error::NotFound(crate::error::Entity::Device));
    }
    change.audit("device.enrollment_reset", Target::new("device", id), forgotten);
    change.commit().await?;
    Ok(device)
}
