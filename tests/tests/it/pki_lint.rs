//! Everything the internal CA signs, judged by strict tools nobody here wrote (issue 21, finding
//! 10): DigiCert's pkilint under the PKIX profile (`lint_pkix_cert`, `lint_crl`,
//! `lint_ocsp_response`: zero FATAL and ERROR findings), pyca/cryptography's parser (what certbot
//! and most Python TLS tooling use; it refuses DER that openssl lets through) and `openssl`.
//! Roots of every key algorithm, an intermediate, leaves of every built-in template and every
//! server-generated key algorithm, a CSR from openssl, the CRLs and OCSP answers (good, revoked,
//! unknown). `scripts/pkilint.sh` installs both Python tools into target/venv-pkilint; `make test`
//! runs it first, and without it this test fails saying so.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use trellis_tests::{workspace_root, Client, Server};

use crate::cas::{create_ca, Openssl};

/// The base URL certificates name (the CRL, OCSP and caIssuers URLs); never resolved: the test
/// asks the server under its real address for the path.
const PUBLIC_URL: &str = "http://pki.lint.test";

const CA_KEY_ALGORITHMS: [&str; 6] = ["ecdsa-p256", "ecdsa-p384", "ed25519", "rsa-2048", "rsa-3072", "rsa-4096"];

/// The venv of scripts/pkilint.sh, checked for every tool the test runs.
fn pkilint_venv() -> PathBuf {
    let bin = workspace_root().join("target/venv-pkilint/bin");
    for tool in ["python", "lint_pkix_cert", "lint_crl", "lint_ocsp_response"] {
        assert!(
            bin.join(tool).exists(),
            "{} is missing: run scripts/pkilint.sh (installs pkilint and cryptography from PyPI; `make test` runs it)",
            bin.join(tool).display()
        );
    }
    let probe = Command::new(bin.join("python")).args(["-c", "import cryptography, pkilint"]).output();
    assert!(
        probe.as_ref().is_ok_and(|out| out.status.success()),
        "the venv cannot import cryptography and pkilint: run scripts/pkilint.sh ({probe:?})"
    );
    bin
}

/// What is linted: a DER file and what it is.
#[derive(Debug, Clone)]
struct Artifact {
    kind: Kind,
    label: String,
    path: PathBuf,
    /// The issuing CA's certificate (DER), for the certificates: cryptography checks the
    /// signature with it.
    issuer: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Certificate,
    Crl,
    Ocsp,
}

/// pkilint's findings of FATAL and ERROR severity, or `None` when there are none.
fn pkilint(bin: &Path, artifact: &Artifact) -> Option<String> {
    let path = artifact.path.display().to_string();
    let args: Vec<&str> = match artifact.kind {
        Kind::Certificate => vec!["lint_pkix_cert", "lint"],
        Kind::Crl => vec!["lint_crl", "lint", "-t", "CRL", "-p", "PKIX"],
        Kind::Ocsp => vec!["lint_ocsp_response", "lint"],
    };
    let output = Command::new(bin.join(args[0]))
        .args(&args[1..])
        .args(["-s", "ERROR", "-f", "TEXT", "--document-format", "DER", &path])
        .output()
        .unwrap_or_else(|err| panic!("running {}: {err}: run scripts/pkilint.sh", args[0]));
    // pkilint exits with the number of findings at or above the threshold (a crash: 1 and a
    // traceback).
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (!output.status.success() || !text.trim().is_empty())
        .then(|| format!("pkilint ({}) on {}:\n{}", args[0], artifact.label, text.trim_end()))
}

/// Parses every artifact with pyca/cryptography and touches what strict parsing fails on (each
/// extension's value, the CRL entries, the OCSP single responses) and checks each certificate's
/// signature with its issuer. One line per failure.
const CRYPTOGRAPHY_CHECK: &str = r#"
import sys
from cryptography import x509
from cryptography.x509 import ocsp

def certificate(path, issuer):
    cert = x509.load_der_x509_certificate(open(path, "rb").read())
    cert.subject, cert.issuer, cert.public_key(), cert.not_valid_after_utc
    for extension in cert.extensions:
        extension.value
    if issuer:
        cert.verify_directly_issued_by(x509.load_der_x509_certificate(open(issuer, "rb").read()))

def crl(path, issuer):
    crl = x509.load_der_x509_crl(open(path, "rb").read())
    crl.issuer, crl.next_update_utc, list(crl.extensions)
    for entry in crl:
        entry.serial_number, entry.revocation_date_utc
        for extension in entry.extensions:
            extension.value

