//! Trellis as an ACME server (docs/acme-server.md), with real clients: certbot (PyPI, in
//! target/venv-certbot: scripts/certbot.sh) and lego (Debian). Challenges are validated by
//! Trellis itself: http-01 against certbot's standalone server and lego's, dns-01 against
//! pebble-challtestsrv's TXT records (also the resolver, which answers 127.0.0.1 for every name).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};
use trellis_tests::pebble::{free_port, ChallTestSrv};
use trellis_tests::{Client, Server};

use crate::cas::{internal_root, Openssl};

pub(crate) fn certbot_venv() -> PathBuf {
    trellis_tests::workspace_root().join("target/venv-certbot/bin")
}

fn certbot_binary() -> PathBuf {
    let path = certbot_venv().join("certbot");
    assert!(path.exists(), "{} is missing: run scripts/certbot.sh (make test does)", path.display());
    path
}

/// A Trellis on a port chosen in advance (the directory's URLs are its public URL), validating
/// on loopback through challtestsrv's DNS.
pub(crate) struct Acme {
    pub(crate) server: Server,
    pub(crate) dns: ChallTestSrv,
    pub(crate) admin: Client,
    /// The http-01 port Trellis's validator connects to (where the clients listen).
    pub(crate) http_port: u16,
}

impl Acme {
    pub(crate) async fn start(extra: &[(&str, &str)]) -> Acme {
        let dns = ChallTestSrv::start();
        let (port, http_port) = (free_port(), free_port());
        let listen = format!("127.0.0.1:{port}");
        let url = format!("http://{listen}");
        let http = http_port.to_string();
        let mut env = vec![
            ("TRELLIS_LISTEN", listen.as_str()),
            ("TRELLIS_PUBLIC_URL", url.as_str()),
            ("TRELLIS_ACME_VALIDATION_HTTP_PORT", http.as_str()),
            ("TRELLIS_ACME_VALIDATION_ALLOW", "127.0.0.0/8"),
            ("TRELLIS_ACME_DNS_RESOLVER", dns.dns_address.as_str()),
        ];
        env.extend_from_slice(extra);
        let server = Server::start_with(&env);
        let admin = server.admin().await;
        Acme { server, dns, admin, http_port }
    }

    /// A new internal CA with its directory enabled (EAB required); returns its id.
    pub(crate) async fn ca(&self, name: &str) -> i64 {
        let ca = internal_root(&self.admin, name).await;
        let enabled =
            self.admin.put(&format!("/api/certificate-authorities/{ca}/acme"), json!({ "enabled": true })).await;
        assert_eq!(enabled.status, 200, "{}", enabled.body);
        assert_eq!(enabled.body["data"]["externalAccountRequired"], true, "EAB is required by default");
        ca
    }

    pub(crate) fn directory(&self, ca: i64) -> String {
        self.server.url(&format!("/acme/{ca}/directory"))
    }

    /// A new EAB key of `ca`: (its id, keyId, hmacKey).
    pub(crate) async fn eab(&self, ca: i64, name: &str) -> (String, String, String) {
        let made = self.admin.post("/api/acme/eab-keys", json!({ "caId": ca, "name": name })).await;
        assert_eq!(made.status, 201, "{}", made.body);
        let data = &made.body["data"];
        let text = |k: &str| data[k].as_str().unwrap_or_default().to_owned();
        assert_eq!(text("status"), "unused");
        (text("id"), text("keyId"), text("hmacKey"))
    }
}

/// One certbot configuration (its own config, work and logs directories).
struct Certbot {
    dir: tempfile::TempDir,
}

impl Certbot {
    fn new() -> Certbot {
        Certbot { dir: tempfile::tempdir().expect("certbot dir") }
    }

    fn run(&self, args: &[&str]) -> Output {
        let d = self.dir.path().display().to_string();
        Command::new(certbot_binary())
            .args(["--non-interactive", "--no-random-sleep-on-renew"])
            .args(["--config-dir", &format!("{d}/config"), "--work-dir", &format!("{d}/work")])
            .args(["--logs-dir", &format!("{d}/logs")])
            .args(args)
            .output()
            .expect("certbot runs")
    }

    fn live(&self, name: &str, file: &str) -> PathBuf {
        self.dir.path().join("config/live").join(name).join(file)
    }
}

pub(crate) fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn assert_ok(output: &Output, what: &str) {
    assert!(output.status.success(), "{what} failed: {}", text(output));
}

fn assert_refused(output: &Output, what: &str, needles: &[&str]) {
    let said = text(output);
    assert!(!output.status.success(), "{what} should have failed: {said}");
    for needle in needles {
        assert!(said.contains(needle), "{what}: `{needle}` not in the client's output: {said}");
    }
}

/// certbot certonly --standalone with EAB.
fn certonly(certbot: &Certbot, acme: &Acme, ca: i64, eab: (&str, &str), names: &[&str]) -> Output {
    let port = acme.http_port.to_string();
    let directory = acme.directory(ca);
    let mut args = vec![
        "certonly",
        "--standalone",
        "--http-01-port",
        &port,
        "--http-01-address",
        "127.0.0.1",
        "--server",
        &directory,
        "--agree-tos",
        "-m",
        "ops@example.com",
    ];
    // `=` keeps a MAC key that starts with `-` from reading as an option.
    let (kid_arg, hmac_arg) = (format!("--eab-kid={}", eab.0), format!("--eab-hmac-key={}", eab.1));
    args.extend([kid_arg.as_str(), hmac_arg.as_str()]);
    for name in names {
        args.extend(["-d", name]);
    }
    certbot.run(&args)
}

