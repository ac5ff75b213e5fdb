//! POST /api/certificates/issue through the real binary: CSRs made by openssl and keys made by
//! the server, checked with `openssl verify` against what the public `/pki/{caId}/ca` serves;
//! revocation onto the CRL; templates; issuance policies (the first-party domain policy and
//! one installed at run time); and connectors that fail without harming the next issuance.

use serde_json::{json, Value};
use trellis_tests::{Client, Server};

use crate::cas::{create_ca, install_plugin, internal_intermediate, internal_root, Openssl};

/// A P-256 key and a CSR for it, made by `openssl req` (`<name>.key`, `<name>.csr`).
fn openssl_csr(openssl: &Openssl, name: &str, subject: &str, sans: &str) -> String {
    let (key, csr) = (format!("{name}.key"), format!("{name}.csr"));
    let mut args = vec!["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    args.extend_from_slice(&["-keyout", &key, "-out", &csr, "-subj", subject]);
    let san = format!("subjectAltName={sans}");
    if !sans.is_empty() {
        args.extend_from_slice(&["-addext", &san]);
    }
    openssl.ok(&args);
    openssl.read(&csr)
}

/// What `/pki/{id}/ca` serves, saved as `<file>`.
async fn save_ca_chain(server: &Server, openssl: &Openssl, id: i64, file: &str) -> String {
    let res = Client::new(server, None).get(&format!("/pki/{id}/ca")).await;
    assert_eq!(res.status, 200, "/pki/{id}/ca is public");
    assert!(res.header("content-type").is_some_and(|t| t.contains("pem")), "{:?}", res.headers);
    openssl.write(file, &res.bytes);
    String::from_utf8_lossy(&res.bytes).into_owned()
}

/// The CA's current CRL (public, DER), saved as PEM in `<file>`.
async fn save_crl(server: &Server, openssl: &Openssl, id: i64, file: &str) {
    let res = Client::new(server, None).get(&format!("/pki/{id}/crl")).await;
    assert_eq!(res.status, 200, "/pki/{id}/crl is public");
    assert_eq!(res.header("content-type"), Some("application/pkix-crl"));
    let der = format!("{file}.der");
    openssl.write(&der, &res.bytes);
    openssl.ok(&["crl", "-inform", "DER", "-in", &der, "-out", file]);
}

async fn issue(client: &Client, body: Value) -> Value {
    let res = client.post("/api/certificates/issue", body.clone()).await;
    assert_eq!(res.status, 201, "issuing {body}: {}", res.body);
    res.body["data"].clone()
}

/// Seconds since the epoch of an RFC 3339 UTC timestamp such as `2026-11-25T12:03:02.000Z`.
fn epoch_secs(text: &str) -> i64 {
    let field = |range: std::ops::Range<usize>| -> i64 {
        text.get(range).and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("not RFC 3339: {text}"))
    };
    let (year, month, day) = (field(0..4), field(5..7), field(8..10));
    let (hour, minute, second) = (field(11..13), field(14..16), field(17..19));
    // Days from the civil date (Howard Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + hour * 3600 + minute * 60 + second
}

/// Seconds between notBefore and expiresAt of an issued certificate record.
pub(crate) fn validity_secs(cert: &Value) -> i64 {
    let field = |name: &str| epoch_secs(cert[name].as_str().unwrap_or_else(|| panic!("{name} missing: {cert}")));
    field("expiresAt") - field("notBefore")
}

