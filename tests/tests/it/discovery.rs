//! `tls_endpoints` discovery scans through the real binary: local TLS endpoints started here
//! (any certificate is recorded), the egress rules (private addresses only when the operator
//! allows them, metadata addresses never), target validation, issuer matching by
//! `issuerPatterns`, the list filters, events, cancel, and a server killed mid-scan whose scan is
//! taken over rather than left running.

use std::time::Duration;

use serde_json::{json, Value};
use trellis_tests::certs::Spec;
use trellis_tests::tls_endpoint::TlsEndpoint;
use trellis_tests::{Client, Response, Server};

use crate::cas::create_ca;
use crate::lifecycle::{days_from_now, finished_scan};

const ALLOW_PRIVATE: (&str, &str) = ("TRELLIS_DISCOVERY_ALLOW_PRIVATE_NETWORKS", "true");

fn assert_error(res: &Response, status: u16, code: &str, what: &str) {
    assert_eq!(res.status, status, "{what}: {}", res.body);
    assert_eq!(res.error_code(), code, "{what}: {}", res.body);
}

async fn start_scan(client: &Client, targets: Value) -> i64 {
    let res = client.post("/api/discovery/scans", json!({ "type": "tls_endpoints", "targets": targets })).await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(res.body["data"]["type"], "tls_endpoints", "{}", res.body);
    res.body["data"]["id"].as_i64().expect("scan id")
}

/// The data of the workspace's events of one type, newest first.
async fn event_data(client: &Client, event_type: &str) -> Vec<Value> {
    let res = client.get(&format!("/api/events?limit=100&type={event_type}")).await;
    assert_eq!(res.status, 200, "{}", res.body);
    res.body["data"].as_array().unwrap().iter().map(|e| e["payload"]["data"].clone()).collect()
}

