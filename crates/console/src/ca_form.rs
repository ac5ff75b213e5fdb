//! CA create and edit forms, generated from the connector's configuration schema (the JSON
//! Schema its `describe()` declares, the same one `GET /api/plugins` shows). Secret members
//! (`writeOnly` in the schema, or listed in the plugin's secret fields) are password inputs that
//! are never filled: on edit, an empty one keeps the stored secret (the form sends the mask, as
//! an API client echoing a masked response does). The domain's refusals are shown inline, on the
//! field they name when they name one.

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value};
use trellis_core::auth::Scope;
use trellis_core::cas::service::{self as cas, CaInput};
use trellis_core::context::SharedContext;
use trellis_core::error::Error;
use trellis_core::plugins::record_config::MASK;
use trellis_core::plugins::PluginInfo;
use trellis_http::extract::numeric_id;

use crate::page::{see_other, Chrome, PageError};
use crate::session::{Console, Posted};

/// Form names of configuration members: this prefix and the member's JSON pointer.
const CONFIG_PREFIX: &str = "config";
/// Nesting deeper than this is edited as JSON (no connector here nests more than one level).
const MAX_DEPTH: usize = 3;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Text,
    LongText,
    Number,
    Choice,
    Boolean,
    /// Anything else (arrays, free-form objects, untyped members): JSON, or a bare string.
    Json,
}

#[derive(Debug, Clone)]
pub struct Field {
    /// RFC 6901 pointer in the configuration, e.g. `/subject/commonName`.
    pub pointer: String,
    /// The form control's name (`config/subject/commonName`) and id (`config-subject-commonName`).
    pub name: String,
    pub id: String,
    pub label: String,
    pub help: String,
    /// The nested object's label this member belongs to (empty at top level).
    pub group: String,
    pub kind: Kind,
    pub required: bool,
    pub secret: bool,
    /// A secret is stored for this member (edit form): an empty input keeps it.
    pub stored: bool,
    pub value: String,
    pub options: Vec<String>,
    pub min: String,
    pub max: String,
    pub error: String,
}

impl Field {
    pub fn is(&self, kind: &str) -> bool {
        matches!(
            (kind, &self.kind),
            ("text", Kind::Text)
                | ("long", Kind::LongText)
                | ("number", Kind::Number)
                | ("choice", Kind::Choice)
                | ("boolean", Kind::Boolean)
                | ("json", Kind::Json)
        )
    }
}

/// `keyAlgorithm` → `Key algorithm`.
fn humanize(key: &str) -> String {
    let mut out = String::new();
    for (i, c) in key.chars().enumerate() {
        if c == '_' || c == '-' {
            out.push(' ');
        } else if c.is_uppercase() && i > 0 {
            out.push(' ');
            out.extend(c.to_lowercase());
        } else if i == 0 {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Follows a local `$ref` and unwraps `Option`'s `anyOf`/`oneOf` with `null`.
fn resolve<'a>(root: &'a Value, mut schema: &'a Value) -> &'a Value {
    for _ in 0..8 {
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            match reference.strip_prefix('#').and_then(|p| root.pointer(p)) {
                Some(found) => {
                    schema = found;
                    continue;
                }
                None => return schema,
            }
        }
        let alternatives = schema.get("anyOf").or_else(|| schema.get("oneOf")).and_then(Value::as_array);
        if let Some(alternatives) = alternatives {
            let not_null: Vec<&Value> =
                alternatives.iter().filter(|a| a.get("type").and_then(Value::as_str) != Some("null")).collect();
            if let [only] = not_null.as_slice() {
                schema = only;
                continue;
            }
        }
        return schema;
    }
    schema
}

/// The schema's `type`, ignoring `null` (`["string", "null"]` is a string).
fn type_of(schema: &Value) -> Option<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => Some(t.as_str()),
        Some(Value::Array(types)) => {
            let named: Vec<&str> = types.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect();
            if let [only] = named.as_slice() {
                Some(only)
            } else {
                None
            }
        }
        _ => None,
    }
}

fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The form's fields for `info`'s configuration schema, in the schema's order.
pub fn fields_of(info: &PluginInfo) -> Vec<Field> {
    let secrets: Vec<&str> = info.secret_fields.iter().map(|f| f.pointer.as_str()).collect();
    fields_from(&info.config_schema, &secrets)
}

fn fields_from(schema: &Value, secrets: &[&str]) -> Vec<Field> {
    let mut out = Vec::new();
    collect(schema, schema, "", "", secrets, 0, &mut out);
    out
}