fn reason_codes(res: &trellis_tests::Response) -> Vec<String> {
    res.body["error"]["details"]["reasons"]
        .as_array()
        .map(|reasons| {
            reasons
                .iter()
                .map(|r| {
                    assert!(r["message"].as_str().is_some_and(|m| !m.is_empty()), "a reason without message: {r}");
                    r["code"].as_str().unwrap_or_default().to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_p256_csr_from_openssl_is_issued_through_an_intermediate_and_verifies() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Verify Root").await;
    let inter = internal_intermediate(&admin, "Verify Issuing CA", root).await;
    let openssl = Openssl::new();
    let csr = openssl_csr(
        &openssl,
        "leaf",
        "/CN=app.example.com/O=Ignored Org",
        "DNS:app.example.com,DNS:www.example.com,IP:10.1.2.3",
    );

    let cert = issue(
        &admin,
        json!({
            "caId": inter,
            "caType": "internal",
            "csr": csr,
            "templateId": "web_server",
            "subject": { "organization": "Trellis Tests", "country": "de", "locality": "Berlin" },
            "validityDays": 45,
            "autoRenewal": true,
        }),
    )
    .await;
    assert!(cert["id"].is_i64());
    assert_eq!(cert["caId"], inter);
    assert_eq!(cert["issuanceSource"], "internal");
    assert_eq!(cert["commonName"], "app.example.com");
    assert_eq!(cert["autoRenewal"], true);
    assert_eq!(cert["status"], "active");
    assert_eq!(cert["keyAlgorithm"], "ECDSA");
    assert_eq!(cert["keySize"], 256);
    assert_eq!(cert["usageCategory"], "TLS");
    assert!(cert["issuer"].as_str().is_some_and(|i| i.contains("Verify Issuing CA")), "{cert}");
    let subject = cert["subject"].as_str().unwrap_or_default();
    assert!(
        subject.contains("O=Trellis Tests") && subject.contains("C=DE") && subject.contains("L=Berlin"),
        "{subject}"
    );
    assert!(!subject.contains("Ignored Org"), "the CSR's own subject is not copied: {subject}");
    assert_eq!(
        cert["subjectAlternativeNames"],
        json!(["DNS:app.example.com", "DNS:www.example.com", "IP:10.1.2.3"]),
        "the CSR's names, as no subjectAltNames were given"
    );
    assert!(
        cert["serialNumber"].as_str().is_some_and(|s| s.len() >= 16 && s.chars().all(|c| c.is_ascii_hexdigit())),
        "{cert}"
    );
    assert_eq!(validity_secs(&cert), 45 * 86_400, "{cert}");
    let chain = cert["chain"].as_array().cloned().unwrap_or_default();
    assert_eq!(chain.len(), 1, "the issuing intermediate: {cert}");

    let leaf = cert["certificate"].as_str().expect("PEM");
    openssl.write("leaf.pem", leaf);
    openssl.write("untrusted.pem", chain.iter().filter_map(Value::as_str).collect::<String>());
    save_ca_chain(&server, &openssl, inter, "inter-ca.pem").await;
    save_ca_chain(&server, &openssl, root, "root-ca.pem").await;
    let (ok, out) = openssl.verify(&["-CAfile", "inter-ca.pem", "leaf.pem"]);
    assert!(ok, "verify against /pki/{{inter}}/ca: {out}");
    let (ok, out) =
        openssl.verify(&["-CAfile", "root-ca.pem", "-untrusted", "untrusted.pem", "-purpose", "sslserver", "leaf.pem"]);
    assert!(ok, "verify against the root with the returned chain: {out}");
    let (ok, _) = openssl.verify(&["-CAfile", "root-ca.pem", "leaf.pem"]);
    assert!(!ok, "without the intermediate the leaf does not verify");
    // The certificate carries the CSR's key.
    let csr_key = openssl.ok(&["req", "-in", "leaf.csr", "-noout", "-pubkey"]);
    let cert_key = openssl.ok(&["x509", "-in", "leaf.pem", "-noout", "-pubkey"]);
    assert_eq!(csr_key, cert_key);
    let text = openssl.ok(&["x509", "-in", "leaf.pem", "-noout", "-text"]);
    assert!(text.contains("TLS Web Server Authentication"), "{text}");
    assert!(text.contains(&format!("/pki/{inter}/crl")), "CRL distribution point: {text}");

    // In the inventory, with the PEM; the key stayed with the requester.
    let id = cert["id"].as_i64().unwrap();
    let got = admin.get(&format!("/api/certificates/{id}")).await;
    assert_eq!(got.body["data"]["certificate"], cert["certificate"]);
    let status = admin.get(&format!("/api/certificates/{id}/private-key-status")).await;
    assert_eq!(status.body["data"]["downloadable"], false, "{}", status.body);
    let key = admin.get(&format!("/api/certificates/{id}/private-key")).await;
    assert!(key.status == 403 || key.status == 404, "no key to download: {} {}", key.status, key.body);
    assert!(!key.body.to_string().contains("PRIVATE KEY"));
    let audit = admin.get("/api/audit-logs?action=certificate.issued").await;
    assert_eq!(audit.body["total"], 1, "{}", audit.body);
    let events = admin.get("/api/events?type=certificate.created").await;
    assert_eq!(events.body["total"], 1, "{}", events.body);
}

#[tokio::test]
async fn a_server_generated_key_is_downloadable_and_matches_the_certificate() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Keygen Root").await;
    let openssl = Openssl::new();
    save_ca_chain(&server, &openssl, root, "root.pem").await;

    let cert = issue(
        &admin,
        json!({
            "caId": root,
            "commonName": "api.example.com",
            "subjectAltNames": ["api.example.com", "api-internal.example.com", "10.9.8.7"],
            "keyAlgorithm": "ecdsa-p384",
        }),
    )
    .await;
    assert_eq!(cert["keyAlgorithm"], "ECDSA");
    assert_eq!(cert["keySize"], 384);
    assert_eq!(cert["issuanceSource"], "internal");
    assert_eq!(
        cert["subjectAlternativeNames"],
        json!(["DNS:api.example.com", "DNS:api-internal.example.com", "IP:10.9.8.7"])
    );
    assert_eq!(validity_secs(&cert), 90 * 86_400, "web_server's default validity");
    // Issued by the root itself: the chain is that root (issue 21, finding 11: it was empty).
    let root_pem =
        admin.get(&format!("/api/certificate-authorities/{}", cert["caId"])).await.body["data"]["certificate"].clone();
    assert_eq!(cert["chain"], json!([root_pem]), "issued by the root itself: {cert}");
    let id = cert["id"].as_i64().unwrap();
    let status = admin.get(&format!("/api/certificates/{id}/private-key-status")).await;
    assert_eq!(status.body["data"]["downloadable"], true, "{}", status.body);
    let key = admin.get(&format!("/api/certificates/{id}/private-key")).await;
    assert_eq!(key.status, 200, "{}", key.body);
    let pem = key.body["data"]["privateKey"].as_str().expect("privateKey PEM");
    assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"), "{pem}");
    openssl.write("leaf.pem", cert["certificate"].as_str().unwrap());
    openssl.write("leaf.key", pem);
    assert_eq!(
        openssl.ok(&["pkey", "-in", "leaf.key", "-pubout"]),
        openssl.ok(&["x509", "-in", "leaf.pem", "-noout", "-pubkey"]),
        "the downloaded key is the certificate's"
    );
    let (ok, out) = openssl.verify(&["-CAfile", "root.pem", "leaf.pem"]);
    assert!(ok, "{out}");
    let downloads = admin.get("/api/audit-logs?action=certificate.private_key_downloaded").await;
    assert_eq!(downloads.body["total"], 1, "the download is audited: {}", downloads.body);

    // Other key algorithms, templates and name kinds.
    for (body, key_algorithm, usage) in [
        (json!({ "commonName": "ed.example.com", "keyAlgorithm": "ed25519" }), "ED25519", "TLS"),
        (json!({ "commonName": "rsa.example.com", "keyAlgorithm": "rsa-2048" }), "RSA", "TLS"),
        (
            json!({ "commonName": "alice", "templateId": "client_auth", "subjectAltNames": ["alice@example.com"] }),
            "ECDSA",
            "Client Auth",
        ),
        (json!({ "commonName": "Release Signing", "templateId": "code_signing" }), "ECDSA", "Code Signing"),
        (
            json!({ "commonName": "bob", "templateId": "smime", "subjectAltNames": ["bob@example.com"] }),
            "ECDSA",
            "S/MIME",
        ),
        (
            json!({ "commonName": "sensor-7", "templateId": "device", "subjectAltNames": ["urn:dev:sensor-7", "sensor-7.iot.example.com"] }),
            "ECDSA",
            "TLS",
        ),
    ] {
        let mut body = body;
        body["caId"] = json!(root);
        let issued = issue(&admin, body.clone()).await;
        assert_eq!(issued["keyAlgorithm"], key_algorithm, "{body}: {issued}");
        assert_eq!(issued["usageCategory"], usage, "{body}: {issued}");
        openssl.write("other.pem", issued["certificate"].as_str().unwrap());
        let (ok, out) = openssl.verify(&["-CAfile", "root.pem", "other.pem"]);
        assert!(ok, "{body}: {out}");
    }
    let listed = admin.get("/api/certificates?issuanceSource=internal").await;
    assert_eq!(listed.body["total"], 7, "{}", listed.body);
}

#[tokio::test]
async fn refused_issue_requests_say_why_and_issue_nothing() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Strict Root").await;
    let openssl = Openssl::new();
    let good_csr = openssl_csr(&openssl, "good", "/CN=good.example.com", "DNS:good.example.com");

    let missing = admin.post("/api/certificates/issue", json!({ "caId": 424242, "commonName": "x.example.com" })).await;
    assert_eq!(missing.status, 404, "{}", missing.body);
    assert_eq!(missing.error_code(), "NOT_FOUND");

    // A weak RSA key (openssl refuses nothing; the service must).
    openssl.ok(&[
        "req",
        "-new",
        "-newkey",
        "rsa:1024",
        "-nodes",
        "-keyout",
        "weak.key",
        "-out",
        "weak.csr",
        "-subj",
        "/CN=weak.example.com",
    ]);
    let weak = openssl.read("weak.csr");
    // A CSR whose signature does not match its content.
    let der = {
        openssl.ok(&["req", "-in", "good.csr", "-outform", "DER", "-out", "good.der"]);
        let mut der = std::fs::read(openssl.path("good.der")).unwrap();
        let n = der.len();
        der[n - 5] ^= 0x55;
        der
    };
    openssl.write("tampered.der", &der);
    openssl.ok(&["req", "-inform", "DER", "-in", "tampered.der", "-out", "tampered.csr"]);
    let tampered = openssl.read("tampered.csr");

    let cases = [
        (json!({ "caId": root, "caType": "acme", "commonName": "x.example.com" }), "caType", "caType mismatch"),
        (json!({ "caId": root }), "commonName", "neither csr nor commonName"),
        (json!({ "caId": root, "csr": "not a csr" }), "csr", "not PEM"),
        (json!({ "caId": root, "csr": tampered }), "csr", "bad signature"),
        (json!({ "caId": root, "csr": weak }), "csr", "RSA 1024"),
        (
            json!({ "caId": root, "csr": good_csr, "keyAlgorithm": "ecdsa-p384" }),
            "keyAlgorithm",
            "keyAlgorithm with a csr",
        ),
        (
            json!({ "caId": root, "commonName": "x.example.com", "keyAlgorithm": "dsa-1024" }),
            "keyAlgorithm",
            "unknown key",
        ),
        (
            json!({ "caId": root, "commonName": "x.example.com", "validityDays": 399 }),
            "validityDays",
            "over web_server's 398",
        ),
        (
            json!({ "caId": root, "commonName": "x.example.com", "templateId": "nope" }),
            "templateId",
            "unknown template",
        ),
        (
            json!({ "caId": root, "commonName": "x.example.com", "subjectAltNames": ["ops@example.com"] }),
            "subjectAltNames",
            "e-mail on web_server",
        ),
        (
            json!({ "caId": root, "commonName": "x.example.com", "subjectAltNames": ["bad name!"] }),
            "subjectAltNames",
            "not a name",
        ),
        (
            json!({ "caId": root, "commonName": "bob", "templateId": "smime" }),
            "subjectAltNames",
            "smime needs an address",
        ),
        (
            json!({ "caId": root, "commonName": "x.example.com", "subject": { "country": "Germany" } }),
            "subject.country",
            "country",
        ),
    ];
    for (body, field, what) in cases {
        let res = admin.post("/api/certificates/issue", body).await;
        assert_eq!(res.status, 400, "{what}: {}", res.body);
        assert_eq!(res.error_code(), "VALIDATION_ERROR", "{what}");
        assert_eq!(res.body["error"]["details"]["field"], field, "{what}: {}", res.body);
    }
    assert_eq!(admin.get("/api/certificates").await.body["total"], 0, "nothing was issued");
    // The longest validity a template allows is fine, and caType may name the CA's own type.
    let longest = issue(
        &admin,
        json!({ "caId": root, "caType": "internal", "commonName": "long.example.com", "validityDays": 398 }),
    )
    .await;
    assert_eq!(validity_secs(&longest), 398 * 86_400);
    issue(&admin, json!({ "caId": root, "csr": good_csr })).await;
}

#[tokio::test]
async fn templates_are_the_built_ins() {
    let server = Server::start();
    let admin = server.admin().await;
    let res = admin.get("/api/certificate-templates").await;
    assert_eq!(res.status, 200, "{}", res.body);
    let ids: Vec<&str> = res.body["data"].as_array().unwrap().iter().filter_map(|t| t["id"].as_str()).collect();
    for id in ["web_server", "client_auth", "code_signing", "smime", "device"] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
    let web = admin.get("/api/certificate-templates/web_server").await;
    assert_eq!(web.status, 200);
    assert_eq!(web.body["data"]["maxValidityDays"], 398);
    assert_eq!(web.body["data"]["defaultValidityDays"], 90);
    assert_eq!(admin.get("/api/certificate-templates/nope").await.status, 404);
    let cas_only = server.key_client(&["cas:read", "cas:write"]).await;
    assert_eq!(cas_only.get("/api/certificate-templates").await.status, 403);
}

#[tokio::test]
async fn revocation_puts_the_certificate_on_the_public_crl() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "CRL Root").await;
    let inter = internal_intermediate(&admin, "CRL Issuing CA", root).await;
    let openssl = Openssl::new();
    save_ca_chain(&server, &openssl, inter, "ca.pem").await;
    let doomed =
        issue(&admin, json!({ "caId": inter, "csr": openssl_csr(&openssl, "doomed", "/CN=doomed.example.com", "") }))
            .await;
    let spared = issue(&admin, json!({ "caId": inter, "commonName": "spared.example.com" })).await;
    openssl.write("doomed.pem", doomed["certificate"].as_str().unwrap());
    openssl.write("spared.pem", spared["certificate"].as_str().unwrap());

    save_crl(&server, &openssl, inter, "crl.pem").await;
    save_crl(&server, &openssl, root, "root-crl.pem").await;
    let (ok, out) = openssl.verify(&["-crl_check", "-CAfile", "ca.pem", "-CRLfile", "crl.pem", "doomed.pem"]);
    assert!(ok, "not revoked yet: {out}");

    let revoked =
        admin.post(&format!("/api/certificates/{}/revoke", doomed["id"]), json!({ "reason": "keyCompromise" })).await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    assert_eq!(revoked.body["data"]["status"], "revoked");
    let again = admin.post(&format!("/api/certificates/{}/revoke", doomed["id"]), json!({})).await;
    assert_eq!(again.status, 400, "{}", again.body);
    assert_eq!(again.error_code(), "VALIDATION_ERROR");

    save_crl(&server, &openssl, inter, "crl.pem").await;
    let listing = openssl.ok(&["crl", "-in", "crl.pem", "-noout", "-text"]);
    let serial = doomed["serialNumber"].as_str().unwrap().to_ascii_uppercase();
    assert!(listing.contains(&serial), "{serial} not on the CRL: {listing}");
    assert!(listing.contains("Key Compromise"), "{listing}");
    assert!(!listing.contains(&spared["serialNumber"].as_str().unwrap().to_ascii_uppercase()));
    let (ok, out) = openssl.verify(&["-crl_check", "-CAfile", "ca.pem", "-CRLfile", "crl.pem", "doomed.pem"]);
    assert!(!ok && out.contains("certificate revoked"), "{out}");
    let (ok, out) = openssl.verify(&["-crl_check", "-CAfile", "ca.pem", "-CRLfile", "crl.pem", "spared.pem"]);
    assert!(ok, "the other certificate stays good: {out}");
    // Checking the whole chain needs the root's CRL too, which lists nothing.
    openssl.write("crls.pem", openssl.read("crl.pem") + &openssl.read("root-crl.pem"));
    let (ok, out) = openssl.verify(&["-crl_check_all", "-CAfile", "ca.pem", "-CRLfile", "crls.pem", "spared.pem"]);
    assert!(ok, "{out}");
    let (ok, out) = openssl.verify(&["-crl_check_all", "-CAfile", "ca.pem", "-CRLfile", "crls.pem", "doomed.pem"]);
    assert!(!ok && out.contains("certificate revoked"), "{out}");

    // OCSP (RFC 6960) from the running binary, as openssl asks it: POST with a nonce, and GET.
    let ocsp_url = server.url(&format!("/pki/{inter}/ocsp"));
    let ocsp = |cert: &str, extra: &[&str]| {
        let mut args = vec!["ocsp", "-issuer", "ca.pem", "-cert", cert, "-url", ocsp_url.as_str(), "-CAfile", "ca.pem"];
        args.extend_from_slice(extra);
        let output = openssl.run(&args);
        String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr)
    };
    let answer = ocsp("doomed.pem", &[]);
    assert!(answer.contains("Response verify OK") && answer.contains("doomed.pem: revoked"), "{answer}");
    assert!(answer.contains("keyCompromise"), "{answer}");
    let answer = ocsp("spared.pem", &["-no_nonce"]);
    assert!(answer.contains("Response verify OK") && answer.contains("spared.pem: good"), "{answer}");
    let answer = ocsp("spared.pem", &["-no_nonce", "-reqout", "req.der"]);
    assert!(answer.contains("good"), "{answer}");
    let encoded = std::process::Command::new("base64").args(["-w0"]).arg(openssl.path("req.der")).output().unwrap();
    let request = String::from_utf8(encoded.stdout).unwrap();
    let by_get = Client::new(&server, None).get(&format!("/pki/{inter}/ocsp/{request}")).await;
    assert_eq!(by_get.status, 200);
    openssl.write("get.der", &by_get.bytes);
    let answer = openssl.run(&[
        "ocsp",
        "-respin",
        "get.der",
        "-issuer",
        "ca.pem",
        "-cert",
        "spared.pem",
        "-CAfile",
        "ca.pem",
        "-no_nonce",
    ]);
    let answer = String::from_utf8_lossy(&answer.stdout).to_string() + &String::from_utf8_lossy(&answer.stderr);
    assert!(answer.contains("Response verify OK") && answer.contains("spared.pem: good"), "{answer}");
    // The root's responder does not answer for the intermediate's certificates.
    let foreign_url = server.url(&format!("/pki/{root}/ocsp"));
    let output =
        openssl.run(&["ocsp", "-issuer", "ca.pem", "-cert", "spared.pem", "-url", &foreign_url, "-CAfile", "ca.pem"]);
    let answer = String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr);
    assert!(answer.contains("unauthorized"), "{answer}");

    let entries = admin.get("/api/certificates/crl").await;
    assert_eq!(entries.status, 200, "{}", entries.body);
    assert_eq!(entries.body["total"], 1, "{}", entries.body);
    let entry = &entries.body["data"][0];
    assert_eq!(entry["serialNumber"], doomed["serialNumber"].as_str().unwrap().to_ascii_lowercase());
    assert_eq!(entry["reason"], "keyCompromise");
    assert_eq!(entry["caId"], inter);
    // The ledger keeps seconds and the API milliseconds: the time shown is the revocation's, not
    // a unit off (1970, or thousands of years ahead).
    let revoked_at = entry["revokedAt"]
        .as_str()
        .and_then(|t| time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok());
    let age = revoked_at.map(|at| time::OffsetDateTime::now_utc() - at);
    assert!(age.is_some_and(|age| age >= time::Duration::ZERO && age < time::Duration::minutes(10)), "{entry}");
    let (other, _) = server.new_user("crl-other@example.com").await;
    assert_eq!(other.get("/api/certificates/crl").await.body["total"], 0, "another workspace's CRL entries");
    let public = Client::new(&server, None);
    assert_eq!(public.get("/api/certificates/crl").await.status, 401);
    assert_eq!(public.get("/pki/424242/crl").await.status, 404);
}

