//! The `aws_private_ca` connector (`plugins/aws-pca`) through the real binary against moto's
//! AWS (tests/src/moto.rs), with IAM enforced: moto recomputes every SigV4 signature and checks
//! the signer's policy. Issue (the chain verifies against the CA's root), revoke (recorded by
//! the CA), the connection test, an assumed role, and wrong credentials, unknown keys and
//! missing permissions refused with errors that say what to fix. Each test runs its own moto.

use serde_json::{json, Value};
use trellis_tests::moto::Moto;
use trellis_tests::{Client, Response, Server};

use crate::cas::Openssl;

struct Setup {
    moto: Moto,
    server: Server,
    admin: Client,
}

async fn setup() -> Setup {
    let moto = Moto::start();
    // moto listens on loopback, a private address the operator must allow.
    let server = Server::start_with(&[("TRELLIS_PLUGIN_ALLOW_PRIVATE_NETWORKS", "true")]);
    let admin = server.admin().await;
    Setup { moto, server, admin }
}

impl Setup {
    /// A config for the active CA signed by `user`'s key, with `extra` members.
    fn config(&self, user: &str, extra: Value) -> Value {
        let mut config = json!({
            "caArn": self.moto.get("/caArn"),
            "accessKeyId": self.moto.get(&format!("/{user}/accessKeyId")),
            "secretAccessKey": self.moto.get(&format!("/{user}/secretAccessKey")),
        });
        if let (Some(config), Some(extra)) = (config.as_object_mut(), extra.as_object()) {
            config.extend(extra.clone());
        }
        config
    }

    async fn create(&self, config: Value) -> Response {
        self.admin
            .post(
                "/api/certificate-authorities",
                json!({ "name": "AWS Private CA", "type": "aws_private_ca", "url": self.moto.url, "config": config }),
            )
            .await
    }

    async fn ca(&self, config: Value) -> i64 {
        let created = self.create(config).await;
        assert_eq!(created.status, 201, "{}\n{}\nmoto: {}", created.body, self.server.log(), self.moto.log());
        created.body["data"]["id"].as_i64().expect("CA id")
    }

    async fn test(&self, ca: i64) -> Value {
        let tested = self.admin.post(&format!("/api/certificate-authorities/{ca}/test"), json!({})).await;
        assert_eq!(tested.status, 200, "{}", tested.body);
        tested.body["data"].clone()
    }

    async fn issue(&self, ca: i64, names: &[&str]) -> Response {
        self.admin
            .post("/api/certificates/issue", json!({ "caId": ca, "commonName": names[0], "subjectAltNames": names }))
            .await
    }
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no check {name}: {report}"))
}

/// The serial as the CA recorded its revocation (`CertificateSerial`: uppercase hex pairs).
fn colon_serial(serial_hex: &str) -> String {
    let digits = serial_hex.to_ascii_uppercase();
    let digits = digits.trim_start_matches('0');
    let padded = if digits.len() % 2 == 1 { format!("0{digits}") } else { digits.to_owned() };
    padded.as_bytes().chunks(2).map(|pair| String::from_utf8_lossy(pair).into_owned()).collect::<Vec<_>>().join(":")
}

