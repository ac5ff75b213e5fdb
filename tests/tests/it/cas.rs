//! Certificate authorities (spec §4.1) through the real binary: CRUD and every status code,
//! the test probe and §3.2 status moves, sync, stats, workspace isolation, scopes, secrets
//! (sealed at rest, masked in every response, kept when the mask is sent back, never logged),
//! and the internal CA's three shapes (root, intermediate, import).

use std::path::PathBuf;
use std::process::Output;

use serde_json::{json, Value};
use trellis_tests::certs::Spec;
use trellis_tests::{Client, Server};

pub(crate) const MASK: &str = "********";

pub(crate) fn plugin_bytes(name: &str) -> Vec<u8> {
    let path = trellis_tests::plugin_file(name);
    std::fs::read(&path).unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()))
}

/// Installs `target/plugins/<name>.wasm` over the API (instance administrators only).
pub(crate) async fn install_plugin(admin: &Client, name: &str) -> Value {
    let res = admin.post_raw("/api/plugins", "application/wasm", plugin_bytes(name)).await;
    assert_eq!(res.status, 201, "installing {name}: {}", res.body);
    res.body["data"].clone()
}

/// Creates a CA and returns its `data` (asserts 201).
pub(crate) async fn create_ca(client: &Client, body: Value) -> Value {
    let res = client.post("/api/certificate-authorities", body.clone()).await;
    assert_eq!(res.status, 201, "creating {body}: {}", res.body);
    res.body["data"].clone()
}

/// A new internal root CA; returns its id.
pub(crate) async fn internal_root(client: &Client, common_name: &str) -> i64 {
    let ca = create_ca(
        client,
        json!({ "name": common_name, "type": "internal", "config": { "subject": { "commonName": common_name } } }),
    )
    .await;
    ca["id"].as_i64().expect("CA id")
}

/// A new internal intermediate CA under `parent`; returns its id.
pub(crate) async fn internal_intermediate(client: &Client, common_name: &str, parent: i64) -> i64 {
    let ca = create_ca(
        client,
        json!({
            "name": common_name,
            "type": "internal",
            "config": { "subject": { "commonName": common_name }, "parentCaId": parent },
        }),
    )
    .await;
    ca["id"].as_i64().expect("CA id")
}

/// A scratch directory for the openssl command line.
pub(crate) struct Openssl {
    dir: tempfile::TempDir,
}