/// Deleting a CA must not make the certificates it revoked good again: its CRL and OCSP keep
/// answering for what it issued, on every replica and across restarts.
#[tokio::test]
async fn deleting_a_ca_does_not_unrevoke_its_certificates() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Gone Root").await;
    let openssl = Openssl::new();
    save_ca_chain(&server, &openssl, root, "ca.pem").await;
    let cert = issue(&admin, json!({ "caId": root, "commonName": "gone.example.com" })).await;
    openssl.write("leaf.pem", cert["certificate"].as_str().unwrap());
    let revoked =
        admin.post(&format!("/api/certificates/{}/revoke", cert["id"]), json!({ "reason": "keyCompromise" })).await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    save_crl(&server, &openssl, root, "crl.pem").await;
    assert_eq!(admin.delete(&format!("/api/certificate-authorities/{root}")).await.status, 204);

    let crl = Client::new(&server, None).get(&format!("/pki/{root}/crl")).await;
    assert_eq!(crl.status, 200, "the CRL of a deleted CA keeps being served");
    openssl.write("after.der", &crl.bytes);
    openssl.ok(&["crl", "-inform", "DER", "-in", "after.der", "-out", "after.pem"]);
    let (ok, out) = openssl.verify(&["-crl_check", "-CAfile", "ca.pem", "-CRLfile", "after.pem", "leaf.pem"]);
    assert!(!ok && out.contains("certificate revoked"), "the revoked certificate verifies again: {out}");
    // The registry no longer has it: nothing issues through it.
    let gone = admin.post("/api/certificates/issue", json!({ "caId": root, "commonName": "again.example.com" })).await;
    assert_eq!(gone.status, 404, "{}", gone.body);
}

