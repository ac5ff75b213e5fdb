//! Tidy tests, in the manner of rust-analyzer's: plain tests that read the source tree (never the
//! binary) and fail when the documentation or the dependency structure drifts.
//!
//! - `architecture_md_is_true`: every path ARCHITECTURE.md names exists; every crate and every
//!   top-level module of `crates/*/src` is named in it.
//! - `core_area_edges_are_allowed`: the areas (top-level modules) of `crates/core/src` reference
//!   each other only along the edges of [`ALLOWED_CORE_EDGES`].
//! - `core_area_edges_form_no_cycle`: that table has no cycle: every area depends one way.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Which areas of `crates/core/src` each area may reference (`crate::AREA…` or
/// `use crate::{AREA, …}`), test code excluded. An area missing from the table may reference
/// none, and an edge the code no longer has fails too, so the table is always the picture of
/// the code. Every edge carries its reason, and `core_area_edges_form_no_cycle` keeps the table
/// free of cycles. Work that spans areas lives in `lifecycle` (and `acme`), above them. The
/// composition root is above everything: `context` hands each area its share (`ca_deps`,
/// `issuance_deps`, …) and `ports` builds each area's storage view from the full store; no area
/// names either.
const ALLOWED_CORE_EDGES: &[(&str, &[(&str, &str)])] = &[
    (
        "acme",
        &[
            ("audit", "who acted (Audit): the ACME account, or the caller of the management API"),
            ("caller", "the management API runs for a Caller"),
            ("cas", "the directory's CA and its connector"),
            ("certificates", "an issued certificate's chain for the download"),
            ("clock", "the directory and account cache (acme/cache.rs) ages its entries by the injected clock"),
            ("crypto", "a nonce's MAC is compared in constant time"),
            ("error", "the domain error, mapped to problem documents"),
            ("events", "a finalized ARI replacement (RFC 9773 `replaces`) emits certificate.renewed"),
            ("issuance", "finalize is an issuance Run; orders wait on certificate requests"),
            (
                "lifecycle",
                "revokeCert revokes through lifecycle::revocation (acme sits above the areas, like lifecycle)",
            ),
            (
                "plugins",
                "newOrder's policy screen builds an EvaluationRequest; finalize tells the client what a CA's connector reported",
            ),
            ("unit_of_work", "changes recorded with their audit rows"),
            ("validation", "the shared free-text checks"),
            ("ttl_cache", "the directory and account cache keeps its rows in a TtlMap"),
            ("store_error", "storage failures: StoreError, StoreResult"),
            ("principal", "an ACME account acts as a principal"),
            ("state", "accounts, orders, authorizations and challenges keep RFC 8555's states as state enums"),
        ],
    ),
    (
        "approvals",
        &[
            ("auth", "use cases run for a Caller"),
            ("caller", "use cases run for a Caller"),
            ("error", "the domain error"),
            ("principal", "requesters and deciders compared as principals"),
        ],
    ),
    (
        "attestation",
        &[
            ("audit", "who acted (Audit)"),
            ("caller", "use cases run for a Caller"),
            ("clock", "time and randomness from the context"),
            ("crypto", "sealing and digests under the master key"),
            ("error", "the domain error"),
            ("events", "event type names"),
            ("issuance", "attest-and-provision issues through issue_attested"),
            ("pagination", "paged lists"),
            ("plugins", "the verifier plugin's calls"),
            ("unit_of_work", "changes recorded with their audit rows and events"),
            ("validation", "the shared free-text checks"),
            ("state", "its records' states are state enums"),
            ("store_error", "storage failures: StoreError, StoreResult"),
        ],
    ),
    (
        "audit",
        &[
            ("caller", "use cases run for a Caller"),
            ("error", "the domain error"),
            ("pagination", "paged lists"),
            ("store_error", "storage failures: StoreError, StoreResult"),
            ("principal", "who acted (Principal)"),
        ],
    ),
    (
        "auth",
        &[
            ("audit", "who acted (Audit)"),
            ("clock", "time and randomness from the context"),
            ("crypto", "sealing and digests under the master key"),
            ("error", "the domain error"),
            ("ids", "typed ids"),
            ("pagination", "paged member and invitation lists"),
            ("unit_of_work", "changes recorded with their audit rows and events"),
            ("store_error", "storage failures: StoreError, StoreResult"),
            ("principal", "an actor reduces to its principal"),
            ("caller", "use cases run for a Caller"),
            ("validation", "display names are checked as every area's free text"),
            ("ttl_cache", "API-key grants kept briefly (AuthDeps::api_keys)"),
        ],
    ),
    (
        "caller",
        &[
            ("error", "a missing scope is the domain error"),
            ("ids", "typed user, key and workspace ids"),
            ("principal", "an actor reduces to the principal records name"),
        ],
    ),
    (
        "cas",
        &[
            ("audit", "who acted (Audit)"),
            ("caller", "use cases run for a Caller"),
            ("error", "the domain error"),
            ("events", "event type names"),
            ("pagination", "paged lists"),
            ("plugins", "the plugin call vocabulary"),
            ("unit_of_work", "changes recorded with their audit rows and events"),
            ("validation", "the shared free-text checks"),
            ("pki", "an internal CA is created and served through the PKI port"),
            ("store_error", "storage failures: StoreError, StoreResult"),
            ("clock", "time and randomness, injected"),
            ("crypto", "configurations sealed under the master key"),
            ("ttl_cache", "the CA records issuance reads, kept briefly (CaDeps::cas_cache)"),
        ],
    ),
    (
        "certificates",
        &[
            ("audit", "who acted (Audit)"),
            ("caller", "use cases run for a Caller"),
            ("clock", "time and randomness from the context"),
            ("error", "the domain error"),
            ("events", "event type names"),
            ("pagination", "paged lists"),
            ("plugins", "typed SANs, keys and revocation reasons"),
            ("unit_of_work", "changes recorded with their audit rows and events"),
            ("state", "its records' states are state enums"),
            ("store_error", "storage failures: StoreError, StoreResult"),
            ("validation", "a certificate's display name"),
            ("crypto", "stored private keys are sealed under the master key"),
        ],
    ),
    (
        "context",
        &[
            ("acme", "the Context hands out every area's dependencies"),
            ("audit", "units of work record who acted (Audit)"),
            ("auth", "the Context hands out every area's dependencies"),
            ("cas", "ReadCaches keeps the CA records issuance reads"),
            ("clock", "the Context holds every area's port or service"),
            ("crypto", "the Context holds every area's port or service"),
            ("discovery", "the Context hands out every area's dependencies"),
            ("domain_claims", "the Context hands out every area's dependencies"),
            ("error", "the Context holds every area's port or service"),
            ("issuance", "ReadCaches keeps the policy lists issuance reads"),
            ("pki", "the Context holds every area's port or service"),
            ("plugins", "the Context hands out every area's dependencies"),
            ("ports", "the Context holds every area's port or service"),
            ("ttl_cache", "ReadCaches: rows every API-key request and issuance reads, kept briefly"),
            ("unit_of_work", "the Context holds every area's port or service"),
            ("webhooks", "the Context hands out every area's dependencies"),
            ("certificates", "the Context hands out every area's dependencies"),
            ("attestation", "the Context hands out every area's dependencies"),
            ("lifecycle", "the Context hands out every area's dependencies"),
        ],
    ),
    ("crypto", &[("clock", "time and randomness from the context")]),
    (
        "discovery",
        &[
            ("audit", "who acted (Audit)"),
            ("caller", "use cases run for a Caller"),
            ("cas", "a ca_certs scan calls the CA's connector (call_target)"),
            ("certificates", "imports parse and add certificates"),
            ("error", "the domain error"),
            ("events", "event type names"),
            ("pagination", "paged lists"),
            ("unit_of_work", "changes recorded with their audit rows and events"),
            ("state", "its records' states are state enums"),
            ("store_error", "storage failures: StoreError, StoreResult"),
            ("clock", "time, injected"),
            ("crypto", "a ca_certs scan unseals the CA's configuration"),
            ("plugins", "a ca_certs scan calls the CA's connector"),
        ],
    ),
    (
        "domain_claims",
        &[
            ("audit", "who acted (Audit)"),
            ("caller", "use cases run for a Caller"),
            ("clock", "verification timestamps"),
            ("error", "the domain error"),
            ("unit_of_work", "changes recorded with their audit rows and events"),
            ("store_error", "storage failures: StoreError, StoreResult"),
        ],
    ),
    (
        "error",
        &[
            ("store_error", "storage failures: StoreError, StoreResult"),
        ],
    ),
    (
        "events",
        &[
            ("caller", "the event list is read by a Caller"),
            ("clock", "time and randomness from the context"),
            ("error", "the domain error"),
            ("pagination", "paged lists"),
            ("store_error", "storage failures: StoreError, StoreResult"),
            ("state", "discovery.scan_completed carries the scan's state (ScanStatus)"),
        ],
    ),
    (
        "issuance",
        &[
            ("approvals", "approval-gated requests are decided between persons"),
            ("audit", "who acted (Audit)"),
            ("caller", "use cases run for a Caller"),
            ("cas", "the CA's connector and call target"),
            ("certificates", "the issued certificate enters the inventory (inventory::add)"),
            ("error", "the domain error"),
            ("events", "event type names"),
            ("pagination", "paged lists"),
            ("pki", "the ledger slot of an internal CA's signature"),
            ("plugins", "connector and policy calls"),
            ("unit_of_work", "changes recorded with their audit rows and events"),
            ("validation", "the shared free-text checks"),
            ("state", "its records' states are state enums"),
            ("store_error", "storage failures: StoreError, StoreResult"),
            ("principal", "requests name their requester as a principal"),
            ("auth", "approvals are decided by members (AuthReads in its port)"),
            ("clock", "time and randomness, injected"),
            ("crypto", "keys and orders sealed under the master key"),
            ("ttl_cache", "each workspace's policies kept briefly (IssuanceDeps::policies_cache)"),
        ],
    ),
    ("pagination", &[("error", "the domain error")]),
    (
        "lifecycle",
        &[
            ("approvals", "the four-eyes rule of revocation requests"),
            ("audit", "who acted (Audit)"),
            ("clock", "a revocation's time goes to the PKI ledger as UnixMillis"),
            ("caller", "use cases run for a Caller"),
            ("cas", "revocation and renewal checks go to the CA's connector"),
            ("certificates", "the inventory side of revoke"),
            ("discovery", "creating a CA starts its first scan"),
            ("error", "the domain error"),
            ("issuance", "revocation requests read templates"),
            ("pagination", "paged lists"),
            ("pki", "a revocation reaches the internal CA's ledger"),
            ("plugins", "revocation reasons and the connector's revoke call"),
            ("unit_of_work", "changes recorded with their audit rows and events"),
            ("store_error", "storage failures: StoreError, StoreResult"),
            ("auth", "revocation requests are decided by members (AuthReads in its port)"),
            ("crypto", "a revocation unseals the CA's configuration for its connector"),
        ],
    ),
    (
        "pki",
        &[
            ("clock", "time and randomness from the context"),
            ("crypto", "sealing and digests under the master key"),
            ("error", "the domain error"),
            ("pagination", "paged lists of the ledger"),
            ("store_error", "storage failures: StoreError, StoreResult"),
        ],
    ),
    (
        "plugins",
        &[
            ("audit", "plugin lifecycle changes are audited"),
            ("caller", "use cases run for a Caller"),
            ("clock", "time and randomness from the context"),
            ("crypto", "sealing and digests under the master key"),
            ("error", "the domain error"),
            ("events", "revoking a signing key emits plugin.version_deactivated"),
            ("pki", "a call target carries the pki-core grant (PkiGrant)"),
            ("unit_of_work", "changes recorded with their audit rows and events"),
            ("validation", "the trust store's key names are free text"),
            ("store_error", "storage failures: StoreError, StoreResult"),
        ],
    ),
    (
        "ports",
        &[
            ("attestation", "ports name every area's records"),
            ("audit", "the port names this area's records"),
            ("auth", "the port names this area's records"),
            ("cas", "the port names this area's records"),
            ("clock", "the internal PKI's revocation time (UnixMillis) in its store's writes"),
            ("certificates", "the port names this area's records"),
            ("discovery", "the port names this area's records"),
            ("error", "the port names this area's records"),
            ("events", "the port names this area's records"),
            ("issuance", "the port names this area's records"),
            ("plugins", "the port names this area's records"),
            ("webhooks", "the port names this area's records"),
            ("pki", "the port names the ledger and CA key records"),
            ("unit_of_work", "the full transaction carries a unit of work's rows (ChangeTx, NewRow)"),
            ("store_error", "storage failures: StoreError, StoreResult"),
            ("domain_claims", "the full store answers the claims' workspace directory"),
            ("lifecycle", "the full store answers lifecycle's port"),
        ],
    ),
    (
        "unit_of_work",
        &[
            ("audit", "the audit rows a change writes"),
            ("error", "the domain error"),
            ("events", "the events a change emits"),
            ("pki", "an internal CA's ledger row rides with a change's rows (NewRow::Issued)"),
            ("store_error", "storage failures: StoreError, StoreResult"),
        ],
    ),
    ("validation", &[("error", "the domain error")]),
    (
        "webhooks",
        &[
            ("audit", "who acted (Audit)"),
            ("caller", "use cases run for a Caller"),
            ("clock", "time and randomness from the context"),
            ("crypto", "sealing and digests under the master key"),
            ("error", "the domain error"),
            ("events", "event type names"),
            ("pagination", "paged lists"),
            ("plugins", "integrations are plugin records (record_config)"),
            ("unit_of_work", "changes recorded with their audit rows and events"),
            ("validation", "the shared free-text checks"),
            ("state", "a delivery's state is a state enum"),
            ("store_error", "storage failures: StoreError, StoreResult"),
        ],
    ),
];