/// The chain verifies with openssl against the CA's own certificate (from Trellis's API, not
/// from the chain), and parses with Python's cryptography.
pub(crate) async fn check_chain(acme: &Acme, ca: i64, cert: &Path, fullchain: &Path, names: &[&str]) {
    let ca_record = acme.admin.get(&format!("/api/certificate-authorities/{ca}")).await;
    let ca_pem = ca_record.body["data"]["certificatePem"]
        .as_str()
        .or_else(|| ca_record.body["data"]["certificate"].as_str())
        .map(str::to_owned);
    let openssl = Openssl::new();
    let anchor = match ca_pem {
        Some(pem) => openssl.write("ca.pem", pem),
        None => {
            // The chain's last certificate is the root (checked to be the CA's by subject).
            let chain = std::fs::read_to_string(fullchain).expect("fullchain");
            let last = chain.rfind("-----BEGIN CERTIFICATE-----").expect("a CA certificate in the chain");
            openssl.write("ca.pem", &chain[last..])
        }
    };
    let cert_path = cert.display().to_string();
    let (verified, said) = openssl.verify(&["-CAfile", &anchor, &cert_path]);
    assert!(verified, "openssl verify: {said}");
    let script = "import sys\nfrom cryptography import x509\ncerts = x509.load_pem_x509_certificates(open(sys.argv[1], 'rb').read())\n\
                  san = certs[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value\n\
                  print(','.join(sorted(san.get_values_for_type(x509.DNSName))), len(certs))";
    let parsed = Command::new(certbot_venv().join("python"))
        .args(["-c", script, &fullchain.display().to_string()])
        .output()
        .expect("python runs");
    assert!(parsed.status.success(), "cryptography: {}", text(&parsed));
    let mut sorted: Vec<&str> = names.to_vec();
    sorted.sort();
    assert_eq!(String::from_utf8_lossy(&parsed.stdout).trim(), format!("{} 2", sorted.join(",")));
}

pub(crate) async fn inventory_entry(admin: &Client, name: &str) -> Value {
    let listed = admin.get(&format!("/api/certificates?search={name}&limit=100")).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let entries = listed.body["data"].as_array().cloned().unwrap_or_default();
    entries.into_iter().max_by_key(|c| c["id"].as_i64()).unwrap_or_else(|| panic!("{name} is in the inventory"))
}