#[tokio::test]
async fn the_domain_policy_denies_with_every_reason() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Policy Root").await;
    // Refusals of the policy itself.
    let unknown =
        admin.post("/api/issuance-policies", json!({ "name": "p", "type": "no-such-policy", "config": {} })).await;
    assert_eq!(unknown.status, 400, "{}", unknown.body);
    assert!(unknown.body["error"]["details"]["availableTypes"].as_array().unwrap().contains(&json!("domain-policy")));
    let typo = admin
        .post(
            "/api/issuance-policies",
            json!({ "name": "p", "type": "domain-policy", "config": { "allowedDnsSufixes": [] } }),
        )
        .await;
    assert_eq!(typo.status, 400, "{}", typo.body);
    assert_eq!(typo.body["error"]["details"]["config"][0]["field"], "/allowedDnsSufixes", "{}", typo.body);
    assert_eq!(admin.get("/api/issuance-policies").await.body["data"], json!([]));
    // Issued while no policy exists: the next request, after the policy is created, is judged
    // by it (the replica's list of policies is forgotten when one is created).
    issue(&admin, json!({ "caId": root, "commonName": "www.example.org" })).await;

    let policy = admin
        .post(
            "/api/issuance-policies",
            json!({
                "name": "corp names",
                "type": "domain-policy",
                "config": {
                    "allowedDnsSuffixes": [".example.com"],
                    "allowedIpRanges": ["10.0.0.0/8"],
                    "allowWildcards": false,
                    "allowedKeyAlgorithms": ["ecdsa-p256", "ecdsa-p384"],
                },
            }),
        )
        .await;
    assert_eq!(policy.status, 201, "{}", policy.body);
    assert_eq!(policy.body["data"]["type"], "domain-policy");
    assert_eq!(policy.body["data"]["enabled"], true);
    let policy_id = policy.body["data"]["id"].as_i64().unwrap();

    let denied = admin
        .post(
            "/api/certificates/issue",
            json!({ "caId": root, "commonName": "www.example.org", "subjectAltNames": ["*.example.com", "192.168.1.1"] }),
        )
        .await;
    assert_eq!(denied.status, 403, "{}", denied.body);
    assert_eq!(denied.error_code(), "POLICY_DENIED");
    let mut codes = reason_codes(&denied);
    codes.sort();
    assert_eq!(codes, ["dns_suffix_not_allowed", "ip_not_allowed", "wildcard_not_allowed"], "{}", denied.body);
    let key = admin
        .post(
            "/api/certificates/issue",
            json!({ "caId": root, "commonName": "ed.example.com", "keyAlgorithm": "ed25519" }),
        )
        .await;
    assert_eq!(key.status, 403, "{}", key.body);
    assert_eq!(reason_codes(&key), ["key_algorithm_not_allowed"]);
    assert_eq!(admin.get("/api/certificates").await.body["total"], 1, "denied requests issue nothing");
    issue(&admin, json!({ "caId": root, "commonName": "ok.example.com", "subjectAltNames": ["10.1.1.1"] })).await;

    // A disabled policy is skipped; a deleted one is gone.
    let disabled = admin
        .post(
            "/api/issuance-policies",
            json!({ "name": "off", "type": "domain-policy", "enabled": false, "config": { "allowedDnsSuffixes": [] } }),
        )
        .await;
    assert_eq!(disabled.status, 201, "{}", disabled.body);
    issue(&admin, json!({ "caId": root, "commonName": "still.example.com" })).await;
    assert_eq!(admin.delete(&format!("/api/issuance-policies/{policy_id}")).await.status, 204);
    assert_eq!(admin.delete(&format!("/api/issuance-policies/{policy_id}")).await.status, 404);
    issue(&admin, json!({ "caId": root, "commonName": "www.example.org" })).await;
    // Policies are per workspace.
    let (other, _) = server.new_user("policy-other@example.com").await;
    assert_eq!(other.get("/api/issuance-policies").await.body["data"], json!([]));
    let other_root = internal_root(&other, "Other Root").await;
    let disabled_id = disabled.body["data"]["id"].as_i64().unwrap();
    assert_eq!(other.delete(&format!("/api/issuance-policies/{disabled_id}")).await.status, 404);
    issue(&other, json!({ "caId": other_root, "commonName": "*.anything.org" })).await;
}

