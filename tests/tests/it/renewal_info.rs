//! ACME Renewal Information (RFC 9773) in the renewal worker: a CA whose connector offers
//! `renewal-info` (`plugins/fixtures/ca-pending` with `renewalWindow`) decides when its
//! certificates renew, instead of the 30-day window. `trellis jobs renew --as-of` drives time.

use serde_json::{json, Value};
use trellis_tests::{Client, Server};

use crate::cas::{create_ca, install_plugin};
use crate::lifecycle::days_from_now;

/// A server whose own workers stay out of the way (the tests drive them with the CLI).
fn server() -> Server {
    Server::start_with(&[("TRELLIS_ISSUANCE_POLL_INTERVAL_SECS", "3600"), ("TRELLIS_RENEWAL_INTERVAL_SECS", "3600")])
}

/// A 90-day auto-renewing certificate issued through a new `fixture-pending` CA with `config`.
async fn certificate(server: &Server, admin: &Client, name: &str, config: Value) {
    let ca = create_ca(admin, json!({ "name": name, "type": "fixture-pending", "config": config })).await;
    let res = admin
        .post(
            "/api/certificates/issue",
            json!({ "caId": ca["id"], "commonName": format!("{name}.example.com"), "autoRenewal": true }),
        )
        .await;
    assert_eq!(res.status, 202, "{}", res.body);
    let done = server.cli(&["jobs", "poll-issuance", "--as-of", &from_now(3600)]).expect("jobs poll-issuance");
    assert_eq!(done["issued"], 1, "{done}");
}

/// RFC 3339, `secs` from now.
fn from_now(secs: i64) -> String {
    let at = time::OffsetDateTime::now_utc() + time::Duration::seconds(secs);
    at.format(&time::format_description::well_known::Rfc3339).expect("format")
}

fn renew_at(server: &Server, at: &str) -> Value {
    server.cli(&["jobs", "renew", "--as-of", at]).expect("jobs renew")
}

fn renew(server: &Server, days: i64) -> Value {
    renew_at(server, &days_from_now(days))
}

/// The names of the certificates whose renewal is parked at the CA.
async fn renewing(admin: &Client) -> Vec<String> {
    let parked = admin.get("/api/certificate-requests?status=issuing").await;
    assert_eq!(parked.status, 200, "{}", parked.body);
    let mut names: Vec<String> = parked.body["data"]
        .as_array()
        .map(|items| items.iter().filter_map(|r| r["commonName"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test]
async fn a_cas_window_starting_now_renews_a_fresh_certificate_today() {
    let server = server();
    let admin = server.admin().await;
    install_plugin(&admin, "fixture-ca-pending").await;
    certificate(&server, &admin, "ari-now", json!({ "renewalWindow": "now" })).await;
    certificate(&server, &admin, "no-ari", json!({})).await;

    // Both are 90-day certificates, 89 days from the 30-day window; only the CA's window counts.
    // The fixture's "now" window ends a minute after the CA is asked.
    assert_eq!(renew_at(&server, &from_now(300)), json!({ "renewed": 0, "failed": 0, "pending": 1 }));
    assert_eq!(renewing(&admin).await, vec!["ari-now.example.com"]);
    assert_eq!(renew(&server, 1), json!({ "renewed": 0, "failed": 0, "pending": 0 }));
    // The other one still renews in its template window.
    assert_eq!(renew(&server, 61), json!({ "renewed": 0, "failed": 0, "pending": 1 }));
    assert_eq!(renewing(&admin).await, vec!["ari-now.example.com", "no-ari.example.com"]);
}

#[tokio::test]
async fn a_cas_later_window_holds_the_renewal_past_the_template_window() {
    let server = server();
    let admin = server.admin().await;
    install_plugin(&admin, "fixture-ca-pending").await;
    let window = json!({ "renewalWindow": { "startOffsetDays": -10, "endOffsetDays": -5 } });
    certificate(&server, &admin, "ari-late", window).await;

    // Inside the 30-day window (day 65), but the CA suggests days 80 to 85.
    assert_eq!(renew(&server, 65), json!({ "renewed": 0, "failed": 0, "pending": 0 }));
    assert_eq!(renew(&server, 79), json!({ "renewed": 0, "failed": 0, "pending": 0 }));
    assert_eq!(renew(&server, 86), json!({ "renewed": 0, "failed": 0, "pending": 1 }));
    assert_eq!(renewing(&admin).await, vec!["ari-late.example.com"]);
}