#[tokio::test]
async fn certbot_issues_renews_revokes_and_unregisters() {
    let acme = Acme::start(&[]).await;
    let ca = acme.ca("ACME Root").await;
    let (eab_id, kid, hmac) = acme.eab(ca, "web servers").await;
    let certbot = Certbot::new();
    let name = "www.example.test";

    let issued = certonly(&certbot, &acme, ca, (&kid, &hmac), &[name]);
    assert_ok(&issued, "certbot certonly");
    check_chain(&acme, ca, &certbot.live(name, "cert.pem"), &certbot.live(name, "fullchain.pem"), &[name]).await;

    // In the inventory, with the account and order it came from.
    let entry = inventory_entry(&acme.admin, name).await;
    let account_id = entry["metadata"]["acme"]["accountId"].as_str().unwrap_or_default().to_owned();
    assert!(account_id.starts_with("acct_"), "{entry}");
    assert!(entry["metadata"]["acme"]["orderId"].as_str().unwrap_or_default().starts_with("order_"), "{entry}");

    // The key is bound now, to that account.
    let keys = acme.admin.get("/api/acme/eab-keys").await;
    let key = keys.body["data"].as_array().and_then(|k| k.iter().find(|k| k["id"] == eab_id.as_str())).cloned();
    let key = key.unwrap_or_else(|| panic!("the key is listed: {}", keys.body));
    assert_eq!(key["status"], "bound");
    assert_eq!(key["accountId"], account_id.as_str());
    assert!(key.get("hmacKey").is_none(), "the MAC key is shown once: {key}");

    // certbot (5.x) asks renewalInfo (RFC 9773) in a plain `renew`: the window is ahead, so
    // nothing is due, and the server answered its GET (the route's request counter says so).
    let not_due = certbot.run(&["renew"]);
    assert_ok(&not_due, "certbot renew (not due)");
    assert!(text(&not_due).contains("not yet due"), "{}", text(&not_due));
    let metrics = acme.admin.get("/metrics").await;
    let metrics = String::from_utf8_lossy(&metrics.bytes);
    assert!(
        metrics.lines().any(|l| l.starts_with("http_requests_total")
            && l.contains(r#"route="/acme/{ca}/renewal-info/{cert_id}""#)
            && l.contains(r#"method="GET""#)
            && l.contains(r#"status="200""#)),
        "certbot's renew asked renewalInfo: {metrics}"
    );

    let renewed = certbot.run(&["renew", "--force-renewal"]);
    assert_ok(&renewed, "certbot renew");
    let second = inventory_entry(&acme.admin, name).await;
    assert_ne!(second["id"], entry["id"], "renewal issued a new certificate");
    check_chain(&acme, ca, &certbot.live(name, "cert.pem"), &certbot.live(name, "fullchain.pem"), &[name]).await;

    let cert_path = certbot.live(name, "cert.pem").display().to_string();
    let directory = acme.directory(ca);
    let revoked = certbot.run(&[
        "revoke",
        "--server",
        &directory,
        "--cert-path",
        &cert_path,
        "--no-delete-after-revoke",
        "--reason",
        "superseded",
    ]);
    assert_ok(&revoked, "certbot revoke");
    let after = acme.admin.get(&format!("/api/certificates/{}", second["id"])).await;
    assert_eq!(after.body["data"]["status"], "revoked", "{}", after.body);
    let again = certbot.run(&["revoke", "--server", &directory, "--cert-path", &cert_path, "--no-delete-after-revoke"]);
    assert_refused(&again, "revoking again", &["already revoked"]);

    let unregistered = certbot.run(&["unregister", "--server", &directory]);
    assert_ok(&unregistered, "certbot unregister");
    let accounts = acme.admin.get("/api/acme/accounts").await;
    let account =
        accounts.body["data"].as_array().and_then(|a| a.iter().find(|a| a["id"] == account_id.as_str())).cloned();
    let account = account.unwrap_or_else(|| panic!("the account is listed: {}", accounts.body));
    assert_eq!(account["status"], "deactivated");
    assert_eq!(account["eabKeyId"], eab_id.as_str());

    // The audit log has the account's life.
    let audit = acme.admin.get("/api/audit-logs?limit=200").await;
    let actions: Vec<&str> = audit.body["data"]
        .as_array()
        .map(|rows| rows.iter().filter_map(|r| r["action"].as_str()).collect())
        .unwrap_or_default();
    for action in ["acme.directory.update", "acme.eab_key.create", "acme.account.create", "acme.account.deactivate"] {
        assert!(actions.contains(&action), "{action} audited: {actions:?}");
    }
}

#[tokio::test]
async fn eab_keys_bind_once_for_their_own_directory_until_revoked() {
    let acme = Acme::start(&[]).await;
    let ca = acme.ca("ACME EAB Root").await;
    let other = acme.ca("Other Root").await;

    let directory = acme.directory(ca);
    let register = |certbot: &Certbot, kid: &str, hmac: &str| {
        certbot.run(&[
            "register",
            "--server",
            &directory,
            "--agree-tos",
            "-m",
            "ops@example.com",
            &format!("--eab-kid={kid}"),
            &format!("--eab-hmac-key={hmac}"),
        ])
    };

    let no_eab = Certbot::new().run(&["register", "--server", &directory, "--agree-tos", "-m", "ops@example.com"]);
    assert_refused(&no_eab, "an account without EAB", &["external account binding"]);

    let (_, kid, hmac) = acme.eab(ca, "once").await;
    assert_ok(&register(&Certbot::new(), &kid, &hmac), "registering with a fresh key");
    let twice = register(&Certbot::new(), &kid, &hmac);
    assert_refused(&twice, "the same EAB key again", &["already"]);

    let (_, other_kid, other_hmac) = acme.eab(other, "other CA").await;
    let foreign = register(&Certbot::new(), &other_kid, &other_hmac);
    assert_refused(&foreign, "another CA's EAB key", &["unknown external account binding key"]);

    let (revoked_id, revoked_kid, revoked_hmac) = acme.eab(ca, "revoked").await;
    let deleted = acme.admin.delete(&format!("/api/acme/eab-keys/{revoked_id}")).await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    let refused = register(&Certbot::new(), &revoked_kid, &revoked_hmac);
    assert_refused(&refused, "a revoked EAB key", &["revoked"]);
}

#[tokio::test]
async fn a_wildcard_is_validated_by_dns01_through_a_manual_hook() {
    let acme = Acme::start(&[]).await;
    let ca = acme.ca("ACME DNS Root").await;
    let (_, kid, hmac) = acme.eab(ca, "dns").await;
    let certbot = Certbot::new();
    let hook = certbot.dir.path().join("hook.sh");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\ncurl -fsS -d \"{{\\\"host\\\":\\\"_acme-challenge.$CERTBOT_DOMAIN.\\\",\\\"value\\\":\\\"$CERTBOT_VALIDATION\\\"}}\" {}/set-txt\n",
            acme.dns.management_url
        ),
    )
    .expect("hook written");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).expect("hook executable");
    let hook_path = hook.display().to_string();
    let directory = acme.directory(ca);
    let issued = certbot.run(&[
        "certonly",
        "--manual",
        "--preferred-challenges",
        "dns",
        "--manual-auth-hook",
        &hook_path,
        "--server",
        &directory,
        "--agree-tos",
        "-m",
        "ops@example.com",
        &format!("--eab-kid={kid}"),
        &format!("--eab-hmac-key={hmac}"),
        "-d",
        "*.apps.example.test",
    ]);
    assert_ok(&issued, "certbot certonly --manual (dns-01)");
    let live = "apps.example.test";
    check_chain(
        &acme,
        ca,
        &certbot.live(live, "cert.pem"),
        &certbot.live(live, "fullchain.pem"),
        &["*.apps.example.test"],
    )
    .await;
}

/// A small ACME client of the test's own (ES256 account keys through ring), for what the real
/// clients never send: wrong JWS, key rollover, a CSR for other names.
pub(crate) mod raw {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
    use serde_json::{json, Value};

    pub fn b64(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    pub struct Key {
        pair: EcdsaKeyPair,
    }

    impl Key {
        pub fn new() -> Key {
            let rng = SystemRandom::new();
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("key");
            let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).expect("key");
            Key { pair }
        }

        pub fn jwk(&self) -> Value {
            let point = self.pair.public_key().as_ref();
            json!({ "crv": "P-256", "kty": "EC", "x": b64(&point[1..33]), "y": b64(&point[33..65]) })
        }

        pub fn thumbprint(&self) -> String {
            use sha2::{Digest, Sha256};
            b64(&Sha256::digest(self.jwk().to_string().as_bytes()))
        }

        /// A flattened JWS of `payload` (None: POST-as-GET) with `header` members added.
        pub fn sign(&self, header: Value, payload: Option<&Value>) -> Value {
            let mut protected = json!({ "alg": "ES256" });
            if let (Some(target), Value::Object(extra)) = (protected.as_object_mut(), header) {
                target.extend(extra);
            }
            let protected = b64(protected.to_string().as_bytes());
            let payload = payload.map(|p| b64(p.to_string().as_bytes())).unwrap_or_default();
            let signature =
                self.pair.sign(&SystemRandom::new(), format!("{protected}.{payload}").as_bytes()).expect("signs");
            json!({ "protected": protected, "payload": payload, "signature": b64(signature.as_ref()) })
        }
    }

    pub struct Answer {
        pub status: u16,
        pub body: Value,
        pub location: Option<String>,
        pub nonce: Option<String>,
        pub retry_after: Option<String>,
        pub content_type: String,
        pub text: String,
    }

    pub struct Client {
        pub http: reqwest::Client,
        pub directory: Value,
        pub key: Key,
        pub kid: Option<String>,
    }

    impl Client {
        pub async fn new(directory_url: &str) -> Client {
            let http = reqwest::Client::new();
            let directory = http.get(directory_url).send().await.expect("directory").json().await.expect("json");
            Client { http, directory, key: Key::new(), kid: None }
        }

        pub fn url(&self, name: &str) -> String {
            self.directory[name].as_str().unwrap_or_default().to_owned()
        }

        pub async fn nonce(&self) -> String {
            let answer = self.http.head(self.url("newNonce")).send().await.expect("newNonce");
            answer.headers()["replay-nonce"].to_str().expect("nonce").to_owned()
        }

        pub async fn post_jws(&self, url: &str, jws: &Value) -> Answer {
            let answer = self
                .http
                .post(url)
                .header("content-type", "application/jose+json")
                .body(jws.to_string())
                .send()
                .await
                .expect("ACME POST");
            let header = |name: &str| answer.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
            let (location, nonce, retry_after) = (header("location"), header("replay-nonce"), header("retry-after"));
            let content_type = header("content-type").unwrap_or_default();
            let status = answer.status().as_u16();
            let text = answer.text().await.unwrap_or_default();
            let body = serde_json::from_str(&text).unwrap_or(Value::Null);
            Answer { status, body, location, nonce, retry_after, content_type, text }
        }

        /// A request signed by the account (`kid`), or by the key (`jwk`) before it has one.
        pub async fn post(&self, url: &str, payload: Option<&Value>) -> Answer {
            let nonce = self.nonce().await;
            let header = match &self.kid {
                Some(kid) => json!({ "nonce": nonce, "url": url, "kid": kid }),
                None => json!({ "nonce": nonce, "url": url, "jwk": self.key.jwk() }),
            };
            self.post_jws(url, &self.key.sign(header, payload)).await
        }

        /// newAccount with an EAB key.
        pub async fn register(&mut self, kid: &str, hmac: &str) -> Answer {
            let url = self.url("newAccount");
            let eab_protected = b64(json!({ "alg": "HS256", "kid": kid, "url": url }).to_string().as_bytes());
            let eab_payload = b64(self.key.jwk().to_string().as_bytes());
            let secret = URL_SAFE_NO_PAD.decode(hmac).expect("hmac key");
            let mac = ring::hmac::sign(
                &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret),
                format!("{eab_protected}.{eab_payload}").as_bytes(),
            );
            let binding = json!({ "protected": eab_protected, "payload": eab_payload, "signature": b64(mac.as_ref()) });
            let payload = json!({ "termsOfServiceAgreed": true, "externalAccountBinding": binding });
            let answer = self.post(&url, Some(&payload)).await;
            if answer.status == 201 || answer.status == 200 {
                self.kid = answer.location.clone();
            }
            answer
        }
    }
}