#[tokio::test]
async fn issues_revokes_and_tests_through_aws_private_ca() {
    let s = setup().await;
    let created = s.create(s.config("issuer", json!({}))).await;
    assert_eq!(created.status, 201, "{}\n{}", created.body, s.server.log());
    let ca = created.body["data"]["id"].as_i64().expect("id");
    let secret = s.moto.get("/issuer/secretAccessKey");
    assert!(!created.body.to_string().contains(&secret), "the secret is never echoed: {}", created.body);

    let report = s.test(ca).await;
    assert_eq!(report["success"], true, "{report}");
    assert_eq!(check(&report, "credentials")["status"], "pass");
    assert_eq!(check(&report, "ca-status")["status"], "pass");
    assert_eq!(check(&report, "ca-validity")["status"], "pass");
    assert_eq!(report["details"]["caArn"], s.moto.get("/caArn"));
    assert_eq!(report["details"]["status"], "ACTIVE");
    assert_eq!(report["details"]["keyAlgorithm"], "RSA_2048");
    assert_eq!(report["details"]["endpoint"], s.moto.url);

    let issued = s.issue(ca, &["app.example.com", "www.app.example.com"]).await;
    assert_eq!(issued.status, 201, "{}\n{}\nmoto: {}", issued.body, s.server.log(), s.moto.log());
    let cert = &issued.body["data"];
    assert_eq!(cert["issuanceSource"], "external", "{cert}");
    assert_eq!(cert["status"], "active");
    assert!(cert["issuer"].as_str().unwrap_or_default().contains("Moto Private Root"), "{cert}");

    let openssl = Openssl::new();
    openssl.write("root.pem", s.moto.get("/rootPem"));
    openssl.write("leaf.pem", cert["certificate"].as_str().expect("PEM"));
    let (ok, out) = openssl.verify(&["-CAfile", "root.pem", "leaf.pem"]);
    assert!(ok, "the leaf verifies against the private CA's root: {out}");
    let chain: Vec<&str> = cert["chain"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert!(
        chain.iter().any(|pem| pem.trim() == s.moto.get("/rootPem").trim()),
        "the CA's chain comes back: {chain:?}"
    );

    let id = cert["id"].as_i64().expect("id");
    let revoked = s.admin.post(&format!("/api/certificates/{id}/revoke"), json!({ "reason": "keyCompromise" })).await;
    assert_eq!(revoked.status, 200, "{}\n{}", revoked.body, s.server.log());
    let state = s.moto.state();
    let recorded = &state["acmpca"]["CertificateAuthority"]
        .as_array()
        .and_then(|cas| cas.iter().find(|c| c["arn"] == s.moto.get("/caArn")).cloned())
        .expect("the CA in moto's state")["revoked_certificates"];
    let serial = colon_serial(cert["serialNumber"].as_str().expect("serial"));
    assert_eq!(recorded[&serial]["revocation_reason"], "KEY_COMPROMISE", "moto recorded {recorded}, we sent {serial}");

    let hold = s.issue(ca, &["hold.example.com"]).await;
    assert_eq!(hold.status, 201, "{}", hold.body);
    let hold_id = hold.body["data"]["id"].as_i64().expect("id");
    let refused =
        s.admin.post(&format!("/api/certificates/{hold_id}/revoke"), json!({ "reason": "certificateHold" })).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.to_string().contains("no certificate hold"), "{}", refused.body);
}

#[tokio::test]
async fn wrong_credentials_unknown_keys_and_missing_permissions_are_refused_clearly() {
    let s = setup().await;
    let cases = [
        ("wrong secret", json!({ "secretAccessKey": "not-the-secret" }), "SignatureDoesNotMatch", "secretAccessKey"),
        ("unknown key", json!({ "accessKeyId": "AKIAUNKNOWN0000000000" }), "InvalidClientTokenId", "accessKeyId"),
        ("no permission", json!({}), "AccessDenied", "acm-pca:IssueCertificate"),
    ];
    for (case, extra, code, hint) in cases {
        let user = if case == "no permission" { "bystander" } else { "issuer" };
        let refused = s.create(s.config(user, extra)).await;
        assert_eq!(refused.status, 502, "{case}: {}", refused.body);
        assert_eq!(refused.error_code(), "UPSTREAM_UNAUTHORIZED", "{case}");
        let message = refused.body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(code) && message.contains(hint), "{case}: {message}");
        assert!(!message.contains("not-the-secret"), "{case}: the secret is never echoed: {message}");
    }
    let listed = s.admin.get("/api/certificate-authorities").await;
    assert_eq!(listed.body["data"].as_array().map(Vec::len), Some(0), "nothing was created: {}", listed.body);

    // Credentials that go bad later (a PATCH does not re-run setup): the test says so and
    // issuance fails with the same clear error.
    let ca = s.ca(s.config("issuer", json!({}))).await;
    let patched = s
        .admin
        .patch(
            &format!("/api/certificate-authorities/{ca}"),
            json!({ "config": s.config("issuer", json!({ "secretAccessKey": "rotated-away" })) }),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    let report = s.test(ca).await;
    assert_eq!(report["success"], false, "{report}");
    let credentials = check(&report, "credentials")["message"].as_str().unwrap_or_default().to_owned();
    assert!(credentials.contains("SignatureDoesNotMatch"), "{credentials}");
    let issued = s.issue(ca, &["late.example.com"]).await;
    assert_eq!(issued.status, 502, "{}", issued.body);
    assert_eq!(issued.error_code(), "UPSTREAM_UNAUTHORIZED");

    let invalid = s.create(json!({ "caArn": "arn:aws:s3:::bucket", "accessKeyId": "AKIA" })).await;
    assert_eq!(invalid.status, 400, "{}", invalid.body);
    let text = invalid.body.to_string();
    assert!(text.contains("/caArn") && text.contains("/secretAccessKey"), "every problem is named: {text}");
}

