use rcgen::ExtendedKeyUsagePurpose as Eku;
use serde_json::json;
use trellis_tests::certs::{rsa_pem, Key, Spec};
use trellis_tests::Server;

#[tokio::test]
async fn registering_parses_every_field() {
    let server = Server::start();
    let admin = server.admin().await;
    let spec = Spec::tls("www.example.com").issued_by("Example Issuing CA");
    let (pem, der) = spec.build();
    let res = admin
        .post(
            "/api/certificates",
            json!({ "certificate": pem, "location": "eu-west lb", "metadata": { "team": "web" } }),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    let c = &res.body["data"];
    assert!(c["id"].is_i64());
    assert_eq!(c["commonName"], "www.example.com");
    assert!(c["issuer"].as_str().unwrap().contains("Example Issuing CA"));
    assert!(c["subject"].as_str().unwrap().contains("www.example.com"));
    assert_eq!(c["status"], "active");
    assert_eq!(c["signatureAlgorithm"], "SHA256-ECDSA");
    assert_eq!(c["signatureHash"], "SHA-256");
    assert_eq!(c["keyAlgorithm"], "ECDSA");
    assert_eq!(c["keySize"], 256);
    assert_eq!(c["usageCategory"], "TLS");
    assert_eq!(c["issuanceSource"], "external");
    assert_eq!(c["autoRenewal"], false);
    assert_eq!(c["location"], "eu-west lb");
    assert_eq!(c["metadata"], json!({ "team": "web" }));
    assert_eq!(c["subjectAlternativeNames"], json!(["DNS:www.example.com"]));
    use sha2::Digest;
    assert_eq!(c["fingerprintSha256"], hex::encode(sha2::Sha256::digest(&der)));
    assert!(c["serialNumber"].as_str().unwrap().chars().all(|ch| ch.is_ascii_hexdigit()));
    assert!(
        c["expiresAt"].as_str().unwrap().ends_with('Z') && c["notBefore"].is_string() && c["createdAt"].is_string()
    );
    assert!(c["certificate"].as_str().unwrap().starts_with("-----BEGIN CERTIFICATE-----"));

    let got = admin.get(&format!("/api/certificates/{}", c["id"])).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body["data"]["fingerprintSha256"], c["fingerprintSha256"]);
    assert!(got.body["data"]["certificate"].is_string());
    let listed = admin.get("/api/certificates").await;
    assert!(listed.body["data"][0].get("certificate").is_none(), "lists omit the PEM");
}

