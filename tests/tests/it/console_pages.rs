//! The console's attestation, discovery, plugin and issuance pages (issue 26) against the real
//! binary: a device's history with each failure's reasons, the certificates a scan found (new
//! or already known, linked, paged), a plugin version uploaded as a multipart form, activated,
//! bound and unbound, and the page an issuance from the form ends on. Each page answers with the
//! right rows, shows no form a role cannot use, and the server refuses that role's forged post.

use serde_json::{json, Value};
use trellis_tests::certs::Spec;
use trellis_tests::tls_endpoint::TlsEndpoint;
use trellis_tests::{Client, Response, Server};

use crate::cas::internal_root;
use crate::console::{assert_console_headers, csrf_of, html, post_form};
use crate::lifecycle::finished_scan;

/// A viewer of the admin's workspace, switched to it in the console.
async fn viewer_of(server: &Server, admin: &Client, email: &str) -> Client {
    let workspace =
        admin.get("/api/auth/user").await.body["data"]["currentWorkspaceId"].as_str().unwrap_or_default().to_string();
    let viewer = server.new_member(email, &workspace, "viewer").await;
    let own = viewer.get("/").await;
    let switched = post_form(&viewer, "/workspace", &[("csrf", &csrf_of(&own)), ("workspace", &workspace)]).await;
    assert_eq!(switched.status, 200, "{}", html(&switched));
    viewer
}

#[tokio::test]
async fn a_devices_page_shows_its_attestation_history_with_each_failures_reasons() {
    let server = Server::start();
    let admin = server.admin().await;
    let device = admin.post("/api/iot/devices", json!({ "name": "gateway-7", "deviceType": "gateway" })).await;
    assert_eq!(device.status, 201, "{}", device.body);
    let id = device.body["data"]["id"].as_i64().unwrap_or_else(|| panic!("{}", device.body));
    let path = format!("/api/iot/devices/{id}/attest");
    assert_eq!(admin.post(&path, json!({ "passed": true, "trustScore": 80 })).await.status, 201);
    let failed = admin
        .post(&path, json!({ "passed": false, "failures": ["pcr_mismatch: PCR 7 differs from the policy's value"] }))
        .await;
    assert_eq!(failed.status, 201, "{}", failed.body);

    // The devices list links each device to its page.
    let list = admin.get("/attestation").await;
    assert!(html(&list).contains(&format!("href=\"/attestation/devices/{id}\"")), "{}", html(&list));
    let page = admin.get(&format!("/attestation/devices/{id}")).await;
    assert_eq!(page.status, 200, "{}", html(&page));
    assert_console_headers(&page);
    let body = html(&page);
    assert!(body.contains("<h1>Device gateway-7</h1>"), "{body}");
    assert!(body.contains("2 shown, newest first; 1 failed."), "{body}");
    assert!(body.contains("<li>pcr_mismatch: PCR 7 differs from the policy&#39;s value</li>"), "{body}");
    assert_eq!(body.matches("<strong>failed</strong>").count(), 1, "{body}");
    assert!(!body.contains("method=\"post\" action=\"/attestation"), "the history has no action: {body}");

    // A viewer reads it too; an unknown or malformed id is a page in words.
    let viewer = viewer_of(&server, &admin, "dv@example.com").await;
    assert_eq!(viewer.get(&format!("/attestation/devices/{id}")).await.status, 200);
    let missing = admin.get("/attestation/devices/99999").await;
    assert_eq!(missing.status, 404, "{}", html(&missing));
    assert_eq!(admin.get("/attestation/devices/abc").await.status, 400);
    // Another workspace does not see it.
    let (stranger, _) = server.new_user("stranger@example.com").await;
    assert_eq!(stranger.get(&format!("/attestation/devices/{id}")).await.status, 404);
}

/// The id of the certificate whose common name is `cn` (from the API).
async fn certificate_id(admin: &Client, cn: &str) -> i64 {
    let listed = admin.get(&format!("/api/certificates?search={cn}")).await;
    listed.body["data"]
        .as_array()
        .and_then(|items| items.iter().find(|c| c["commonName"] == cn))
        .and_then(|c| c["id"].as_i64())
        .unwrap_or_else(|| panic!("{cn}: {}", listed.body))
}

/// The scan id a console scan page was answered for (`<h1>Scan N: …`).
fn scan_id_of(page: &Response) -> i64 {
    let body = html(page);
    body.split("<h1>Scan ")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no scan heading in {body}"))
}