def ocsp_response(path, issuer):
    response = ocsp.load_der_ocsp_response(open(path, "rb").read())
    if response.response_status != ocsp.OCSPResponseStatus.SUCCESSFUL:
        raise ValueError(f"status {response.response_status}")
    response.responder_name, response.responder_key_hash, response.produced_at_utc, list(response.extensions)
    for single in response.responses:
        single.certificate_status, single.serial_number, single.this_update_utc, single.next_update_utc
        single.revocation_reason
    list(response.single_extensions)

failures = 0
for arg in sys.argv[1:]:
    kind, label, path, issuer = arg.split("|")
    try:
        {"cert": certificate, "crl": crl, "ocsp": ocsp_response}[kind](path, issuer)
    except Exception as err:
        failures += 1
        print(f"cryptography on {label}: {type(err).__name__}: {err}")
sys.exit(1 if failures else 0)
"#;

fn cryptography(bin: &Path, artifacts: &[Artifact]) -> Option<String> {
    let args = artifacts.iter().map(|a| {
        let kind = match a.kind {
            Kind::Certificate => "cert",
            Kind::Crl => "crl",
            Kind::Ocsp => "ocsp",
        };
        let issuer = a.issuer.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
        format!("{kind}|{}|{}|{issuer}", a.label, a.path.display())
    });
    let output = Command::new(bin.join("python"))
        .args(["-c", CRYPTOGRAPHY_CHECK])
        .args(args)
        .output()
        .unwrap_or_else(|err| panic!("running the venv's python: {err}: run scripts/pkilint.sh"));
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (!output.status.success()).then(|| text.trim_end().to_string())
}

/// `openssl` reads it too (`x509`/`crl`/`ocsp` as text).
fn openssl_reads(openssl: &Openssl, artifact: &Artifact) -> Option<String> {
    let path = artifact.path.display().to_string();
    let args: Vec<&str> = match artifact.kind {
        Kind::Certificate => vec!["x509", "-inform", "DER", "-in", &path, "-noout", "-text"],
        Kind::Crl => vec!["crl", "-inform", "DER", "-in", &path, "-noout", "-text"],
        Kind::Ocsp => vec!["ocsp", "-respin", &path, "-resp_text", "-noverify"],
    };
    let output = openssl.run(&args);
    (!output.status.success())
        .then(|| format!("openssl on {}: {}", artifact.label, String::from_utf8_lossy(&output.stderr).trim_end()))
}

/// The collection of everything to lint, written into the openssl scratch directory.
struct Collected<'a> {
    openssl: &'a Openssl,
    artifacts: Vec<Artifact>,
}

impl Collected<'_> {
    fn add(&mut self, kind: Kind, label: &str, der: &[u8], issuer: Option<PathBuf>) -> PathBuf {
        let file: String =
            label.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect::<String>() + ".der";
        let path = PathBuf::from(self.openssl.write(&file, der));
        self.artifacts.push(Artifact { kind, label: label.to_string(), path: path.clone(), issuer });
        path
    }
}

/// The DER of the first certificate of a PEM text.
fn first_der(openssl: &Openssl, pem: &str) -> Vec<u8> {
    openssl.write("in.pem", pem);
    openssl.ok(&["x509", "-in", "in.pem", "-outform", "DER", "-out", "out.der"]);
    std::fs::read(openssl.path("out.der")).expect("DER written")
}

async fn ca_pem(public: &Client, id: i64) -> String {
    let res = public.get(&format!("/pki/{id}/ca")).await;
    assert_eq!(res.status, 200, "/pki/{id}/ca: {}", res.body);
    String::from_utf8_lossy(&res.bytes).into_owned()
}

async fn issue(client: &Client, body: Value) -> Value {
    let res = client.post("/api/certificates/issue", body.clone()).await;
    assert_eq!(res.status, 201, "issuing {body}: {}", res.body);
    res.body["data"].clone()
}

/// An OCSP request made by `openssl ocsp` (for `cert`, or for a serial nobody issued), POSTed to
/// the CA's responder; the DER answer.
async fn ocsp_answer(public: &Client, openssl: &Openssl, ca: i64, subject: &[&str], nonce: bool) -> Vec<u8> {
    let mut args = vec!["ocsp", "-issuer", "issuer.pem", "-reqout", "req.der"];
    args.extend_from_slice(subject);
    if !nonce {
        args.push("-no_nonce");
    }
    openssl.ok(&args);
    let request = std::fs::read(openssl.path("req.der")).expect("OCSP request written");
    let res = public.post_raw(&format!("/pki/{ca}/ocsp"), "application/ocsp-request", request).await;
    assert_eq!(res.status, 200, "OCSP answers 200");
    assert_eq!(res.header("content-type"), Some("application/ocsp-response"));
    res.bytes
}

