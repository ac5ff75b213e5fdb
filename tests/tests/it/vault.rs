//! The `hashicorp_vault` connector (`plugins/vault`) through the real binary against a real
//! OpenBao (tests/src/openbao.rs: raft storage, initialised and unsealed by the test, PKI with a
//! root and a role). Issue with a least-privilege token, with AppRole and in a namespace;
//! revoke (seen at OpenBao); discovery of 1,000 certificates issued at OpenBao; a sealed
//! server (503), a token without permission (502), a role refusing the name (400), nothing
//! stored on failure; renewal by the renewal worker; the chain verifies with openssl and parses
//! with pyca/cryptography; the token and secret ID appear in no response and no log line.
//! Each test runs its own OpenBao and server.

use std::process::Command;

use serde_json::{json, Value};
use trellis_tests::openbao::{OpenBao, ROLE};
use trellis_tests::{workspace_root, Client, Response, Server};

use crate::cas::Openssl;
use crate::lifecycle::days_from_now;

/// What a token needs to issue and revoke under the role, and what the test's `role` check reads.
const ISSUER_POLICY: &str = r#"
path "pki/sign/web" { capabilities = ["update"] }
path "pki/revoke" { capabilities = ["update"] }
path "pki/roles/web" { capabilities = ["read"] }
"#;

/// Discovery: list and read the certificates.
const DISCOVERY_POLICY: &str = r#"
path "pki/certs" { capabilities = ["list"] }
path "pki/cert/*" { capabilities = ["read"] }
"#;

struct Setup {
    bao: OpenBao,
    server: Server,
    admin: Client,
}

async fn setup() -> Setup {
    let bao = OpenBao::start().await;
    // OpenBao listens on loopback, a private address the operator must allow.
    let server = Server::start_with(&[("TRELLIS_PLUGIN_ALLOW_PRIVATE_NETWORKS", "true")]);
    let admin = server.admin().await;
    Setup { bao, server, admin }
}

impl Setup {
    async fn create(&self, config: Value) -> Response {
        self.admin
            .post(
                "/api/certificate-authorities",
                json!({ "name": "OpenBao", "type": "hashicorp_vault", "url": self.bao.url, "config": config }),
            )
            .await
    }

    async fn ca(&self, config: Value) -> i64 {
        let created = self.create(config).await;
        assert_eq!(created.status, 201, "{}\n{}", created.body, self.server.log());
        created.body["data"]["id"].as_i64().expect("CA id")
    }

    async fn token_ca(&self, policies: &[&str]) -> (i64, String) {
        let token = self.bao.token(None, policies).await;
        let ca = self.ca(json!({ "role": ROLE, "authMethod": "token", "token": token })).await;
        (ca, token)
    }

    async fn test(&self, ca: i64) -> Value {
        let tested = self.admin.post(&format!("/api/certificate-authorities/{ca}/test"), json!({})).await;
        assert_eq!(tested.status, 200, "{}", tested.body);
        tested.body["data"].clone()
    }

    async fn issue(&self, ca: i64, names: &[&str]) -> Response {
        self.admin
            .post(
                "/api/certificates/issue",
                json!({ "caId": ca, "commonName": names[0], "subjectAltNames": names, "validityDays": 40 }),
            )
            .await
    }

    async fn total(&self) -> i64 {
        self.admin.get("/api/certificates").await.body["total"].as_i64().expect("total")
    }
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no check {name}: {report}"))
}

/// A serial as OpenBao names it: lowercase hex pairs joined by `:`.
fn vault_serial(serial_hex: &str) -> String {
    let digits = serial_hex.to_ascii_lowercase();
    let digits = digits.trim_start_matches('0');
    let padded = if digits.len() % 2 == 1 { format!("0{digits}") } else { digits.to_owned() };
    padded.as_bytes().chunks(2).map(|pair| String::from_utf8_lossy(pair).into_owned()).collect::<Vec<_>>().join(":")
}