#[tokio::test]
async fn wrong_jws_are_refused_with_their_problem_types_and_keys_roll_over() {
    // The challenge POST waits for its validation (longer than any loaded CI machine needs).
    let acme = Acme::start(&[("TRELLIS_ACME_ORDERS_PER_HOUR", "2"), ("TRELLIS_ACME_CHALLENGE_WAIT_MS", "30000")]).await;
    let ca = acme.ca("ACME Protocol Root").await;
    let dns_only = acme
        .admin
        .put(&format!("/api/certificate-authorities/{ca}/acme"), json!({ "challengeTypes": ["dns-01"] }))
        .await;
    assert_eq!(dns_only.status, 200, "{}", dns_only.body);
    let (_, kid, hmac) = acme.eab(ca, "raw").await;
    let mut client = raw::Client::new(&acme.directory(ca)).await;
    let registered = client.register(&kid, &hmac).await;
    assert_eq!(registered.status, 201, "{}", registered.text);
    let account_url = client.kid.clone().expect("account URL");
    let new_order = client.url("newOrder");
    let order_body = json!({ "identifiers": [{ "type": "dns", "value": "raw.example.test" }] });

    let problem = |answer: &raw::Answer, status: u16, kind: &str| {
        assert_eq!(answer.status, status, "{}", answer.text);
        assert_eq!(answer.content_type, "application/problem+json", "{}", answer.text);
        assert_eq!(answer.body["type"], format!("urn:ietf:params:acme:error:{kind}"), "{}", answer.text);
        assert!(answer.nonce.is_some(), "every answer carries a fresh nonce");
    };

    // alg none, and a MAC on an account request.
    for alg in ["none", "HS256"] {
        let nonce = client.nonce().await;
        let protected = raw::b64(
            json!({ "alg": alg, "nonce": nonce, "url": new_order, "kid": account_url }).to_string().as_bytes(),
        );
        let jws =
            json!({ "protected": protected, "payload": raw::b64(order_body.to_string().as_bytes()), "signature": "" });
        problem(&client.post_jws(&new_order, &jws).await, 400, "badSignatureAlgorithm");
    }
    // A nonce used twice: the second is badNonce, with a fresh nonce to retry with.
    let nonce = client.nonce().await;
    let signed = client.key.sign(json!({ "nonce": nonce, "url": new_order, "kid": account_url }), Some(&order_body));
    assert_eq!(client.post_jws(&new_order, &signed).await.status, 201);
    let replayed = client.post_jws(&new_order, &signed).await;
    problem(&replayed, 400, "badNonce");
    // The spent nonce spelt with base64 padding is the same nonce.
    let padded = client
        .key
        .sign(json!({ "nonce": format!("{nonce}=="), "url": new_order, "kid": account_url }), Some(&order_body));
    problem(&client.post_jws(&new_order, &padded).await, 400, "badNonce");
    // A url that is not the request's.
    let nonce = client.nonce().await;
    let elsewhere = client
        .key
        .sign(json!({ "nonce": nonce, "url": client.url("revokeCert"), "kid": account_url }), Some(&order_body));
    problem(&client.post_jws(&new_order, &elsewhere).await, 403, "unauthorized");
    // An unknown kid.
    let nonce = client.nonce().await;
    let unknown = client.key.sign(
        json!({ "nonce": nonce, "url": new_order, "kid": format!("{}/account/acct_nobody", acme.server.url(&format!("/acme/{ca}"))) }),
        Some(&order_body),
    );
    problem(&client.post_jws(&new_order, &unknown).await, 400, "accountDoesNotExist");
    // Not JSON, and too large.
    let garbage = client.http.post(&new_order).body("not json").send().await.expect("POST");
    assert_eq!(garbage.status(), 400);
    let huge = client.http.post(&new_order).body(vec![b'x'; 70 * 1024]).send().await.expect("POST");
    assert!(huge.status().is_client_error(), "{}", huge.status());
    // An identifier Trellis does not issue for: rejectedIdentifier with a subproblem.
    let bad = client
        .post(&new_order, Some(&json!({ "identifiers": [{ "type": "dns", "value": "bad_name" }, { "type": "dns", "value": "ok.example.test" }] })))
        .await;
    problem(&bad, 400, "rejectedIdentifier");
    assert_eq!(bad.body["subproblems"][0]["identifier"]["value"], "bad_name", "{}", bad.text);
    // An IP identifier cannot be validated by dns-01 (the only type this directory offers).
    let ip = client.post(&new_order, Some(&json!({ "identifiers": [{ "type": "ip", "value": "127.0.0.1" }] }))).await;
    problem(&ip, 400, "rejectedIdentifier");

    // A CSR with other names than the order's: badCSR. The order is made ready by dns-01.
    let order = client.post(&new_order, Some(&order_body)).await;
    assert_eq!(order.status, 201, "{}", order.text);
    let order_url = order.location.clone().expect("order URL");
    let authz_url = order.body["authorizations"][0].as_str().expect("authz").to_owned();
    let authz = client.post(&authz_url, None).await;
    let challenge = authz.body["challenges"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "dns-01")).cloned();
    let challenge = challenge.unwrap_or_else(|| panic!("a dns-01 challenge: {}", authz.text));
    let key_authorization = format!("{}.{}", challenge["token"].as_str().unwrap_or_default(), client.key.thumbprint());
    use sha2::{Digest, Sha256};
    let digest = raw::b64(&Sha256::digest(key_authorization.as_bytes()));
    let set = client
        .http
        .post(format!("{}/set-txt", acme.dns.management_url))
        .body(json!({ "host": "_acme-challenge.raw.example.test.", "value": digest }).to_string())
        .send()
        .await
        .expect("set-txt");
    assert!(set.status().is_success());
    let posted = client.post(challenge["url"].as_str().unwrap_or_default(), Some(&json!({}))).await;
    assert_eq!(posted.status, 200, "{}", posted.text);
    // Validated while the POST waited: the answer is the outcome, and the authorization and the
    // order are decided at the first look.
    assert_eq!(posted.body["status"], "valid", "{}", posted.text);
    assert!(posted.retry_after.is_none(), "nothing left to wait for: {}", posted.text);
    assert_eq!(client.post(&authz_url, None).await.body["status"], "valid");
    assert_eq!(client.post(&order_url, None).await.body["status"], "ready");
    // A third order this hour: rateLimited with Retry-After.
    let limited = client.post(&new_order, Some(&order_body)).await;
    problem(&limited, 429, "rateLimited");
    assert!(limited.retry_after.is_some(), "Retry-After");

    let csr_for = |names: Vec<String>| {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(names).expect("params");
        // rcgen's default subject is a common name of its own, which is no identifier.
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.serialize_request(&key).expect("CSR").der().to_vec()
    };
    let finalize_url = order.body["finalize"].as_str().expect("finalize").to_owned();
    let other = csr_for(vec!["raw.example.test".into(), "other.example.test".into()]);
    let refused = client.post(&finalize_url, Some(&json!({ "csr": raw::b64(&other) }))).await;
    problem(&refused, 400, "badCSR");
    assert!(refused.body["detail"].as_str().unwrap_or_default().contains("other.example.test"), "{}", refused.text);
    // Two finalizes at once: the order is claimed once, so one certificate is issued and the
    // other request is told the order is no longer ready.
    let good = csr_for(vec!["raw.example.test".into()]);
    let finalize = json!({ "csr": raw::b64(&good) });
    let (first, second) =
        tokio::join!(client.post(&finalize_url, Some(&finalize)), client.post(&finalize_url, Some(&finalize)));
    let (finalized, refused) = if first.status == 200 { (first, second) } else { (second, first) };
    problem(&refused, 403, "orderNotReady");
    assert_eq!(finalized.status, 200, "{}", finalized.text);
    assert_eq!(finalized.body["status"], "valid", "{}", finalized.text);
    let chain = client.post(finalized.body["certificate"].as_str().unwrap_or_default(), None).await;
    assert_eq!(chain.content_type, "application/pem-certificate-chain");
    assert_eq!(chain.text.matches("-----BEGIN CERTIFICATE-----").count(), 2, "leaf then chain");

    // Key rollover (RFC 8555 §7.3.5): the new key signs from then on, the old one no longer.
    let new_key = raw::Key::new();
    let key_change = client.url("keyChange");
    let inner = new_key.sign(
        json!({ "url": key_change, "jwk": new_key.jwk() }),
        Some(&json!({ "account": account_url, "oldKey": client.key.jwk() })),
    );
    let rolled = client.post(&key_change, Some(&inner)).await;
    assert_eq!(rolled.status, 200, "{}", rolled.text);
    let old_key = std::mem::replace(&mut client.key, new_key);
    let fine = client.post(&account_url, None).await;
    assert_eq!(fine.status, 200, "the new key signs: {}", fine.text);
    let nonce = client.nonce().await;
    let stale = old_key.sign(json!({ "nonce": nonce, "url": account_url, "kid": account_url }), None);
    problem(&client.post_jws(&account_url, &stale).await, 400, "malformed");
}