#[tokio::test]
async fn everything_the_internal_ca_signs_passes_pkilint_cryptography_and_openssl() {
    let bin = pkilint_venv();
    let server = Server::start_with(&[("TRELLIS_PUBLIC_URL", PUBLIC_URL)]);
    let admin = server.admin().await;
    let public = Client::new(&server, None);
    let openssl = Openssl::new();
    let mut collected = Collected { openssl: &openssl, artifacts: Vec::new() };

    // A root of every key algorithm the internal CA offers, and an intermediate.
    let mut roots = Vec::new();
    for algorithm in CA_KEY_ALGORITHMS {
        let name = format!("Lint Root {algorithm}");
        let config = json!({
            "subject": { "commonName": name, "organization": "Trellis Lint", "country": "DE" },
            "keyAlgorithm": algorithm,
        });
        let ca = create_ca(&admin, json!({ "name": name, "type": "internal", "config": config })).await;
        let id = ca["id"].as_i64().expect("CA id");
        let der = first_der(&openssl, &ca_pem(&public, id).await);
        let path = collected.add(Kind::Certificate, &format!("root {algorithm}"), &der, None);
        roots.push((algorithm, id, path));
    }
    let (_, p256_root, p256_root_der) = roots[0].clone();
    let inter_config = json!({
        "subject": { "commonName": "Lint Issuing CA", "organization": "Trellis Lint" },
        "parentCaId": p256_root,
        "pathLength": 0,
    });
    let inter = create_ca(&admin, json!({ "name": "Lint Issuing CA", "type": "internal", "config": inter_config }))
        .await["id"]
        .as_i64()
        .expect("CA id");
    let inter_pem = ca_pem(&public, inter).await;
    let inter_der = first_der(&openssl, &inter_pem);
    let inter_path = collected.add(Kind::Certificate, "intermediate", &inter_der, Some(p256_root_der.clone()));

    // Leaves: every built-in template under the intermediate, every server key algorithm under
    // the root of the same algorithm, and a CSR from openssl.
    let templates = admin.get("/api/certificate-templates").await;
    assert_eq!(templates.status, 200, "{}", templates.body);
    let built_ins: Vec<String> = templates.body["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["builtIn"] == true)
        .filter_map(|t| t["id"].as_str().map(str::to_string))
        .collect();
    assert!(built_ins.len() >= 5, "the built-in templates: {}", templates.body);
    let mut leaves = Vec::new();
    for template in &built_ins {
        let names = match template.as_str() {
            "client_auth" => json!(["alice@lint.example", "svc.lint.example"]),
            "code_signing" => json!([]),
            "smime" => json!(["bob@lint.example"]),
            // pkilint checks URI names with python-validators' `url`, which knows only web-like
            // schemes (http, https, ftp, …) and refuses URIs RFC 3986 and RFC 5280 allow
            // (`urn:dev:…`, `spiffe://…`): a false positive, so the device's URI here is https.
            "device" => json!(["https://devices.lint.example/sensor-7", "sensor-7.lint.example"]),
            _ => json!(["app.lint.example", "www.lint.example", "10.1.2.3"]),
        };
        let body = json!({
            "caId": inter,
            "templateId": template,
            "commonName": format!("{template} leaf"),
            "subjectAltNames": names,
            "subject": { "organization": "Trellis Lint", "country": "DE" },
        });
        leaves.push((format!("leaf {template}"), inter, issue(&admin, body).await, inter_path.clone()));
    }
    for (algorithm, root, root_path) in &roots {
        let body = json!({
            "caId": root,
            "commonName": format!("{algorithm}.lint.example"),
            "subjectAltNames": [format!("{algorithm}.lint.example")],
            "keyAlgorithm": algorithm,
        });
        leaves.push((format!("leaf {algorithm} key"), *root, issue(&admin, body).await, root_path.clone()));
    }
    openssl.ok(&[
        "req",
        "-new",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "csr.key",
        "-out",
        "leaf.csr",
        "-subj",
        "/CN=csr.lint.example/O=Ignored",
        "-addext",
        "subjectAltName=DNS:csr.lint.example,IP:10.9.8.7",
    ]);
    let csr_body = json!({ "caId": inter, "csr": openssl.read("leaf.csr") });
    leaves.push(("leaf from an openssl CSR".into(), inter, issue(&admin, csr_body).await, inter_path.clone()));

    let mut failures = Vec::new();
    for (label, ca, cert, issuer_path) in &leaves {
        let pem = cert["certificate"].as_str().unwrap_or_else(|| panic!("{label}: no certificate: {cert}"));
        let der = first_der(&openssl, pem);
        collected.add(Kind::Certificate, label, &der, Some(issuer_path.clone()));
        // Clients build the chain from the AIA caIssuers URL and ask the OCSP URL beside it.
        openssl.write("aia.pem", pem);
        let aia = openssl.run(&["x509", "-in", "aia.pem", "-noout", "-ext", "authorityInfoAccess"]);
        let aia = String::from_utf8_lossy(&aia.stdout).into_owned();
        let ca_issuers = format!("{PUBLIC_URL}/pki/{ca}/ca");
        for (what, url) in [("CA Issuers", ca_issuers.clone()), ("OCSP", format!("{PUBLIC_URL}/pki/{ca}/ocsp"))] {
            if !aia.contains(&format!("{what} - URI:{url}")) {
                failures.push(format!("{label}: no AIA {what} URL {url}: {aia:?}"));
            }
        }
    }
    // What the caIssuers URL serves is the issuing CA's certificate (PEM or DER).
    let served = public.get(&format!("/pki/{inter}/ca")).await;
    let fetched = if served.bytes.starts_with(b"-----BEGIN") {
        first_der(&openssl, &String::from_utf8_lossy(&served.bytes))
    } else {
        served.bytes.clone()
    };
    if served.status != 200 || fetched != inter_der {
        failures.push(format!("GET {PUBLIC_URL}/pki/{inter}/ca is not the intermediate's certificate"));
    }

    // Revoke one; the CRL of every CA (the intermediate's lists it) and OCSP: good, revoked
    // (with a nonce, as openssl asks by default) and a serial nobody issued.
    let (_, _, doomed, _) = leaves.iter().find(|(label, ..)| label.contains("openssl CSR")).expect("CSR leaf");
    let (_, _, spared, _) = leaves.iter().find(|(label, ..)| label.contains("web_server")).expect("web leaf");
    let revoked =
        admin.post(&format!("/api/certificates/{}/revoke", doomed["id"]), json!({ "reason": "keyCompromise" })).await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    let mut crls: Vec<(String, i64)> = roots.iter().map(|(a, id, _)| (format!("CRL of root {a}"), *id)).collect();
    crls.push(("CRL of the intermediate (one entry)".into(), inter));
    for (label, id) in crls {
        let crl = public.get(&format!("/pki/{id}/crl")).await;
        assert_eq!(crl.status, 200, "{label}");
        collected.add(Kind::Crl, &label, &crl.bytes, None);
    }
    openssl.write("issuer.pem", &inter_pem);
    openssl.write("doomed.pem", doomed["certificate"].as_str().unwrap_or_default());
    openssl.write("spared.pem", spared["certificate"].as_str().unwrap_or_default());
    let answers = [
        ("OCSP good", ocsp_answer(&public, &openssl, inter, &["-cert", "spared.pem"], false).await),
        ("OCSP revoked", ocsp_answer(&public, &openssl, inter, &["-cert", "doomed.pem"], true).await),
        ("OCSP unknown serial", ocsp_answer(&public, &openssl, inter, &["-serial", "0x0123456789abcdef"], false).await),
    ];
    for (label, der) in &answers {
        collected.add(Kind::Ocsp, label, der, None);
    }
    // The roots' responders too: each signs with another key algorithm.
    for (algorithm, root, root_path) in &roots {
        let (_, _, leaf, _) = leaves.iter().find(|(l, ..)| l == &format!("leaf {algorithm} key")).expect("leaf");
        let root_path = root_path.display().to_string();
        openssl.ok(&["x509", "-inform", "DER", "-in", &root_path, "-out", "issuer.pem"]);
        openssl.write("leaf.pem", leaf["certificate"].as_str().unwrap_or_default());
        let der = ocsp_answer(&public, &openssl, *root, &["-cert", "leaf.pem"], false).await;
        collected.add(Kind::Ocsp, &format!("OCSP good, root {algorithm}"), &der, None);
    }

    let artifacts = collected.artifacts;
    // One pkilint process per artifact, several at once: each spends its second or two starting
    // Python and importing pkilint, mostly waiting, so one after another they made this the
    // suite's slowest test.
    let at_once = std::thread::available_parallelism().map_or(2, |cores| cores.get() * 4);
    for batch in artifacts.chunks(at_once) {
        let found: Vec<Option<String>> = std::thread::scope(|scope| {
            let linting: Vec<_> = batch.iter().map(|artifact| scope.spawn(|| pkilint(&bin, artifact))).collect();
            linting
                .into_iter()
                .map(|lint| lint.join().unwrap_or_else(|_| Some("pkilint's thread panicked".into())))
                .collect()
        });
        failures.extend(found.into_iter().flatten());
    }
    for artifact in &artifacts {
        failures.extend(openssl_reads(&openssl, artifact));
    }
    failures.extend(cryptography(&bin, &artifacts));
    assert!(
        failures.is_empty(),
        "{} failures among {} artifacts:\n\n{}",
        failures.len(),
        artifacts.len(),
        failures.join("\n\n")
    );
}
