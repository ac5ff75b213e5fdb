//! The connector against the SDK's fakes: AWS answers scripted in order per URL (every ACM PCA
//! operation is a `POST /`), and the fake clock. The real API, signatures and IAM checks are
//! exercised against moto in tests/it/aws_pca.rs.

use serde_json::json;
use trellis_plugin_sdk::testing::{self, http::respond_with_headers as answer};

use super::*;

const ENDPOINT: &str = "https://acm-pca.eu-west-1.amazonaws.com/";
const STS: &str = "https://sts.eu-west-1.amazonaws.com/";
const CA: &str = "arn:aws:acm-pca:eu-west-1:123456789012:certificate-authority/11111111-2222-3333-4444-555555555555";
const CERT_ARN: &str = "arn:aws:acm-pca:eu-west-1:123456789012:certificate-authority/1111/certificate/abc";
const LEAF: &str = "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----";
const ROOT: &str = "-----BEGIN CERTIFICATE-----\nBAUG\n-----END CERTIFICATE-----\n";

fn cfg(extra: Value) -> Config {
    let mut base = json!({ "caArn": CA, "accessKeyId": "AKIAEXAMPLE", "secretAccessKey": "secret" });
    if let (Some(base), Some(extra)) = (base.as_object_mut(), extra.as_object()) {
        base.extend(extra.clone());
    }
    testing::config(base).unwrap()
}

fn aws_error(code: &str, message: &str) -> String {
    json!({ "__type": code, "message": message }).to_string()
}

fn described(status: &str) -> String {
    json!({ "CertificateAuthority": {
        "Arn": CA, "Status": status, "Type": "ROOT", "NotAfter": 4_102_444_800.0,
        "CertificateAuthorityConfiguration": { "KeyAlgorithm": "RSA_2048", "SigningAlgorithm": "SHA256WITHRSA",
            "Subject": { "CommonName": "Root" } } } })
    .to_string()
}

fn targets() -> Vec<String> {
    testing::http::requests().iter().filter_map(|r| r.header("x-amz-target")).collect()
}

fn request() -> IssueRequest {
    let mut r = IssueRequest::for_test(
        "-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n",
        &["app.example.com"],
        30,
    );
    r.idempotency_key = "ik_1".into();
    r
}

#[test]
fn validation_names_every_problem() {
    testing::reset();
    assert_eq!(AwsPca::validate_config(&cfg(json!({}))), Ok(()));
    let bad = cfg(json!({
        "caArn": "arn:aws:acm:eu-west-1:123:certificate/x", "accessKeyId": "AK IA", "secretAccessKey": " ",
        "roleArn": "arn:aws:iam::1:user/x", "endpoint": "ftp://x", "signingAlgorithm": "MD5", "templateArn": "t",
    }));
    let Err(PluginError::InvalidConfig(issues)) = AwsPca::validate_config(&bad) else { panic!("invalid") };
    let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
    assert_eq!(
        fields,
        ["/caArn", "/accessKeyId", "/secretAccessKey", "/roleArn", "/endpoint", "/signingAlgorithm", "/templateArn"]
    );
    let Err(PluginError::InvalidConfig(issues)) = AwsPca::validate_config(&cfg(json!({ "region": "us-east-1" })))
    else {
        panic!("region differs from the ARN's")
    };
    assert!(issues[0].message.contains("eu-west-1"), "{issues:?}");
    assert!(AwsPca::validate_config(&cfg(json!({ "externalId": "x" }))).is_err(), "externalId needs roleArn");
}