#[tokio::test]
async fn algorithms_and_usage_categories_are_derived() {
    let server = Server::start();
    let admin = server.admin().await;
    let cases = [
        (Spec::tls("p384.example.com").key(Key::P384).pem(), "SHA384-ECDSA", "ECDSA", Some(384), "TLS"),
        (Spec::tls("ed.example.com").key(Key::Ed25519).pem(), "ED25519", "ED25519", Some(256), "TLS"),
        (rsa_pem("rsa.example.com", 2048), "SHA256-RSA", "RSA", Some(2048), "TLS"),
        (
            Spec::tls("code.example.com").usages(vec![Eku::CodeSigning]).pem(),
            "SHA256-ECDSA",
            "ECDSA",
            Some(256),
            "Code Signing",
        ),
        (
            Spec::tls("client.example.com").usages(vec![Eku::ClientAuth]).pem(),
            "SHA256-ECDSA",
            "ECDSA",
            Some(256),
            "Client Auth",
        ),
        (
            Spec::tls("mail").usages(vec![Eku::EmailProtection]).emails(&["a@example.com"]).pem(),
            "SHA256-ECDSA",
            "ECDSA",
            Some(256),
            "S/MIME",
        ),
        (
            Spec::tls("both.example.com").usages(vec![Eku::ClientAuth, Eku::ServerAuth]).pem(),
            "SHA256-ECDSA",
            "ECDSA",
            Some(256),
            "TLS",
        ),
        (Spec::tls("noeku.example.com").usages(vec![]).pem(), "SHA256-ECDSA", "ECDSA", Some(256), "TLS"),
    ];
    for (pem, signature, key, size, usage) in cases {
        let c = admin.register(&pem).await;
        assert_eq!(c["signatureAlgorithm"], signature, "{}", c["commonName"]);
        assert_eq!(c["keyAlgorithm"], key, "{}", c["commonName"]);
        assert_eq!(c["keySize"], json!(size), "{}", c["commonName"]);
        assert_eq!(c["usageCategory"], usage, "{}", c["commonName"]);
    }
    let count = |q: &str| {
        let admin = admin.clone();
        let q = q.to_string();
        async move { admin.get(&format!("/api/certificates?{q}")).await.body["total"].as_i64().unwrap() }
    };
    assert_eq!(count("signatureAlgorithm=RSA").await, 1);
    assert_eq!(count("signatureAlgorithm=SHA-256").await, 6);
    assert_eq!(count("signatureAlgorithm=sha384").await, 1);
    assert_eq!(count("signatureAlgorithm=ED25519").await, 1);
    assert_eq!(count("keyAlgorithm=ECDSA").await, 6);
    assert_eq!(count("usageCategory=Code%20Signing").await, 1);
    assert_eq!(count("usageCategory=smime").await, 1);
    assert_eq!(count("usageCategory=TLS").await, 5);
    assert_eq!(count("issuanceSource=external").await, 8);
    assert_eq!(count("issuanceSource=internal").await, 0);
    assert_eq!(admin.get("/api/certificates?usageCategory=bogus").await.status, 400);
    assert_eq!(admin.get("/api/certificates?issuanceSource=bogus").await.status, 400);
}

#[tokio::test]
async fn duplicate_fingerprint_is_a_conflict_but_other_workspaces_may_hold_it() {
    let server = Server::start();
    let admin = server.admin().await;
    let pem = Spec::tls("dup.example.com").pem();
    admin.register(&pem).await;
    let res = admin.post("/api/certificates", json!({ "certificate": pem })).await;
    assert_eq!(res.status, 409);
    assert_eq!(res.error_code(), "CONFLICT");
    let (other, _) = server.new_user("o@example.com").await;
    other.register(&pem).await;
}

/// Concurrent registrations share group-commit transactions: each duplicate is refused on its
/// own while the certificates queued beside it commit, with exactly one audit row and one
/// event per stored certificate.
#[tokio::test]
async fn concurrent_registrations_with_duplicates_commit_exactly_the_distinct_ones() {
    let server = Server::start();
    let admin = server.admin().await;
    let distinct: Vec<String> = (0..12).map(|i| Spec::tls(&format!("burst-{i}.example.com")).pem()).collect();
    // Every certificate three times, interleaved, all in flight at once.
    let attempts: Vec<String> = (0..3).flat_map(|_| distinct.iter().cloned()).collect();
    let tasks: Vec<_> = attempts
        .into_iter()
        .map(|pem| {
            let admin = admin.clone();
            tokio::spawn(async move { admin.post("/api/certificates", json!({ "certificate": pem })).await })
        })
        .collect();
    let mut created = Vec::new();
    let mut conflicts = 0;
    for task in tasks {
        let res = task.await.unwrap();
        match res.status {
            201 => created.push(res.body["data"]["fingerprintSha256"].as_str().unwrap().to_string()),
            409 => {
                assert_eq!(res.error_code(), "CONFLICT");
                conflicts += 1;
            }
            other => panic!("unexpected {other}: {}", res.body),
        }
    }
    created.sort();
    created.dedup();
    assert_eq!((created.len(), conflicts), (12, 24));
    let listed = admin.get("/api/certificates?search=burst-&limit=100").await;
    assert_eq!(listed.body["total"], 12);
    let audit = admin.get("/api/audit-logs?action=certificate.created&limit=100").await;
    assert_eq!(audit.body["total"], 12, "{}", audit.body);
    let events = admin.get("/api/events?type=certificate.created&limit=100").await;
    assert_eq!(events.body["total"], 12, "{}", events.body);
}