/// The leaf and chain verify against OpenBao's root with `openssl verify`, and parse with
/// pyca/cryptography (target/venv-pkilint, installed by scripts/pkilint.sh).
fn verify_chain(cert: &Value, root_pem: &str) {
    let openssl = Openssl::new();
    openssl.write("root.pem", root_pem);
    let leaf = cert["certificate"].as_str().expect("PEM");
    openssl.write("leaf.pem", leaf);
    let chain: Vec<&str> = cert["chain"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert!(chain.iter().any(|pem| pem.trim() == root_pem.trim()), "OpenBao's chain comes back: {chain:?}");
    openssl.write("chain.pem", chain.join("\n"));
    let (ok, out) = openssl.verify(&["-CAfile", "root.pem", "-untrusted", "chain.pem", "leaf.pem"]);
    assert!(ok, "the leaf verifies against OpenBao's root: {out}");

    let python = workspace_root().join("target/venv-pkilint/bin/python");
    assert!(python.exists(), "{} is missing: run scripts/pkilint.sh (make test does)", python.display());
    let script = "import sys\nfrom cryptography import x509\n\
        leaf = x509.load_pem_x509_certificate(open(sys.argv[1], 'rb').read())\n\
        chain = x509.load_pem_x509_certificates(open(sys.argv[2], 'rb').read())\n\
        leaf.verify_directly_issued_by(chain[0])\n\
        print(leaf.subject.rfc4514_string())";
    let out = Command::new(&python)
        .args(["-c", script, &openssl.path("leaf.pem").display().to_string()])
        .arg(openssl.path("chain.pem"))
        .output()
        .expect("python runs");
    assert!(out.status.success(), "cryptography: {}", String::from_utf8_lossy(&out.stderr));
}

/// Neither secret is in any response nor in the server's log.
fn assert_never_echoed(s: &Setup, secrets: &[&str], responses: &[&Value]) {
    let log = s.server.log();
    for secret in secrets {
        assert!(!log.contains(secret), "a secret is in the server's log");
        for response in responses {
            assert!(!response.to_string().contains(secret), "a secret is in a response: {response}");
        }
    }
}

#[tokio::test]
async fn issues_tests_and_revokes_with_a_least_privilege_token() {
    let s = setup().await;
    s.bao.policy(None, "issuer", ISSUER_POLICY).await;
    let token = s.bao.token(None, &["issuer"]).await;
    let created = s.create(json!({ "role": ROLE, "authMethod": "token", "token": token })).await;
    assert_eq!(created.status, 201, "{}\n{}", created.body, s.server.log());
    let ca = created.body["data"]["id"].as_i64().expect("id");
    let read = s.admin.get(&format!("/api/certificate-authorities/{ca}")).await;

    let report = s.test(ca).await;
    assert_eq!(report["success"], true, "{report}");
    for name in ["health", "auth", "role", "issuer-validity"] {
        assert_eq!(check(&report, name)["status"], "pass", "{name}: {report}");
    }
    let details = &report["details"];
    assert_eq!(details["vaultAddr"], s.bao.url);
    assert_eq!((details["pkiPath"].as_str(), details["role"].as_str()), (Some("pki"), Some(ROLE)));
    assert_eq!(details["version"], "2.7.2", "{details}");
    assert_eq!(details["sealed"], false);
    assert_eq!(details["issuer"]["subject"], "CN=OpenBao Test Root", "{details}");
    assert!(details["issuer"]["daysUntilExpiry"].as_i64().is_some_and(|d| d > 3000), "{details}");
    assert!(details["issuer"]["notAfter"].as_str().is_some_and(|t| t.ends_with('Z')), "{details}");

    let issued = s.issue(ca, &["app.example.com", "www.app.example.com"]).await;
    assert_eq!(issued.status, 201, "{}\n{}\nbao: {}", issued.body, s.server.log(), s.bao.log());
    let cert = issued.body["data"].clone();
    assert_eq!(cert["issuanceSource"], "vault", "{cert}");
    assert_eq!(cert["status"], "active");
    assert_eq!(cert["caId"], ca);
    assert!(cert["issuer"].as_str().unwrap_or_default().contains("OpenBao Test Root"), "{cert}");
    verify_chain(&cert, &s.bao.root_pem);
    let serial = vault_serial(cert["serialNumber"].as_str().expect("serial"));
    assert_eq!(s.bao.cert(&serial).await["revocation_time"], 0, "OpenBao recorded the certificate");

    let revoked =
        s.admin.post(&format!("/api/certificates/{}/revoke", cert["id"]), json!({ "reason": "superseded" })).await;
    assert_eq!(revoked.status, 200, "{}\n{}", revoked.body, s.server.log());
    let at_bao = s.bao.cert(&serial).await;
    assert!(at_bao["revocation_time"].as_i64().is_some_and(|t| t > 0), "OpenBao has the revocation: {at_bao}");
    let after = s.admin.get(&format!("/api/certificates/{}", cert["id"])).await;
    assert_eq!(after.body["data"]["status"], "revoked", "{}", after.body);

    // With issuerRef the path is issuer/<ref>/sign/<role>, and the policy names that path.
    s.bao.policy(None, "by-issuer", "path \"pki/issuer/default/sign/web\" { capabilities = [\"update\"] }").await;
    let by_issuer = s.bao.token(None, &["by-issuer"]).await;
    let pinned = s.ca(json!({ "role": ROLE, "issuerRef": "default", "token": by_issuer })).await;
    let through_issuer = s.issue(pinned, &["pinned.example.com"]).await;
    assert_eq!(through_issuer.status, 201, "{}\n{}", through_issuer.body, s.server.log());
    verify_chain(&through_issuer.body["data"], &s.bao.root_pem);

    assert_never_echoed(
        &s,
        &[&token, &by_issuer],
        &[&created.body, &read.body, &report, &issued.body, &revoked.body, &through_issuer.body],
    );
}

#[tokio::test]
async fn issues_with_approle_and_in_a_namespace() {
    let s = setup().await;
    s.bao.policy(None, "issuer", ISSUER_POLICY).await;
    let (role_id, secret_id) = s.bao.approle("trellis", &["issuer"], "1h").await;
    let created =
        s.create(json!({ "role": ROLE, "authMethod": "approle", "roleId": role_id, "secretId": secret_id })).await;
    assert_eq!(created.status, 201, "{}\n{}", created.body, s.server.log());
    let ca = created.body["data"]["id"].as_i64().expect("id");
    let report = s.test(ca).await;
    assert_eq!(report["success"], true, "{report}");
    assert!(check(&report, "auth")["message"].as_str().unwrap_or_default().contains("AppRole"), "{report}");
    let mut bodies = vec![created.body.clone(), report.clone()];
    for name in ["one.example.com", "two.example.com"] {
        let issued = s.issue(ca, &[name]).await;
        assert_eq!(issued.status, 201, "{}\n{}\nbao: {}", issued.body, s.server.log(), s.bao.log());
        assert_eq!(issued.body["data"]["issuanceSource"], "vault");
        verify_chain(&issued.body["data"], &s.bao.root_pem);
        bodies.push(issued.body.clone());
    }

    // A namespace (OpenBao has them since 2.3): its own PKI, policy and token.
    let ns = "team-a";
    s.bao.root(None, "POST", &format!("sys/namespaces/{ns}"), json!({})).await;
    s.bao
        .root(Some(ns), "POST", "sys/mounts/pki", json!({ "type": "pki", "config": { "max_lease_ttl": "87600h" } }))
        .await;
    let root = s
        .bao
        .root(Some(ns), "POST", "pki/root/generate/internal", json!({ "common_name": "Team A Root", "ttl": "8760h" }))
        .await;
    let team_root = root["data"]["certificate"].as_str().expect("root").to_owned();
    s.bao
        .root(
            Some(ns),
            "POST",
            &format!("pki/roles/{ROLE}"),
            json!({ "allowed_domains": ["team-a.example.com"], "allow_subdomains": true, "max_ttl": "2160h",
                "key_type": "any" }),
        )
        .await;
    s.bao.policy(Some(ns), "issuer", ISSUER_POLICY).await;
    let token = s.bao.token(Some(ns), &["issuer"]).await;
    let team = s.ca(json!({ "role": ROLE, "namespace": ns, "token": token })).await;
    let report = s.test(team).await;
    assert_eq!(report["success"], true, "{report}");
    assert_eq!(report["details"]["namespace"], ns);
    assert_eq!(report["details"]["issuer"]["subject"], "CN=Team A Root");
    let issued = s.issue(team, &["svc.team-a.example.com"]).await;
    assert_eq!(issued.status, 201, "{}\n{}", issued.body, s.server.log());
    assert!(issued.body["data"]["issuer"].as_str().unwrap_or_default().contains("Team A Root"), "{}", issued.body);
    verify_chain(&issued.body["data"], &team_root);
    bodies.push(issued.body.clone());

    let refs: Vec<&Value> = bodies.iter().collect();
    assert_never_echoed(&s, &[&secret_id, &token], &refs);
}

#[tokio::test]
async fn sealed_unauthorised_and_refused_issuance_store_nothing() {
    let s = setup().await;
    // A token whose policy reads the role but may not sign: 502 saying what to grant.
    s.bao.policy(None, "reader", "path \"pki/roles/web\" { capabilities = [\"read\"] }").await;
    let (weak, _) = s.token_ca(&["reader"]).await;
    let denied = s.issue(weak, &["app.example.com"]).await;
    assert_eq!(denied.status, 502, "{}", denied.body);
    assert_eq!(denied.body["error"]["code"], "UPSTREAM_UNAUTHORIZED", "{}", denied.body);
    let message = denied.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("permission denied") && message.contains("update on pki/sign/web"), "{message}");

    // The role refuses a name outside example.com: 400 with OpenBao's own words.
    s.bao.policy(None, "issuer", ISSUER_POLICY).await;
    let (ca, _) = s.token_ca(&["issuer"]).await;
    let refused = s.issue(ca, &["app.example.org"]).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], "CA_REJECTED", "{}", refused.body);
    let message = refused.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not allowed by this role"), "{message}");

    // Sealed: 503, and the test says why.
    s.bao.seal().await;
    let sealed = s.issue(ca, &["app.example.com"]).await;
    assert_eq!(sealed.status, 503, "{}", sealed.body);
    assert_eq!(sealed.body["error"]["code"], "SERVICE_UNAVAILABLE", "{}", sealed.body);
    assert!(sealed.body["error"]["message"].as_str().unwrap_or_default().contains("sealed"), "{}", sealed.body);
    let report = s.test(ca).await;
    assert_eq!(report["success"], false, "{report}");
    assert_eq!(check(&report, "health")["status"], "fail");
    assert_eq!(report["details"]["sealed"], true, "{report}");

    assert_eq!(s.total().await, 0, "nothing is stored on any failure");
    s.bao.unseal().await;
    assert_eq!(s.issue(ca, &["app.example.com"]).await.status, 201, "issues again once unsealed");
}