impl Openssl {
    pub(crate) fn new() -> Openssl {
        Openssl { dir: tempfile::tempdir().expect("tempdir") }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> String {
        let path = self.path(name);
        std::fs::write(&path, contents).expect("write");
        path.display().to_string()
    }

    pub(crate) fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).expect("read")
    }

    /// Runs `openssl <args>` in the scratch directory.
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        std::process::Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("openssl is installed (apt-get install openssl)")
    }

    /// Runs `openssl <args>` and returns stdout; panics with stderr when it fails.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "openssl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `openssl verify <args>`: (success, stdout + stderr).
    pub(crate) fn verify(&self, args: &[&str]) -> (bool, String) {
        let mut all = vec!["verify"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }

    /// A self-signed CA certificate and a new P-256 key (PEM files `<name>.pem`, `<name>.key`).
    pub(crate) fn ca(&self, name: &str, subject: &str) -> (String, String) {
        let (cert, key) = (format!("{name}.pem"), format!("{name}.key"));
        self.ok(&[
            "req",
            "-x509",
            "-nodes",
            "-days",
            "365",
            "-subj",
            subject,
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-keyout",
            &key,
            "-out",
            &cert,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        (self.read(&cert), self.read(&key))
    }
}

/// The sealed form of a config member as stored, e.g. `{"$sealed":"…"}`.
fn stored_config(server: &Server, id: i64) -> Value {
    let text = server.sql(&format!("SELECT config FROM certificate_authorities WHERE id = {id}"));
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("stored config is JSON: {text}"))
}

#[tokio::test]
async fn internal_root_crud_and_status_codes() {
    let server = Server::start();
    let admin = server.admin().await;

    let empty = admin.get("/api/certificate-authorities").await;
    assert_eq!(empty.status, 200, "{}", empty.body);
    assert_eq!((empty.body["data"].clone(), empty.body["total"].clone()), (json!([]), json!(0)));

    // `endpoint` is the legacy name of `url`.
    let created = admin
        .post(
            "/api/certificate-authorities",
            json!({
                "name": "Corp Root",
                "type": "internal",
                "description": "the root",
                "endpoint": "https://pki.example.com/root",
                "issuerPatterns": ["Corp Root CA"],
                "config": { "subject": { "commonName": "Corp Root CA", "organization": "Corp" }, "validityDays": 365 },
            }),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let ca = created.body["data"].clone();
    let id = ca["id"].as_i64().expect("integer id");
    assert_eq!(ca["name"], "Corp Root");
    assert_eq!(ca["type"], "internal");
    assert_eq!(ca["description"], "the root");
    assert_eq!(ca["url"], "https://pki.example.com/root");
    assert_eq!(ca["status"], "active", "status defaults to active (§3.2)");
    assert_eq!(ca["healthStatus"], "unknown");
    assert_eq!(ca["lastSync"], Value::Null);
    assert!(ca["workspaceId"].as_str().is_some_and(|w| w.starts_with("ws_")), "{ca}");
    assert!(ca["createdAt"].as_str().is_some_and(|t| t.ends_with('Z')), "{ca}");
    assert_eq!(ca["issuerPatterns"], json!(["Corp Root CA"]), "given patterns override the type's defaults");
    assert_eq!(ca["config"]["subject"]["commonName"], "Corp Root CA");

    let got = admin.get(&format!("/api/certificate-authorities/{id}")).await;
    assert_eq!(got.status, 200);
    // A single read of an internal CA adds its certificate and its chain (here the root alone).
    let mut single = got.body["data"].clone();
    let certificate = single.as_object_mut().and_then(|o| o.remove("certificate")).unwrap_or_default();
    assert!(certificate.as_str().is_some_and(|pem| pem.starts_with("-----BEGIN CERTIFICATE-----")), "{}", got.body);
    let chain = single.as_object_mut().and_then(|o| o.remove("chain")).unwrap_or_default();
    assert_eq!(chain, json!([certificate]), "a root's chain is itself");
    assert_eq!(single, ca);
    let listed = admin.get("/api/certificate-authorities").await;
    assert_eq!(listed.body["data"], json!([ca]));
    assert_eq!(listed.body["limit"], 50, "the CA list's default limit is 50 (§8)");

    // Refusals of create.
    let refusals = [
        (json!({ "type": "internal", "config": { "subject": { "commonName": "x" } } }), "name missing"),
        (json!({ "name": "x", "config": { "subject": { "commonName": "x" } } }), "type missing"),
        (json!({ "name": "x", "type": "Not A Type", "config": {} }), "malformed type"),
        (
            json!({ "name": "x", "type": "internal", "status": "sleeping", "config": { "subject": { "commonName": "x" } } }),
            "status",
        ),
        (
            json!({ "name": "x", "type": "internal", "url": "ftp://ca.example.com", "config": { "subject": { "commonName": "x" } } }),
            "url",
        ),
        (json!({ "name": "x", "type": "internal", "config": [1, 2] }), "config not an object"),
    ];
    for (body, what) in refusals {
        let res = admin.post("/api/certificate-authorities", body).await;
        assert_eq!(res.status, 400, "{what}: {}", res.body);
        assert_eq!(res.error_code(), "VALIDATION_ERROR", "{what}");
    }
    // A type no installed connector serves: the answer lists the types that are served.
    let unknown =
        admin.post("/api/certificate-authorities", json!({ "name": "x", "type": "no_such_ca", "config": {} })).await;
    assert_eq!(unknown.status, 400, "{}", unknown.body);
    assert_eq!(unknown.error_code(), "VALIDATION_ERROR");
    let available = unknown.body["error"]["details"]["availableTypes"].as_array().cloned().unwrap_or_default();
    assert!(available.contains(&json!("internal")) && available.contains(&json!("acme")), "{}", unknown.body);
    assert!(!available.contains(&json!("no_such_ca")), "{}", unknown.body);
    // The connector validates the config and names every problem with its field.
    let invalid = admin
        .post(
            "/api/certificate-authorities",
            json!({ "name": "x", "type": "internal", "config": { "subject": { "country": "Germany" }, "keyAlgorithm": "dsa" } }),
        )
        .await;
    assert_eq!(invalid.status, 400, "{}", invalid.body);
    assert_eq!(invalid.error_code(), "VALIDATION_ERROR");
    let fields: Vec<&str> = invalid.body["error"]["details"]["config"]
        .as_array()
        .map(|issues| issues.iter().filter_map(|i| i["field"].as_str()).collect())
        .unwrap_or_default();
    for field in ["/subject/commonName", "/subject/country", "/keyAlgorithm"] {
        assert!(fields.contains(&field), "{field} missing from {}", invalid.body);
    }
    assert!(
        invalid.body["error"]["details"]["config"].as_array().unwrap().iter().all(|i| i["message"].is_string()),
        "{}",
        invalid.body
    );
    assert_eq!(admin.get("/api/certificate-authorities").await.body["total"], 1, "no refused create left a CA");

    // Ids: malformed → 400, unknown → 404.
    assert_eq!(admin.get("/api/certificate-authorities/abc").await.status, 400);
    let missing = 999_999;
    for res in [
        admin.get(&format!("/api/certificate-authorities/{missing}")).await,
        admin.patch(&format!("/api/certificate-authorities/{missing}"), json!({ "name": "y" })).await,
        admin.put(&format!("/api/certificate-authorities/{missing}"), json!({ "name": "y", "type": "internal" })).await,
        admin.delete(&format!("/api/certificate-authorities/{missing}")).await,
        admin.post(&format!("/api/certificate-authorities/{missing}/test"), json!({})).await,
        admin.post(&format!("/api/certificate-authorities/{missing}/sync"), json!({})).await,
    ] {
        assert_eq!(res.status, 404, "{}", res.body);
        assert_eq!(res.error_code(), "NOT_FOUND");
    }

    // PATCH changes what it names and keeps the rest.
    let patched = admin
        .patch(
            &format!("/api/certificate-authorities/{id}"),
            json!({ "name": "Corp Root (renamed)", "status": "disconnected" }),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    let p = &patched.body["data"];
    assert_eq!((p["name"].as_str(), p["status"].as_str()), (Some("Corp Root (renamed)"), Some("disconnected")));
    assert_eq!((p["description"].clone(), p["url"].clone()), (ca["description"].clone(), ca["url"].clone()));
    assert_eq!(p["config"], ca["config"]);
    assert_eq!(p["createdAt"], ca["createdAt"]);
    // An internal CA keeps its key: its type cannot change.
    let retype = admin.patch(&format!("/api/certificate-authorities/{id}"), json!({ "type": "fixture_other" })).await;
    assert_eq!(retype.status, 400, "{}", retype.body);

    // PUT replaces: absent optional fields are reset; name and type are required.
    let put = admin
        .put(
            &format!("/api/certificate-authorities/{id}"),
            json!({ "name": "Corp Root", "type": "internal", "status": "disconnected", "config": ca["config"] }),
        )
        .await;
    assert_eq!(put.status, 200, "{}", put.body);
    assert_eq!(put.body["data"]["description"], Value::Null);
    assert_eq!(put.body["data"]["url"], Value::Null);
    assert_eq!(put.body["data"]["status"], "disconnected");
    let incomplete = admin.put(&format!("/api/certificate-authorities/{id}"), json!({ "type": "internal" })).await;
    assert_eq!(incomplete.status, 400, "{}", incomplete.body);

    // The probe (§4.1): success moves the CA to active and healthy (§3.2).
    let test = admin.post(&format!("/api/certificate-authorities/{id}/test"), json!({})).await;
    assert_eq!(test.status, 200, "{}", test.body);
    let t = &test.body["data"];
    assert_eq!(t["success"], true, "{t}");
    assert!(t["message"].is_string());
    let checks = t["checks"].as_array().cloned().unwrap_or_default();
    assert!(!checks.is_empty(), "{t}");
    for check in &checks {
        assert!(check["name"].is_string() && check["message"].is_string(), "{check}");
        assert_eq!(check["status"], "pass", "{check}");
    }
    let details = &t["details"];
    assert!(details["subject"].as_str().is_some_and(|s| s.contains("CN=Corp Root CA")), "{details}");
    assert_eq!(details["issuer"], details["subject"], "a root is self-issued");
    assert!(details["expiresAt"].as_str().is_some_and(|e| e.ends_with('Z')), "{details}");
    let days = details["daysUntilExpiry"].as_i64().expect("daysUntilExpiry");
    assert!((363..=365).contains(&days), "validityDays 365 → {days} days left");
    let after = admin.get(&format!("/api/certificate-authorities/{id}")).await.body["data"].clone();
    assert_eq!((after["status"].as_str(), after["healthStatus"].as_str()), (Some("active"), Some("healthy")));

    // Sync touches lastSync only.
    let synced = admin.post(&format!("/api/certificate-authorities/{id}/sync"), json!({})).await;
    assert_eq!(synced.status, 200, "{}", synced.body);
    let s = synced.body["data"].clone();
    assert!(s["lastSync"].as_str().is_some_and(|t| t.ends_with('Z')), "{s}");
    for field in ["name", "type", "status", "healthStatus", "config", "url", "description", "issuerPatterns"] {
        assert_eq!(s[field], after[field], "sync changed {field}");
    }

    // Pagination of the list.
    internal_root(&admin, "Second Root").await;
    internal_root(&admin, "Third Root").await;
    let page = admin.get("/api/certificate-authorities?limit=2").await;
    assert_eq!(page.body["data"].as_array().map(Vec::len), Some(2), "{}", page.body);
    assert_eq!(page.body["total"], 3);
    assert_eq!(page.body["data"][0]["name"], "Third Root", "newest first");
    let second = admin.get("/api/certificate-authorities?page=2&limit=2").await;
    assert_eq!(second.body["data"][0]["id"], id);

    // DELETE: 204 with an empty body, then 404.
    let deleted = admin.delete(&format!("/api/certificate-authorities/{id}")).await;
    assert_eq!(deleted.status, 204);
    assert!(deleted.bytes.is_empty());
    assert_eq!(admin.get(&format!("/api/certificate-authorities/{id}")).await.status, 404);
    assert_eq!(admin.delete(&format!("/api/certificate-authorities/{id}")).await.status, 404);
    assert_eq!(admin.get("/api/certificate-authorities").await.body["total"], 2);

    // Every change is audited.
    let audit = admin.get("/api/audit-logs?targetType=certificate_authority&limit=100").await;
    let actions: Vec<&str> = audit.body["data"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["action"].as_str()).collect())
        .unwrap_or_default();
    for action in ["ca.created", "ca.updated", "ca.tested", "ca.synced", "ca.deleted"] {
        assert!(actions.contains(&action), "{action} missing from {actions:?}");
    }
}

#[tokio::test]
async fn stats_count_cas_by_status_and_health_and_their_certificates() {
    let server = Server::start();
    let admin = server.admin().await;
    let zero = admin.get("/api/certificate-authorities/stats").await;
    assert_eq!(zero.status, 200, "{}", zero.body);
    assert_eq!(
        zero.body["data"],
        json!({ "totalCAs": 0, "connectedCAs": 0, "disconnectedCAs": 0, "totalCertificatesIssued": 0, "healthyCAs": 0 })
    );

    let tested = internal_root(&admin, "Tested Root").await;
    let untested = internal_root(&admin, "Untested Root").await;
    let offline = create_ca(
        &admin,
        json!({ "name": "Offline", "type": "internal", "status": "disconnected", "config": { "subject": { "commonName": "Offline Root" } } }),
    )
    .await;
    assert_eq!(offline["status"], "disconnected");
    let probe = admin.post(&format!("/api/certificate-authorities/{tested}/test"), json!({})).await;
    assert_eq!(probe.body["data"]["success"], true, "{}", probe.body);
    for (ca, name) in [(tested, "a.example.com"), (tested, "b.example.com"), (untested, "c.example.com")] {
        let res = admin.post("/api/certificates/issue", json!({ "caId": ca, "commonName": name })).await;
        assert_eq!(res.status, 201, "{}", res.body);
    }
    // An imported certificate is not one issued through a CA.
    admin.register(&Spec::tls("imported.example.com").pem()).await;

    let stats = admin.get("/api/certificate-authorities/stats").await;
    assert_eq!(
        stats.body["data"],
        json!({ "totalCAs": 3, "connectedCAs": 2, "disconnectedCAs": 1, "totalCertificatesIssued": 3, "healthyCAs": 1 }),
        "{}",
        stats.body
    );
    for value in stats.body["data"].as_object().unwrap().values() {
        assert!(value.is_i64(), "stats are integers: {}", stats.body);
    }
    // Another workspace counts only its own.
    let (other, _) = server.new_user("stats-other@example.com").await;
    let theirs = other.get("/api/certificate-authorities/stats").await;
    assert_eq!(theirs.body["data"]["totalCAs"], 0, "{}", theirs.body);
    assert_eq!(theirs.body["data"]["totalCertificatesIssued"], 0, "{}", theirs.body);
}

#[tokio::test]
async fn another_workspace_sees_404_and_cannot_use_the_ca() {
    let server = Server::start();
    let admin = server.admin().await;
    let id = internal_root(&admin, "Private Root").await;
    let before = admin.get(&format!("/api/certificate-authorities/{id}")).await.body["data"].clone();
    let (other, _) = server.new_user("intruder@example.com").await;
    for res in [
        other.get(&format!("/api/certificate-authorities/{id}")).await,
        other.patch(&format!("/api/certificate-authorities/{id}"), json!({ "name": "mine now" })).await,
        other
            .put(
                &format!("/api/certificate-authorities/{id}"),
                json!({ "name": "mine now", "type": "internal", "config": before["config"] }),
            )
            .await,
        other.delete(&format!("/api/certificate-authorities/{id}")).await,
        other.post(&format!("/api/certificate-authorities/{id}/test"), json!({})).await,
        other.post(&format!("/api/certificate-authorities/{id}/sync"), json!({})).await,
        other.post("/api/certificates/issue", json!({ "caId": id, "commonName": "steal.example.com" })).await,
    ] {
        assert_eq!(res.status, 404, "{}", res.body);
        assert_eq!(res.error_code(), "NOT_FOUND");
    }
    assert_eq!(other.get("/api/certificate-authorities").await.body["total"], 0);
    // Nor can it chain an intermediate to the other workspace's root.
    let chained = other
        .post(
            "/api/certificate-authorities",
            json!({ "name": "sub", "type": "internal", "config": { "subject": { "commonName": "Sub" }, "parentCaId": id } }),
        )
        .await;
    assert_eq!(chained.status, 400, "{}", chained.body);
    assert_eq!(other.get("/api/certificate-authorities").await.body["total"], 0, "the refused CA is not left behind");
    // The same through a session switched to the other workspace by header: the admin's own
    // workspace is the one that holds the CA.
    let second = admin.post("/api/workspaces", json!({ "name": "second" })).await;
    assert_eq!(second.status, 201, "{}", second.body);
    let in_second = admin.with_header("X-Workspace-Id", second.body["data"]["id"].as_str().unwrap());
    assert_eq!(in_second.get(&format!("/api/certificate-authorities/{id}")).await.status, 404);
    let issued = in_second.post("/api/certificates/issue", json!({ "caId": id, "commonName": "x.example.com" })).await;
    assert_eq!(issued.status, 404, "{}", issued.body);

    let after = admin.get(&format!("/api/certificate-authorities/{id}")).await.body["data"].clone();
    assert_eq!(after, before, "nothing changed");
    assert_eq!(admin.get("/api/certificates").await.body["total"], 0, "nothing was issued");
}

#[tokio::test]
async fn ca_routes_need_the_cas_scopes() {
    let server = Server::start();
    let admin = server.admin().await;
    let id = internal_root(&admin, "Scoped Root").await;
    let reader = server.key_client(&["cas:read"]).await;
    assert_eq!(reader.get("/api/certificate-authorities").await.status, 200);
    assert_eq!(reader.get(&format!("/api/certificate-authorities/{id}")).await.status, 200);
    assert_eq!(reader.get("/api/certificate-authorities/stats").await.status, 200);
    assert_eq!(reader.get("/api/issuance-policies").await.status, 200);
    for res in [
        reader
            .post(
                "/api/certificate-authorities",
                json!({ "name": "x", "type": "internal", "config": { "subject": { "commonName": "x" } } }),
            )
            .await,
        reader.patch(&format!("/api/certificate-authorities/{id}"), json!({ "name": "y" })).await,
        reader.put(&format!("/api/certificate-authorities/{id}"), json!({ "name": "y", "type": "internal" })).await,
        reader.delete(&format!("/api/certificate-authorities/{id}")).await,
        reader.post(&format!("/api/certificate-authorities/{id}/test"), json!({})).await,
        reader.post(&format!("/api/certificate-authorities/{id}/sync"), json!({})).await,
        reader.post("/api/issuance-policies", json!({ "name": "p", "type": "domain-policy", "config": {} })).await,
        // Issuing is a certificate mutation: certificates:write.
        reader.post("/api/certificates/issue", json!({ "caId": id, "commonName": "r.example.com" })).await,
    ] {
        assert_eq!(res.status, 403, "{}", res.body);
        assert_eq!(res.error_code(), "INSUFFICIENT_SCOPE");
    }

    // Certificate scopes do not open the CA registry, but they issue.
    let certs = server.key_client(&["certificates:read", "certificates:write"]).await;
    for res in [
        certs.get("/api/certificate-authorities").await,
        certs.get(&format!("/api/certificate-authorities/{id}")).await,
        certs.get("/api/certificate-authorities/stats").await,
        certs.post(&format!("/api/certificate-authorities/{id}/test"), json!({})).await,
        certs.get("/api/issuance-policies").await,
    ] {
        assert_eq!(res.status, 403, "{}", res.body);
        assert_eq!(res.error_code(), "INSUFFICIENT_SCOPE");
    }
    let issued = certs.post("/api/certificates/issue", json!({ "caId": id, "commonName": "k.example.com" })).await;
    assert_eq!(issued.status, 201, "{}", issued.body);
    let writer = server.key_client(&["cas:write"]).await;
    assert_eq!(writer.get("/api/certificate-authorities").await.status, 403, "write does not imply read");
    let anonymous = Client::new(&server, None);
    let res = anonymous.get("/api/certificate-authorities").await;
    assert_eq!(res.status, 401);
    assert_eq!(res.error_code(), "UNAUTHORIZED");
}

/// Secrets (well-known names and plugin-declared ones) are sealed in the database, read
/// `********` in every response, survive an update that echoes the mask, and reach neither
/// the log nor the database in the clear.
#[tokio::test]
async fn secrets_are_sealed_masked_kept_and_never_logged() {
    let server = Server::start();
    let admin = server.admin().await;
    install_plugin(&admin, "fixture-ca-static").await;
    install_plugin(&admin, "fixture-connector-v02").await;

    let (api_key, password, declared, api_key_2) = (
        "sk_live_S3CRET_api_key_7f3a",
        "pw_S3CRET_password_91c2",
        "caKey_S3CRET_declared_44d0",
        "sk_live_S3CRET_v02_aa17",
    );
    let statik = create_ca(
        &admin,
        json!({
            "name": "Static",
            "type": "fixture-static",
            "url": "https://ca.example.net/api",
            "config": { "apiKey": api_key, "password": password, "region": "eu" },
        }),
    )
    .await;
    assert_eq!(statik["config"], json!({ "apiKey": MASK, "password": MASK, "region": "eu" }));
    assert_eq!(statik["issuerPatterns"], json!(["*Fixture CA*"]), "the connector's default issuer patterns");
    // `/caKeyPem` is a secret because the plugin declares it (withheld from the plugin too).
    let v02 = create_ca(
        &admin,
        json!({ "name": "V02", "type": "fixture-v02", "config": { "apiKey": api_key_2, "caKeyPem": declared, "tier": 1 } }),
    )
    .await;
    assert_eq!(v02["config"], json!({ "apiKey": MASK, "caKeyPem": MASK, "tier": 1 }));
    let (sid, vid) = (statik["id"].as_i64().unwrap(), v02["id"].as_i64().unwrap());

    let got = admin.get(&format!("/api/certificate-authorities/{sid}")).await;
    assert_eq!(got.body["data"]["config"], statik["config"]);
    let listed = admin.get("/api/certificate-authorities").await;
    let text = listed.body.to_string();
    assert!(text.contains(MASK), "{text}");

    // Sealed at rest.
    let sealed = stored_config(&server, sid);
    assert!(sealed["apiKey"]["$sealed"].is_string() && sealed["password"]["$sealed"].is_string(), "{sealed}");
    assert_eq!(sealed["region"], "eu");
    assert!(stored_config(&server, vid)["caKeyPem"]["$sealed"].is_string());

    // PATCH echoing the mask keeps the secret: the stored ciphertext is the very same.
    let patched = admin
        .patch(&format!("/api/certificate-authorities/{sid}"), json!({ "config": { "apiKey": MASK, "region": "us" } }))
        .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    assert_eq!(patched.body["data"]["config"], json!({ "apiKey": MASK, "password": MASK, "region": "us" }));
    let after_patch = stored_config(&server, sid);
    assert_eq!(after_patch["apiKey"], sealed["apiKey"], "the masked apiKey was kept as it was");
    assert_eq!(after_patch["password"], sealed["password"], "members the PATCH did not name stay");
    // A second PATCH with the mask still finds the secret set, and so does a PUT.
    let again = admin
        .patch(
            &format!("/api/certificate-authorities/{sid}"),
            json!({ "config": { "apiKey": MASK, "password": MASK } }),
        )
        .await;
    assert_eq!(again.status, 200, "{}", again.body);
    let put = admin
        .put(
            &format!("/api/certificate-authorities/{sid}"),
            json!({ "name": "Static", "type": "fixture-static", "url": "https://ca.example.net/api",
                "config": { "apiKey": MASK, "region": "us" } }),
        )
        .await;
    assert_eq!(put.status, 200, "{}", put.body);
    assert_eq!(put.body["data"]["config"], json!({ "apiKey": MASK, "region": "us" }), "PUT replaces the config");
    assert_eq!(stored_config(&server, sid)["apiKey"], sealed["apiKey"]);
    // A new value is sealed anew; a cleared secret has no mask to keep.
    let rotated = admin
        .patch(
            &format!("/api/certificate-authorities/{sid}"),
            json!({ "config": { "apiKey": "sk_live_rotated_0001" } }),
        )
        .await;
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    assert_eq!(rotated.body["data"]["config"]["apiKey"], MASK);
    let rotated_sealed = stored_config(&server, sid)["apiKey"].clone();
    assert!(rotated_sealed["$sealed"].is_string() && rotated_sealed != sealed["apiKey"], "{rotated_sealed}");
    let cleared =
        admin.patch(&format!("/api/certificate-authorities/{sid}"), json!({ "config": { "apiKey": null } })).await;
    assert_eq!(cleared.status, 200, "{}", cleared.body);
    assert_eq!(cleared.body["data"]["config"]["apiKey"], Value::Null);
    let no_secret =
        admin.patch(&format!("/api/certificate-authorities/{sid}"), json!({ "config": { "apiKey": MASK } })).await;
    assert_eq!(no_secret.status, 400, "the mask of a secret that is not set: {}", no_secret.body);
    // Nor can a create send the mask.
    let masked_create = admin
        .post(
            "/api/certificate-authorities",
            json!({ "name": "m", "type": "fixture-static", "config": { "apiKey": MASK } }),
        )
        .await;
    assert_eq!(masked_create.status, 400, "{}", masked_create.body);
    assert_eq!(masked_create.error_code(), "VALIDATION_ERROR");

    // The plugin-declared secret is kept by a PATCH of another member.
    let v_before = stored_config(&server, vid);
    let v_patched =
        admin.patch(&format!("/api/certificate-authorities/{vid}"), json!({ "config": { "tier": 2 } })).await;
    assert_eq!(v_patched.status, 200, "{}", v_patched.body);
    assert_eq!(v_patched.body["data"]["config"], json!({ "apiKey": MASK, "caKeyPem": MASK, "tier": 2 }));
    assert_eq!(stored_config(&server, vid)["caKeyPem"], v_before["caKeyPem"]);
    // Probing and syncing the records exercises the plugins with the secrets in hand.
    let probe = admin.post(&format!("/api/certificate-authorities/{vid}/test"), json!({})).await;
    assert_eq!(probe.status, 200, "{}", probe.body);
    let probe = admin.post(&format!("/api/certificate-authorities/{sid}/test"), json!({})).await;
    assert_eq!(probe.body["data"]["success"], true, "{}", probe.body);

    let all = server.sql("SELECT config FROM certificate_authorities");
    let log = server.flushed_log().await;
    for secret in [api_key, password, declared, api_key_2, "sk_live_rotated_0001"] {
        assert!(!all.contains(secret), "{secret} is stored in the clear: {all}");
        assert!(!log.contains(secret), "{secret} reached the server's log");
    }
    for res in [admin.get("/api/certificate-authorities").await, admin.get("/api/audit-logs?limit=100").await] {
        let text = res.body.to_string();
        for secret in [api_key, password, declared, api_key_2] {
            assert!(!text.contains(secret), "{secret} in a response: {text}");
        }
    }
}

/// Issue 21, finding 5: a record moved to another destination keeps no secret. A PATCH of the
/// CA's `url` (which sends no mask: the stored secrets rode along), of a config member naming an
/// endpoint, or a PUT echoing the masks, is a 400 naming every secret to send again, and
/// nothing changes; sending them all again is accepted.
#[tokio::test]
async fn a_ca_moved_to_another_host_must_be_sent_its_secrets_again() {
    let server = Server::start();
    let admin = server.admin().await;
    install_plugin(&admin, "fixture-ca-static").await;
    let ca = create_ca(
        &admin,
        json!({
            "name": "Moved",
            "type": "fixture-static",
            "url": "https://ca.example.net/api",
            "config": { "apiKey": "sk_live_kept_1", "password": "pw_kept_2", "endpoint": "https://pca.example.net", "region": "eu" },
        }),
    )
    .await;
    let path = format!("/api/certificate-authorities/{}", ca["id"].as_i64().unwrap());
    let stored = stored_config(&server, ca["id"].as_i64().unwrap());

    for (what, body) in [
        ("PATCH url", json!({ "url": "https://elsewhere.example.org" })),
        ("PATCH url to http", json!({ "url": "http://ca.example.net/api" })),
        ("PATCH config endpoint", json!({ "config": { "endpoint": "https://attacker.example.org" } })),
        ("PATCH config endpoint removed", json!({ "config": { "endpoint": null } })),
        (
            "PATCH with one secret again",
            json!({ "url": "https://elsewhere.example.org", "config": { "apiKey": "sk_new" } }),
        ),
        (
            "PUT echoing the masks",
            json!({ "name": "Moved", "type": "fixture-static", "url": "https://elsewhere.example.org",
                "config": { "apiKey": MASK, "password": MASK, "endpoint": "https://pca.example.net" } }),
        ),
    ] {
        let res = if what.starts_with("PUT") { admin.put(&path, body).await } else { admin.patch(&path, body).await };
        assert_eq!(res.status, 400, "{what}: {}", res.body);
        assert_eq!(res.error_code(), "VALIDATION_ERROR", "{what}");
        let secrets = res.body["error"]["details"]["secrets"].clone();
        let expected =
            if what.ends_with("one secret again") { json!(["password"]) } else { json!(["apiKey", "password"]) };
        assert_eq!(secrets, expected, "{what}: {}", res.body);
        assert!(res.body["error"]["message"].as_str().is_some_and(|m| m.contains("sent again")), "{}", res.body);
    }
    let unchanged = admin.get(&path).await;
    assert_eq!(unchanged.body["data"]["url"], "https://ca.example.net/api", "{}", unchanged.body);
    assert_eq!(stored_config(&server, ca["id"].as_i64().unwrap()), stored, "nothing was written");

    // The same origin (another path) is not another destination; every secret sent again is.
    let same_host = admin.patch(&path, json!({ "url": "https://CA.example.net:443/v2" })).await;
    assert_eq!(same_host.status, 200, "{}", same_host.body);
    let moved = admin
        .patch(
            &path,
            json!({ "url": "https://elsewhere.example.org", "config": { "apiKey": "sk_new", "password": "pw_new" } }),
        )
        .await;
    assert_eq!(moved.status, 200, "{}", moved.body);
    assert_eq!(moved.body["data"]["url"], "https://elsewhere.example.org");
    assert_eq!(moved.body["data"]["config"]["apiKey"], MASK);
}

/// Issue 21: a `{"$sealed": …}` value only ever comes from the store. One sent by a client (here
/// the sealed secret of another CA of the workspace, copied from the database) is a 400, on
/// create, PATCH and PUT alike, and nothing is stored.
#[tokio::test]
async fn a_client_sent_sealed_value_is_refused() {
    let server = Server::start();
    let admin = server.admin().await;
    install_plugin(&admin, "fixture-ca-static").await;
    let source =
        create_ca(&admin, json!({ "name": "Source", "type": "fixture-static", "config": { "apiKey": "sk_source_1" } }))
            .await;
    let target =
        create_ca(&admin, json!({ "name": "Target", "type": "fixture-static", "config": { "region": "eu" } })).await;
    let sealed = stored_config(&server, source["id"].as_i64().unwrap())["apiKey"].clone();
    assert!(sealed["$sealed"].is_string(), "{sealed}");
    let path = format!("/api/certificate-authorities/{}", target["id"].as_i64().unwrap());
    for (what, res) in [
        ("PATCH", admin.patch(&path, json!({ "config": { "apiKey": sealed } })).await),
        (
            "PUT",
            admin
                .put(&path, json!({ "name": "Target", "type": "fixture-static", "config": { "apiKey": sealed } }))
                .await,
        ),
        (
            "create",
            admin
                .post(
                    "/api/certificate-authorities",
                    json!({ "name": "Copy", "type": "fixture-static", "config": { "nested": { "x": sealed } } }),
                )
                .await,
        ),
    ] {
        assert_eq!(res.status, 400, "{what}: {}", res.body);
        assert_eq!(res.error_code(), "VALIDATION_ERROR", "{what}");
        assert!(res.body["error"]["message"].as_str().is_some_and(|m| m.contains("$sealed")), "{what}: {}", res.body);
    }
    assert_eq!(stored_config(&server, target["id"].as_i64().unwrap()), json!({ "region": "eu" }));
    assert_eq!(admin.get("/api/certificate-authorities").await.body["total"], 2);
}

#[tokio::test]
async fn an_imported_ca_needs_its_matching_key_which_is_never_shown() {
    let server = Server::start();
    let admin = server.admin().await;
    let openssl = Openssl::new();
    let (cert, key) = openssl.ca("imported", "/CN=Imported Issuing CA/O=Trellis Tests");
    let (_, other_key) = openssl.ca("other", "/CN=Other CA");
    // The one line of the key's base64 body that must appear nowhere.
    let key_line = key.lines().nth(2).expect("a key body line").to_string();

    let mismatch = admin
        .post(
            "/api/certificate-authorities",
            json!({ "name": "bad", "type": "internal", "config": { "certificatePem": cert, "privateKeyPem": other_key } }),
        )
        .await;
    assert_eq!(mismatch.status, 400, "{}", mismatch.body);
    assert_eq!(mismatch.error_code(), "VALIDATION_ERROR");
    let not_a_ca = admin
        .post(
            "/api/certificate-authorities",
            json!({ "name": "bad", "type": "internal", "config": { "certificatePem": Spec::tls("leaf.example.com").pem(), "privateKeyPem": key } }),
        )
        .await;
    assert_eq!(not_a_ca.status, 400, "{}", not_a_ca.body);
    let mixed = admin
        .post(
            "/api/certificate-authorities",
            json!({ "name": "bad", "type": "internal", "config": { "certificatePem": cert, "privateKeyPem": key, "subject": { "commonName": "x" } } }),
        )
        .await;
    assert_eq!(mixed.status, 400, "{}", mixed.body);
    assert!(mixed.body.to_string().contains("/subject"), "{}", mixed.body);
    assert_eq!(admin.get("/api/certificate-authorities").await.body["total"], 0, "refused imports leave nothing");

    let imported = create_ca(
        &admin,
        json!({ "name": "Imported", "type": "internal", "config": { "certificatePem": cert, "privateKeyPem": key } }),
    )
    .await;
    assert_eq!(imported["config"]["privateKeyPem"], MASK);
    assert_eq!(imported["config"]["certificatePem"], json!(cert));
    let id = imported["id"].as_i64().unwrap();
    let test = admin.post(&format!("/api/certificate-authorities/{id}/test"), json!({})).await;
    assert_eq!(test.body["data"]["success"], true, "{}", test.body);
    assert!(
        test.body["data"]["details"]["subject"].as_str().is_some_and(|s| s.contains("CN=Imported Issuing CA")),
        "{}",
        test.body
    );
    // It signs with the imported key: the leaf verifies against the PEM we hold ourselves.
    let issued = admin.post("/api/certificates/issue", json!({ "caId": id, "commonName": "svc.example.com" })).await;
    assert_eq!(issued.status, 201, "{}", issued.body);
    openssl.write("leaf.pem", issued.body["data"]["certificate"].as_str().unwrap());
    let (ok, out) = openssl.verify(&["-CAfile", "imported.pem", "leaf.pem"]);
    assert!(ok, "{out}");
    let served = Client::new(&server, None).get(&format!("/pki/{id}/ca")).await;
    assert_eq!(served.status, 200);
    assert!(String::from_utf8_lossy(&served.bytes).contains(cert.lines().nth(1).unwrap()), "the imported certificate");

    // A PATCH echoing the mask keeps the sealed key.
    let sealed = stored_config(&server, id)["privateKeyPem"].clone();
    assert!(sealed["$sealed"].is_string(), "{sealed}");
    let patched = admin
        .patch(
            &format!("/api/certificate-authorities/{id}"),
            json!({ "name": "Imported (renamed)", "config": { "privateKeyPem": MASK } }),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    assert_eq!(stored_config(&server, id)["privateKeyPem"], sealed);

    for res in [
        admin.get(&format!("/api/certificate-authorities/{id}")).await,
        admin.get("/api/certificate-authorities").await,
        patched,
    ] {
        assert!(!res.body.to_string().contains(&key_line), "the key in a response: {}", res.body);
    }
    let log = server.flushed_log().await;
    assert!(!log.contains(&key_line), "the imported key reached the log");
    let stored = server.sql("SELECT config FROM certificate_authorities")
        + &server.sql("SELECT key_sealed FROM internal_authorities");
    assert!(!stored.contains(&key_line), "the imported key is stored in the clear");
}

#[tokio::test]
async fn internal_roots_take_every_key_algorithm() {
    let server = Server::start();
    let admin = server.admin().await;
    let openssl = Openssl::new();
    for (algorithm, public_key) in
        [("ecdsa-p256", "prime256v1"), ("ecdsa-p384", "secp384r1"), ("ed25519", "ED25519"), ("rsa-2048", "(2048 bit)")]
    {
        let ca = create_ca(
            &admin,
            json!({
                "name": algorithm,
                "type": "internal",
                "config": { "subject": { "commonName": format!("{algorithm} root"), "country": "de" }, "keyAlgorithm": algorithm },
            }),
        )
        .await;
        let id = ca["id"].as_i64().unwrap();
        let test = admin.post(&format!("/api/certificate-authorities/{id}/test"), json!({})).await;
        assert_eq!(test.body["data"]["details"]["keyAlgorithm"], algorithm, "{}", test.body);
        assert!(test.body["data"]["details"]["subject"].as_str().unwrap().contains("C=DE"), "{}", test.body);
        let pem = Client::new(&server, None).get(&format!("/pki/{id}/ca")).await;
        let file = format!("{algorithm}.pem");
        openssl.write(&file, &pem.bytes);
        let text = openssl.ok(&["x509", "-in", &file, "-noout", "-text"]);
        assert!(text.contains(public_key), "{algorithm}: {text}");
        assert!(text.contains("CA:TRUE"), "{algorithm}: {text}");
        let issued = admin
            .post("/api/certificates/issue", json!({ "caId": id, "commonName": format!("{algorithm}.example.com") }))
            .await;
        assert_eq!(issued.status, 201, "{algorithm}: {}", issued.body);
        openssl.write("leaf.pem", issued.body["data"]["certificate"].as_str().unwrap());
        let (ok, out) = openssl.verify(&["-CAfile", &file, "leaf.pem"]);
        assert!(ok, "{algorithm}: {out}");
    }
}

#[tokio::test]
async fn an_intermediate_chains_to_its_root_and_never_outlives_it() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = create_ca(
        &admin,
        json!({ "name": "Short Root", "type": "internal", "config": { "subject": { "commonName": "Short Root" }, "validityDays": 20 } }),
    )
    .await;
    let root_id = root["id"].as_i64().unwrap();
    let inter = create_ca(
        &admin,
        json!({
            "name": "Long Intermediate",
            "type": "internal",
            "config": { "subject": { "commonName": "Long Intermediate" }, "parentCaId": root_id, "validityDays": 3650 },
        }),
    )
    .await;
    let inter_id = inter["id"].as_i64().unwrap();
    let root_test = admin.post(&format!("/api/certificate-authorities/{root_id}/test"), json!({})).await;
    let inter_test = admin.post(&format!("/api/certificate-authorities/{inter_id}/test"), json!({})).await;
    let (r, i) = (&root_test.body["data"]["details"], &inter_test.body["data"]["details"]);
    assert_eq!(inter_test.body["data"]["success"], true, "{}", inter_test.body);
    assert_eq!(i["issuer"], r["subject"], "{i}");
    assert_eq!(i["parentCaId"], root_id, "{i}");
    assert!(i["expiresAt"].as_str() <= r["expiresAt"].as_str(), "the intermediate outlives its root: {i} / {r}");
    assert!(i["daysUntilExpiry"].as_i64() <= Some(20), "{i}");
    // A warning: fewer than 30 days left is a degraded CA, still usable.
    assert!(
        inter_test.body["data"]["checks"].as_array().unwrap().iter().any(|c| c["status"] == "warn"),
        "{}",
        inter_test.body
    );
    assert_eq!(
        admin.get(&format!("/api/certificate-authorities/{inter_id}")).await.body["data"]["healthStatus"],
        "degraded"
    );

    let public = Client::new(&server, None);
    let chain = String::from_utf8_lossy(&public.get(&format!("/pki/{inter_id}/ca")).await.bytes).into_owned();
    assert_eq!(chain.matches("BEGIN CERTIFICATE").count(), 2, "the intermediate and its root: {chain}");
    let root_pem = String::from_utf8_lossy(&public.get(&format!("/pki/{root_id}/ca")).await.bytes).into_owned();
    assert_eq!(root_pem.matches("BEGIN CERTIFICATE").count(), 1);
    assert!(chain.ends_with(&root_pem) || chain.contains(root_pem.trim()), "the chain ends with the root");

    let openssl = Openssl::new();
    openssl.write("root.pem", &root_pem);
    openssl.write("chain.pem", &chain);
    let (ok, out) = openssl.verify(&["-CAfile", "root.pem", "chain.pem"]);
    assert!(ok, "the intermediate verifies under the root: {out}");
    // Unknown parents are refused.
    let orphan = admin
        .post(
            "/api/certificate-authorities",
            json!({ "name": "orphan", "type": "internal", "config": { "subject": { "commonName": "Orphan" }, "parentCaId": 987654 } }),
        )
        .await;
    assert_eq!(orphan.status, 400, "{}", orphan.body);
    assert_eq!(orphan.error_code(), "VALIDATION_ERROR");
    assert_eq!(public.get("/pki/987654/ca").await.status, 404);
    assert_eq!(public.get("/pki/not-a-number/ca").await.status, 400);
}

#[tokio::test]
async fn deleting_a_ca_keeps_its_certificates_without_the_link() {
    let server = Server::start();
    let admin = server.admin().await;
    let id = internal_root(&admin, "Doomed Root").await;
    let issued = admin.post("/api/certificates/issue", json!({ "caId": id, "commonName": "keep.example.com" })).await;
    assert_eq!(issued.status, 201, "{}", issued.body);
    let cert = issued.body["data"].clone();
    assert_eq!(cert["caId"], id);
    let cert_id = cert["id"].as_i64().unwrap();
    assert_eq!(admin.get("/api/certificate-authorities/stats").await.body["data"]["totalCertificatesIssued"], 1);

    assert_eq!(admin.delete(&format!("/api/certificate-authorities/{id}")).await.status, 204);
    let kept = admin.get(&format!("/api/certificates/{cert_id}")).await;
    assert_eq!(kept.status, 200, "{}", kept.body);
    let k = &kept.body["data"];
    assert_eq!(k["caId"], Value::Null, "{k}");
    assert_eq!(k["status"], "active", "deleting the CA does not revoke (§4.1)");
    assert_eq!(
        (k["serialNumber"].clone(), k["certificate"].clone()),
        (cert["serialNumber"].clone(), cert["certificate"].clone())
    );
    assert_eq!(k["issuanceSource"], "internal");
    assert_eq!(admin.get("/api/certificates").await.body["total"], 1);
    let stats = admin.get("/api/certificate-authorities/stats").await;
    assert_eq!(stats.body["data"]["totalCAs"], 0, "{}", stats.body);
    let again = admin.post("/api/certificates/issue", json!({ "caId": id, "commonName": "more.example.com" })).await;
    assert_eq!(again.status, 404, "{}", again.body);
    // The certificate still lives its own life: it can be revoked in the inventory.
    let revoked = admin.post(&format!("/api/certificates/{cert_id}/revoke"), json!({})).await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    assert_eq!(revoked.body["data"]["status"], "revoked");
}