/// Polls until the scan is `running` (bounded).
async fn running_scan(client: &Client, id: i64) -> Value {
    for _ in 0..400 {
        let scan = client.get(&format!("/api/discovery/scans/{id}")).await.body["data"].clone();
        if scan["status"] == "running" && scan["totalTargets"].is_i64() {
            return scan;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("scan {id} did not start running");
}

fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

#[tokio::test]
async fn tls_endpoints_scans_import_served_chains_and_match_issuers() {
    let server = Server::start_with(&[ALLOW_PRIVATE]);
    let admin = server.admin().await;
    // A CA whose patterns claim the issuer (matched case-insensitively), and one that does not.
    let matcher =
        create_ca(&admin, json!({ "name": "Matcher", "type": "google_cas", "issuerPatterns": ["discovery TEST ca"] }))
            .await;
    create_ca(&admin, json!({ "name": "Other", "type": "aws_acm", "issuerPatterns": ["Nobody Issuing"] })).await;
    let issued = Spec::tls("issued.example").issued_by("Discovery Test CA 1").build_served();
    let lone = Spec::tls("lone.example").build_served();
    let (issued_endpoint, lone_endpoint) = (TlsEndpoint::start(&issued).await, TlsEndpoint::start(&lone).await);
    let closed = closed_port();
    let targets = json!([
        format!("localhost:{}", issued_endpoint.port),
        format!("127.0.0.1:{}", lone_endpoint.port),
        format!("127.0.0.1:{closed}"),
    ]);
    let id = start_scan(&admin, targets.clone()).await;
    let scan = finished_scan(&admin, id).await;
    assert_eq!(scan["status"], "completed", "{scan}");
    assert_eq!(scan["targets"], targets);
    assert_eq!(scan["caId"], Value::Null);
    assert_eq!((scan["found"].as_i64(), scan["new"].as_i64()), (Some(2), Some(2)), "{scan}");
    assert_eq!((scan["updated"].as_i64(), scan["failed"].as_i64()), (Some(0), Some(1)), "{scan}");
    assert_eq!((scan["totalTargets"].as_i64(), scan["doneTargets"].as_i64()), (Some(3), Some(3)), "{scan}");
    assert_eq!(scan["progress"], 100);
    assert_eq!(scan["failures"].as_array().map(Vec::len), Some(1), "{scan}");
    assert_eq!(scan["failures"][0]["target"], format!("127.0.0.1:{closed}"));
    assert!(scan["failures"][0]["message"].as_str().unwrap().contains("connect"), "{scan}");
    assert!(scan["failures"][0]["message"].as_str().unwrap().contains("refused (the port is closed)"), "{scan}");
    assert!(issued_endpoint.handshakes() >= 1 && lone_endpoint.handshakes() >= 1);

    // In the inventory: the served leaf, its chain, where it was found, and the matched CA.
    let all = admin.get("/api/certificates?limit=100").await.body.clone();
    assert_eq!(all["total"], 2, "{all}");
    let find = |cn: &str| {
        all["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["commonName"] == cn)
            .cloned()
            .unwrap_or_else(|| panic!("{cn}: {all}"))
    };
    let (issued_row, lone_row) = (find("issued.example"), find("lone.example"));
    assert_eq!(issued_row["caId"], matcher["id"], "{issued_row}");
    assert_eq!(lone_row["caId"], Value::Null, "{lone_row}");
    assert_eq!(issued_row["issuanceSource"], "external");
    assert_eq!(issued_row["location"], format!("localhost:{}", issued_endpoint.port), "{issued_row}");
    assert_eq!(issued_row["metadata"]["discoveredBy"], id, "{issued_row}");
    let full = admin.get(&format!("/api/certificates/{}", issued_row["id"])).await.body["data"].clone();
    assert_eq!(full["certificate"].as_str().map(str::trim), Some(issued.pem.trim()), "the served leaf");
    let usage = admin.get(&format!("/api/certificate-usage?certificateId={}", issued_row["id"])).await;
    assert_eq!(usage.body["total"], 1, "{}", usage.body);
    assert_eq!(usage.body["data"][0]["host"], "localhost");
    assert_eq!(usage.body["data"][0]["port"], issued_endpoint.port);

    // Events and audit.
    let completed = event_data(&admin, "discovery.scan_completed").await;
    assert_eq!(completed.len(), 1, "{completed:?}");
    assert_eq!((completed[0]["scanId"].clone(), completed[0]["type"].clone()), (json!(id), json!("tls_endpoints")));
    assert_eq!((completed[0]["new"].clone(), completed[0]["failed"].clone()), (json!(2), json!(1)));
    let found = event_data(&admin, "discovery.new_certificates_found").await;
    assert_eq!((found.len(), found[0]["count"].clone()), (1, json!(2)), "{found:?}");
    let audit = admin.get("/api/audit-logs?action=discovery.scan_started").await;
    assert_eq!(audit.body["data"][0]["targetId"], id.to_string(), "{}", audit.body);

    // A rescan finds the same two: nothing new, nothing duplicated, no second usage row.
    let again = finished_scan(&admin, start_scan(&admin, targets).await).await;
    assert_eq!((again["found"].as_i64(), again["new"].as_i64(), again["failed"].as_i64()), (Some(2), Some(0), Some(1)));
    assert_eq!(admin.get("/api/certificates").await.body["total"], 2);
    assert_eq!(event_data(&admin, "discovery.new_certificates_found").await.len(), 1);
    let usage = admin.get(&format!("/api/certificate-usage?certificateId={}", issued_row["id"])).await;
    assert_eq!(usage.body["total"], 1, "{}", usage.body);

    // The list filters by type and state.
    let listed = admin.get("/api/discovery/scans?type=tls_endpoints&status=completed&limit=1").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!((listed.body["total"].clone(), listed.body["data"].as_array().map(Vec::len)), (json!(2), Some(1)));
    assert_eq!(admin.get("/api/discovery/scans?type=ca_certs").await.body["total"], 0);
    assert_eq!(admin.get("/api/discovery/scans?status=running").await.body["total"], 0);
    assert_error(&admin.get("/api/discovery/scans?status=stuck").await, 400, "VALIDATION_ERROR", "unknown state");
}

#[tokio::test]
async fn private_and_metadata_addresses_are_refused_without_the_setting() {
    let server = Server::start();
    let admin = server.admin().await;
    let endpoint = TlsEndpoint::start(&Spec::tls("private.example").build_served()).await;
    let id = start_scan(
        &admin,
        json!([format!("127.0.0.1:{}", endpoint.port), format!("localhost:{}", endpoint.port), "169.254.169.254:443"]),
    )
    .await;
    let scan = finished_scan(&admin, id).await;
    assert_eq!(scan["status"], "completed", "{scan}");
    assert_eq!((scan["found"].as_i64(), scan["failed"].as_i64()), (Some(0), Some(3)), "{scan}");
    let failures = scan["failures"].as_array().unwrap();
    for failure in failures {
        let message = failure["message"].as_str().unwrap();
        if failure["target"] == "169.254.169.254:443" {
            assert!(message.contains("metadata"), "{failure}");
        } else {
            assert!(message.contains("TRELLIS_DISCOVERY_ALLOW_PRIVATE_NETWORKS"), "{failure}");
        }
    }
    assert_eq!(endpoint.accepted(), 0, "refused before connecting");
    assert_eq!(admin.get("/api/certificates").await.body["total"], 0);
}

#[tokio::test]
async fn targets_are_checked_before_a_scan_starts() {
    let server = Server::start();
    let admin = server.admin().await;
    let too_wide =
        admin.post("/api/discovery/scans", json!({ "type": "tls_endpoints", "targets": ["10.0.0.0/23:443"] })).await;
    assert_error(&too_wide, 400, "VALIDATION_ERROR", "a /23");
    assert_eq!(too_wide.body["error"]["details"]["targets"][0]["target"], "10.0.0.0/23:443", "{}", too_wide.body);
    assert!(too_wide.body["error"]["message"].as_str().unwrap().contains("/24"), "{}", too_wide.body);
    let many = admin
        .post(
            "/api/discovery/scans",
            json!({ "type": "tls_endpoints", "targets": ["ok.example:443", "bad host:1", "x:0", "[::1"] }),
        )
        .await;
    assert_error(&many, 400, "VALIDATION_ERROR", "bad targets");
    assert_eq!(many.body["error"]["details"]["targets"].as_array().map(Vec::len), Some(3), "{}", many.body);
    let over: Vec<String> = (0..257).map(|i| format!("h{i}.example:443")).collect();
    for (body, what) in [
        (json!({ "type": "tls_endpoints", "targets": [] }), "no targets"),
        (json!({ "type": "tls_endpoints", "targets": over }), "257 targets"),
        (json!({ "type": "tls_endpoints", "targets": ["10.0.0.0/33:443"] }), "prefix 33"),
        (json!({ "type": "ca_certs", "caId": 1, "targets": ["a.example:443"] }), "targets on ca_certs"),
        (json!({ "type": "tls_endpoints", "targets": "a.example:443" }), "targets not a list"),
    ] {
        assert_error(&admin.post("/api/discovery/scans", body).await, 400, "VALIDATION_ERROR", what);
    }
    assert_eq!(admin.get("/api/discovery/scans").await.body["total"], 0, "nothing was started");
    // A /24 is accepted (254 hosts; nothing is reachable there without the setting).
    let id = start_scan(&admin, json!(["192.0.2.0/24:443"])).await;
    let cancelled = admin.post(&format!("/api/discovery/scans/{id}/cancel"), json!({})).await;
    assert!(matches!(cancelled.status, 200 | 409), "{}", cancelled.body);
}

// Multi-threaded: the endpoint's task is stopped for real while the test waits for the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_scan_and_a_killed_server_leaves_nothing_running() {
    let mut server = Server::start_with(&[ALLOW_PRIVATE, ("TRELLIS_DISCOVERY_TLS_TIMEOUT_MS", "120000")]);
    let admin = server.admin().await;
    let hanging = TlsEndpoint::hanging().await;
    let target = format!("127.0.0.1:{}", hanging.port);

    // Cancelled while its probe hangs.
    let id = start_scan(&admin, json!([target])).await;
    running_scan(&admin, id).await;
    let cancelled = admin.post(&format!("/api/discovery/scans/{id}/cancel"), json!({})).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    assert_eq!(cancelled.body["data"]["status"], "cancelled");
    assert!(cancelled.body["data"]["finishedAt"].is_string());
    let events = event_data(&admin, "discovery.scan_completed").await;
    assert_eq!((events[0]["scanId"].clone(), events[0]["status"].clone()), (json!(id), json!("cancelled")));
    assert_error(&admin.post(&format!("/api/discovery/scans/{id}/cancel"), json!({})).await, 409, "CONFLICT", "twice");

    // Killed mid-scan: the scan is left `running` with a heartbeat that stops...
    let id = start_scan(&admin, json!([target])).await;
    running_scan(&admin, id).await;
    server.kill_and_restart();
    let admin = server.admin().await;
    let after = admin.get(&format!("/api/discovery/scans/{id}")).await.body["data"].clone();
    assert_eq!(after["status"], "running", "{after}");
    // ...and any replica's discovery job takes it over once the heartbeat is stale, reruns it
    // (the endpoint is gone by then) and finishes it.
    hanging.stop();
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", hanging.port)).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ran = server.cli(&["jobs", "discovery", "--as-of", &days_from_now(1)]).expect("jobs discovery");
    assert_eq!(ran["ran"], 1, "{ran}");
    let scan = finished_scan(&admin, id).await;
    assert_eq!(scan["status"], "completed", "{scan}");
    assert_eq!((scan["failed"].as_i64(), scan["doneTargets"].as_i64()), (Some(1), Some(1)), "{scan}");
    assert_eq!(admin.get("/api/discovery/scans?status=running").await.body["total"], 0);
    assert_eq!(admin.get("/api/discovery/scans?status=pending").await.body["total"], 0);
    let again = server.cli(&["jobs", "discovery"]).expect("jobs discovery");
    assert_eq!(again["ran"], 0, "nothing left to run: {again}");
}

/// A `ca_certs` scan imports a page of the CA's certificates in one transaction; a certificate
/// that does not parse fails alone, named, and the rest of its page still lands (the page is
/// imported again one by one). A rescan changes nothing.
#[tokio::test]
async fn ca_certs_pages_import_together_and_a_bad_certificate_fails_alone() {
    let server = Server::start_with(&[("TRELLIS_CA_HEALTH_INTERVAL_SECS", "0")]);
    let admin = server.admin().await;
    let fixture = trellis_tests::plugin_file("fixture-ca-bulk");
    let bytes = std::fs::read(&fixture).unwrap_or_else(|e| panic!("{}: {e}", fixture.display()));
    let installed = admin.post_raw("/api/plugins", "application/wasm", bytes).await;
    assert_eq!(installed.status, 201, "{}", installed.body);
    let ca = create_ca(
        &admin,
        json!({ "name": "Bulk", "type": "fixture-bulk", "config": { "count": 250, "brokenEvery": 100 } }),
    )
    .await;
    let scan_of =
        |scan: &Value| (scan["status"].clone(), scan["found"].as_i64(), scan["new"].as_i64(), scan["failed"].as_i64());
    let start = || async {
        let res = admin.post("/api/discovery/scans", json!({ "type": "ca_certs", "caId": ca["id"] })).await;
        assert_eq!(res.status, 201, "{}", res.body);
        finished_scan(&admin, res.body["data"]["id"].as_i64().expect("scan id")).await
    };
    let scan = start().await;
    assert_eq!(scan_of(&scan), (json!("completed"), Some(250), Some(248), Some(2)), "{scan}");
    let failed: Vec<&str> =
        scan["failures"].as_array().into_iter().flatten().filter_map(|f| f["target"].as_str()).collect();
    assert_eq!(failed, ["bulk-99", "bulk-199"], "{scan}");
    assert_eq!(admin.get("/api/certificates?limit=1").await.body["total"], 248);
    let created = admin.get("/api/audit-logs?action=certificate.created&limit=1").await;
    assert_eq!(created.body["total"], 248, "one audit entry per imported certificate: {}", created.body);

    let again = start().await;
    assert_eq!(scan_of(&again), (json!("completed"), Some(250), Some(0), Some(2)), "{again}");
    assert_eq!(admin.get("/api/certificates?limit=1").await.body["total"], 248);
}

/// Issue 21: per-workspace caps on `tls_endpoints` scans. Scans at once beyond
/// `TRELLIS_DISCOVERY_MAX_SCANS_PER_WORKSPACE` and endpoints beyond
/// `TRELLIS_DISCOVERY_ENDPOINTS_PER_HOUR` are 429 `RATE_LIMITED` in the error shape, with
/// `Retry-After` and a message saying when; another workspace is not held back; a scan larger
/// than the hourly cap is a 400 (no wait would admit it). A port that accepts but never
/// shakes hands is told from a closed one.
#[tokio::test]
async fn tls_endpoints_scans_are_capped_per_workspace() {
    let server = Server::start_with(&[
        ALLOW_PRIVATE,
        ("TRELLIS_DISCOVERY_TLS_TIMEOUT_MS", "120000"),
        ("TRELLIS_DISCOVERY_MAX_SCANS_PER_WORKSPACE", "1"),
        ("TRELLIS_DISCOVERY_ENDPOINTS_PER_HOUR", "5"),
    ]);
    let admin = server.admin().await;
    let hanging = TlsEndpoint::hanging().await;
    let target = format!("127.0.0.1:{}", hanging.port);

    let first = start_scan(&admin, json!([target])).await;
    running_scan(&admin, first).await;
    let busy = admin.post("/api/discovery/scans", json!({ "type": "tls_endpoints", "targets": [target] })).await;
    assert_error(&busy, 429, "RATE_LIMITED", "a second scan at once");
    let message = busy.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("TRELLIS_DISCOVERY_MAX_SCANS_PER_WORKSPACE") && message.contains("Retry"), "{message}");
    assert!(busy.header("retry-after").is_some_and(|s| s.parse::<u64>().is_ok()), "{:?}", busy.header("retry-after"));
    // Another workspace has its own caps.
    let (other, _) = server.new_user("other-scanner@example.com").await;
    let theirs = start_scan(&other, json!([target])).await;
    other.post(&format!("/api/discovery/scans/{theirs}/cancel"), json!({})).await;

    // Once the first ended, the hourly cap: 1 endpoint used, 4 left.
    assert_eq!(admin.post(&format!("/api/discovery/scans/{first}/cancel"), json!({})).await.status, 200);
    let four: Vec<String> = (0..4).map(|i| format!("127.0.0.{}:{}", i + 2, closed_port())).collect();
    let second = start_scan(&admin, json!(four)).await;
    finished_scan(&admin, second).await;
    let over = admin.post("/api/discovery/scans", json!({ "type": "tls_endpoints", "targets": [target] })).await;
    assert_error(&over, 429, "RATE_LIMITED", "a sixth endpoint within the hour");
    let message = over.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("TRELLIS_DISCOVERY_ENDPOINTS_PER_HOUR") && message.contains("Retry in"), "{message}");
    let retry: u64 = over.header("retry-after").and_then(|s| s.parse().ok()).unwrap_or_default();
    assert!((3000..=3600).contains(&retry), "the first scan leaves the hour in about an hour: {retry}");
    assert_eq!(over.body["error"]["details"]["retryAfterSeconds"], retry, "{}", over.body);
    let never =
        admin.post("/api/discovery/scans", json!({ "type": "tls_endpoints", "targets": ["10.9.9.0/29:443"] })).await;
    assert_error(&never, 400, "VALIDATION_ERROR", "six endpoints in one scan, over the hourly cap");
    assert_eq!(admin.get("/api/discovery/scans").await.body["total"], 2, "refused scans leave nothing");
}

/// A port that accepts the connection but never answers the handshake is named as such, not as
/// a bare timeout (nor as refused).
#[tokio::test]
async fn a_silent_tls_port_is_told_from_a_closed_one() {
    let server = Server::start_with(&[ALLOW_PRIVATE, ("TRELLIS_DISCOVERY_TLS_TIMEOUT_MS", "300")]);
    let admin = server.admin().await;
    let hanging = TlsEndpoint::hanging().await;
    let id = start_scan(&admin, json!([format!("127.0.0.1:{}", hanging.port)])).await;
    let scan = finished_scan(&admin, id).await;
    let message = scan["failures"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("no TLS handshake within"), "{scan}");
}