// ---------------------------------------------------------------------------------------------
// ARCHITECTURE.md

#[test]
fn architecture_md_is_true() {
    let root = repo_root();
    let text = read(&root.join("ARCHITECTURE.md"));
    let tree = RepoTree::walk(&root);
    let sections = sections(&text);
    let mut problems = Vec::new();

    // Every path it names exists.
    for section in &sections {
        for (line, span) in &section.spans {
            let Some(path) = path_like(span) else { continue };
            if !tree.resolves(path, &section.bases) {
                problems.push(format!(
                    "ARCHITECTURE.md:{line}: `{span}` names no file or directory (section {:?})",
                    section.heading
                ));
            }
        }
    }

    // Every relative link leads somewhere.
    for (index, line) in text.lines().enumerate() {
        for target in line.split("](").skip(1).filter_map(|rest| rest.split(')').next()) {
            let path = target.split('#').next().unwrap_or(target);
            if path.is_empty() || path.contains("://") {
                continue;
            }
            if !root.join(path).exists() {
                problems.push(format!("ARCHITECTURE.md:{}: the link to `{target}` leads nowhere", index + 1));
            }
        }
    }

    // Every crate is named.
    let all_spans: Vec<&str> = sections.iter().flat_map(|s| s.spans.iter().map(|(_, span)| span.as_str())).collect();
    for krate in crate_dirs(&root) {
        let named = all_spans.iter().any(|span| {
            let span = span.trim_end_matches('/');
            span == krate || span.starts_with(&format!("{krate}/"))
        });
        if !named {
            problems.push(format!("crate directory `{krate}/` is not named in ARCHITECTURE.md"));
        }
    }

    // Every top-level module of every crate under crates/ is named: as `crates/X/src/m.rs` (or
    // `m/`) anywhere, or as `m.rs` / `m/` in a section about that crate.
    for krate in crate_dirs(&root).into_iter().filter(|k| k.starts_with("crates/")) {
        let src = format!("{krate}/src");
        let local: Vec<&str> = sections
            .iter()
            .filter(|s| s.bases.iter().any(|b| b == &krate || b.starts_with(&format!("{krate}/"))))
            .flat_map(|s| s.spans.iter().map(|(_, span)| span.as_str()))
            .collect();
        for module in top_level_modules(&root.join(&src)) {
            let file = format!("{module}.rs");
            let dir = format!("{module}/");
            let names = |span: &str| {
                let span = span.strip_prefix(&format!("{src}/")).unwrap_or(span);
                span == file || span.starts_with(&dir)
            };
            let anywhere = all_spans
                .iter()
                .any(|s| s.strip_prefix(&format!("{src}/")).is_some_and(|rest| rest == file || rest.starts_with(&dir)));
            if !anywhere && !local.iter().any(|s| names(s)) {
                problems.push(format!(
                    "module `{src}/{module}` is not named in ARCHITECTURE.md's code map \
                     (add an entry `{file}` or `{dir}` to the section of `{krate}`)"
                ));
            }
        }
    }

    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md has drifted from the tree; fix the document (or the tree):\n  {}",
        problems.join("\n  ")
    );
}

