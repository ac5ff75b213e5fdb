//! The web console (issue 26) against the real binary: pages answer with the right rows and
//! numbers, the Content Security Policy is on every page, a viewer sees no button it cannot use
//! and is refused anyway, and form posts without the session's form token or from another
//! site are refused.

use serde_json::Value;
use trellis_tests::certs::Spec;
use trellis_tests::{Client, Response, Server};

/// The form token of a console page (`<input type="hidden" name="csrf" value="…">`).
pub(crate) fn csrf_of(page: &Response) -> String {
    let html = String::from_utf8_lossy(&page.bytes);
    let marker = "name=\"csrf\" value=\"";
    let start = html.find(marker).unwrap_or_else(|| panic!("no form token in {html}")) + marker.len();
    html[start..].split('"').next().unwrap_or_default().to_string()
}

pub(crate) fn html(page: &Response) -> String {
    String::from_utf8_lossy(&page.bytes).into_owned()
}

/// The text of the element with `id` (the first `>` after it to the next `<`).
fn text_of(page: &Response, id: &str) -> String {
    let html = html(page);
    let marker = format!("id=\"{id}\"");
    let start = html.find(&marker).unwrap_or_else(|| panic!("no #{id} in {html}"));
    let rest = &html[start..];
    let open = rest.find('>').unwrap_or(0) + 1;
    rest[open..].split('<').next().unwrap_or_default().trim().to_string()
}

pub(crate) async fn post_form(client: &Client, path: &str, form: &[(&str, &str)]) -> Response {
    let body: String = form
        .iter()
        .map(|(k, v)| format!("{k}={}", v.replace('%', "%25").replace('&', "%26").replace(' ', "+")))
        .collect::<Vec<_>>()
        .join("&");
    client.post_raw(path, "application/x-www-form-urlencoded", body.into_bytes()).await
}

/// A client that does not follow redirects, to see the 303s themselves.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client")
}

pub(crate) fn assert_console_headers(page: &Response) {
    let csp = page.header("content-security-policy").unwrap_or_default();
    assert!(csp.starts_with("default-src 'self'"), "CSP: {csp:?}");
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "CSP: {csp}");
    let html = html(page);
    // Nothing inline: no style attribute or element, no script without src.
    assert!(!html.contains("style="), "inline style in {html}");
    assert!(!html.contains("<style"), "style element in {html}");
    for script in html.split("<script").skip(1) {
        assert!(script.trim_start().starts_with("src="), "inline script in {html}");
    }
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
}