fn collect(
    root: &Value,
    schema: &Value,
    prefix: &str,
    group: &str,
    secrets: &[&str],
    depth: usize,
    out: &mut Vec<Field>,
) {
    let schema = resolve(root, schema);
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else { return };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |r| r.iter().filter_map(Value::as_str).collect());
    for (key, raw) in properties {
        // Members the host fills in on every call (the record's own type) are not the user's.
        if raw.get("x-trellis-record-type").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        let member = resolve(root, raw);
        let pointer = format!("{prefix}/{}", escape_pointer(key));
        let label = member
            .get("title")
            .or_else(|| raw.get("title"))
            .and_then(Value::as_str)
            .map_or_else(|| humanize(key), str::to_owned);
        let help =
            raw.get("description").or_else(|| member.get("description")).and_then(Value::as_str).unwrap_or_default();
        let kind_name = type_of(member);
        if kind_name == Some("object") && member.get("properties").is_some() && depth < MAX_DEPTH {
            let nested_group = if group.is_empty() { label.clone() } else { format!("{group} / {label}") };
            collect(root, member, &pointer, &nested_group, secrets, depth + 1, out);
            continue;
        }
        let options: Vec<String> = member
            .get("enum")
            .and_then(Value::as_array)
            .map_or_else(Vec::new, |e| e.iter().filter_map(Value::as_str).map(str::to_owned).collect());
        let secret = raw.get("writeOnly").or_else(|| member.get("writeOnly")).and_then(Value::as_bool) == Some(true)
            || secrets.contains(&pointer.as_str());
        let kind = if !options.is_empty() {
            Kind::Choice
        } else {
            match kind_name {
                Some("string") if !secret && (key.ends_with("Pem") || key.ends_with("Certificate")) => Kind::LongText,
                Some("string") => Kind::Text,
                Some("integer" | "number") => Kind::Number,
                Some("boolean") => Kind::Boolean,
                _ => Kind::Json,
            }
        };
        let bound = |name: &str| member.get(name).and_then(Value::as_f64).map(|v| v.to_string()).unwrap_or_default();
        out.push(Field {
            name: format!("{CONFIG_PREFIX}{pointer}"),
            id: format!("{CONFIG_PREFIX}{}", pointer.replace(['/', '~'], "-")),
            label,
            help: help.to_owned(),
            group: group.to_owned(),
            kind,
            required: required.contains(&key.as_str()),
            secret,
            stored: false,
            value: String::new(),
            options,
            min: bound("minimum"),
            max: bound("maximum"),
            error: String::new(),
            pointer,
        });
    }
}

/// Fills the fields from a (masked) configuration; secrets stay empty, marked as stored.
pub fn fill(fields: &mut [Field], config: &Value) {
    for field in fields {
        match config.pointer(&field.pointer) {
            None | Some(Value::Null) => {}
            Some(_) if field.secret => field.stored = true,
            Some(Value::String(text)) => field.value = text.clone(),
            Some(other) if field.kind == Kind::Json => {
                field.value = serde_json::to_string_pretty(other).unwrap_or_default();
            }
            Some(other) => field.value = other.to_string(),
        }
    }
}

fn set(config: &mut Value, pointer: &str, value: Value) {
    let mut at = config;
    let keys: Vec<String> = pointer.split('/').skip(1).map(|k| k.replace("~1", "/").replace("~0", "~")).collect();
    for (i, key) in keys.iter().enumerate() {
        if !at.is_object() {
            *at = Value::Object(Map::new());
        }
        let Value::Object(map) = at else { return };
        if i + 1 == keys.len() {
            map.insert(key.clone(), value);
            return;
        }
        at = map.entry(key.clone()).or_insert_with(|| Value::Object(Map::new()));
    }
}

/// The configuration the form describes, or the fields (with their errors) to show again. An
/// empty input leaves its member out; an empty secret input whose secret is stored keeps it.
pub fn config_of(fields: &mut [Field], posted: &HashMap<String, String>) -> Result<Value, ()> {
    let mut config = Value::Object(Map::new());
    let mut failed = false;
    for field in fields.iter_mut() {
        let text = posted.get(&field.name).map(|t| t.trim()).unwrap_or_default();
        if !field.secret {
            field.value = text.to_owned();
        }
        if text.is_empty() {
            if field.secret && field.stored {
                set(&mut config, &field.pointer, Value::String(MASK.to_owned()));
            }
            continue;
        }
        let value = match field.kind {
            Kind::Text | Kind::LongText | Kind::Choice => Ok(Value::String(text.to_owned())),
            Kind::Boolean => match text {
                "true" => Ok(Value::Bool(true)),
                "false" => Ok(Value::Bool(false)),
                _ => Err("Choose yes or no.".to_owned()),
            },
            Kind::Number => serde_json::from_str::<serde_json::Number>(text)
                .map(Value::Number)
                .map_err(|_| "Enter a number.".to_owned()),
            // A bare word is a string; anything that reads as JSON is taken as JSON.
            Kind::Json => Ok(serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))),
        };
        match value {
            Ok(value) => set(&mut config, &field.pointer, value),
            Err(message) => {
                field.error = message;
                failed = true;
            }
        }
    }
    if failed {
        Err(())
    } else {
        Ok(config)
    }
}