#[tokio::test]
async fn discovery_imports_a_thousand_certificates_issued_at_openbao() {
    let s = setup().await;
    let issued = s.bao.issue_directly(1_000, 16).await;
    let (name, revoked) = &issued[7];
    s.bao.root(None, "POST", "pki/revoke", json!({ "serial_number": revoked })).await;
    s.bao.policy(None, "discovery", DISCOVERY_POLICY).await;
    let (ca, token) = s.token_ca(&["discovery"]).await;

    let fetched = s.admin.post(&format!("/api/certificate-authorities/{ca}/fetch-certificates"), json!({})).await;
    assert_eq!(fetched.status, 200, "{}", fetched.body);
    let scan_id = fetched.body["data"]["scanId"].as_i64().expect("scanId");
    let scan = crate::lifecycle::finished_scan(&s.admin, scan_id).await;
    assert_eq!(scan["status"], "completed", "{scan}\n{}", s.server.log());
    assert_eq!((scan["found"].as_i64(), scan["new"].as_i64()), (Some(1_000), Some(1_000)), "{scan}");
    assert_eq!(scan["failed"], 0, "{scan}");
    assert_eq!(s.total().await, 1_000);

    let page = s.admin.get(&format!("/api/certificates?limit=100&search={name}")).await;
    let found: Vec<&Value> =
        page.body["data"].as_array().into_iter().flatten().filter(|c| c["commonName"] == name.as_str()).collect();
    assert_eq!(found.len(), 1, "{}", page.body);
    assert_eq!(vault_serial(found[0]["serialNumber"].as_str().unwrap_or_default()), *revoked);
    assert_eq!(found[0]["status"], "revoked", "{}", found[0]);
    assert_eq!(found[0]["issuanceSource"], "vault", "{}", found[0]);
    assert_eq!(found[0]["caId"], ca);
    assert_never_echoed(&s, &[&token], &[&fetched.body, &scan]);
}