#[tokio::test]
async fn an_assumed_role_issues_and_a_role_it_may_not_assume_is_refused() {
    let s = setup().await;
    let role = json!({ "roleArn": s.moto.get("/roleArn"), "stsEndpoint": s.moto.url });
    let ca = s.ca(s.config("assumer", role.clone())).await;
    let report = s.test(ca).await;
    assert_eq!(report["success"], true, "{report}");
    assert_eq!(check(&report, "assume-role")["status"], "pass");
    assert_eq!(report["details"]["roleArn"], s.moto.get("/roleArn"));
    let issued = s.issue(ca, &["role.example.com"]).await;
    assert_eq!(issued.status, 201, "{}\n{}\nmoto: {}", issued.body, s.server.log(), s.moto.log());

    // The assumer's own key may not use the CA, and the issuer may not assume the role.
    let direct = s.create(s.config("assumer", json!({}))).await;
    assert_eq!((direct.status, direct.error_code()), (502, "UPSTREAM_UNAUTHORIZED"), "{}", direct.body);
    let not_trusted = s.create(s.config("bystander", role)).await;
    assert_eq!((not_trusted.status, not_trusted.error_code()), (502, "UPSTREAM_UNAUTHORIZED"), "{}", not_trusted.body);
    let message = not_trusted.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("assuming") && message.contains("trellis-issuer"), "{message}");
}

#[tokio::test]
async fn a_ca_without_its_certificate_fails_the_test_and_moves_to_error() {
    let s = setup().await;
    let ca = s.ca(s.config("issuer", json!({ "caArn": s.moto.get("/pendingCaArn") }))).await;
    let report = s.test(ca).await;
    assert_eq!(report["success"], false, "{report}");
    assert_eq!(check(&report, "credentials")["status"], "pass");
    let status = check(&report, "ca-status");
    assert_eq!(status["status"], "fail", "{report}");
    assert!(status["message"].as_str().unwrap_or_default().contains("PENDING_CERTIFICATE"), "{status}");
    let after = s.admin.get(&format!("/api/certificate-authorities/{ca}")).await.body["data"].clone();
    assert_eq!(
        (after["status"].clone(), after["healthStatus"].clone()),
        (json!("error"), json!("unhealthy")),
        "{after}"
    );

    // A CA ARN the account does not have: refused at creation, naming the ARN.
    let missing = s
        .create(s.config(
            "issuer",
            json!({ "caArn": "arn:aws:acm-pca:eu-west-1:123456789012:certificate-authority/00000000-0000-0000-0000-000000000000" }),
        ))
        .await;
    assert_eq!(missing.status, 404, "{}", missing.body);
    assert!(missing.body.to_string().contains("caArn"), "{}", missing.body);
}