fn pointer_of(named: &str) -> String {
    let named = named.trim_start_matches('/');
    format!("/{}", named.replace('.', "/"))
}

/// Puts a refusal's messages on the fields they name: the connector's `validate_config` issues
/// (`details.config: [{field, message}]`, a member path such as `subject.commonName`) and the
/// use case's own (`details.field`, e.g. `name`, `url` or `config.role`). True when one landed.
fn attach(page: &mut CaFormPage, err: &Error) -> bool {
    let Error::Validation { message, details: Some(details) } = err else { return false };
    let mut landed = false;
    let issues = details.get("config").and_then(Value::as_array).cloned().unwrap_or_default();
    for issue in issues {
        let (Some(named), Some(text)) =
            (issue.get("field").and_then(Value::as_str), issue.get("message").and_then(Value::as_str))
        else {
            continue;
        };
        let pointer = pointer_of(named);
        if let Some(field) = page.fields.iter_mut().find(|f| f.pointer == pointer) {
            field.error = text.to_owned();
            landed = true;
        }
    }
    if let Some(named) = details.get("field").and_then(Value::as_str) {
        match named {
            "name" => page.name_error = message.clone(),
            "url" => page.url_error = message.clone(),
            other => {
                let pointer = pointer_of(other.strip_prefix("config").unwrap_or(other));
                if let Some(field) = page.fields.iter_mut().find(|f| f.pointer == pointer) {
                    field.error = message.clone();
                } else {
                    return landed;
                }
            }
        }
        landed = true;
    }
    landed
}

#[derive(Debug, Default, Deserialize)]
pub struct TypeQuery {
    #[serde(default, rename = "type")]
    pub ca_type: String,
}

#[derive(Template)]
#[template(path = "ca_form.html")]
struct CaFormPage {
    chrome: Chrome,
    csrf: String,
    /// `None` when creating.
    ca_id: Option<i64>,
    types: Vec<String>,
    ca_type: String,
    connector: String,
    name: String,
    description: String,
    url: String,
    status: String,
    fields: Vec<Field>,
    error: String,
    name_error: String,
    url_error: String,
}

impl CaFormPage {
    fn action(&self) -> String {
        self.ca_id.map_or_else(|| "/cas/new".to_owned(), |id| format!("/cas/{id}/edit"))
    }
}

fn show(page: CaFormPage, status: StatusCode) -> Result<Response, PageError> {
    let html = page.render().map_err(|err| PageError::from(Error::Internal(format!("template: {err}"))))?;
    Ok((status, Html(html)).into_response())
}

/// GET /cas/new[?type=…]: the type chooser, then that type's form.
pub async fn new_form(
    State(ctx): State<SharedContext>,
    console: Console,
    Query(query): Query<TypeQuery>,
) -> Result<Response, PageError> {
    let types = cas::connector_types(&ctx.ca_deps(), &console.caller)?;
    let chosen = types.iter().find(|(t, _)| *t == query.ca_type);
    let (fields, connector) =
        chosen.map_or_else(|| (Vec::new(), String::new()), |(_, info)| (fields_of(info), connector_name(info)));
    show(
        CaFormPage {
            chrome: Chrome::new(&console, "New certificate authority", "cas"),
            csrf: console.csrf.clone(),
            ca_id: None,
            ca_type: chosen.map(|(t, _)| t.clone()).unwrap_or_default(),
            types: types.into_iter().map(|(t, _)| t).collect(),
            connector,
            name: String::new(),
            description: String::new(),
            url: String::new(),
            status: "active".into(),
            fields,
            error: String::new(),
            name_error: String::new(),
            url_error: String::new(),
        },
        StatusCode::OK,
    )
}

fn connector_name(info: &PluginInfo) -> String {
    format!("{} {} ({})", info.name, info.version, info.id)
}

