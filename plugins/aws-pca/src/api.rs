//! The two AWS APIs the connector speaks: ACM PCA (JSON 1.1: `POST /` with an
//! `x-amz-target` naming the operation) and STS `AssumeRole` (query protocol, XML answer), both
//! SigV4-signed with [`sigv4`], and AWS's error answers turned into [`PluginError`]s that say
//! what to fix.

use serde_json::Value;
use trellis_plugin_sdk::prelude::*;
use trellis_plugin_sdk::sigv4::{self, Credentials};

/// The signing name of ACM PCA.
const PCA_SERVICE: &str = "acm-pca";
/// JSON 1.1, as the ACM PCA API takes it.
const PCA_CONTENT_TYPE: &str = "application/x-amz-json-1.1";
/// How long one assumed-role session lasts; one call never needs more than a few minutes.
const SESSION_SECONDS: u32 = 900;

/// An ACM PCA endpoint with the credentials to sign for it.
pub struct Pca {
    endpoint: String,
    region: String,
    credentials: Credentials,
}

/// An AWS error answer: its code (`ResourceNotFoundException`, `SignatureDoesNotMatch`, …),
/// message and HTTP status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsError {
    pub status: u16,
    pub code: String,
    pub message: String,
}

/// What a call can fail with: AWS answered with an error, or the request failed before that.
#[derive(Debug)]
pub enum CallError {
    Aws(AwsError),
    Plugin(PluginError),
}

impl From<PluginError> for CallError {
    fn from(err: PluginError) -> CallError {
        CallError::Plugin(err)
    }
}

impl From<http::HttpError> for CallError {
    fn from(err: http::HttpError) -> CallError {
        CallError::Plugin(err.into())
    }
}

impl From<CallError> for PluginError {
    fn from(err: CallError) -> PluginError {
        match err {
            CallError::Aws(aws) => aws.into_plugin_error(),
            CallError::Plugin(err) => err,
        }
    }
}

impl AwsError {
    /// `code: message`, for checks and logs.
    pub fn describe(&self) -> String {
        if self.message.is_empty() {
            self.code.clone()
        } else {
            format!("{}: {}", self.code, self.message)
        }
    }

    /// The credentials or the IAM policy are at fault.
    pub fn is_auth(&self) -> bool {
        matches!(
            self.code.as_str(),
            "UnrecognizedClientException"
                | "InvalidClientTokenId"
                | "SignatureDoesNotMatch"
                | "IncompleteSignature"
                | "MissingAuthenticationToken"
                | "InvalidSignatureException"
                | "ExpiredToken"
                | "ExpiredTokenException"
                | "AccessDenied"
                | "AccessDeniedException"
                | "InvalidAccessKeyId"
                | "AuthFailure"
        )
    }

    pub fn into_plugin_error(self) -> PluginError {
        let described = self.describe();
        if self.is_auth() {
            let hint = if self.code.starts_with("AccessDenied") {
                "the IAM identity lacks permission: allow it acm-pca:IssueCertificate, GetCertificate, RevokeCertificate, GetCertificateAuthorityCertificate and DescribeCertificateAuthority on the CA"
            } else {
                "check accessKeyId, secretAccessKey and sessionToken (and that the key is active)"
            };
            return PluginError::unauthorized(format!("AWS refused the request ({described}); {hint}"));
        }
        match self.code.as_str() {
            "ResourceNotFoundException" => {
                PluginError::not_found(format!("AWS Private CA: {described}; check caArn and region"))
            }
            "InvalidStateException" => PluginError::rejected(format!(
                "AWS Private CA is not in a state to serve this ({described}); the CA must be ACTIVE"
            )),
            "MalformedCSRException"
            | "InvalidArgsException"
            | "InvalidArnException"
            | "InvalidParameterException"
            | "InvalidRequestException"
            | "ValidationException"
            | "InvalidPolicyException" => {
                PluginError::invalid_input(format!("AWS Private CA refused the request: {described}"))
            }
            "ThrottlingException"
            | "Throttling"
            | "TooManyRequestsException"
            | "LimitExceededException"
            | "RequestLimitExceeded" => PluginError::RateLimited(None),
            "RequestAlreadyProcessedException" | "RequestFailedException" => {
                PluginError::rejected(format!("AWS Private CA: {described}"))
            }
            _ => PluginError::upstream(Some(self.status), format!("AWS Private CA: {described}"), self.status >= 500),
        }
    }
}

impl Pca {
    pub fn new(endpoint: &str, region: &str, credentials: Credentials) -> Pca {
        Pca { endpoint: endpoint.trim_end_matches('/').to_owned(), region: region.to_owned(), credentials }
    }

    /// Calls `operation` (e.g. `IssueCertificate`) with a JSON body.
    pub fn call(&self, operation: &str, body: &Value) -> Result<Value, CallError> {
        let payload = serde_json::to_vec(body)
            .map_err(|err| PluginError::internal(format!("cannot serialize the {operation} request: {err}")))?;
        let request = http::Request::post(&format!("{}/", self.endpoint))
            .header("content-type", PCA_CONTENT_TYPE)
            .header("x-amz-target", &format!("ACMPrivateCA.{operation}"))
            .body(payload);
        let signed = sigv4::sign(request, &self.credentials, &self.region, PCA_SERVICE, clock::unix_seconds())?;
        let response = signed.send()?;
        if !response.is_success() {
            return Err(CallError::Aws(error_of(&response)));
        }
        if response.body.is_empty() {
            return Ok(Value::Null);
        }
        Ok(response.json()?)
    }
}