#[tokio::test]
async fn the_domain_policy_shortens_validity_and_asks_for_approval() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Approval Root").await;
    let policy = admin
        .post(
            "/api/issuance-policies",
            json!({
                "name": "limits",
                "type": "domain-policy",
                "config": { "maxValidityDays": 30, "requireApprovalFor": ["*.prod.example.com"] },
            }),
        )
        .await;
    assert_eq!(policy.status, 201, "{}", policy.body);

    let shortened = issue(&admin, json!({ "caId": root, "commonName": "web.example.com", "validityDays": 200 })).await;
    assert_eq!(validity_secs(&shortened), 30 * 86_400, "capped at maxValidityDays: {shortened}");
    let openssl = Openssl::new();
    openssl.write("leaf.pem", shortened["certificate"].as_str().unwrap());
    let dates = openssl.ok(&["x509", "-in", "leaf.pem", "-noout", "-startdate", "-enddate"]);
    assert!(!dates.is_empty());
    let within = issue(&admin, json!({ "caId": root, "commonName": "short.example.com", "validityDays": 7 })).await;
    assert_eq!(validity_secs(&within), 7 * 86_400, "shorter requests are left alone");

    // Approval: the request is parked as a pending certificate request (202), not issued.
    let approval = admin
        .post(
            "/api/certificates/issue",
            json!({ "caId": root, "commonName": "api.prod.example.com", "validityDays": 90 }),
        )
        .await;
    assert_eq!(approval.status, 202, "{}", approval.body);
    let request = &approval.body["data"];
    assert_eq!(request["status"], "pending", "{request}");
    assert_eq!(request["certificateId"], Value::Null, "{request}");
    let codes: Vec<&str> = request["reasons"].as_array().unwrap().iter().filter_map(|r| r["code"].as_str()).collect();
    assert_eq!(codes, ["approval_required", "validity_shortened"], "{request}");
    assert!(request["reasons"][0]["message"].as_str().unwrap().contains("*.prod.example.com"), "{request}");
    let listed = admin.get("/api/certificates?search=prod").await;
    assert_eq!(listed.body["total"], 0, "nothing issued without the approval");
    let pending = admin.get("/api/certificate-requests").await;
    assert_eq!(pending.status, 200, "{}", pending.body);
    assert_eq!(pending.body["data"][0]["id"], request["id"], "{}", pending.body);
}