#[tokio::test]
async fn status_is_computed_when_read_and_filterable() {
    let server = Server::start();
    let admin = server.admin().await;
    let active = admin.register(&Spec::tls("active.example.com").expiring_in(200).pem()).await;
    let expiring = admin.register(&Spec::tls("expiring.example.com").expiring_in(10).pem()).await;
    let expired = admin.register(&Spec::tls("expired.example.com").expiring_in(-2).pem()).await;
    let revoked = admin.register(&Spec::tls("revoked.example.com").pem()).await;
    assert_eq!(active["status"], "active");
    assert_eq!(expiring["status"], "expiring");
    assert_eq!(expired["status"], "expired");
    let res = admin.post(&format!("/api/certificates/{}/revoke", revoked["id"]), json!({})).await;
    assert_eq!(res.status, 200);
    for (status, cn) in [
        ("active", "active.example.com"),
        ("expiring", "expiring.example.com"),
        ("expired", "expired.example.com"),
        ("revoked", "revoked.example.com"),
    ] {
        let res = admin.get(&format!("/api/certificates?status={status}")).await;
        assert_eq!(res.body["total"], 1, "{status}: {}", res.body);
        assert_eq!(res.body["data"][0]["commonName"], cn);
        assert_eq!(res.body["data"][0]["status"], status);
    }
    assert_eq!(admin.get("/api/certificates?status=sleeping").await.status, 400);

    let stats = admin.get("/api/certificates/stats").await;
    assert_eq!(stats.status, 200);
    let s = &stats.body["data"];
    assert_eq!(
        (
            s["total"].as_i64(),
            s["active"].as_i64(),
            s["expiring"].as_i64(),
            s["expired"].as_i64(),
            s["revoked"].as_i64()
        ),
        (Some(4), Some(1), Some(1), Some(1), Some(1))
    );
    assert_eq!(s["byUsageCategory"]["TLS"], 4);
    assert_eq!(s["byIssuanceSource"]["external"], 4);
}

#[tokio::test]
async fn search_is_a_case_insensitive_substring_of_common_name_and_issuer() {
    let server = Server::start();
    let admin = server.admin().await;
    admin.register(&Spec::tls("api.payments.example.com").pem()).await;
    admin.register(&Spec::tls("www.shop.example.org").issued_by("Payments Root CA").pem()).await;
    admin.register(&Spec::tls("db.internal").pem()).await;
    let search = |q: &str| {
        let admin = admin.clone();
        let q = q.to_string();
        async move { admin.get(&format!("/api/certificates?search={q}")).await.body["total"].as_i64().unwrap() }
    };
    assert_eq!(search("PAYMENTS").await, 2, "common name and issuer");
    assert_eq!(search("ments.exa").await, 1);
    assert_eq!(search("db").await, 1, "short terms work too");
    assert_eq!(search("%25").await, 0, "LIKE wildcards are literal");
    assert_eq!(search("\"quoted").await, 0);
    assert_eq!(search("example").await, 2);
    let combined = admin.get("/api/certificates?search=example&status=active").await;
    assert_eq!(combined.body["total"], 2);
}