#[tokio::test]
async fn signed_out_the_console_sends_to_sign_in_and_password_sign_in_opens_it() {
    let server = Server::start();
    let http = no_redirects();
    let res = http.get(server.url("/certificates?status=expired")).send().await.expect("request");
    assert_eq!(res.status(), 303);
    assert_eq!(res.headers()["location"], "/login?next=/certificates%3Fstatus%3Dexpired");

    let anonymous = Client::new(&server, None);
    let login = anonymous.get("/login").await;
    assert_eq!(login.status, 200);
    assert_console_headers(&login);
    let page = html(&login);
    assert!(page.contains("<label for=\"email\">") && page.contains("<label for=\"password\">"), "{page}");
    assert!(!page.contains("Sign in with"), "no identity provider is configured: {page}");

    // The stylesheet and htmx are embedded, named by their hash, cached for a year.
    let css_href =
        page.split("rel=\"stylesheet\" href=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or_default();
    assert!(css_href.starts_with("/assets/console.") && css_href.ends_with(".css"), "{css_href}");
    let css = anonymous.get(css_href).await;
    assert_eq!(css.status, 200);
    assert!(css.header("cache-control").unwrap_or_default().contains("immutable"));
    let etag = css.header("etag").unwrap_or_default().to_string();
    let again = anonymous.send(anonymous.request(reqwest::Method::GET, css_href).header("if-none-match", &etag)).await;
    assert_eq!(again.status, 304);
    let js_href = page.split("<script src=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or_default();
    let js = anonymous.get(js_href).await;
    assert_eq!(js.status, 200);
    assert!(html(&js).contains("htmx"), "htmx is served");

    // Wrong password: the form again, with the reason in words.
    let wrong =
        post_form(&anonymous, "/login", &[("email", "admin@example.com"), ("password", "nope"), ("next", "/")]).await;
    assert_eq!(wrong.status, 401);
    assert!(html(&wrong).contains("Wrong e-mail or password"), "{}", html(&wrong));

    // Right password: the session cookie, then back where the user was going.
    let res = http
        .post(server.url("/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "email={}&password={}&next=/certificates",
            trellis_tests::ADMIN_EMAIL.replace('@', "%40"),
            trellis_tests::ADMIN_PASSWORD.replace(' ', "+")
        ))
        .send()
        .await
        .expect("request");
    assert_eq!(res.status(), 303);
    assert_eq!(res.headers()["location"], "/certificates");
    let cookie = res.headers()["set-cookie"].to_str().unwrap_or_default().to_string();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"), "{cookie}");
    // An open redirect is not: `next` must be a path here.
    let res = http
        .post(server.url("/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "email={}&password={}&next=//evil.example",
            trellis_tests::ADMIN_EMAIL.replace('@', "%40"),
            trellis_tests::ADMIN_PASSWORD.replace(' ', "+")
        ))
        .send()
        .await
        .expect("request");
    assert_eq!(res.headers()["location"], "/");
}

#[tokio::test]
async fn the_dashboard_shows_the_numbers_the_api_gives() {
    let server = Server::start();
    let admin = server.admin().await;
    for (name, days) in [("gone", -3), ("soon", 5), ("month", 20), ("later", 50), ("year", 300)] {
        admin.register(&Spec::tls(&format!("{name}.example.com")).expiring_in(days).pem()).await;
    }
    let stats = admin.get("/api/certificates/stats").await;
    assert_eq!(stats.status, 200, "{}", stats.body);
    let dashboard = admin.get("/").await;
    assert_eq!(dashboard.status, 200, "{}", html(&dashboard));
    assert_console_headers(&dashboard);
    assert_eq!(text_of(&dashboard, "count-total"), stats.body["data"]["total"].to_string());
    for status in ["active", "expiring", "expired", "revoked"] {
        assert_eq!(text_of(&dashboard, &format!("count-{status}")), stats.body["data"][status].to_string(), "{status}");
    }
    assert_eq!(text_of(&dashboard, "within-7"), stats.body["data"]["expiringWithin7Days"].to_string());
    assert_eq!(text_of(&dashboard, "expired"), "1");
    assert_eq!(text_of(&dashboard, "within-30"), "2");
    // The default window is 60 days; the user picks another.
    assert_eq!(text_of(&dashboard, "within-window"), "3");
    let wide = admin.get("/?window=365").await;
    assert_eq!(text_of(&wide, "within-window"), "4");
    let bad = admin.get("/?window=abc").await;
    assert_eq!(bad.status, 200);
    assert!(html(&bad).contains("is not a number of days"), "{}", html(&bad));
    // The timeline: one bar per day with certificates, titled with its count.
    let page = html(&dashboard);
    assert!(page.contains("<svg") && page.matches("class=\"bar\"").count() == 3, "{page}");
    assert!(page.contains("3 certificates expire in the next 90 days"), "{page}");
}

#[tokio::test]
async fn the_inventory_filters_and_pages_on_the_server() {
    let server = Server::start();
    let admin = server.admin().await;
    admin.register(&Spec::tls("old.example.com").expiring_in(-2).pem()).await;
    admin.register(&Spec::tls("fresh.example.com").expiring_in(200).pem()).await;
    let all = admin.get("/certificates").await;
    assert_eq!(all.status, 200);
    assert_console_headers(&all);
    assert!(html(&all).contains("old.example.com") && html(&all).contains("fresh.example.com"));
    let expired = admin.get("/certificates?status=expired").await;
    assert!(html(&expired).contains("old.example.com") && !html(&expired).contains("fresh.example.com"));
    let searched = admin.get("/certificates?search=fresh").await;
    assert!(!html(&searched).contains("old.example.com") && html(&searched).contains("fresh.example.com"));
    // A filter the API refuses is a page in words, not a 500.
    let bad = admin.get("/certificates?status=sideways").await;
    assert_eq!(bad.status, 400);
    assert!(html(&bad).contains("status"), "{}", html(&bad));
}

/// The certificate ids of an inventory page, in the order of its rows.
fn row_ids(page: &Response) -> Vec<i64> {
    html(page).split("<tr data-id=\"").skip(1).filter_map(|rest| rest.split('"').next()?.parse().ok()).collect()
}

#[tokio::test]
async fn the_inventory_sorts_by_expiry_and_filters_by_ca() {
    let server = Server::start();
    let admin = server.admin().await;
    let ca = admin
        .post(
            "/api/certificate-authorities",
            serde_json::json!({ "name": "Sorting Root", "type": "internal", "config": { "subject": { "commonName": "Sorting Root" } } }),
        )
        .await;
    assert_eq!(ca.status, 201, "{}", ca.body);
    let ca_id = ca.body["data"]["id"].as_i64().expect("CA id");
    let mut issued = Vec::new();
    for name in ["issued-a.example.com", "issued-b.example.com"] {
        let cert =
            admin.post("/api/certificates/issue", serde_json::json!({ "caId": ca_id, "commonName": name })).await;
        assert_eq!(cert.status, 201, "{}", cert.body);
        issued.push(cert.body["data"]["id"].as_i64().expect("id"));
    }
    // Two with the same expiry: the order breaks the tie by id.
    for (name, days) in [("late", 400), ("gone", -3), ("soon", 5), ("twin-1", 20), ("twin-2", 20)] {
        admin.register(&Spec::tls(&format!("{name}.example.com")).expiring_in(days).pem()).await;
    }
    let api = admin.get("/api/certificates?limit=100").await;
    let mut expected: Vec<(String, i64)> = api.body["data"]
        .as_array()
        .expect("list")
        .iter()
        .map(|c| (c["expiresAt"].as_str().unwrap_or_default().to_string(), c["id"].as_i64().unwrap_or_default()))
        .collect();
    assert_eq!(expected.len(), 7, "{}", api.body);
    expected.sort();
    let soonest: Vec<i64> = expected.iter().map(|(_, id)| *id).collect();
    let newest = admin.get("/certificates").await;
    let mut by_id = soonest.clone();
    by_id.sort_by(|a, b| b.cmp(a));
    assert_eq!(row_ids(&newest), by_id, "the default order is newest first");
    let sorted = admin.get("/certificates?sort=expiresAt").await;
    assert_eq!(sorted.status, 200);
    assert_console_headers(&sorted);
    assert_eq!(row_ids(&sorted), soonest, "{}", html(&sorted));
    assert!(html(&sorted).contains("aria-sort=\"ascending\""));
    let latest = admin.get("/certificates?sort=-expiresAt").await;
    assert_eq!(row_ids(&latest), soonest.iter().rev().copied().collect::<Vec<_>>());
    // The API answers the same order.
    let api_sorted = admin.get("/api/certificates?sort=expiresAt&limit=100").await;
    let api_ids: Vec<i64> =
        api_sorted.body["data"].as_array().expect("list").iter().filter_map(|c| c["id"].as_i64()).collect();
    assert_eq!(api_ids, soonest);
    // The CA filter offers the workspace's CA and keeps what it issued, sorted too.
    assert!(html(&newest).contains(&format!("<option value=\"{ca_id}\">Sorting Root</option>")), "{}", html(&newest));
    let of_ca = admin.get(&format!("/certificates?caId={ca_id}&sort=-expiresAt")).await;
    let mut ids = row_ids(&of_ca);
    ids.sort();
    assert_eq!(ids, issued, "{}", html(&of_ca));
    assert!(html(&of_ca).contains(&format!("<option value=\"{ca_id}\" selected>")), "{}", html(&of_ca));
    // The API pages a CA's certificates in that order too.
    let paged = admin.get(&format!("/api/certificates?caId={ca_id}&sort=expiresAt&limit=1&page=2")).await;
    assert_eq!(paged.body["data"].as_array().map(Vec::len), Some(1), "{}", paged.body);
    // Values the API refuses are pages in words, not 500s.
    for bad in ["sort=sideways", "caId=abc", "caId=-4"] {
        let page = admin.get(&format!("/certificates?{bad}")).await;
        assert_eq!(page.status, 400, "{bad}: {}", html(&page));
        let api = admin.get(&format!("/api/certificates?{bad}")).await;
        assert_eq!(api.status, 400, "{bad}: {}", api.body);
    }
}

/// Registers one certificate and answers its id.
async fn one_certificate(admin: &Client) -> i64 {
    let created = admin.register(&Spec::tls("www.example.com").expiring_in(90).pem()).await;
    created["id"].as_i64().expect("id")
}

#[tokio::test]
async fn a_viewer_sees_no_action_and_is_refused_anyway() {
    let server = Server::start();
    let admin = server.admin().await;
    let id = one_certificate(&admin).await;
    let workspace =
        admin.get("/api/auth/user").await.body["data"]["currentWorkspaceId"].as_str().unwrap_or_default().to_string();
    let viewer = server.new_member("viewer@example.com", &workspace, "viewer").await;
    // The switcher's choice is a cookie; the viewer picks the admin's workspace.
    let own = viewer.get("/").await;
    let switched = post_form(&viewer, "/workspace", &[("csrf", &csrf_of(&own)), ("workspace", &workspace)]).await;
    assert_eq!(switched.status, 200, "{}", html(&switched));

    let page = viewer.get(&format!("/certificates/{id}")).await;
    assert_eq!(page.status, 200, "{}", html(&page));
    let body = html(&page);
    assert!(body.contains("www.example.com"), "{body}");
    assert!(body.contains("Certificate (PEM)"), "downloads are reads: {body}");
    for action in [">Revoke<", "Turn auto-renewal", ">Delete<", ">Private key…<", "href=\"/issue\""] {
        assert!(!body.contains(action), "{action} shown to a viewer: {body}");
    }
    assert!(!body.contains("action=\"/certificates/"), "a form for a viewer: {body}");
    // The server refuses what the page does not offer.
    let refused = post_form(
        &viewer,
        &format!("/certificates/{id}/revoke"),
        &[("csrf", &csrf_of(&page)), ("reason", "superseded")],
    )
    .await;
    assert_eq!(refused.status, 403, "{}", html(&refused));
    assert!(html(&refused).contains("certificates:write"), "{}", html(&refused));
    let certificate = admin.get(&format!("/api/certificates/{id}")).await;
    assert_eq!(certificate.body["data"]["status"], "active");
    // Downloads work for a viewer.
    let pem = viewer.get(&format!("/certificates/{id}/download?format=pem")).await;
    assert_eq!(pem.status, 200);
    assert!(html(&pem).starts_with("-----BEGIN CERTIFICATE-----"));
}

#[tokio::test]
async fn forms_without_the_session_token_or_from_another_site_are_refused() {
    let server = Server::start();
    let admin = server.admin().await;
    let id = one_certificate(&admin).await;
    let page = admin.get(&format!("/certificates/{id}")).await;
    assert!(html(&page).contains(">Revoke<"), "{}", html(&page));
    let token = csrf_of(&page);

    let no_token = post_form(&admin, &format!("/certificates/{id}/revoke"), &[("reason", "superseded")]).await;
    assert_eq!(no_token.status, 403);
    assert!(html(&no_token).contains("was not sent from this console"), "{}", html(&no_token));
    let wrong =
        post_form(&admin, &format!("/certificates/{id}/revoke"), &[("csrf", "0123"), ("reason", "superseded")]).await;
    assert_eq!(wrong.status, 403);
    let cross_site = admin
        .send(
            admin
                .request(reqwest::Method::POST, &format!("/certificates/{id}/revoke"))
                .header("content-type", "application/x-www-form-urlencoded")
                .header("sec-fetch-site", "cross-site")
                .body(format!("csrf={token}&reason=superseded")),
        )
        .await;
    assert_eq!(cross_site.status, 403);
    assert_eq!(admin.get(&format!("/api/certificates/{id}")).await.body["data"]["status"], "active");

    // With the token: revoked, with the reason, and the page says so.
    let done =
        post_form(&admin, &format!("/certificates/{id}/revoke"), &[("csrf", &token), ("reason", "keyCompromise")])
            .await;
    assert_eq!(done.status, 200, "{}", html(&done));
    assert!(html(&done).contains("The certificate is revoked."), "{}", html(&done));
    let certificate: Value = admin.get(&format!("/api/certificates/{id}")).await.body;
    assert_eq!(certificate["data"]["status"], "revoked");
    assert_eq!(certificate["data"]["revocationReason"], "keyCompromise");
    // Its history shows the revocation (the audit rows of the same use case).
    assert!(html(&done).contains("certificate.revoked"), "{}", html(&done));

    let toggled =
        post_form(&admin, &format!("/certificates/{id}/auto-renew"), &[("csrf", &token), ("enabled", "true")]).await;
    // A registered certificate has no CA to renew it: refused in words.
    assert!(toggled.status == 400 || toggled.status == 200, "{}", html(&toggled));
    let deleted =
        post_form(&admin, &format!("/certificates/{id}/delete"), &[("csrf", &token), ("confirm", "yes")]).await;
    assert_eq!(deleted.status, 200, "{}", html(&deleted));
    assert_eq!(admin.get(&format!("/api/certificates/{id}")).await.status, 404);
}

#[tokio::test]
async fn sign_out_ends_the_session() {
    let server = Server::start();
    let admin = server.admin().await;
    let page = admin.get("/").await;
    let out = post_form(&admin, "/logout", &[("csrf", &csrf_of(&page))]).await;
    assert_eq!(out.status, 200);
    assert!(html(&out).contains("Sign in to Trellis"), "{}", html(&out));
    assert_eq!(admin.get("/api/auth/user").await.status, 401);
}

/// Where scripts/console-deps.sh installs playwright-core and axe-core.
fn console_node_modules() -> std::path::PathBuf {
    let in_tree = trellis_tests::workspace_root().join("target/console-deps/node_modules");
    let dir = if in_tree.exists() { in_tree } else { trellis_tests::target_dir().join("console-deps/node_modules") };
    assert!(
        dir.join("playwright-core/package.json").exists() && dir.join("axe-core/axe.min.js").exists(),
        "{} lacks playwright-core or axe-core: run scripts/console-deps.sh (make test does)",
        dir.display()
    );
    dir
}

// Multi-threaded: the TLS endpoint the scan probes runs on the runtime while node blocks this thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_sign_in_filter_issue_download_revoke_approve_and_scan_with_no_accessibility_violation() {
    let server = Server::start_with(&[("TRELLIS_DISCOVERY_ALLOW_PRIVATE_NETWORKS", "true")]);
    let endpoint = trellis_tests::tls_endpoint::TlsEndpoint::start(&Spec::tls("scanned.example").build_served()).await;
    let admin = server.admin().await;
    let workspace =
        admin.get("/api/auth/user").await.body["data"]["currentWorkspaceId"].as_str().unwrap_or_default().to_string();
    let ca = admin
        .post(
            "/api/certificate-authorities",
            serde_json::json!({ "name": "Console Root", "type": "internal", "config": { "subject": { "commonName": "Console Root" } } }),
        )
        .await;
    assert_eq!(ca.status, 201, "{}", ca.body);
    let ca_id = ca.body["data"]["id"].as_i64().unwrap_or_default();
    for (name, days) in [("alpha-1", 5), ("alpha-2", -2), ("beta", 120)] {
        admin.register(&Spec::tls(&format!("{name}.example.com")).expiring_in(days).pem()).await;
    }
    let request = admin
        .post("/api/certificate-requests", serde_json::json!({ "caId": ca_id, "commonName": "approve-me.example.com" }))
        .await;
    assert!(request.status == 201 || request.status == 202, "{}", request.body);
    let request_id = request.body["data"]["id"].as_i64().unwrap_or_default();
    server.new_member("approver@example.com", &workspace, "member").await;
    // A device whose last attestation failed, for its history page.
    let device = admin.post("/api/iot/devices", serde_json::json!({ "name": "console-device" })).await;
    let device_id = device.body["data"]["id"].as_i64().unwrap_or_default();
    let failed = admin
        .post(
            &format!("/api/iot/devices/{device_id}/attest"),
            serde_json::json!({ "passed": false, "failures": ["pcr_mismatch: PCR 7 differs"] }),
        )
        .await;
    assert_eq!(failed.status, 201, "{}", failed.body);
    let stats = admin.get("/api/certificates/stats").await.body;

    let config = serde_json::json!({
        "base": server.base_url,
        "admin": { "email": trellis_tests::ADMIN_EMAIL, "password": trellis_tests::ADMIN_PASSWORD },
        "approver": { "email": "approver@example.com", "password": "password-123" },
        "workspace": workspace,
        "requestId": request_id,
        "search": "alpha",
        "scanTarget": format!("127.0.0.1:{}", endpoint.port),
        "deviceId": device_id,
        "pluginV1": trellis_tests::plugin_file("fixture-upgrade-v1"),
        "pluginV2": trellis_tests::plugin_file("fixture-upgrade-v2"),
        "screenshots": std::env::var("TRELLIS_CONSOLE_SCREENSHOTS").ok(),
    });
    let out = std::process::Command::new("node")
        .arg(trellis_tests::workspace_root().join("tests/console/browser.mjs"))
        .arg(config.to_string())
        .env("TRELLIS_NODE_MODULES", console_node_modules())
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "browser.mjs failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|_| panic!("not JSON: {stdout}"));
    assert!(seen["error"].is_null(), "the browser run failed: {seen:#}");
    // The dashboard's numbers are the API's.
    assert_eq!(seen["numbers"]["count-total"], stats["data"]["total"], "{seen}");
    for status in ["active", "expiring", "expired", "revoked"] {
        assert_eq!(seen["numbers"][format!("count-{status}")], stats["data"][status], "{status}: {seen}");
    }
    assert_eq!(seen["numbers"]["within-7"], stats["data"]["expiringWithin7Days"], "{seen}");
    // The live filter kept the two alphas.
    let filtered: Vec<&str> = seen["filtered"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert_eq!(filtered.len(), 2, "{seen}");
    assert!(filtered.iter().all(|n| n.contains("alpha")), "{seen}");
    // Sorted by expiry, soonest first: the expired alpha before the one expiring in 5 days.
    assert_eq!(seen["sorted"], serde_json::json!(["alpha-2.example.com", "alpha-1.example.com"]), "{seen}");
    // The CA filter kept only the certificate issued through Console Root from the form.
    assert_eq!(seen["byCa"], serde_json::json!(["web.console.example"]), "{seen}");
    assert_eq!(seen["downloaded"], "-----BEGIN CERTIFICATE-----", "{seen}");
    assert!(seen["revoked"].as_str().unwrap_or_default().contains("superseded"), "{seen}");
    assert!(seen["steps"].as_array().is_some_and(|s| s.iter().any(|x| x == "approved")), "{seen}");
    let decided = admin.get(&format!("/api/certificate-requests/{request_id}")).await;
    assert_ne!(decided.body["data"]["status"], "pending", "{}", decided.body);
    // No page broke its CSP, and axe-core found nothing serious or critical on any page.
    assert_eq!(seen["csp"], serde_json::json!([]), "{seen:#}");
    for (page, violations) in seen["violations"].as_object().into_iter().flatten() {
        assert_eq!(violations, &serde_json::json!([]), "{page}: {violations:#}");
    }
    assert_eq!(seen["violations"].as_object().map(|v| v.len()), Some(20), "{seen}");
    // The issue form ended on its result page; the device's history shows why it failed; a
    // plugin version was uploaded, then another activated.
    assert!(seen["issuedUrl"].as_str().unwrap_or_default().contains("/issue/issued/"), "{seen}");
    assert_eq!(seen["deviceFailure"], "pcr_mismatch: PCR 7 differs", "{seen}");
    assert!(seen["pluginUploaded"].as_str().unwrap_or_default().contains("trellis.fixture.upgrade 1.0.0"), "{seen}");
    assert!(seen["pluginActivated"].as_str().unwrap_or_default().contains("2.0.0 is active"), "{seen}");
    let active = admin.get("/api/plugins/trellis.fixture.upgrade").await;
    assert_eq!(active.body["data"]["activeVersion"], "2.0.0", "{}", active.body);
    assert!(seen["caTest"].as_str().unwrap_or_default().starts_with("Passed"), "{seen}");
    // The CA form: the connector's refusal shown in words, then the CA created.
    assert!(seen["caRefused"].as_str().unwrap_or_default().contains("validityDays"), "{seen}");
    assert_eq!(seen["caCreated"].as_str(), Some("Console root"), "{seen}");
    assert_eq!(seen["auditRows"], 1, "{seen}");
    // The key shown once works against the API.
    let key = seen["newKey"].as_str().unwrap_or_default().to_string();
    assert_eq!(Client::new(&server, Some(key)).get("/api/certificates").await.status, 200, "{seen}");
    // The scan's progress reached its end, and it found the endpoint's certificate.
    assert_eq!((seen["scan"]["percent"].as_str(), seen["scan"]["found"].as_i64()), (Some("100"), Some(1)), "{seen}");
    // …and lists it: new to the inventory.
    assert_eq!(seen["scan"]["findings"], serde_json::json!(["scanned.example | new"]), "{seen}");
}

#[tokio::test]
async fn administration_pages_follow_the_role() {
    let server = Server::start();
    let admin = server.admin().await;
    let workspace =
        admin.get("/api/auth/user").await.body["data"]["currentWorkspaceId"].as_str().unwrap_or_default().to_string();
    // The owner: every entry, the forms, a key shown once, a member added.
    let home = admin.get("/").await;
    for entry in ["href=\"/audit\"", "href=\"/api-keys\"", "href=\"/members\"", "href=\"/cas\""] {
        assert!(html(&home).contains(entry), "{entry}: {}", html(&home));
    }
    let token = csrf_of(&home);
    let created =
        post_form(&admin, "/api-keys", &[("csrf", &token), ("name", "ci"), ("scopes", "certificates:read")]).await;
    assert_eq!(created.status, 200, "{}", html(&created));
    let key = html(&created)
        .split("id=\"new-key\" class=\"mono\" readonly value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_default()
        .to_string();
    assert!(key.starts_with("ck_"), "{}", html(&created));
    assert_eq!(Client::new(&server, Some(key.clone())).get("/api/certificates").await.status, 200);
    // Listed afterwards by its prefix only.
    let listed = admin.get("/api-keys").await;
    assert!(!html(&listed).contains(&key), "the key is shown once");
    let added =
        post_form(&admin, "/members", &[("csrf", &token), ("email", "later@example.com"), ("role", "viewer")]).await;
    assert_eq!(added.status, 200, "{}", html(&added));
    assert!(html(&added).contains("later@example.com"), "{}", html(&added));
    let hooks = admin.get("/events-out").await;
    assert_eq!(hooks.status, 200, "{}", html(&hooks));
    assert!(html(&hooks).contains("Add the endpoint"), "{}", html(&hooks));
    let plugins = admin.get("/plugins").await;
    assert_eq!(plugins.status, 200, "{}", html(&plugins));
    assert!(html(&plugins).contains("trellis.internal"), "{}", html(&plugins));
    assert_eq!(admin.get("/attestation").await.status, 200);
    let audit = admin.get("/audit?action=api_key.created").await;
    assert_eq!(audit.status, 200);
    assert!(html(&audit).contains("api_key.created"), "{}", html(&audit));

    // A viewer: no entry for what its role cannot read, no form, and refused anyway.
    let viewer = server.new_member("v@example.com", &workspace, "viewer").await;
    let own = viewer.get("/").await;
    post_form(&viewer, "/workspace", &[("csrf", &csrf_of(&own)), ("workspace", &workspace)]).await;
    let home = viewer.get("/").await;
    for entry in ["href=\"/audit\"", "href=\"/issue\"", "href=\"/plugins\""] {
        assert!(!html(&home).contains(entry), "{entry} shown to a viewer");
    }
    // Plugins are the instance administrators'.
    assert_eq!(viewer.get("/plugins").await.status, 403);
    assert_eq!(viewer.get("/attestation").await.status, 200);
    assert_eq!(viewer.get("/audit").await.status, 403);
    let keys = viewer.get("/api-keys").await;
    assert_eq!(keys.status, 200, "{}", html(&keys));
    assert!(!html(&keys).contains("Create the key"), "{}", html(&keys));
    let refused =
        post_form(&viewer, "/api-keys", &[("csrf", &csrf_of(&keys)), ("name", "x"), ("scopes", "certificates:read")])
            .await;
    assert_eq!(refused.status, 403);
    let events_out = viewer.get("/events-out").await;
    assert_eq!(events_out.status, 200, "{}", html(&events_out));
    assert!(!html(&events_out).contains("action=\"/events-out\""), "{}", html(&events_out));
    let members = viewer.get("/members").await;
    assert!(!html(&members).contains("action=\"/members\""), "{}", html(&members));
    let refused =
        post_form(&viewer, "/members", &[("csrf", &csrf_of(&members)), ("email", "x@example.com"), ("role", "owner")])
            .await;
    assert_eq!(refused.status, 403);
}

#[tokio::test]
async fn a_ca_is_created_and_edited_from_forms_generated_from_its_connectors_schema() {
    let server = Server::start();
    let admin = server.admin().await;
    let workspace =
        admin.get("/api/auth/user").await.body["data"]["currentWorkspaceId"].as_str().unwrap_or_default().to_string();
    let count = |res: Response| res.body["data"].as_array().map_or(0, Vec::len);
    let before = count(admin.get("/api/certificate-authorities").await);
    let list = admin.get("/cas").await;
    assert!(html(&list).contains("href=\"/cas/new\""), "{}", html(&list));
    let chooser = admin.get("/cas/new").await;
    assert_eq!(chooser.status, 200, "{}", html(&chooser));
    assert!(html(&chooser).contains("<option>internal</option>"), "{}", html(&chooser));

    // The internal connector's schema: nested subject, an enum, a bounded number, and the
    // imported key as a write-only secret (a password input, never filled).
    let form = admin.get("/cas/new?type=internal").await;
    assert_eq!(form.status, 200, "{}", html(&form));
    assert_console_headers(&form);
    let page = html(&form);
    for control in [
        "name=\"config/subject/commonName\"",
        "name=\"config/keyAlgorithm\"",
        "<option>ecdsa-p384</option>",
        "name=\"config/validityDays\" type=\"number\" min=\"1\" max=\"36500\"",
        "name=\"config/privateKeyPem\" type=\"password\"",
    ] {
        assert!(page.contains(control), "{control}: {page}");
    }
    let token = csrf_of(&form);

    // Input the form itself cannot read: the form again, the error on its field.
    let bad = post_form(
        &admin,
        "/cas/new",
        &[("csrf", &token), ("type", "internal"), ("name", "Form root"), ("config/validityDays", "ten")],
    )
    .await;
    assert_eq!(bad.status, 400, "{}", html(&bad));
    assert!(html(&bad).contains("id=\"config-validityDays-error\">Enter a number."), "{}", html(&bad));
    assert!(html(&bad).contains("value=\"Form root\""), "what was typed stays: {}", html(&bad));
    // The domain's refusal (the connector's validation): shown in words, nothing created.
    let refused = post_form(
        &admin,
        "/cas/new",
        &[("csrf", &token), ("type", "internal"), ("name", "Form root"), ("url", "not a url")],
    )
    .await;
    assert_eq!(refused.status, 400, "{}", html(&refused));
    assert!(html(&refused).contains("id=\"url-error\""), "{}", html(&refused));
    assert_eq!(count(admin.get("/api/certificate-authorities").await), before, "nothing created");

    // Sent: to the new CA's page (303, followed).
    let created = post_form(
        &admin,
        "/cas/new",
        &[
            ("csrf", &token),
            ("type", "internal"),
            ("name", "Form root"),
            ("config/subject/commonName", "Form Root CA"),
            ("config/keyAlgorithm", "ecdsa-p384"),
            ("config/validityDays", "400"),
        ],
    )
    .await;
    assert_eq!(created.status, 200, "{}", html(&created));
    assert!(html(&created).contains("<h1>Form root</h1>"), "{}", html(&created));
    let listed = admin.get("/api/certificate-authorities?limit=100").await;
    let id = listed.body["data"]
        .as_array()
        .and_then(|cas| cas.iter().find(|ca| ca["name"] == "Form root"))
        .and_then(|ca| ca["id"].as_i64())
        .unwrap_or_else(|| panic!("created: {}", listed.body));
    let api = admin.get(&format!("/api/certificate-authorities/{id}")).await;
    assert_eq!(api.status, 200, "{}", api.body);
    assert_eq!(api.body["data"]["config"]["subject"]["commonName"], "Form Root CA", "{}", api.body);
    assert_eq!(api.body["data"]["config"]["validityDays"], 400, "{}", api.body);

    // Edit: the form is filled from the stored configuration; a change is saved by the use case.
    let edit = admin.get(&format!("/cas/{id}/edit")).await;
    assert_eq!(edit.status, 200, "{}", html(&edit));
    assert!(html(&edit).contains("value=\"Form Root CA\""), "{}", html(&edit));
    let saved = post_form(
        &admin,
        &format!("/cas/{id}/edit"),
        &[
            ("csrf", &token),
            ("name", "Form root"),
            ("description", "made in the console"),
            ("status", "active"),
            ("config/subject/commonName", "Form Root CA"),
            ("config/keyAlgorithm", "ecdsa-p384"),
            ("config/validityDays", "400"),
        ],
    )
    .await;
    assert_eq!(saved.status, 200, "{}", html(&saved));
    let api = admin.get(&format!("/api/certificate-authorities/{id}")).await;
    assert_eq!(api.body["data"]["description"], "made in the console", "{}", api.body);

    // A viewer has no entry to the forms and is refused anyway.
    let viewer = server.new_member("cv@example.com", &workspace, "viewer").await;
    let own = viewer.get("/").await;
    post_form(&viewer, "/workspace", &[("csrf", &csrf_of(&own)), ("workspace", &workspace)]).await;
    let list = viewer.get("/cas").await;
    assert!(!html(&list).contains("href=\"/cas/new\""), "{}", html(&list));
    assert_eq!(viewer.get("/cas/new?type=internal").await.status, 403);
    assert_eq!(viewer.get(&format!("/cas/{id}/edit")).await.status, 403);
    let refused = post_form(
        &viewer,
        "/cas/new",
        &[("csrf", &csrf_of(&list)), ("type", "internal"), ("name", "x"), ("config/subject/commonName", "x")],
    )
    .await;
    assert_eq!(refused.status, 403);
}