fn text(posted: &HashMap<String, String>, name: &str) -> String {
    posted.get(name).map(|t| t.trim().to_owned()).unwrap_or_default()
}

fn optional(text: String) -> Option<String> {
    Some(text).filter(|t| !t.is_empty())
}

/// POST /cas/new and POST /cas/{id}/edit.
async fn save(
    ctx: &SharedContext,
    console: Console,
    ca_id: Option<i64>,
    posted: Vec<(String, String)>,
) -> Result<Response, PageError> {
    let posted: HashMap<String, String> = posted.into_iter().collect();
    let (ca_type, stored_config) = match ca_id {
        Some(id) => {
            let view = cas::get(&ctx.ca_deps(), &console.caller, id).await?;
            (view.ca.ca_type.clone(), Some(view.config))
        }
        None => (text(&posted, "type"), None),
    };
    let types = cas::connector_types(&ctx.ca_deps(), &console.caller)?;
    let info = match types.iter().find(|(t, _)| *t == ca_type) {
        Some((_, info)) => info.clone(),
        None => cas::connector_for(ctx.plugins.host(), &console.caller.workspace_id, &ca_type)?,
    };
    let mut fields = fields_of(&info);
    if let Some(config) = &stored_config {
        fill(&mut fields, config);
    }
    let config = config_of(&mut fields, &posted);
    let mut page = CaFormPage {
        chrome: Chrome::new(
            &console,
            if ca_id.is_some() { "Edit certificate authority" } else { "New certificate authority" },
            "cas",
        ),
        csrf: console.csrf.clone(),
        ca_id,
        types: types.into_iter().map(|(t, _)| t).collect(),
        ca_type: ca_type.clone(),
        connector: connector_name(&info),
        name: text(&posted, "name"),
        description: text(&posted, "description"),
        url: text(&posted, "url"),
        status: text(&posted, "status"),
        fields,
        error: String::new(),
        name_error: String::new(),
        url_error: String::new(),
    };
    let Ok(config) = config else {
        page.error = "Some fields need correcting (see below).".into();
        return show(page, StatusCode::BAD_REQUEST);
    };
    let input = CaInput {
        name: Some(page.name.clone()),
        ca_type: Some(ca_type),
        description: Some(optional(page.description.clone())),
        url: Some(optional(page.url.clone())),
        status: optional(page.status.clone()),
        issuer_patterns: None,
        config: Some(config),
    };
    let saved = match ca_id {
        // A PUT: the form shows every member, so one left empty is removed.
        Some(id) => cas::update(&ctx.ca_deps(), &console.caller, id, input, true).await,
        None => cas::create(&ctx.ca_deps(), &console.caller, input).await,
    };
    match saved {
        Ok(view) => Ok(see_other(&format!("/cas/{}?done=saved", view.ca.id))),
        Err(err @ (Error::Validation { .. } | Error::Conflict(_) | Error::NotFound(_))) => {
            let status = trellis_http::error::status_of(&err);
            let on_fields = attach(&mut page, &err);
            page.error =
                format!("The CA was not saved: {err}{}", if on_fields { " (see the marked fields below)" } else { "" });
            show(page, status)
        }
        Err(err) => Err(err.into()),
    }
}

pub async fn create(
    State(ctx): State<SharedContext>,
    Posted(console, posted): Posted<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    save(&ctx, console, None, posted).await
}

/// GET /cas/{id}/edit.
pub async fn edit_form(
    State(ctx): State<SharedContext>,
    console: Console,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let id = numeric_id(&id).map_err(PageError::Api)?;
    console.caller.require(Scope::CasWrite)?;
    let view = cas::get(&ctx.ca_deps(), &console.caller, id).await?;
    let info = cas::connector_for(ctx.plugins.host(), &console.caller.workspace_id, &view.ca.ca_type)?;
    let mut fields = fields_of(&info);
    fill(&mut fields, &view.config);
    show(
        CaFormPage {
            chrome: Chrome::new(&console, format!("Edit CA {}", view.ca.name), "cas"),
            csrf: console.csrf.clone(),
            ca_id: Some(id),
            types: Vec::new(),
            ca_type: view.ca.ca_type.clone(),
            connector: connector_name(&info),
            name: view.ca.name.clone(),
            description: view.ca.description.clone().unwrap_or_default(),
            url: view.ca.url.clone().unwrap_or_default(),
            status: view.ca.status.as_str().to_owned(),
            fields,
            error: String::new(),
            name_error: String::new(),
            url_error: String::new(),
        },
        StatusCode::OK,
    )
}