#[test]
fn issues_signed_requests_and_polls_until_the_certificate_is_ready() {
    testing::reset();
    testing::http::respond("POST", ENDPOINT, 200, described("ACTIVE"));
    testing::http::respond("POST", ENDPOINT, 200, json!({ "CertificateArn": CERT_ARN }).to_string());
    testing::http::respond("POST", ENDPOINT, 400, aws_error("RequestInProgressException", "wait"));
    testing::http::respond("POST", ENDPOINT, 200, json!({ "Certificate": LEAF, "CertificateChain": ROOT }).to_string());

    let outcome = AwsPca::issue(&testing::context("ca_1"), &cfg(json!({})), &request()).unwrap();
    let IssueOutcome::Issued(issued) = outcome else { panic!("issued: {outcome:?}") };
    assert_eq!(issued.ca_reference(), Some(CERT_ARN));
    assert_eq!(issued.certificate_pem(), LEAF);
    assert_eq!(
        targets(),
        [
            "ACMPrivateCA.DescribeCertificateAuthority",
            "ACMPrivateCA.IssueCertificate",
            "ACMPrivateCA.GetCertificate",
            "ACMPrivateCA.GetCertificate"
        ]
    );
    let sent = testing::http::requests();
    let issue = &sent[1];
    assert_eq!(issue.header("content-type").as_deref(), Some("application/x-amz-json-1.1"));
    let authorization = issue.header("authorization").unwrap_or_default();
    assert!(authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIAEXAMPLE/"), "{authorization}");
    assert!(authorization.contains("/eu-west-1/acm-pca/aws4_request"), "{authorization}");
    let body = issue.json();
    assert_eq!(body["SigningAlgorithm"], "SHA256WITHRSA", "the CA's own, described once");
    assert_eq!(body["Validity"], json!({ "Value": 30, "Type": "DAYS" }));
    assert_eq!(body["IdempotencyToken"].as_str().map(str::len), Some(32));
    assert_eq!(body["Csr"], util::base64(request().csr_pem.trim().as_bytes()), "Csr is the PEM, base64");

    // The second issuance knows the signing algorithm (state) and sends the same token for the
    // same idempotency key.
    let remembered = state::get(&format!("{SIGNING_ALGORITHM_STATE}{CA}")).unwrap();
    testing::reset();
    state::set(&format!("{SIGNING_ALGORITHM_STATE}{CA}"), &remembered.unwrap_or_default()).unwrap();
    testing::http::respond("POST", ENDPOINT, 200, json!({ "CertificateArn": CERT_ARN }).to_string());
    testing::http::respond("POST", ENDPOINT, 200, json!({ "Certificate": LEAF }).to_string());
    AwsPca::issue(&testing::context("ca_1"), &cfg(json!({})), &request()).unwrap();
    let sent = testing::http::requests();
    assert_eq!(sent[0].header("x-amz-target").as_deref(), Some("ACMPrivateCA.IssueCertificate"));
    assert_eq!(sent[0].json()["IdempotencyToken"], body["IdempotencyToken"]);
    assert_eq!(sent[0].json()["SigningAlgorithm"], "SHA256WITHRSA");
}

#[test]
fn answers_pending_with_the_certificate_arn_when_the_budget_runs_out() {
    testing::reset();
    testing::http::respond("POST", ENDPOINT, 200, json!({ "CertificateArn": CERT_ARN }).to_string());
    testing::http::respond("POST", ENDPOINT, 400, aws_error("RequestInProgressException", "wait"));
    let mut ctx = testing::context("ca_1");
    ctx.time_budget_ms = 3_000;
    let outcome = AwsPca::issue(&ctx, &cfg(json!({ "signingAlgorithm": "SHA256WITHRSA" })), &request()).unwrap();
    let IssueOutcome::Pending { reference, .. } = outcome else { panic!("pending: {outcome:?}") };
    assert_eq!(reference, CERT_ARN);

    testing::http::respond("POST", ENDPOINT, 200, json!({ "Certificate": LEAF }).to_string());
    let polled = AwsPca::poll_issue(&ctx, &cfg(json!({})), &reference, &request()).unwrap();
    assert!(matches!(polled, IssueOutcome::Issued(_)), "{polled:?}");
}

#[test]
fn revokes_by_colon_separated_serial_and_refuses_a_hold() {
    testing::reset();
    testing::http::respond("POST", ENDPOINT, 200, "");
    let request = RevokeRequest::for_test("0a1b2c", RevocationReason::KeyCompromise);
    AwsPca::revoke(&testing::context("ca_1"), &cfg(json!({})), &request).unwrap();
    let body = testing::http::requests()[0].json();
    assert_eq!(body["CertificateSerial"], "0A:1B:2C");
    assert_eq!(body["RevocationReason"], "KEY_COMPROMISE");
    assert_eq!(colon_serial("abc").as_deref(), Some("0A:BC"));
    assert_eq!(colon_serial("00ff").as_deref(), Some("FF"));
    assert_eq!(colon_serial("xyz"), None);

    testing::http::respond("POST", ENDPOINT, 400, aws_error("RequestAlreadyProcessedException", "already revoked"));
    AwsPca::revoke(&testing::context("ca_1"), &cfg(json!({})), &request).unwrap();

    let hold = RevokeRequest::for_test("0a", RevocationReason::CertificateHold);
    assert!(matches!(
        AwsPca::revoke(&testing::context("ca_1"), &cfg(json!({})), &hold),
        Err(PluginError::InvalidInput(_))
    ));
}

#[test]
fn a_role_is_assumed_and_its_session_signs() {
    testing::reset();
    let sts = "<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>ASIATEMP</AccessKeyId>\
        <SecretAccessKey>s3cret</SecretAccessKey><SessionToken>tok&amp;en</SessionToken></Credentials>\
        </AssumeRoleResult></AssumeRoleResponse>";
    answer("POST", STS, 200, &[("content-type", "text/xml")], sts);
    testing::http::respond("POST", ENDPOINT, 200, described("ACTIVE"));
    let config = cfg(json!({ "roleArn": "arn:aws:iam::123456789012:role/issuer", "externalId": "x-1" }));
    let report = AwsPca::test_connection(&testing::context("ca_1"), &config).unwrap();
    assert!(report.success(), "{report:?}");
    let sent = testing::http::requests();
    let form = String::from_utf8_lossy(&sent[0].body).into_owned();
    assert!(
        form.contains("Action=AssumeRole")
            && form.contains("RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fissuer"),
        "{form}"
    );
    assert!(form.contains("ExternalId=x-1"), "{form}");
    assert!(sent[0].header("authorization").unwrap_or_default().contains("/eu-west-1/sts/aws4_request"));
    assert!(sent[1].header("authorization").unwrap_or_default().contains("Credential=ASIATEMP/"));
    assert_eq!(sent[1].header("x-amz-security-token").as_deref(), Some("tok&en"));
}

#[test]
fn the_test_reports_credentials_state_and_expiry() {
    testing::reset();
    answer(
        "POST",
        ENDPOINT,
        400,
        &[],
        aws_error("UnrecognizedClientException", "The security token included in the request is invalid."),
    );
    let report = AwsPca::test_connection(&testing::context("ca_1"), &cfg(json!({}))).unwrap();
    assert!(!report.success());
    let check = &report.checks()[0];
    assert_eq!(check.name, "credentials");
    assert!(
        check.message.contains("UnrecognizedClientException") && check.message.contains("secretAccessKey"),
        "{check:?}"
    );

    testing::reset();

    testing::http::respond("POST", ENDPOINT, 200, described("PENDING_CERTIFICATE"));
    let report = AwsPca::test_connection(&testing::context("ca_1"), &cfg(json!({}))).unwrap();
    assert!(!report.success());
    assert_eq!(report.details()["status"], "PENDING_CERTIFICATE");
    assert_eq!(report.details()["keyAlgorithm"], "RSA_2048");
    assert_eq!(report.details()["notAfter"], "2100-01-01T00:00:00.000Z");

    // Setup refuses a record whose credentials AWS rejects.
    testing::reset();
    testing::http::respond("POST", ENDPOINT, 400, aws_error("AccessDeniedException", "not allowed"));
    let err = AwsPca::setup(&testing::context("ca_1"), &cfg(json!({}))).unwrap_err();
    assert!(matches!(&err, PluginError::Unauthorized(m) if m.contains("acm-pca:IssueCertificate")), "{err:?}");
}

#[test]
fn the_endpoint_comes_from_config_then_the_record_then_the_region() {
    testing::reset();
    let config = cfg(json!({}));
    let resolved = config.resolve().unwrap();
    assert_eq!(resolved.endpoint(&testing::context("c")), "https://acm-pca.eu-west-1.amazonaws.com");
    assert_eq!(
        resolved.endpoint(&testing::context("c").with_endpoint("http://127.0.0.1:5000")),
        "http://127.0.0.1:5000"
    );
    let config = cfg(json!({ "endpoint": "https://vpce.example" }));
    let resolved = config.resolve().unwrap();
    assert_eq!(
        resolved.endpoint(&testing::context("c").with_endpoint("http://127.0.0.1:5000")),
        "https://vpce.example"
    );
}
