//! AWS Signature Version 4 (the `Authorization` header of every AWS API request), so that a
//! connector for an AWS service signs inside the sandbox with the record's credentials:
//!
//! ```ignore
//! let credentials = sigv4::Credentials::new(&config.access_key_id, &config.secret_access_key);
//! let request = http::Request::post("https://acm-pca.eu-west-1.amazonaws.com/")
//!     .header("content-type", "application/x-amz-json-1.1")
//!     .header("x-amz-target", "ACMPrivateCA.DescribeCertificateAuthority")
//!     .body(body);
//! let signed = sigv4::sign(request, &credentials, "eu-west-1", "acm-pca", clock::unix_seconds())?;
//! let response = signed.send()?;
//! ```
//!
//! Every header already on the request is signed, with `host` (the URL's authority, as the host
//! sends it), `x-amz-date` and, for temporary credentials, `x-amz-security-token`. The time is a
//! parameter so tests sign reproducibly; AWS refuses signatures more than 5 minutes off its
//! clock.

use std::fmt::Write as _;

use crate::http::{Request, Target};
use crate::jws::{hmac_sha256, sha256};
use crate::PluginError;

/// The algorithm name in the `Authorization` header and the string to sign.
const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// An access key, and the session token of temporary credentials (STS).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The access key ID (`AKIA…`, or `ASIA…` for temporary credentials).
    pub access_key_id: String,
    /// The secret access key. Never logged: `Debug` masks it.
    pub secret_access_key: String,
    /// The session token of temporary credentials.
    pub session_token: Option<String>,
}

impl Credentials {
    /// Long-term credentials.
    pub fn new(access_key_id: &str, secret_access_key: &str) -> Credentials {
        Credentials {
            access_key_id: access_key_id.to_owned(),
            secret_access_key: secret_access_key.to_owned(),
            session_token: None,
        }
    }

    /// Adds the session token of temporary credentials.
    pub fn with_session_token(mut self, token: &str) -> Credentials {
        self.session_token = Some(token.to_owned());
        self
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<secret>")
            .field("session_token", &self.session_token.as_ref().map(|_| "<secret>"))
            .finish()
    }
}

/// Signs `request` for `service` in `region` at `unix_seconds`: adds `x-amz-date`, the session
/// token if any, and `authorization`. The body must be final (its hash is signed).
pub fn sign(
    request: Request,
    credentials: &Credentials,
    region: &str,
    service: &str,
    unix_seconds: i64,
) -> Result<Request, PluginError> {
    let target = Target::parse(request.url()).map_err(|err| PluginError::invalid_input(err.to_string()))?;
    let timestamp = amz_date(unix_seconds);
    let date = timestamp.get(..8).unwrap_or_default().to_owned();
    let mut request = request.header("x-amz-date", &timestamp);
    if let Some(token) = &credentials.session_token {
        request = request.header("x-amz-security-token", token);
    }

    let mut headers: Vec<(String, String)> = request
        .header_pairs()
        .filter(|(name, _)| !name.eq_ignore_ascii_case("authorization") && !name.eq_ignore_ascii_case("host"))
        .map(|(name, value)| (name.to_ascii_lowercase(), canonical_header_value(&String::from_utf8_lossy(value))))
        .collect();
    headers.push(("host".to_owned(), target.authority.to_ascii_lowercase()));
    headers.sort();
    // Repeated headers are signed as one, values comma-joined in the order they were added.
    let mut merged: Vec<(String, String)> = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        match merged.last_mut() {
            Some((last, joined)) if *last == name => {
                joined.push(',');
                joined.push_str(&value);
            }
            _ => merged.push((name, value)),
        }
    }
    let signed_headers = merged.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>().join(";");
    let canonical_headers: String = merged.iter().map(|(name, value)| format!("{name}:{value}\n")).collect();

    let (path, query) = target.path_and_query.split_once('?').unwrap_or((&target.path_and_query, ""));
    let canonical_request = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        request.method(),
        canonical_uri(path),
        canonical_query(query),
        canonical_headers,
        signed_headers,
        hex(&sha256(request.body_bytes())),
    );
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let string_to_sign = format!("{ALGORITHM}\n{timestamp}\n{scope}\n{}", hex(&sha256(canonical_request.as_bytes())));
    let signature = hex(&hmac_sha256(
        &signing_key(&credentials.secret_access_key, &date, region, service),
        string_to_sign.as_bytes(),
    ));
    let authorization = format!(
        "{ALGORITHM} Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
        credentials.access_key_id
    );
    Ok(request.header("authorization", &authorization))
}