/// Temporary credentials for `role_arn`, from STS `AssumeRole` signed with `credentials`.
pub fn assume_role(
    sts_endpoint: &str,
    region: &str,
    credentials: &Credentials,
    role_arn: &str,
    external_id: Option<&str>,
) -> Result<Credentials, CallError> {
    let mut form = format!(
        "Action=AssumeRole&Version=2011-06-15&RoleSessionName=trellis-aws-pca&DurationSeconds={SESSION_SECONDS}&RoleArn={}",
        sigv4::uri_encode(role_arn)
    );
    if let Some(id) = external_id {
        form.push_str(&format!("&ExternalId={}", sigv4::uri_encode(id)));
    }
    let request = http::Request::post(&format!("{}/", sts_endpoint.trim_end_matches('/')))
        .header("content-type", "application/x-www-form-urlencoded; charset=utf-8")
        .body(form.into_bytes());
    let signed = sigv4::sign(request, credentials, region, "sts", clock::unix_seconds())?;
    let response = signed.send()?;
    if !response.is_success() {
        return Err(CallError::Aws(error_of(&response)));
    }
    let xml = response.text();
    let field = |name: &str| xml_text(&xml, name);
    match (field("AccessKeyId"), field("SecretAccessKey"), field("SessionToken")) {
        (Some(id), Some(secret), Some(token)) => Ok(Credentials::new(&id, &secret).with_session_token(&token)),
        _ => Err(CallError::Plugin(PluginError::upstream(
            Some(response.status),
            "STS AssumeRole answered without credentials",
            false,
        ))),
    }
}

/// An AWS error answer in any of its shapes: JSON (`__type`, `message`; the code may carry a
/// `namespace#` prefix or arrive in `x-amzn-errortype`) or XML (`<Code>`, `<Message>`).
fn error_of(response: &http::Response) -> AwsError {
    let json: Option<Value> = serde_json::from_slice(&response.body).ok();
    let from_json = |key: &str| {
        json.as_ref()
            .and_then(|v| v.get(key).or_else(|| v.get(key.to_ascii_lowercase())))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let text = response.text();
    let code = from_json("__type")
        .or_else(|| from_json("code"))
        .or_else(|| response.header("x-amzn-errortype"))
        .or_else(|| xml_text(&text, "Code"))
        .map(|code| {
            // `com.amazonaws.acmpca#ResourceNotFoundException`, `Foo:http://…`.
            let code = code.rsplit('#').next().unwrap_or(&code).to_owned();
            code.split(':').next().unwrap_or(&code).to_owned()
        })
        .unwrap_or_else(|| format!("HTTP {}", response.status));
    let message = from_json("Message").or_else(|| xml_text(&text, "Message")).unwrap_or_default();
    AwsError { status: response.status, code, message: util::truncate(&message, 300) }
}

/// The text of the first `<name>…</name>` element, entities decoded.
fn xml_text(xml: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml.get(start..)?.find(&format!("</{name}>"))?;
    let raw = xml.get(start..end)?.trim();
    Some(
        raw.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, headers: &[(&str, &str)], body: &str) -> http::Response {
        http::Response {
            status,
            headers: headers.iter().map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec())).collect(),
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn reads_every_error_shape() {
        let json = error_of(&response(
            400,
            &[],
            r#"{"__type":"com.amazonaws.acmpca#ResourceNotFoundException","message":"no such CA"}"#,
        ));
        assert_eq!((json.code.as_str(), json.message.as_str()), ("ResourceNotFoundException", "no such CA"));
        let header = error_of(&response(403, &[("x-amzn-errortype", "UnrecognizedClientException:http://x")], ""));
        assert_eq!(header.code, "UnrecognizedClientException");
        let xml = error_of(&response(
            403,
            &[],
            "<ErrorResponse><Error><Code>SignatureDoesNotMatch</Code><Message>a &amp; b</Message></Error></ErrorResponse>",
        ));
        assert_eq!((xml.code.as_str(), xml.message.as_str()), ("SignatureDoesNotMatch", "a & b"));
        assert_eq!(error_of(&response(502, &[], "<html>")).code, "HTTP 502");
    }

    #[test]
    fn maps_codes_to_what_the_operator_must_fix() {
        let err = |code: &str, status| AwsError { status, code: code.into(), message: "m".into() }.into_plugin_error();
        assert!(
            matches!(err("SignatureDoesNotMatch", 403), PluginError::Unauthorized(m) if m.contains("secretAccessKey"))
        );
        assert!(matches!(err("AccessDeniedException", 400), PluginError::Unauthorized(m) if m.contains("permission")));
        assert!(matches!(err("ResourceNotFoundException", 400), PluginError::NotFound(m) if m.contains("caArn")));
        assert!(matches!(err("MalformedCSRException", 400), PluginError::InvalidInput(_)));
        assert_eq!(err("ThrottlingException", 400), PluginError::RateLimited(None));
        assert!(matches!(err("InternalFailure", 500), PluginError::Upstream { retryable: true, .. }));
        assert!(matches!(err("Odd", 400), PluginError::Upstream { retryable: false, .. }));
    }
}