// Multi-threaded: the TLS endpoints answer on the runtime while the test waits on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scans_page_lists_the_certificates_it_found_new_or_already_known() {
    let server = Server::start_with(&[("TRELLIS_DISCOVERY_ALLOW_PRIVATE_NETWORKS", "true")]);
    let admin = server.admin().await;
    let known = Spec::tls("known.scan.example").build_served();
    let fresh = Spec::tls("fresh.scan.example").build_served();
    admin.register(&known.pem).await;
    let known_endpoint = TlsEndpoint::start(&known).await;
    let fresh_endpoint = TlsEndpoint::start(&fresh).await;

    // Started from the console's form: the answer is the scan's page.
    let discovery = admin.get("/discovery").await;
    let targets = format!("127.0.0.1:{}\n127.0.0.1:{}", known_endpoint.port, fresh_endpoint.port);
    let started = post_form(&admin, "/discovery", &[("csrf", &csrf_of(&discovery)), ("targets", &targets)]).await;
    assert_eq!(started.status, 200, "{}", html(&started));
    let scan = scan_id_of(&started);
    let done = finished_scan(&admin, scan).await;
    assert_eq!((done["status"].as_str(), done["found"].as_i64()), (Some("completed"), Some(2)), "{done}");

    let page = admin.get(&format!("/discovery/{scan}")).await;
    assert_eq!(page.status, 200, "{}", html(&page));
    assert_console_headers(&page);
    let body = html(&page);
    assert!(body.contains("2 certificates · page 1"), "{body}");
    let (known_id, fresh_id) =
        (certificate_id(&admin, "known.scan.example").await, certificate_id(&admin, "fresh.scan.example").await);
    let row = |id: i64| {
        body.split(&format!("<tr data-finding=\"{id}\">"))
            .nth(1)
            .and_then(|r| r.split("</tr>").next())
            .unwrap_or_else(|| panic!("no row for {id} in {body}"))
            .to_string()
    };
    let fresh_row = row(fresh_id);
    assert!(fresh_row.contains(&format!("href=\"/certificates/{fresh_id}\">fresh.scan.example</a>")), "{fresh_row}");
    assert!(fresh_row.contains(">new<"), "{fresh_row}");
    let known_row = row(known_id);
    assert!(known_row.contains("already known") && known_row.contains("known.scan.example"), "{known_row}");
    assert!(!body.contains("rel=\"next\""), "one page: {body}");

    // The same endpoints again: both known and left unchanged, both listed as already known.
    let again = post_form(&admin, "/discovery", &[("csrf", &csrf_of(&discovery)), ("targets", &targets)]).await;
    let second = scan_id_of(&again);
    finished_scan(&admin, second).await;
    let body = html(&admin.get(&format!("/discovery/{second}")).await);
    assert!(body.contains("2 certificates · page 1"), "{body}");
    assert_eq!(body.matches("already known</td>").count(), 2, "{body}");
    assert!(!body.contains(">new<") && !body.contains("findings-unlisted"), "{body}");
    for id in [known_id, fresh_id] {
        assert!(body.contains(&format!("<tr data-finding=\"{id}\">")), "{id} in {body}");
    }

    // Paged on the server: past the end, a link back; a page that is not a number, in words.
    let past = html(&admin.get(&format!("/discovery/{scan}?page=2")).await);
    assert!(past.contains(&format!("href=\"/discovery/{scan}?page=1\" rel=\"prev\"")), "{past}");
    assert!(!past.contains("data-finding="), "{past}");
    let bad = admin.get(&format!("/discovery/{scan}?page=first")).await;
    assert_eq!(bad.status, 400, "{}", html(&bad));
    assert!(html(&bad).contains("page"), "{}", html(&bad));

    // A viewer sees the findings but no scan form, and its forged start is refused.
    let viewer = viewer_of(&server, &admin, "sv@example.com").await;
    let seen = viewer.get(&format!("/discovery/{scan}")).await;
    assert!(html(&seen).contains(&format!("data-finding=\"{fresh_id}\"")), "{}", html(&seen));
    let list = viewer.get("/discovery").await;
    assert!(!html(&list).contains("action=\"/discovery\""), "{}", html(&list));
    let refused = post_form(&viewer, "/discovery", &[("csrf", &csrf_of(&list)), ("targets", &targets)]).await;
    assert_eq!(refused.status, 403, "{}", html(&refused));
}