/// The key derived from the secret for one day, region and service.
fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> [u8; 32] {
    let k_date = hmac_sha256(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac_sha256(&k_date, region.as_bytes());
    let k_service = hmac_sha256(&k_region, service.as_bytes());
    hmac_sha256(&k_service, b"aws4_request")
}

/// `YYYYMMDDTHHMMSSZ` in UTC.
pub fn amz_date(unix_seconds: i64) -> String {
    // util::rfc3339 renders `YYYY-MM-DDTHH:MM:SS.mmmZ`; drop the separators and millis.
    let iso = crate::util::rfc3339(unix_seconds.saturating_mul(1000));
    let digits: String = iso.get(..19).unwrap_or_default().chars().filter(|c| *c != '-' && *c != ':').collect();
    format!("{digits}Z")
}

/// Trimmed, with inner runs of spaces collapsed to one (SigV4's canonical header value).
fn canonical_header_value(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The path with each segment URI-encoded as it appears (so an already-encoded `%2F` is encoded
/// again, as every AWS service but S3 expects); empty is `/`.
fn canonical_uri(path: &str) -> String {
    if path.is_empty() {
        return "/".to_owned();
    }
    path.split('/').map(uri_encode).collect::<Vec<_>>().join("/")
}

/// Query parameters URI-encoded and sorted by name, then value.
fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (uri_encode(&percent_decode(name)), uri_encode(&percent_decode(value)))
        })
        .collect();
    pairs.sort();
    pairs.iter().map(|(name, value)| format!("{name}={value}")).collect::<Vec<_>>().join("&")
}

/// RFC 3986 encoding: everything but unreserved characters as `%XX`, uppercase hex.
pub fn uri_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// Decodes `%XX` escapes (and `+` as a space, as form encoding writes it); invalid escapes stay.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        let escaped = (byte == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(decoded) => {
                out.push(decoded);
                i += 3;
            }
            None => {
                out.push(if byte == b'+' { b' ' } else { byte });
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2015-08-30T12:36:00Z, the time of AWS's published examples.
    const EXAMPLE_TIME: i64 = 1_440_938_160;

    fn example_credentials() -> Credentials {
        Credentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    }

    fn authorization(request: &Request) -> String {
        request.header_value("authorization").unwrap_or_default()
    }

    #[test]
    fn amz_date_is_compact_utc() {
        assert_eq!(amz_date(EXAMPLE_TIME), "20150830T123600Z");
        assert_eq!(amz_date(0), "19700101T000000Z");
    }

    /// `get-vanilla` of AWS's SigV4 test suite.
    #[test]
    fn signs_the_test_suites_vanilla_get() {
        let signed = sign(
            Request::get("https://example.amazonaws.com/"),
            &example_credentials(),
            "us-east-1",
            "service",
            EXAMPLE_TIME,
        )
        .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            authorization(&signed),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
        assert_eq!(signed.header_value("x-amz-date").as_deref(), Some("20150830T123600Z"));
    }

    /// The IAM `ListUsers` example of AWS's SigV4 documentation (query parameters and a signed
    /// content type).
    #[test]
    fn signs_the_documentations_iam_example() {
        let signed = sign(
            Request::get("https://iam.amazonaws.com/?Action=ListUsers&Version=2010-05-08")
                .header("Content-Type", "application/x-www-form-urlencoded; charset=utf-8"),
            &example_credentials(),
            "us-east-1",
            "iam",
            EXAMPLE_TIME,
        )
        .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            authorization(&signed),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date, \
             Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
        );
    }

    #[test]
    fn a_session_token_is_sent_and_signed() {
        let signed = sign(
            Request::post("http://127.0.0.1:5000/").body(b"{}".to_vec()),
            &example_credentials().with_session_token("tok/en+="),
            "eu-west-1",
            "acm-pca",
            EXAMPLE_TIME,
        )
        .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(signed.header_value("x-amz-security-token").as_deref(), Some("tok/en+="));
        assert!(authorization(&signed).contains("SignedHeaders=host;x-amz-date;x-amz-security-token,"));
        assert!(!format!("{:?}", example_credentials().with_session_token("tok")).contains("EXAMPLEKEY"));
    }

    #[test]
    fn canonical_parts_follow_the_rules() {
        assert_eq!(canonical_query("b=2&a=%7E x&a=1"), "a=1&a=~%20x&b=2");
        assert_eq!(canonical_uri("/documents and settings/"), "/documents%20and%20settings/");
        assert_eq!(canonical_uri(""), "/");
        assert_eq!(canonical_header_value("  a   b  "), "a b");
        assert_eq!(uri_encode("a/b~c"), "a%2Fb~c");
    }
}