fn lego_binary() -> PathBuf {
    let path = PathBuf::from("/usr/bin/lego");
    assert!(path.exists(), "lego is missing: install Debian's `lego` package (scripts/install-deps.sh test)");
    path
}

/// With no wait (`TRELLIS_ACME_CHALLENGE_WAIT_MS=0`) a challenge POST answers `processing` with
/// `Retry-After` and the validation goes on: here a dns-01 TXT record that was never set, so the
/// authorization the client polls ends `invalid`, its challenge carrying the problem.
#[tokio::test]
async fn a_challenge_answered_before_its_validation_ends_is_decided_in_the_background() {
    let acme = Acme::start(&[("TRELLIS_ACME_CHALLENGE_WAIT_MS", "0")]).await;
    let ca = acme.ca("ACME Background Root").await;
    let dns_only = acme
        .admin
        .put(&format!("/api/certificate-authorities/{ca}/acme"), json!({ "challengeTypes": ["dns-01"] }))
        .await;
    assert_eq!(dns_only.status, 200, "{}", dns_only.body);
    let (_, kid, hmac) = acme.eab(ca, "background").await;
    let mut client = raw::Client::new(&acme.directory(ca)).await;
    assert_eq!(client.register(&kid, &hmac).await.status, 201);
    let order = client
        .post(
            &client.url("newOrder"),
            Some(&json!({ "identifiers": [{ "type": "dns", "value": "unset.example.test" }] })),
        )
        .await;
    assert_eq!(order.status, 201, "{}", order.text);
    let authz_url = order.body["authorizations"][0].as_str().expect("authz").to_owned();
    let authz = client.post(&authz_url, None).await;
    let challenge = authz.body["challenges"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "dns-01")).cloned();
    let challenge_url = challenge.and_then(|c| c["url"].as_str().map(str::to_owned)).expect("a dns-01 challenge");
    let posted = client.post(&challenge_url, Some(&json!({}))).await;
    assert_eq!(posted.status, 200, "{}", posted.text);
    assert_eq!(posted.body["status"], "processing", "{}", posted.text);
    assert!(posted.retry_after.is_some(), "a processing challenge says when to look again");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let decided = loop {
        let now = client.post(&authz_url, None).await;
        if now.body["status"] != "pending" {
            break now;
        }
        assert!(std::time::Instant::now() < deadline, "never decided: {}", now.text);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(decided.body["status"], "invalid", "{}", decided.text);
    let failed = client.post(&challenge_url, None).await;
    assert_eq!(failed.body["status"], "invalid", "{}", failed.text);
    let kind = failed.body["error"]["type"].as_str().unwrap_or_default();
    assert!(kind.starts_with("urn:ietf:params:acme:error:"), "the challenge says why: {}", failed.text);
}