/// A second scan of the same CA sees its certificates again, known and unchanged (a rescan
/// does not even open a transaction per certificate): its page lists each as already known.
#[tokio::test]
async fn a_second_scan_of_a_ca_lists_its_certificates_as_already_known() {
    let server = Server::start_with(&[("TRELLIS_CA_HEALTH_INTERVAL_SECS", "0")]);
    let admin = server.admin().await;
    crate::cas::install_plugin(&admin, "fixture-ca-bulk").await;
    let ca = crate::cas::create_ca(&admin, json!({ "name": "Bulk", "type": "fixture-bulk", "config": { "count": 3 } }))
        .await;
    let mut pages = Vec::new();
    for _ in 0..2 {
        let res = admin.post("/api/discovery/scans", json!({ "type": "ca_certs", "caId": ca["id"] })).await;
        assert_eq!(res.status, 201, "{}", res.body);
        let id = res.body["data"]["id"].as_i64().unwrap_or_else(|| panic!("{}", res.body));
        let done = finished_scan(&admin, id).await;
        assert_eq!((done["status"].as_str(), done["found"].as_i64()), (Some("completed"), Some(3)), "{done}");
        pages.push(html(&admin.get(&format!("/discovery/{id}")).await));
    }
    let (first, second) = (&pages[0], &pages[1]);
    assert!(first.contains("3 certificates · page 1"), "{first}");
    assert_eq!(first.matches(">new<").count(), 3, "{first}");
    assert!(second.contains("3 certificates · page 1"), "{second}");
    assert_eq!(second.matches("already known</td>").count(), 3, "{second}");
    assert!(!second.contains(">new<") && !second.contains("findings-unlisted"), "{second}");
    // The same certificates, each linked to its page.
    let rows = |body: &str| -> Vec<String> {
        body.split("<tr data-finding=\"").skip(1).filter_map(|r| r.split('"').next()).map(str::to_owned).collect()
    };
    assert_eq!(rows(first), rows(second));
}