/// One `##`/`###` section of a markdown document: its heading, the directories its heading
/// names (paths in it resolve against them), and every backticked span with its line.
struct Section {
    heading: String,
    bases: Vec<String>,
    spans: Vec<(usize, String)>,
}

fn sections(text: &str) -> Vec<Section> {
    let mut sections = vec![Section { heading: String::new(), bases: Vec::new(), spans: Vec::new() }];
    let mut in_fence = false;
    for (index, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let spans = backticked(line);
        if line.starts_with("## ") || line.starts_with("### ") {
            let bases = spans
                .iter()
                .filter(|s| s.contains('/') && path_like(s).is_some())
                .map(|s| s.trim_end_matches('/').to_string())
                .collect();
            sections.push(Section { heading: line.to_string(), bases, spans: Vec::new() });
        }
        if let Some(section) = sections.last_mut() {
            section.spans.extend(spans.into_iter().map(|s| (index + 1, s)));
        }
    }
    sections
}

fn backticked(line: &str) -> Vec<String> {
    line.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// The span as a repository path, if it reads as one: no spaces, placeholders, Rust paths,
/// routes or URLs; a `/` in it or a source-like extension.
fn path_like(span: &str) -> Option<&str> {
    const EXTENSIONS: &[&str] = &[".rs", ".toml", ".md", ".sql", ".sh", ".py", ".wit"];
    let forbidden = [' ', '<', '>', '{', '}', '$', ':', '(', ')', '=', ',', '|', '·', '@', '"', '\''];
    if span.is_empty()
        || span.contains(&forbidden[..])
        || span.starts_with('/')
        || span.starts_with("target/")
        || span.starts_with('-')
    {
        return None;
    }
    (span.contains('/') || EXTENSIONS.iter().any(|e| span.ends_with(e))).then_some(span)
}

/// Every file and directory of the repository (relative, `/`-separated, build output left out).
struct RepoTree {
    root: PathBuf,
    paths: Vec<String>,
}

impl RepoTree {
    fn walk(root: &Path) -> Self {
        let mut paths = Vec::new();
        let mut stack = vec![PathBuf::new()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = fs::read_dir(root.join(&dir)) else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if matches!(name.as_str(), ".git" | "target" | "node_modules") {
                    continue;
                }
                let rel = dir.join(&name);
                let rel_str = rel.to_string_lossy().replace('\\', "/");
                if entry.path().is_dir() {
                    stack.push(rel);
                }
                paths.push(rel_str);
            }
        }
        RepoTree { root: root.to_path_buf(), paths }
    }

    /// A path resolves when it exists from the root, from one of the section's bases (or their
    /// `src/`), or as the tail of a path under one of them (a file named in a module's entry,
    /// `csr.rs` under `crates/core`): the check is that the name is still true, not that the
    /// prose spells it in full.
    fn resolves(&self, path: &str, bases: &[String]) -> bool {
        let path = path.trim_end_matches('/');
        let direct = |candidate: &str| {
            if candidate.contains('*') {
                self.paths.iter().any(|p| glob_match(candidate, p))
            } else {
                self.root.join(candidate).exists()
            }
        };
        if direct(path) {
            return true;
        }
        let roots: Vec<&str> = if bases.is_empty() { vec![""] } else { bases.iter().map(String::as_str).collect() };
        roots.iter().any(|base| {
            if base.is_empty() {
                return self.paths.iter().any(|p| p.ends_with(&format!("/{path}")));
            }
            direct(&format!("{base}/{path}"))
                || direct(&format!("{base}/src/{path}"))
                || self.paths.iter().any(|p| p.starts_with(&format!("{base}/")) && p.ends_with(&format!("/{path}")))
        })
    }
}