#[tokio::test]
async fn lego_runs_and_renews_with_eab_over_http01_and_tls_alpn01() {
    let tls_port = free_port();
    let acme = Acme::start(&[("TRELLIS_ACME_VALIDATION_TLS_PORT", tls_port.to_string().as_str())]).await;
    let ca = acme.ca("ACME lego Root").await;
    let (_, kid, hmac) = acme.eab(ca, "lego").await;
    let dir = tempfile::tempdir().expect("lego dir");
    let path = dir.path().display().to_string();
    let listen = format!("127.0.0.1:{}", acme.http_port);
    let directory = acme.directory(ca);
    let lego_for = |domain: &str, solver: &[&str], command: &[&str]| {
        Command::new(lego_binary())
            .args(["--server", &directory, "--email", "ops@example.com", "--accept-tos", "--eab", "--kid", &kid])
            .args(["--hmac", &hmac, "--domains", domain, "--path", &path])
            .args(solver)
            .args(command)
            .output()
            .expect("lego runs")
    };
    let lego = |command: &[&str]| lego_for("lego.example.test", &["--http", "--http.port", &listen], command);
    assert_ok(&lego(&["run"]), "lego run");
    let first = inventory_entry(&acme.admin, "lego.example.test").await;
    // lego sleeps a random 0-8 minutes before a renewal (to spread load on public CAs); a test
    // wants the renewal now.
    assert_ok(&lego(&["renew", "--days", "3650", "--no-random-sleep"]), "lego renew");
    let second = inventory_entry(&acme.admin, "lego.example.test").await;
    assert_ne!(first["id"], second["id"], "renewal issued a new certificate");
    let certificates = dir.path().join("certificates");
    check_chain(
        &acme,
        ca,
        &certificates.join("lego.example.test.crt"),
        &certificates.join("lego.example.test.crt"),
        &["lego.example.test"],
    )
    .await;

    // tls-alpn-01 (RFC 8737): lego answers on the TLS port with the acmeIdentifier certificate.
    let tls_listen = format!("127.0.0.1:{tls_port}");
    let alpn = lego_for("alpn.example.test", &["--tls", "--tls.port", &tls_listen], &["run"]);
    assert_ok(&alpn, "lego run --tls");
    inventory_entry(&acme.admin, "alpn.example.test").await;
}