/// Each workspace searches only its own certificates, and a deleted certificate leaves the
/// search index with its row (the index keeps a rowid range per workspace).
#[tokio::test]
async fn search_stays_in_the_workspace_and_forgets_deleted_certificates() {
    let server = Server::start();
    let admin = server.admin().await;
    let (other, _) = server.new_user("tenant-b@example.com").await;
    let mut mine = Vec::new();
    for i in 0..3 {
        mine.push(admin.register(&Spec::tls(&format!("shared-{i}.example.com")).pem()).await["id"].as_i64().unwrap());
        other.register(&Spec::tls(&format!("shared-{i}.example.com")).pem()).await;
        other.register(&Spec::tls(&format!("shared-extra-{i}.example.com")).pem()).await;
    }
    let ids = |client: &trellis_tests::Client, query: &'static str| {
        let client = client.clone();
        async move {
            let res = client.get(&format!("/api/certificates?{query}")).await;
            assert_eq!(res.status, 200, "{}", res.body);
            let ids: Vec<i64> =
                res.body["data"].as_array().unwrap().iter().map(|c| c["id"].as_i64().unwrap()).collect();
            (ids, res.body["total"].as_i64().unwrap())
        }
    };
    let (found, total) = ids(&admin, "search=shared-").await;
    assert_eq!(total, 3);
    assert_eq!(found, mine.iter().rev().copied().collect::<Vec<_>>(), "newest first, only this workspace's");
    assert_eq!(ids(&other, "search=shared-").await.1, 6);
    assert_eq!(ids(&admin, "search=extra").await, (vec![], 0), "the other workspace's names are not found");
    // A page past the first still counts only this workspace.
    let (page, total) = ids(&admin, "search=example.com&limit=2&page=2").await;
    assert_eq!((page, total), (vec![mine[0]], 3));

    assert_eq!(admin.delete(&format!("/api/certificates/{}", mine[1])).await.status, 204);
    let (found, total) = ids(&admin, "search=shared-").await;
    assert_eq!((found, total), (vec![mine[2], mine[0]], 2));
    assert_eq!(ids(&admin, "search=shared-1").await, (vec![], 0));
    assert_eq!(ids(&other, "search=shared-1").await.1, 1, "the other workspace's twin is untouched");
}