pub async fn update(
    State(ctx): State<SharedContext>,
    Path(id): Path<String>,
    Posted(console, posted): Posted<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let id = numeric_id(&id).map_err(PageError::Api)?;
    save(&ctx, console, Some(id), posted).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "required": ["role"],
            "properties": {
                "caType": {"type": ["string", "null"], "x-trellis-record-type": true},
                "role": {"type": ["string", "null"], "description": "The PKI role."},
                "authMethod": {"type": ["string", "null"], "enum": ["token", "approle"]},
                "token": {"type": ["string", "null"], "writeOnly": true},
                "validityDays": {"type": ["integer", "null"], "minimum": 1, "maximum": 36500},
                "agreed": {"type": ["boolean", "null"]},
                "subject": {"anyOf": [{"$ref": "#/$defs/Subject"}, {"type": "null"}]},
                "dnsProvider": true
            },
            "$defs": {"Subject": {"type": "object", "properties": {"commonName": {"type": ["string", "null"]}}}}
        })
    }

    #[test]
    fn the_schema_becomes_typed_fields_secrets_masked_and_nested_objects_grouped() {
        let fields = fields_from(&schema(), &[]);
        let by = |p: &str| fields.iter().find(|f| f.pointer == p).unwrap();
        assert!(fields.iter().all(|f| f.pointer != "/caType"), "the host fills the record type");
        assert!(by("/role").required && by("/role").kind == Kind::Text && by("/role").help == "The PKI role.");
        assert_eq!(by("/authMethod").options, ["token", "approle"]);
        assert!(by("/token").secret);
        assert_eq!((by("/validityDays").min.as_str(), by("/validityDays").max.as_str()), ("1", "36500"));
        assert_eq!(by("/agreed").kind, Kind::Boolean);
        assert_eq!(by("/subject/commonName").group, "Subject");
        assert_eq!(by("/subject/commonName").name, "config/subject/commonName");
        assert_eq!(by("/dnsProvider").kind, Kind::Json);
    }

    #[test]
    fn a_stored_secret_is_never_shown_and_an_empty_input_keeps_it() {
        let mut fields = fields_from(&schema(), &[]);
        fill(&mut fields, &json!({"role": "web", "token": MASK, "subject": {"commonName": "Root"}}));
        let token = fields.iter().find(|f| f.pointer == "/token").unwrap();
        assert!(token.stored && token.value.is_empty());
        let posted: HashMap<String, String> = [
            ("config/role", "web"),
            ("config/token", ""),
            ("config/subject/commonName", "Root 2"),
            ("config/validityDays", "30"),
            ("config/dnsProvider", r#"{"type": "x"}"#),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let config = config_of(&mut fields, &posted).unwrap();
        assert_eq!(
            config,
            json!({"role": "web", "token": MASK, "subject": {"commonName": "Root 2"}, "validityDays": 30, "dnsProvider": {"type": "x"}})
        );
    }

    #[test]
    fn a_bad_number_is_refused_on_its_field() {
        let mut fields = fields_from(&schema(), &[]);
        let posted: HashMap<String, String> =
            [("config/validityDays".to_owned(), "ten".to_owned())].into_iter().collect();
        assert!(config_of(&mut fields, &posted).is_err());
        assert_eq!(fields.iter().find(|f| f.pointer == "/validityDays").unwrap().error, "Enter a number.");
    }

    #[test]
    fn a_domain_refusal_naming_a_member_lands_on_it() {
        let mut page = CaFormPage {
            chrome: Chrome::anonymous("t"),
            csrf: String::new(),
            ca_id: None,
            types: Vec::new(),
            ca_type: "vault".into(),
            connector: String::new(),
            name: String::new(),
            description: String::new(),
            url: String::new(),
            status: String::new(),
            fields: fields_from(&schema(), &[]),
            error: String::new(),
            name_error: String::new(),
            url_error: String::new(),
        };
        let issues = json!({"config": [{"field": "subject.commonName", "message": "is required"}]});
        assert!(attach(&mut page, &Error::validation_with("Invalid config: subject.commonName: is required", issues)));
        assert_eq!(page.fields.iter().find(|f| f.pointer == "/subject/commonName").unwrap().error, "is required");
        assert!(attach(&mut page, &Error::invalid_field("url", "must be an absolute URL")));
        assert!(page.url_error.contains("must be an absolute URL"));
        assert!(!attach(&mut page, &Error::invalid_field("type", "unknown")));
    }
}