/// `*` matches within one path segment.
fn glob_match(pattern: &str, path: &str) -> bool {
    let pattern: Vec<&str> = pattern.split('/').collect();
    let path: Vec<&str> = path.split('/').collect();
    pattern.len() == path.len()
        && pattern.iter().zip(&path).all(|(pat, seg)| match pat.split_once('*') {
            None => pat == seg,
            Some((prefix, suffix)) => {
                seg.len() >= prefix.len() + suffix.len() && seg.starts_with(prefix) && seg.ends_with(suffix)
            }
        })
}

/// The workspace's crates as directories: `crates/*` with a manifest, `agent`, `sdk`.
fn crate_dirs(root: &Path) -> Vec<String> {
    let mut crates: Vec<String> = fs::read_dir(root.join("crates"))
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().join("Cargo.toml").is_file())
                .map(|e| format!("crates/{}", e.file_name().to_string_lossy()))
                .collect()
        })
        .unwrap_or_default();
    crates.sort();
    crates.extend(["agent".to_string(), "sdk".to_string()]);
    crates
}

/// The modules `lib.rs` and `main.rs` declare from files (`mod m;`, any visibility), test-only
/// ones left out.
fn top_level_modules(src: &Path) -> Vec<String> {
    let mut modules = BTreeSet::new();
    for root_file in ["lib.rs", "main.rs"] {
        let Ok(text) = fs::read_to_string(src.join(root_file)) else { continue };
        let code = strip_comments_and_literals(&text);
        let code = blank_test_items(&code, &mut BTreeSet::new());
        for line in code.lines() {
            if let Some(name) = declared_module(line) {
                modules.insert(name);
            }
        }
    }
    modules.into_iter().collect()
}

