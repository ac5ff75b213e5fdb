//! `--only console`: the console figures of issue 26 on the seeded database of the list figure.
//!
//! Signs in through the console's own form (`POST /login`), then requests the dashboard (`/`),
//! the first inventory page in the default order and the first page sorted by expiry
//! (`/certificates?sort=expiresAt`), one after the other from one keep-alive connection. The
//! time is the client's, over loopback: from sending the request to the last byte of the body
//! (the server renders the whole page before it sends the first byte). The page weight counts
//! the bytes as sent with `Accept-Encoding: gzip, br` (the HTML, and the stylesheet and
//! scripts the page loads, each counted once), and beside it what gzip -9 makes of them.

use std::time::Instant;

use anyhow::{anyhow, bail, Context as _, Result};
use trellis_tests::bench::{percentile, sorted};

use super::{seeded_instance, Instance, Options, Samples, Server};

const PAGES: [(&str, &str); 3] = [
    ("dashboard /", "/"),
    ("inventory, first page, newest first", "/certificates"),
    ("inventory, first page, soonest expiry first", "/certificates?sort=expiresAt"),
];

/// The password `new_tenant` gives the bench's users.
const PASSWORD: &str = "bench-password-123";

pub async fn run_console(options: &Options, certs: &[String], samples: &mut Samples) -> Result<()> {
    let instance = seeded_instance(options, certs, samples).await?;
    for run in 1..=options.runs {
        let server = Server::start(&options.trellis, &instance).await?;
        let result = one_run(options, &instance, &server, run, samples).await;
        let errors = server.logged_errors();
        let tail = server.log_tail();
        server.stop().await?;
        result.map_err(|e| anyhow!("{e}\nserver log (tail):\n{tail}"))?;
        if errors > 0 {
            eprintln!("  warning: the server logged {errors} ERROR lines");
        }
    }
    Ok(())
}

async fn one_run(
    options: &Options,
    _instance: &Instance,
    server: &Server,
    run: usize,
    samples: &mut Samples,
) -> Result<()> {
    let client = reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(1)
        .timeout(std::time::Duration::from_secs(60))
        .build()?;
    let signed_in = client
        .post(format!("{}/login", server.base))
        .header("Origin", &server.base)
        .form(&[("email", "bench@example.com"), ("password", PASSWORD), ("next", "/")])
        .send()
        .await?;
    if signed_in.status() != reqwest::StatusCode::SEE_OTHER {
        bail!("sign-in answered {}: {}", signed_in.status(), signed_in.text().await.unwrap_or_default());
    }
    let get = |path: &str| client.get(format!("{}{path}", server.base)).header("Accept-Encoding", "gzip, br").send();
    // Warm-up: the first requests after a start fill SQLite's page cache and the prepared
    // statement caches, as any running server has them.
    for (_, path) in PAGES {
        for _ in 0..5 {
            get(path).await?.bytes().await?;
        }
    }
    let mut assets_weight = None;
    for (name, path) in PAGES {
        let mut times = Vec::with_capacity(options.console_requests);
        let mut sent = 0usize;
        let mut html = String::new();
        for _ in 0..options.console_requests {
            let started = Instant::now();
            let response = get(path).await?;
            let status = response.status();
            let encoding = response.headers().get("content-encoding").map(|v| v.to_str().unwrap_or("?").to_string());
            let body = response.bytes().await?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            if status != reqwest::StatusCode::OK {
                bail!("{path} answered {status}: {}", String::from_utf8_lossy(&body));
            }
            if encoding.is_some() {
                bail!("{path} came {encoding:?}-encoded: this bench counts identity bodies; teach it to decode");
            }
            sent = body.len();
            html = String::from_utf8_lossy(&body).into_owned();
        }
        if !html.contains("<table") && path != "/" {
            bail!("{path} shows no table");
        }
        let times = sorted(&times);
        let (p50, p99) = (percentile(&times, 50.0), percentile(&times, 99.0));
        if assets_weight.is_none() {
            assets_weight = Some(assets(&client, &server.base, &html).await?);
        }
        let (assets_sent, assets_gzip) = assets_weight.unwrap_or_default();
        let page_gzip = gzip_size(html.as_bytes())?;
        eprintln!(
            "  console run {run}/{}: {name}: p50 {p50:.1} p99 {p99:.1} ms over {} requests; HTML {:.1} KB as sent ({:.1} gzip), with assets {:.1} KB ({:.1} gzip)",
            options.runs,
            times.len(),
            sent as f64 / 1000.0,
            page_gzip as f64 / 1000.0,
            (sent + assets_sent) as f64 / 1000.0,
            (page_gzip + assets_gzip) as f64 / 1000.0,
        );
        samples.push(&format!("console p99, {name}"), "ms", "<= 50", p99);
        samples.push(&format!("console p50, {name}"), "ms", "", p50);
        samples.push(
            &format!("  page weight as sent (HTML + CSS + JS), {name}"),
            "KB",
            "<= 100",
            (sent + assets_sent) as f64 / 1000.0,
        );
        samples.push(
            &format!("  page weight gzip -9 (HTML + CSS + JS), {name}"),
            "KB",
            "",
            (page_gzip + assets_gzip) as f64 / 1000.0,
        );
    }
    Ok(())
}

/// The stylesheets and scripts `html` loads from this server (`/assets/…`), each once: the
/// bytes as sent and their gzip -9 size.
async fn assets(client: &reqwest::Client, base: &str, html: &str) -> Result<(usize, usize)> {
    let mut paths: Vec<&str> = Vec::new();
    for marker in ["src=\"", "href=\""] {
        for piece in html.split(marker).skip(1) {
            let path = piece.split('"').next().unwrap_or_default();
            if path.starts_with("/assets/") && !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    if paths.is_empty() {
        bail!("the page loads no asset: {html}");
    }
    let (mut sent, mut gzip) = (0, 0);
    for path in paths {
        let response = client.get(format!("{base}{path}")).header("Accept-Encoding", "gzip, br").send().await?;
        if !response.status().is_success() || response.headers().contains_key("content-encoding") {
            bail!("{path}: {} {:?}", response.status(), response.headers().get("content-encoding"));
        }
        let body = response.bytes().await?;
        sent += body.len();
        gzip += gzip_size(&body)?;
    }
    Ok((sent, gzip))
}

/// What `gzip -9` makes of `bytes` (the CLI: the bench needs no compression crate).
fn gzip_size(bytes: &[u8]) -> Result<usize> {
    use std::io::Write as _;
    let mut child = std::process::Command::new("gzip")
        .arg("-9c")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("running gzip")?;
    child.stdin.take().ok_or_else(|| anyhow!("gzip stdin"))?.write_all(bytes)?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("gzip failed");
    }
    Ok(out.stdout.len())
}