#[tokio::test]
async fn the_renewal_worker_renews_through_openbao() {
    let s = setup().await;
    s.bao.policy(None, "issuer", ISSUER_POLICY).await;
    let (ca, token) = s.token_ca(&["issuer"]).await;
    let issued = s
        .admin
        .post(
            "/api/certificates/issue",
            json!({ "caId": ca, "commonName": "renew.example.com", "validityDays": 40, "autoRenewal": true }),
        )
        .await;
    assert_eq!(issued.status, 201, "{}\n{}", issued.body, s.server.log());
    let old = issued.body["data"]["id"].as_i64().expect("id");

    // Fifteen days on, it is 25 days from expiry: due.
    let later = days_from_now(15);
    let run = s.server.cli(&["jobs", "renew", "--as-of", &later]).expect("jobs renew --as-of");
    assert_eq!(run, json!({ "renewed": 1, "failed": 0, "pending": 0 }), "as of {later}\n{}", s.server.log());
    let all = s.admin.get("/api/certificates").await.body.clone();
    assert_eq!(all["total"], 2, "{all}");
    let new_id = all["data"].as_array().into_iter().flatten().find(|c| c["id"] != old).expect("renewal")["id"].clone();
    let new = s.admin.get(&format!("/api/certificates/{new_id}")).await.body["data"].clone();
    assert_eq!(new["commonName"], "renew.example.com");
    assert_eq!(new["issuanceSource"], "vault");
    assert_eq!(new["caId"], ca);
    assert_eq!(new["autoRenewal"], true, "{new}");
    verify_chain(&new, &s.bao.root_pem);
    let serial = vault_serial(new["serialNumber"].as_str().expect("serial"));
    assert_eq!(s.bao.cert(&serial).await["revocation_time"], 0, "OpenBao signed the renewal");
    assert_never_echoed(&s, &[&token], &[&issued.body, &all]);
}