/// `m` for a line `mod m;` / `pub mod m;` / `pub(crate) mod m;`.
fn declared_module(line: &str) -> Option<String> {
    let line = line.trim();
    let rest = ["pub mod ", "pub(crate) mod ", "mod "].iter().find_map(|p| line.strip_prefix(p))?;
    let name = rest.strip_suffix(';')?.trim();
    is_ident(name).then(|| name.to_string())
}

// ---------------------------------------------------------------------------------------------
// Edges between the areas of crates/core/src

#[test]
fn core_area_edges_are_allowed() {
    let root = repo_root();
    let src = root.join("crates/core/src");
    let areas = top_level_modules(&src);
    let allowed = allowed_edges();
    let mut problems = Vec::new();

    for area in allowed.keys() {
        if !areas.iter().any(|a| a == area) {
            problems.push(format!("ALLOWED_CORE_EDGES names `{area}`, which is no module of crates/core/src"));
        }
    }
    let actual = core_area_edges(&root);
    // The table stays a picture of the code: an edge the code no longer has is taken out, so a
    // removed dependency cannot come back unnoticed.
    for (area, permitted) in &allowed {
        for to in permitted {
            if !actual.get(*area).is_some_and(|edges| edges.contains_key(*to)) {
                problems.push(format!(
                    "`{area}` no longer references `{to}`: take (\"{to}\", …) out of `{area}`'s row in tests/tests/tidy.rs"
                ));
            }
        }
    }
    for (area, edges) in actual {
        let permitted = allowed.get(area.as_str()).cloned().unwrap_or_default();
        for (to, sites) in edges {
            if permitted.contains(to.as_str()) {
                continue;
            }
            let (file, line) = &sites[0];
            problems.push(format!(
                "{file}:{line}: `{area}` references `{to}` ({} place(s)), an edge ALLOWED_CORE_EDGES \
                 lacks: remove the edge, or add (\"{to}\", \"why\") to `{area}`'s row in tests/tests/tidy.rs",
                sites.len()
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "edges between core's areas differ from ALLOWED_CORE_EDGES:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn core_area_edges_form_no_cycle() {
    let allowed = allowed_edges();
    let mut cycles = Vec::new();
    let mut done = BTreeSet::new();
    for start in allowed.keys() {
        let mut path = Vec::new();
        find_cycles(start, &allowed, &mut path, &mut done, &mut cycles);
    }
    let knots: Vec<String> =
        knots(&allowed).iter().map(|knot| knot.iter().copied().collect::<Vec<_>>().join(", ")).collect();
    assert!(
        cycles.is_empty(),
        "ALLOWED_CORE_EDGES has cycles (areas must depend one way); the areas that reach one another: {}\n  {}",
        knots.join(" | "),
        cycles.join("\n  ")
    );
}

/// The groups of areas that all reach one another (the strongly connected ones): every cycle
/// lies inside one, so they say what must be cut.
fn knots<'a>(allowed: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Vec<BTreeSet<&'a str>> {
    let reach = |from: &'a str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from];
        while let Some(area) = todo.pop() {
            for &next in allowed.get(area).into_iter().flatten() {
                if seen.insert(next) {
                    todo.push(next);
                }
            }
        }
        seen
    };
    let mut placed = BTreeSet::new();
    let mut knots = Vec::new();
    for &area in allowed.keys() {
        if placed.contains(area) {
            continue;
        }
        let knot: BTreeSet<&str> = reach(area).into_iter().filter(|&other| reach(other).contains(area)).collect();
        if knot.len() > 1 {
            placed.extend(knot.iter().copied());
            knots.push(knot);
        }
    }
    knots
}

fn find_cycles<'a>(
    area: &'a str,
    allowed: &BTreeMap<&'a str, BTreeSet<&'a str>>,
    path: &mut Vec<&'a str>,
    done: &mut BTreeSet<&'a str>,
    cycles: &mut Vec<String>,
) {
    if let Some(at) = path.iter().position(|a| *a == area) {
        let mut cycle = path[at..].to_vec();
        cycle.push(area);
        cycles.push(cycle.join(" -> "));
        return;
    }
    if done.contains(area) {
        return;
    }
    path.push(area);
    for next in allowed.get(area).into_iter().flatten() {
        find_cycles(next, allowed, path, done, cycles);
    }
    path.pop();
    done.insert(area);
}

fn allowed_edges() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    ALLOWED_CORE_EDGES.iter().map(|(area, edges)| (*area, edges.iter().map(|(to, _why)| *to).collect())).collect()
}

/// area → referenced area → the places (file relative to the repository, line).
type Edges = BTreeMap<String, BTreeMap<String, Vec<(String, usize)>>>;

fn core_area_edges(root: &Path) -> Edges {
    let src = root.join("crates/core/src");
    let areas: BTreeSet<String> = top_level_modules(&src).into_iter().collect();
    let reexports = root_reexports(&src, &areas);

    let mut files = Vec::new();
    collect_rs_files(&src, &mut files);
    files.sort();
    let cleaned: Vec<(PathBuf, String, BTreeSet<String>)> = files
        .into_iter()
        .map(|file| {
            let mut test_modules = BTreeSet::new();
            let code = blank_test_items(&strip_comments_and_literals(&read(&file)), &mut test_modules);
            (file, code, test_modules)
        })
        .collect();
    // Files declared `#[cfg(test)] mod m;` are test code wherever they are named.
    let test_files: BTreeSet<PathBuf> = cleaned
        .iter()
        .flat_map(|(file, _, modules)| {
            let dir = module_dir(file);
            modules.iter().flat_map(move |m| [dir.join(format!("{m}.rs")), dir.join(m)])
        })
        .collect();

    let mut edges = Edges::new();
    for (file, code, _) in &cleaned {
        let rel = file.strip_prefix(&src).unwrap_or(file);
        let Some(area) = area_of(rel) else { continue };
        if is_test_file(rel) || test_files.iter().any(|t| file.starts_with(t)) {
            continue;
        }
        let shown = file.strip_prefix(root).unwrap_or(file).to_string_lossy().into_owned();
        for (line, name) in crate_references(code) {
            let Some(to) = (if areas.contains(&name) { Some(name) } else { reexports.get(&name).cloned() }) else {
                continue;
            };
            if to != area {
                edges.entry(area.clone()).or_default().entry(to).or_default().push((shown.clone(), line));
            }
        }
    }
    edges
}

/// The directory a file's child modules live in (`a/mod.rs` → `a/`, `a/b.rs` → `a/b/`).
fn module_dir(file: &Path) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new("")).to_path_buf();
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("mod" | "lib" | "main") | None => parent,
        Some(stem) => parent.join(stem),
    }
}