#[tokio::test]
async fn a_policy_denial_is_a_rejected_identifier_the_client_shows() {
    let acme = Acme::start(&[]).await;
    let ca = acme.ca("ACME Policy Root").await;
    let policy = acme
        .admin
        .post(
            "/api/issuance-policies",
            json!({ "name": "corp names", "type": "domain-policy", "config": { "allowedDnsSuffixes": [".corp.test"] } }),
        )
        .await;
    assert_eq!(policy.status, 201, "{}", policy.body);
    let (_, kid, hmac) = acme.eab(ca, "policy").await;
    let denied = certonly(&Certbot::new(), &acme, ca, (&kid, &hmac), &["www.elsewhere.test"]);
    assert_refused(&denied, "a name the policy denies", &["issuance policy", "www.elsewhere.test"]);
}

/// The leaf of a PEM chain, as DER.
fn first_der(pem: &str) -> Vec<u8> {
    use base64::Engine;
    let body: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN CERTIFICATE"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    base64::engine::general_purpose::STANDARD.decode(body).expect("PEM body")
}

/// RFC 9773 §4.1, computed here independently of the server: base64url(AKI keyIdentifier) "."
/// base64url(serial content octets); with the certificate's validity in ms.
fn ari_cert_id(der: &[u8]) -> (String, i64, i64) {
    use x509_parser::prelude::{FromDer, ParsedExtension, X509Certificate};
    let (_, cert) = X509Certificate::from_der(der).expect("a certificate");
    let aki = cert
        .extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(aki) => aki.key_identifier.as_ref().map(|k| k.0.to_vec()),
            _ => None,
        })
        .expect("an authorityKeyIdentifier");
    let id = format!("{}.{}", raw::b64(&aki), raw::b64(cert.tbs_certificate.raw_serial()));
    let validity = cert.validity();
    (id, validity.not_before.timestamp() * 1000, validity.not_after.timestamp() * 1000)
}

/// Answers each pending authorization of `order` by dns-01: the TXT record goes to challtestsrv,
/// which Trellis's validator reads, then the challenge is posted.
pub(crate) async fn answer_dns01(acme: &Acme, client: &raw::Client, order: &Value) {
    use sha2::{Digest, Sha256};
    for authz_url in order["authorizations"].as_array().cloned().unwrap_or_default() {
        let authz = client.post(authz_url.as_str().unwrap_or_default(), None).await;
        if authz.body["status"] != "pending" {
            continue;
        }
        let name = authz.body["identifier"]["value"].as_str().unwrap_or_default().to_owned();
        let challenge =
            authz.body["challenges"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "dns-01")).cloned();
        let challenge = challenge.unwrap_or_else(|| panic!("a dns-01 challenge: {}", authz.text));
        let key_authorization =
            format!("{}.{}", challenge["token"].as_str().unwrap_or_default(), client.key.thumbprint());
        let digest = raw::b64(&Sha256::digest(key_authorization.as_bytes()));
        let set = client
            .http
            .post(format!("{}/set-txt", acme.dns.management_url))
            .body(json!({ "host": format!("_acme-challenge.{name}."), "value": digest }).to_string())
            .send()
            .await
            .expect("set-txt");
        assert!(set.status().is_success());
        let posted = client.post(challenge["url"].as_str().unwrap_or_default(), Some(&json!({}))).await;
        assert_eq!(posted.status, 200, "{}\n{}", posted.text, acme.server.log());
    }
}

/// POST-as-GET on the order until it is `ready` (a deadline, never a fixed sleep).
async fn wait_until_ready(client: &raw::Client, order_url: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let now = client.post(order_url, None).await;
        if now.body["status"] == "ready" {
            return;
        }
        assert_ne!(now.body["status"], "invalid", "{}", now.text);
        assert!(std::time::Instant::now() < deadline, "the order never became ready: {}", now.text);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Takes a new order (201 expected) to `valid` through dns-01 (challtestsrv) and answers the
/// final order and the leaf's DER.
async fn complete_order(acme: &Acme, client: &raw::Client, order: &raw::Answer, name: &str) -> (raw::Answer, Vec<u8>) {
    assert_eq!(order.status, 201, "{}", order.text);
    let order_url = order.location.clone().expect("order URL");
    answer_dns01(acme, client, &order.body).await;
    wait_until_ready(client, &order_url).await;
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).expect("params");
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params.serialize_request(&key).expect("CSR").der().to_vec();
    let finalize_url = order.body["finalize"].as_str().expect("finalize").to_owned();
    let finalized = client.post(&finalize_url, Some(&json!({ "csr": raw::b64(&csr) }))).await;
    assert_eq!(finalized.status, 200, "{}", finalized.text);
    assert_eq!(finalized.body["status"], "valid", "{}", finalized.text);
    let chain = client.post(finalized.body["certificate"].as_str().unwrap_or_default(), None).await;
    assert_eq!(chain.status, 200, "{}", chain.text);
    let der = first_der(&chain.text);
    (finalized, der)
}

/// `GET renewalInfo/{certID}`: (status, body, Retry-After).
async fn renewal_info(client: &raw::Client, base: &str, cert_id: &str) -> (u16, Value, Option<String>) {
    let answer = client.http.get(format!("{base}/{cert_id}")).send().await.expect("renewalInfo GET");
    let retry_after = answer.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let status = answer.status().as_u16();
    let body = answer.json().await.unwrap_or(Value::Null);
    (status, body, retry_after)
}