/// A third issuance policy, built from its own crate, installed while the server runs, takes
/// effect on the very next issuance; every enabled policy judges every request.
#[tokio::test]
async fn a_policy_plugin_installed_at_run_time_judges_the_next_issuance() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Runtime Root").await;
    let before =
        admin.post("/api/issuance-policies", json!({ "name": "fx", "type": "fixture-policy", "config": {} })).await;
    assert_eq!(before.status, 400, "not installed yet: {}", before.body);
    let available = before.body["error"]["details"]["availableTypes"].clone();
    assert!(!available.as_array().unwrap().contains(&json!("fixture-policy")), "{available}");
    issue(&admin, json!({ "caId": root, "commonName": "*.wild.example.com" })).await;

    let installed = install_plugin(&admin, "fixture-policy").await;
    assert_eq!(installed["info"]["kind"], "issuance-policy");
    let bad = admin
        .post(
            "/api/issuance-policies",
            json!({ "name": "fx", "type": "fixture-policy", "config": { "maxValidityDays": 0 } }),
        )
        .await;
    assert_eq!(bad.status, 400, "the plugin validates its configuration: {}", bad.body);
    let created = admin
        .post(
            "/api/issuance-policies",
            json!({
                "name": "fixture",
                "type": "fixture-policy",
                "position": 10,
                "config": { "allowedSuffixes": [".example.com"], "maxValidityDays": 10 },
            }),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);

    let wildcard =
        admin.post("/api/certificates/issue", json!({ "caId": root, "commonName": "*.wild.example.com" })).await;
    assert_eq!(wildcard.status, 403, "{}", wildcard.body);
    assert_eq!(wildcard.error_code(), "POLICY_DENIED");
    assert_eq!(reason_codes(&wildcard), ["wildcard-not-allowed"]);
    let outside = admin.post("/api/certificates/issue", json!({ "caId": root, "commonName": "www.example.net" })).await;
    assert_eq!(reason_codes(&outside), ["san-not-allowed"], "{}", outside.body);
    let capped = issue(&admin, json!({ "caId": root, "commonName": "fx.example.com", "validityDays": 60 })).await;
    assert_eq!(validity_secs(&capped), 10 * 86_400, "{capped}");

    // Beside the first-party policy: both judge, every reason is reported, the shortest cap wins.
    let domain = admin
        .post(
            "/api/issuance-policies",
            json!({ "name": "ips", "type": "domain-policy", "position": 1, "config": { "allowedIpRanges": ["10.0.0.0/8"], "maxValidityDays": 5 } }),
        )
        .await;
    assert_eq!(domain.status, 201, "{}", domain.body);
    let both = admin
        .post(
            "/api/certificates/issue",
            json!({ "caId": root, "commonName": "*.x.example.com", "subjectAltNames": ["172.16.0.1"] }),
        )
        .await;
    assert_eq!(both.status, 403, "{}", both.body);
    let mut codes = reason_codes(&both);
    codes.sort();
    assert_eq!(codes, ["ip_not_allowed", "wildcard-not-allowed"], "{}", both.body);
    let shortest = issue(&admin, json!({ "caId": root, "commonName": "min.example.com", "validityDays": 60 })).await;
    assert_eq!(validity_secs(&shortest), 5 * 86_400, "{shortest}");
    let order: Vec<String> = admin.get("/api/issuance-policies").await.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(order, ["ips", "fixture"], "listed in evaluation order");
}