#[tokio::test]
async fn update_auto_renew_and_assign_identity() {
    let server = Server::start();
    let admin = server.admin().await;
    let id = admin.register(&Spec::tls("upd.example.com").pem()).await["id"].as_i64().unwrap();
    let res = admin
        .put(
            &format!("/api/certificates/{id}"),
            json!({ "location": "rack 7", "metadata": { "owner": "ops" }, "autoRenewal": true }),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(res.body["data"]["location"], "rack 7");
    assert_eq!(res.body["data"]["autoRenewal"], true);
    let res = admin.put(&format!("/api/certificates/{id}"), json!({ "location": null })).await;
    assert_eq!(res.body["data"]["location"], serde_json::Value::Null);
    assert_eq!(res.body["data"]["metadata"], json!({ "owner": "ops" }), "absent fields stay");
    assert_eq!(admin.put(&format!("/api/certificates/{id}"), json!({ "certificate": "x" })).await.status, 400);
    assert_eq!(admin.put(&format!("/api/certificates/{id}"), json!({ "metadata": [1] })).await.status, 400);

    let toggled = admin.put(&format!("/api/certificates/{id}/auto-renew"), json!({})).await;
    assert_eq!(toggled.status, 200, "{}", toggled.body);
    assert_eq!(toggled.body["data"]["autoRenewal"], false);
    let set = admin.put(&format!("/api/certificates/{id}/auto-renew"), json!({ "enabled": true })).await;
    assert_eq!(set.body["data"]["autoRenewal"], true);

    let identity = admin.post("/api/machine-identities", json!({ "name": "web-01", "type": "server" })).await;
    assert_eq!(identity.status, 201, "{}", identity.body);
    let identity_id = identity.body["data"]["id"].as_i64().unwrap();
    let res = admin
        .post(&format!("/api/certificates/{id}/assign-identity"), json!({ "machineIdentityId": identity_id }))
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(res.body["data"]["machineIdentityId"], identity_id);
    let got = admin.get(&format!("/api/machine-identities/{identity_id}")).await;
    assert_eq!(got.body["data"]["certificateCount"], 1);
    assert_eq!(admin.get("/api/machine-identities").await.body["total"], 1);
    assert_eq!(
        admin
            .post(&format!("/api/certificates/{id}/assign-identity"), json!({ "machineIdentityId": 999 }))
            .await
            .status,
        404
    );
    assert_eq!(admin.post("/api/machine-identities", json!({ "name": "x", "type": "toaster" })).await.status, 400);
    assert_eq!(admin.delete(&format!("/api/machine-identities/{identity_id}")).await.status, 204);
    let after = admin.get(&format!("/api/certificates/{id}")).await;
    assert_eq!(after.body["data"]["machineIdentityId"], serde_json::Value::Null);
}

#[tokio::test]
async fn revoke_records_the_reason_and_a_second_revoke_is_400() {
    let server = Server::start();
    let admin = server.admin().await;
    let a = admin.register(&Spec::tls("a.example.com").pem()).await["id"].as_i64().unwrap();
    let b = admin.register(&Spec::tls("b.example.com").pem()).await["id"].as_i64().unwrap();
    let res = admin.post(&format!("/api/certificates/{a}/revoke"), json!({ "reason": "keyCompromise" })).await;
    assert_eq!(res.status, 200);
    assert_eq!(res.body["data"]["status"], "revoked");
    assert_eq!(res.body["data"]["revocationReason"], "keyCompromise");
    let again = admin.post(&format!("/api/certificates/{a}/revoke"), json!({})).await;
    assert_eq!(again.status, 400);
    assert_eq!(again.error_code(), "VALIDATION_ERROR");
    // No body at all: the reason defaults to `unspecified`.
    let res = admin.send(admin.request(reqwest::Method::POST, &format!("/api/certificates/{b}/revoke"))).await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(res.body["data"]["revocationReason"], "unspecified");
}

#[tokio::test]
async fn delete_removes_without_revoking() {
    let server = Server::start();
    let admin = server.admin().await;
    let id = admin.register(&Spec::tls("del.example.com").pem()).await["id"].as_i64().unwrap();
    assert_eq!(admin.delete(&format!("/api/certificates/{id}")).await.status, 204);
    assert_eq!(admin.get(&format!("/api/certificates/{id}")).await.status, 404);
    assert_eq!(admin.delete(&format!("/api/certificates/{id}")).await.status, 404);
    let audit = admin.get("/api/audit-logs?action=certificate.revoked").await;
    assert_eq!(audit.body["total"], 0);
}

#[tokio::test]
async fn download_pem_and_der() {
    let server = Server::start();
    let admin = server.admin().await;
    let (pem, der) = Spec::tls("dl.example.com").build();
    let id = admin.register(&pem).await["id"].as_i64().unwrap();
    let res = admin.get(&format!("/api/certificates/{id}/download")).await;
    assert_eq!(res.status, 200);
    assert!(res.header("content-disposition").unwrap().starts_with("attachment; filename=\"dl.example.com.pem\""));
    let text = String::from_utf8(res.bytes.clone()).unwrap();
    assert!(text.starts_with("-----BEGIN CERTIFICATE-----"));
    let res = admin.get(&format!("/api/certificates/{id}/download?format=der")).await;
    assert_eq!(res.status, 200);
    assert!(res.header("content-disposition").unwrap().contains("dl.example.com.der"));
    assert_eq!(res.bytes, der, "DER download equals the PEM's DER");
    assert_eq!(admin.get(&format!("/api/certificates/{id}/download?format=pfx")).await.status, 400);
    // Registered without its chain: the full chain is the certificate alone.
    let res = admin.get(&format!("/api/certificates/{id}/download?format=fullchain")).await;
    assert_eq!(res.status, 200);
    assert_eq!(String::from_utf8_lossy(&res.bytes).trim(), pem.trim());
    assert_eq!(admin.get(&format!("/api/certificates/{id}")).await.body["data"]["chain"], serde_json::json!([]));
}

#[tokio::test]
async fn private_keys_are_only_for_internal_certificates() {
    let server = Server::start();
    let admin = server.admin().await;
    let id = admin.register(&Spec::tls("pk.example.com").pem()).await["id"].as_i64().unwrap();
    let res = admin.get(&format!("/api/certificates/{id}/private-key")).await;
    assert_eq!(res.status, 403);
    assert_eq!(res.error_code(), "PRIVATE_KEY_NOT_AVAILABLE");
    // Reading the inventory is not enough to take keys: the download needs certificates:write.
    let reader = server.key_client(&["certificates:read"]).await;
    let res = reader.get(&format!("/api/certificates/{id}/private-key")).await;
    assert_eq!(res.status, 403, "{}", res.body);
    assert_eq!(res.error_code(), "INSUFFICIENT_SCOPE");
    let status = admin.get(&format!("/api/certificates/{id}/private-key-status")).await;
    assert_eq!(status.status, 200);
    assert_eq!(status.body["data"]["downloadable"], false);
    assert_eq!(status.body["data"]["issuanceSource"], "external");
    assert!(status.body["data"]["reason"].is_string());
    let res = admin
        .post(
            "/api/certificates",
            json!({ "certificate": Spec::tls("i.example.com").pem(), "issuanceSource": "internal" }),
        )
        .await;
    assert_eq!(res.status, 400, "an import cannot claim internal issuance");
    let agent = admin
        .post(
            "/api/certificates",
            json!({ "certificate": Spec::tls("ag.example.com").pem(), "issuanceSource": "agent" }),
        )
        .await;
    assert_eq!(agent.body["data"]["issuanceSource"], "agent");
}

#[tokio::test]
async fn usage_records() {
    let server = Server::start();
    let admin = server.admin().await;
    let id = admin.register(&Spec::tls("use.example.com").pem()).await["id"].as_i64().unwrap();
    let res = admin
        .post(
            "/api/certificate-usage",
            json!({ "certificateId": id, "host": "lb-1.example.com", "port": 443, "service": "nginx" }),
        )
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(res.body["data"]["host"], "lb-1.example.com");
    let list = admin.get(&format!("/api/certificate-usage?certificateId={id}")).await;
    assert_eq!(list.body["total"], 1);
    assert_eq!(admin.get("/api/certificate-usage?certificateId=999").await.body["total"], 0);
    assert_eq!(admin.post("/api/certificate-usage", json!({ "certificateId": 999, "host": "x" })).await.status, 404);
    assert_eq!(
        admin.post("/api/certificate-usage", json!({ "certificateId": id, "host": "x", "port": 70000 })).await.status,
        400
    );
}

#[tokio::test]
async fn another_workspace_sees_404_for_every_resource() {
    let server = Server::start();
    let admin = server.admin().await;
    let id = admin.register(&Spec::tls("mine.example.com").pem()).await["id"].as_i64().unwrap();
    let identity =
        admin.post("/api/machine-identities", json!({ "name": "m" })).await.body["data"]["id"].as_i64().unwrap();
    let key_id = admin.post("/api/api-keys", json!({ "name": "k", "scopes": ["certificates:read"] })).await.body
        ["data"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (other, _) = server.new_user("intruder@example.com").await;
    for res in [
        other.get(&format!("/api/certificates/{id}")).await,
        other.put(&format!("/api/certificates/{id}"), json!({ "location": "x" })).await,
        other.delete(&format!("/api/certificates/{id}")).await,
        other.put(&format!("/api/certificates/{id}/auto-renew"), json!({ "enabled": true })).await,
        other.post(&format!("/api/certificates/{id}/revoke"), json!({})).await,
        other.get(&format!("/api/certificates/{id}/download")).await,
        other.get(&format!("/api/certificates/{id}/private-key")).await,
        other.get(&format!("/api/certificates/{id}/private-key-status")).await,
        other.post(&format!("/api/certificates/{id}/assign-identity"), json!({ "machineIdentityId": identity })).await,
        other.post("/api/certificate-usage", json!({ "certificateId": id, "host": "h" })).await,
        other.get(&format!("/api/machine-identities/{identity}")).await,
        other.delete(&format!("/api/machine-identities/{identity}")).await,
        other.delete(&format!("/api/api-keys/{key_id}")).await,
    ] {
        assert_eq!(res.status, 404, "{}", res.body);
        assert_eq!(res.error_code(), "NOT_FOUND");
    }
    assert_eq!(other.get("/api/certificates").await.body["total"], 0);
    let audit = other.get("/api/audit-logs?limit=100").await;
    assert!(
        audit.body["data"].as_array().unwrap().iter().all(|e| e["action"] != "certificate.created"),
        "audit of another workspace is invisible"
    );
    assert_eq!(admin.get(&format!("/api/certificates/{id}")).await.body["data"]["status"], "active", "nothing changed");
}

#[tokio::test]
async fn expiry_events_are_emitted_once_per_transition() {
    // A long interval keeps the background scanner out of the way after its first run;
    // the CLI runs the same scan on demand.
    let server = Server::start_with(&[("TRELLIS_EXPIRY_SCAN_INTERVAL_SECS", "3600")]);
    let admin = server.admin().await;
    let expiring = admin.register(&Spec::tls("soon.example.com").expiring_in(10).pem()).await["id"].as_i64().unwrap();
    let expired = admin.register(&Spec::tls("gone.example.com").expiring_in(-3).pem()).await["id"].as_i64().unwrap();
    let revoked = admin.register(&Spec::tls("rev.example.com").expiring_in(5).pem()).await["id"].as_i64().unwrap();
    admin.register(&Spec::tls("fine.example.com").expiring_in(300).pem()).await;
    admin.post(&format!("/api/certificates/{revoked}/revoke"), json!({})).await;

    let first = server.cli(&["jobs", "expiry-scan"]).unwrap();
    let second = server.cli(&["jobs", "expiry-scan"]).unwrap();
    assert_eq!(second, json!({ "expiring": 0, "expired": 0 }), "each transition is announced once");
    assert!(first["expiring"].as_i64().unwrap() + first["expired"].as_i64().unwrap() <= 2, "{first}");

    let events = |t: &'static str| {
        let admin = admin.clone();
        async move { admin.get(&format!("/api/events?type={t}")).await.body["data"].as_array().unwrap().clone() }
    };
    let expiring_events = events("certificate.expiring").await;
    assert_eq!(expiring_events.len(), 1, "{expiring_events:?}");
    assert_eq!(expiring_events[0]["payload"]["data"]["certificateId"], expiring);
    assert_eq!(expiring_events[0]["payload"]["data"]["status"], "expiring");
    // Already expired when registered: the transition happened before Trellis knew it.
    let expired_events = events("certificate.expired").await;
    assert!(expired_events.is_empty(), "{expired_events:?}");
    let created = events("certificate.created").await;
    let gone = created.iter().find(|e| e["payload"]["data"]["certificateId"] == expired).unwrap();
    assert_eq!(gone["payload"]["data"]["status"], "expired");

    // Eleven days on, the expiring certificate has expired: announced once, as of that instant.
    let as_of = |days: i64| {
        (time::OffsetDateTime::now_utc() + time::Duration::days(days))
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    };
    let later = as_of(11);
    assert_eq!(
        server.cli(&["jobs", "expiry-scan", "--as-of", &later]).unwrap(),
        json!({ "expiring": 0, "expired": 1 })
    );
    assert_eq!(
        server.cli(&["jobs", "expiry-scan", "--as-of", &later]).unwrap(),
        json!({ "expiring": 0, "expired": 0 })
    );
    let expired_events = events("certificate.expired").await;
    assert_eq!(expired_events.len(), 1, "{expired_events:?}");
    assert_eq!(expired_events[0]["payload"]["data"]["certificateId"], expiring);
    assert_eq!(expired_events[0]["payload"]["data"]["status"], "expired");
    // A scan that finds a certificate already past expiry (the scanner was down through its
    // whole expiring window) announces only the expiry; the revoked one is never announced.
    assert_eq!(
        server.cli(&["jobs", "expiry-scan", "--as-of", &as_of(400)]).unwrap(),
        json!({ "expiring": 0, "expired": 1 })
    );
    assert_eq!(events("certificate.expiring").await.len(), 1);
    assert!(events("certificate.expired").await.iter().all(|e| e["payload"]["data"]["certificateId"] != revoked));
    assert!(server.cli(&["jobs", "expiry-scan", "--as-of", "next tuesday"]).is_err(), "a bad instant is refused");
}