fn area_of(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_string_lossy().into_owned();
    match first.as_str() {
        "lib.rs" | "main.rs" => None,
        _ => Some(first.trim_end_matches(".rs").to_string()),
    }
}

fn is_test_file(rel: &Path) -> bool {
    let name = rel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || rel.components().any(|c| matches!(c.as_os_str().to_str(), Some("testing" | "tests" | "testing.rs")))
}

/// Names `lib.rs` re-exports from a module (`pub use crate::context::{Context, …}`), so
/// `crate::Context` counts as an edge to `context`.
fn root_reexports(src: &Path, areas: &BTreeSet<String>) -> BTreeMap<String, String> {
    let code = strip_comments_and_literals(&read(&src.join("lib.rs")));
    let mut names = BTreeMap::new();
    for statement in code.split(';') {
        let Some(rest) = statement.trim().strip_prefix("pub use crate::") else { continue };
        let Some((module, items)) = rest.split_once("::") else { continue };
        if !areas.contains(module) {
            continue;
        }
        for item in items.trim_matches(|c| c == '{' || c == '}' || char::is_whitespace(c)).split(',') {
            let name = item.split(" as ").last().unwrap_or(item).trim();
            if is_ident(name) {
                names.insert(name.to_string(), module.to_string());
            }
        }
    }
    names
}