/// A connector that fails during issue fails that call only: the next issuance on the internal
/// CA works. No fixture connector traps in `issue` (plugins/fixtures/trap is an integration), so
/// the 502 of a trap is not exercised here; these two answer otherwise: one answers "pending"
/// (202, an `issuing` request: `pending_issuance.rs` follows it), the other returns a fixed
/// certificate that is not for the CSR's key (502 CA_KEY_MISMATCH, nothing stored).
#[tokio::test]
async fn a_failing_connector_fails_only_its_own_call() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Steady Root").await;
    install_plugin(&admin, "fixture-connector-v02").await;
    install_plugin(&admin, "fixture-ca-static").await;
    let pending = create_ca(&admin, json!({ "name": "Pending CA", "type": "fixture-v02", "config": {} })).await;
    let statik = create_ca(&admin, json!({ "name": "Static CA", "type": "fixture-static", "config": {} })).await;

    let res =
        admin.post("/api/certificates/issue", json!({ "caId": pending["id"], "commonName": "p.example.com" })).await;
    assert_eq!(res.status, 202, "{}", res.body);
    assert_eq!(res.body["data"]["status"], "issuing", "{}", res.body);
    issue(&admin, json!({ "caId": root, "commonName": "after-pending.example.com" })).await;

    let foreign =
        admin.post("/api/certificates/issue", json!({ "caId": statik["id"], "commonName": "s1.example.com" })).await;
    assert_eq!(foreign.status, 502, "the fixture's canned certificate is not for the CSR's key: {}", foreign.body);
    assert_eq!(foreign.error_code(), "CA_KEY_MISMATCH", "{}", foreign.body);
    let after = issue(&admin, json!({ "caId": root, "commonName": "after-static.example.com" })).await;
    assert_eq!(after["issuanceSource"], "internal");

    // A connector that traps (502) or spins past its CPU budget (504) fails only that call.
    let trapping =
        create_ca(&admin, json!({ "name": "Trap CA", "type": "fixture-static", "config": { "trapOnIssue": true } }))
            .await;
    let trap =
        admin.post("/api/certificates/issue", json!({ "caId": trapping["id"], "commonName": "t.example.com" })).await;
    assert_eq!(trap.status, 502, "{}", trap.body);
    assert_eq!(trap.error_code(), "PLUGIN_TRAPPED", "{}", trap.body);
    issue(&admin, json!({ "caId": root, "commonName": "after-trap.example.com" })).await;
    let spinning =
        create_ca(&admin, json!({ "name": "Spin CA", "type": "fixture-static", "config": { "spinOnIssue": true } }))
            .await;
    let spin =
        admin.post("/api/certificates/issue", json!({ "caId": spinning["id"], "commonName": "s.example.com" })).await;
    assert_eq!(spin.status, 504, "{}", spin.body);
    issue(&admin, json!({ "caId": root, "commonName": "after-spin.example.com" })).await;

    assert_eq!(admin.get("/api/certificates").await.body["total"], 4);
    let health = admin.get("/health").await;
    assert_eq!(health.status, 200);
}