fn rfc3339_ms(value: &Value) -> i64 {
    let text = value.as_str().unwrap_or_else(|| panic!("an RFC 3339 time: {value}"));
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| panic!("RFC 3339: {text}"));
    (at.unix_timestamp_nanos() / 1_000_000) as i64
}

#[tokio::test]
async fn renewal_information_and_replaces_once() {
    let acme = Acme::start(&[]).await;
    let ca = acme.ca("ACME ARI Root").await;
    let other_ca = acme.ca("ACME ARI Other").await;
    let (_, kid, hmac) = acme.eab(ca, "ari").await;
    let mut client = raw::Client::new(&acme.directory(ca)).await;
    assert_eq!(client.register(&kid, &hmac).await.status, 201);
    let base = client.url("renewalInfo");
    assert_eq!(base, acme.server.url(&format!("/acme/{ca}/renewal-info")), "the directory has renewalInfo");
    let name = "ari.example.test";
    let new_order = client.url("newOrder");
    let identifiers = json!([{ "type": "dns", "value": name }]);

    let first = client.post(&new_order, Some(&json!({ "identifiers": identifiers }))).await;
    let (first_order, first_der) = complete_order(&acme, &client, &first, name).await;
    assert!(first_order.body.get("replaces").is_none(), "{}", first_order.text);
    let (cert_id, not_before, not_after) = ari_cert_id(&first_der);

    // The documented window: 2/3 to 5/6 of the validity, Retry-After 6 h.
    let (status, body, retry_after) = renewal_info(&client, &base, &cert_id).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(retry_after.as_deref(), Some("21600"));
    let life = not_after - not_before;
    let (start, end) = (rfc3339_ms(&body["suggestedWindow"]["start"]), rfc3339_ms(&body["suggestedWindow"]["end"]));
    assert_eq!(start, (not_before + life * 2 / 3) / 1000 * 1000, "{body}");
    assert_eq!(end, (not_before + life * 5 / 6) / 1000 * 1000, "{body}");

    // A malformed certID, an unknown one, and this certificate asked of another CA's directory.
    let (status, body, _) = renewal_info(&client, &base, "not-a-cert-id").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["type"], "urn:ietf:params:acme:error:malformed", "{body}");
    let (status, body, _) = renewal_info(&client, &base, "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE").await;
    assert_eq!(status, 404, "{body}");
    let other_base = acme.server.url(&format!("/acme/{other_ca}/renewal-info"));
    let (status, body, _) = renewal_info(&client, &other_base, &cert_id).await;
    assert_eq!(status, 404, "another CA's directory does not know it: {body}");

    // Another account cannot replace it (malformed, saying why).
    let (_, other_kid, other_hmac) = acme.eab(ca, "ari other account").await;
    let mut stranger = raw::Client::new(&acme.directory(ca)).await;
    assert_eq!(stranger.register(&other_kid, &other_hmac).await.status, 201);
    let foreign = stranger.post(&new_order, Some(&json!({ "identifiers": identifiers, "replaces": cert_id }))).await;
    assert_eq!(foreign.status, 400, "{}", foreign.text);
    assert_eq!(foreign.body["type"], "urn:ietf:params:acme:error:malformed", "{}", foreign.text);
    assert!(foreign.text.contains("another account"), "{}", foreign.text);
    // A certID this directory never issued is malformed too.
    let unknown = client
        .post(
            &new_order,
            Some(&json!({ "identifiers": identifiers, "replaces": "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE" })),
        )
        .await;
    assert_eq!(unknown.status, 400, "{}", unknown.text);
    assert!(unknown.text.contains("no certificate this directory issued"), "{}", unknown.text);

    // The account replaces it: the order shows `replaces`; a second replacement is refused.
    let replacing = client.post(&new_order, Some(&json!({ "identifiers": identifiers, "replaces": cert_id }))).await;
    assert_eq!(replacing.status, 201, "{}", replacing.text);
    assert_eq!(replacing.body["replaces"], cert_id.as_str(), "{}", replacing.text);
    let again = client.post(&new_order, Some(&json!({ "identifiers": identifiers, "replaces": cert_id }))).await;
    assert_eq!(again.status, 409, "{}", again.text);
    assert_eq!(again.body["type"], "urn:ietf:params:acme:error:alreadyReplaced", "{}", again.text);
    let (replaced_order, second_der) = complete_order(&acme, &client, &replacing, name).await;
    assert_eq!(replaced_order.body["replaces"], cert_id.as_str(), "{}", replaced_order.text);
    assert_ne!(ari_cert_id(&second_der).0, cert_id);

    // The inventory shows the new certificate as the renewal of the old one.
    let listed = acme.admin.get(&format!("/api/certificates?search={name}&limit=100")).await;
    let mut ids: Vec<i64> =
        listed.body["data"].as_array().map(|c| c.iter().filter_map(|c| c["id"].as_i64()).collect()).unwrap_or_default();
    ids.sort();
    assert_eq!(ids.len(), 2, "{}", listed.body);
    let old = acme.admin.get(&format!("/api/certificates/{}", ids[0])).await;
    assert_eq!(old.body["data"]["renewedById"], ids[1], "{}", old.body);

    // Revoked: the window is in the past, so clients renew at once.
    let revoked = client.post(&client.url("revokeCert"), Some(&json!({ "certificate": raw::b64(&first_der) }))).await;
    assert_eq!(revoked.status, 200, "{}", revoked.text);
    let (status, body, _) = renewal_info(&client, &base, &cert_id).await;
    assert_eq!(status, 200, "{body}");
    let now_ms = (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64;
    let (start, end) = (rfc3339_ms(&body["suggestedWindow"]["start"]), rfc3339_ms(&body["suggestedWindow"]["end"]));
    assert!(start < end && end < now_ms, "a revoked certificate's window is in the past: {body}");
}