/// (line, first segment) of every `crate::x` path and every member of a `crate::{x, y::z}`
/// group.
fn crate_references(code: &str) -> Vec<(usize, String)> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(offset) = code[from..].find("crate::") {
        let at = from + offset;
        from = at + "crate::".len();
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let line = code[..at].matches('\n').count() + 1;
        let rest = code[from..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut member = String::new();
            let mut members = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => members.push(std::mem::take(&mut member)),
                    _ if depth == 0 => member.push(c),
                    _ => {}
                }
            }
            members.push(member);
            for member in members {
                let name: String = member.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    found.push((line, name));
                }
            }
        } else {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                found.push((line, name));
            }
        }
    }
    found
}

// ---------------------------------------------------------------------------------------------
// Reading Rust source without a parser

/// The code with comments and the contents of string and char literals blanked (newlines kept,
/// so line numbers hold).
fn strip_comments_and_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
        {
            // Raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            out.push('"');
            j += 1;
            while j < chars.len() {
                if chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                out.push(blank(chars[j]));
                j += 1;
            }
            out.push('"');
            i = j;
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push('"');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A char literal (a lifetime has no closing quote two characters on).
            out.push('\'');
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
                out.push(' ');
            }
            out.push('\'');
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The code with every `#[cfg(test)]` item blanked; the names of `#[cfg(test)] mod m;`
/// declarations go to `test_modules`.
fn blank_test_items(code: &str, test_modules: &mut BTreeSet<String>) -> String {
    let mut out: Vec<char> = code.chars().collect();
    let text: String = out.iter().collect();
    let mut from = 0;
    while let Some(offset) = text[from..].find("#[cfg(test)]") {
        let start = from + offset;
        let chars_before = text[..start].chars().count();
        let mut i = chars_before;
        let mut depth = 0usize;
        let mut item = String::new();
        while i < out.len() {
            let c = out[i];
            item.push(c);
            match c {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        break;
                    }
                }
                ';' if depth == 0 => {
                    if let Some(name) = item.trim_end_matches(';').split_whitespace().last() {
                        if item.contains("mod ") && is_ident(name) {
                            test_modules.insert(name.to_string());
                        }
                    }
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        let end = (i + 1).min(out.len());
        for c in &mut out[chars_before..end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        from = start + "#[cfg(test)]".len();
    }
    out.into_iter().collect()
}

fn is_ident(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

fn collect_rs_files(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_rs_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Not a check: prints the current edges as a table row each, to seed or review
/// `ALLOWED_CORE_EDGES` (`cargo test -p trellis-tests --test tidy -- --ignored --nocapture print`).
#[test]
#[ignore = "a tool, not a check"]
fn print_core_area_edges() {
    for (area, edges) in core_area_edges(&repo_root()) {
        let list: Vec<String> =
            edges.iter().map(|(to, sites)| format!("{to} ({}:{})", sites[0].0, sites[0].1)).collect();
        println!("{area}: {}", list.join(", "));
    }
}