/// A `multipart/form-data` body as a browser sends the upload form.
fn multipart(fields: &[(&str, &str)], files: &[(&str, &str, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "----TrellisConsoleTestBoundary7MA4YWxk";
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").as_bytes(),
        );
    }
    for (name, file_name, data) in files {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{file_name}\"\r\n\
                 Content-Type: application/wasm\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

async fn upload(client: &Client, csrf: &str, activate: &str, file: &[u8]) -> Response {
    let (content_type, body) = multipart(&[("csrf", csrf), ("activate", activate)], &[("component", "p.wasm", file)]);
    client.post_raw("/plugins/upload", &content_type, body).await
}

fn plugin(name: &str) -> Vec<u8> {
    std::fs::read(trellis_tests::plugin_file(name)).expect("plugin file")
}

#[tokio::test]
async fn plugin_versions_are_uploaded_activated_and_bound_from_the_console() {
    let server = Server::start();
    let admin = server.admin().await;
    let page = admin.get("/plugins").await;
    assert_eq!(page.status, 200, "{}", html(&page));
    assert_console_headers(&page);
    let body = html(&page);
    assert!(body.contains("enctype=\"multipart/form-data\""), "{body}");
    // Each plugin's capabilities and egress (asked / granted).
    let internal = body
        .split("<tr data-plugin=\"trellis.internal\">")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_else(|| panic!("no internal row in {body}"));
    assert!(internal.contains("issue, revoke"), "{internal}");
    assert!(internal.contains("none / none"), "{internal}");
    let token = csrf_of(&page);

    // Upload v1 (active: newer than nothing), then v2 stored only.
    let v1 = upload(&admin, &token, "if-newer", &plugin("fixture-upgrade-v1")).await;
    assert_eq!(v1.status, 200, "{}", html(&v1));
    assert!(html(&v1).contains("Installed trellis.fixture.upgrade 1.0.0"), "{}", html(&v1));
    assert!(html(&v1).contains("now active"), "{}", html(&v1));
    // The default signature mode (warn) says why `require` would have refused it.
    assert!(
        html(&v1).contains("id=\"signature-status\">Signature: Installed without a trusted signature"),
        "{}",
        html(&v1)
    );
    let v2 = upload(&admin, &token, "never", &plugin("fixture-upgrade-v2")).await;
    assert_eq!(v2.status, 200, "{}", html(&v2));
    assert!(html(&v2).contains("2.0.0") && html(&v2).contains("not active"), "{}", html(&v2));
    let shown = admin.get("/api/plugins/trellis.fixture.upgrade").await;
    assert_eq!(shown.body["data"]["activeVersion"], "1.0.0", "{}", shown.body);

    // Activate v2 from its button.
    let button = "action=\"/plugins/trellis.fixture.upgrade/versions/2.0.0/activate\"";
    assert!(html(&v2).contains(button), "{}", html(&v2));
    let activated =
        post_form(&admin, "/plugins/trellis.fixture.upgrade/versions/2.0.0/activate", &[("csrf", &token)]).await;
    assert_eq!(activated.status, 200, "{}", html(&activated));
    assert!(html(&activated).contains("trellis.fixture.upgrade 2.0.0 is active."), "{}", html(&activated));
    assert_eq!(admin.get("/api/plugins/trellis.fixture.upgrade").await.body["data"]["activeVersion"], "2.0.0");

    // Refusals in words: the same version again, bytes that are no component, no file.
    let again = upload(&admin, &token, "if-newer", &plugin("fixture-upgrade-v2")).await;
    assert_eq!(again.status, 409, "{}", html(&again));
    assert!(html(&again).contains("The upload was refused:"), "{}", html(&again));
    let junk = upload(&admin, &token, "if-newer", b"not a component").await;
    assert_eq!(junk.status, 400, "{}", html(&junk));
    assert!(html(&junk).contains("id=\"plugin-error\""), "{}", html(&junk));
    let (content_type, body) = multipart(&[("csrf", &token)], &[("component", "", &b""[..])]);
    let empty = admin.post_raw("/plugins/upload", &content_type, body).await;
    assert_eq!(empty.status, 400, "{}", html(&empty));
    assert!(html(&empty).contains("Choose the component file"), "{}", html(&empty));
    // Without the form token, or not as multipart: refused, nothing installed.
    let forged = upload(&admin, "0123", "always", &plugin("fixture-noop")).await;
    assert_eq!(forged.status, 403, "{}", html(&forged));
    let urlencoded = post_form(&admin, "/plugins/upload", &[("csrf", &token)]).await;
    assert_eq!(urlencoded.status, 400, "{}", html(&urlencoded));

    // Bind the internal type to its plugin in this workspace, then unbind it.
    let bound = post_form(
        &admin,
        "/plugins/bindings",
        &[("csrf", &token), ("kind", "ca-connector"), ("type", "internal"), ("pluginId", "trellis.internal")],
    )
    .await;
    assert_eq!(bound.status, 200, "{}", html(&bound));
    assert!(html(&bound).contains("now served by trellis.internal"), "{}", html(&bound));
    let bindings = admin.get("/api/plugin-bindings").await;
    assert_eq!(bindings.body["data"].as_array().map(Vec::len), Some(1), "{}", bindings.body);
    let unbind = "/plugins/bindings/ca-connector/internal/unbind";
    assert!(html(&bound).contains(&format!("action=\"{unbind}\"")), "{}", html(&bound));
    let unbound = post_form(&admin, unbind, &[("csrf", &token)]).await;
    assert_eq!(unbound.status, 200, "{}", html(&unbound));
    assert_eq!(admin.get("/api/plugin-bindings").await.body["data"], json!([]));
    let wrong = post_form(
        &admin,
        "/plugins/bindings",
        &[("csrf", &token), ("kind", "sideways"), ("type", "internal"), ("pluginId", "trellis.internal")],
    )
    .await;
    assert_eq!(wrong.status, 400, "{}", html(&wrong));
    assert!(html(&wrong).contains("kind"), "{}", html(&wrong));

    // A viewer (no instance administrator, no plugins:write): no page, and every post refused.
    let viewer = viewer_of(&server, &admin, "pv@example.com").await;
    assert_eq!(viewer.get("/plugins").await.status, 403);
    let home = viewer.get("/").await;
    let viewer_token = csrf_of(&home);
    let refused = upload(&viewer, &viewer_token, "always", &plugin("fixture-noop")).await;
    assert_eq!(refused.status, 403, "{}", html(&refused));
    let refused = post_form(
        &viewer,
        "/plugins/bindings",
        &[("csrf", &viewer_token), ("kind", "ca-connector"), ("type", "internal"), ("pluginId", "trellis.internal")],
    )
    .await;
    assert_eq!(refused.status, 403, "{}", html(&refused));
    let refused =
        post_form(&viewer, "/plugins/trellis.fixture.upgrade/versions/1.0.0/activate", &[("csrf", &viewer_token)])
            .await;
    assert_eq!(refused.status, 403, "{}", html(&refused));
    let listed: Value = admin.get("/api/plugins").await.body;
    assert!(!listed.to_string().contains("trellis.fixture.noop"), "nothing installed: {listed}");
    assert_eq!(admin.get("/api/plugins/trellis.fixture.upgrade").await.body["data"]["activeVersion"], "2.0.0");
}

#[tokio::test]
async fn an_issuance_from_the_form_ends_on_its_result_or_on_its_request() {
    let server = Server::start();
    let admin = server.admin().await;
    let root = internal_root(&admin, "Form Root").await.to_string();
    let form = admin.get("/issue").await;
    let token = csrf_of(&form);
    let issue = |cn: &'static str| {
        let (admin, token, root) = (&admin, token.clone(), root.clone());
        async move {
            post_form(
                admin,
                "/issue",
                &[
                    ("csrf", &token),
                    ("caId", &root),
                    ("templateId", "web_server"),
                    ("commonName", cn),
                    ("names", cn),
                    ("keyAlgorithm", "ecdsa-p256"),
                ],
            )
            .await
        }
    };

    // Issued: the result page says what was issued and offers the downloads.
    let issued = issue("web.form.example").await;
    assert_eq!(issued.status, 200, "{}", html(&issued));
    assert_console_headers(&issued);
    let body = html(&issued);
    assert!(body.contains("<h1>Issued: web.form.example</h1>"), "{body}");
    let id = certificate_id(&admin, "web.form.example").await;
    for link in [
        format!("href=\"/certificates/{id}/download?format=pem\""),
        format!("href=\"/certificates/{id}/download?format=der\""),
        format!("href=\"/certificates/{id}/download?format=fullchain\""),
        format!("href=\"/certificates/{id}/private-key\""),
        format!("href=\"/certificates/{id}\" id=\"certificate-link\""),
    ] {
        assert!(body.contains(&link), "{link}: {body}");
    }
    let pem = admin.get(&format!("/certificates/{id}/download?format=pem")).await;
    assert!(html(&pem).starts_with("-----BEGIN CERTIFICATE-----"), "{}", html(&pem));

    // Gated by a policy: the page says it waits for approval and links the request.
    let gate = admin
        .post(
            "/api/issuance-policies",
            json!({ "name": "gate", "type": "domain-policy", "config": { "requireApprovalFor": ["*.prod.example.com"] } }),
        )
        .await;
    assert_eq!(gate.status, 201, "{}", gate.body);
    let parked = issue("api.prod.example.com").await;
    assert_eq!(parked.status, 200, "{}", html(&parked));
    let body = html(&parked);
    assert!(body.contains("this request waits for a second person's approval"), "{body}");
    let requests = admin.get("/api/certificate-requests?status=pending").await;
    let request = requests.body["data"][0]["id"].as_i64().unwrap_or_else(|| panic!("{}", requests.body));
    assert!(body.contains(&format!("href=\"/requests?status=all#request-{request}\"")), "{body}");
    assert!(html(&admin.get("/requests?status=all").await).contains(&format!("id=\"request-{request}\"")));

    // A viewer reads the result without the private key link, and cannot issue.
    let viewer = viewer_of(&server, &admin, "iv@example.com").await;
    let seen = viewer.get(&format!("/issue/issued/{id}")).await;
    assert_eq!(seen.status, 200, "{}", html(&seen));
    assert!(!html(&seen).contains("/private-key\""), "{}", html(&seen));
    assert_eq!(viewer.get(&format!("/issue/requested/{request}")).await.status, 200);
    let refused = post_form(
        &viewer,
        "/issue",
        &[("csrf", &csrf_of(&seen)), ("caId", &root), ("commonName", "no.form.example"), ("names", "no.form.example")],
    )
    .await;
    assert_eq!(refused.status, 403, "{}", html(&refused));
    assert_eq!(admin.get("/issue/issued/99999").await.status, 404);
    assert_eq!(admin.get("/issue/requested/x").await.status, 400);
}
