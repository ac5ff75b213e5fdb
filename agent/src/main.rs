//! `trellis-agent`: the device side of Trellis's TPM attestation (docs/agent.md).
//!
//! - `enroll`: reads the EK certificate from NV, creates an AK under the EK, asks the service
//!   for a credential-activation challenge (`POST …/enroll`), recovers the secret with
//!   TPM2_ActivateCredential and proves it (`POST …/enroll/activate`).
//! - `provision`: gets a nonce, creates a P-256 signing key in the TPM, certifies it with the
//!   AK (TPM2_Certify), quotes the PCRs with the nonce (TPM2_Quote), builds a CSR signed in the
//!   TPM, submits everything to `POST …/attest-and-provision` and writes the certificate, its
//!   chain and the key's TPM blobs.
//! - `evidence`: the same evidence and CSR for a nonce given on the command line, printed as
//!   JSON instead of submitted (to inspect it, or tamper with it in tests).

mod csr;
mod tpm;

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _, Result};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use clap::{Args, Parser, Subcommand};
use serde_json::{json, Value};

use tpm::{KeyBlobs, Selection, Tpm};
// TPMT_PUBLIC, the form the service takes (no TPM2B size prefix).
use tss_esapi::traits::Marshall as _;

#[derive(Parser)]
#[command(name = "trellis-agent", version, about = "Trellis TPM device agent: AK enrollment and attested certificates")]
struct Cli {
    /// The TPM: a TCTI (`swtpm:host=127.0.0.1,port=2321`, `mssim:…`, `device:/dev/tpmrm0`) or a
    /// device path.
    #[arg(long, env = "TRELLIS_AGENT_TCTI", default_value = "device:/dev/tpmrm0", global = true)]
    tcti: String,
    /// Where the AK's blobs are kept between runs.
    #[arg(long, env = "TRELLIS_AGENT_STATE", default_value = "trellis-agent", global = true)]
    state: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct Service {
    /// The Trellis base URL, e.g. https://trellis.example. `http://` only to a loopback
    /// address unless --allow-insecure-http.
    #[arg(long, env = "TRELLIS_URL")]
    server: String,
    /// Lets the API key travel over plain `http://` to a host other than loopback.
    #[arg(long)]
    allow_insecure_http: bool,
    /// A file holding the API key (attestation:write); `-` reads it from stdin. The default is
    /// the TRELLIS_API_KEY environment variable.
    #[arg(long, value_name = "FILE")]
    api_key_file: Option<PathBuf>,
    /// Refused: a key on the command line is visible to every local user (`ps`).
    #[arg(long, hide = true)]
    api_key: Option<String>,
    /// An extra CA certificate (PEM) to trust for the service's TLS.
    #[arg(long, env = "TRELLIS_CA_CERT")]
    ca_cert: Option<PathBuf>,
    /// The device's id in Trellis.
    #[arg(long)]
    device: i64,
}

#[derive(Args)]
struct EvidenceOptions {
    /// The CSR's common name.
    #[arg(long)]
    cn: String,
    /// DNS names for the CSR (default: the common name).
    #[arg(long)]
    dns: Vec<String>,
    /// PCRs to quote, `BANK:INDEX,…` joined by `+`.
    #[arg(long, default_value = "sha256:0,1,2,3,4,7")]
    pcrs: Selection,
    /// The firmware's TCG event log (default for a device TPM:
    /// /sys/kernel/security/tpm0/binary_bios_measurements when readable).
    #[arg(long)]
    event_log: Option<PathBuf>,
    /// Attributes of the CSR key (for tests of the service's refusals).
    #[arg(long, hide = true, default_value = tpm::CSR_KEY_ATTRIBUTES)]
    key_attributes: String,
}

#[derive(Subcommand)]
enum Command {
    /// Enroll this TPM's AK with the service (credential activation).
    Enroll {
        #[command(flatten)]
        service: Service,
        /// Intermediate certificates of the EK certificate (PEM file), sent with it.
        #[arg(long)]
        ek_chain: Option<PathBuf>,
        /// Stop after the service's challenge and print it (no activation).
        #[arg(long)]
        challenge_only: bool,
    },
    /// Attest and obtain a certificate for a new TPM-resident key.
    Provision {
        #[command(flatten)]
        service: Service,
        #[command(flatten)]
        evidence: EvidenceOptions,
        /// The CA to issue from.
        #[arg(long)]
        ca: i64,
        /// The certificate template.
        #[arg(long, default_value = "device")]
        template: String,
        #[arg(long)]
        validity_days: Option<i64>,
        /// An explicit attestation policy (default: the service picks by device type).
        #[arg(long)]
        policy: Option<i64>,
        /// Where to write cert.pem, chain.pem and the key blobs (key.pub, key.priv).
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
    /// Print `{csr, evidence}` for a nonce without submitting anything.
    Evidence {
        #[command(flatten)]
        evidence: EvidenceOptions,
        /// The nonce (hex) from POST /api/iot/devices/{id}/attestation/challenge.
        #[arg(long)]
        nonce: String,
        /// Also write the key blobs (key.pub, key.priv) there.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Enroll { service, ek_chain, challenge_only } => {
            enroll(&cli.tcti, &cli.state, &service, ek_chain.as_deref(), challenge_only)
        }
        Command::Provision { service, evidence, ca, template, validity_days, policy, out } => {
            let api = Api::new(&service)?;
            let challenge = api.post(
                &format!("/api/iot/devices/{}/attestation/challenge", service.device),
                json!({ "purpose": "attestation" }),
            )?;
            let nonce = challenge["nonce"].as_str().ok_or_else(|| anyhow!("no nonce in {challenge}"))?;
            let (csr, evidence, key) = attest(&cli.tcti, &cli.state, nonce, &evidence)?;
            let mut body = json!({ "caId": ca, "templateId": template, "csr": csr, "evidence": evidence });
            if let Some(days) = validity_days {
                body["validityDays"] = json!(days);
            }
            if let Some(policy) = policy {
                body["policyId"] = json!(policy);
            }
            let issued = api.post(&format!("/api/iot/devices/{}/attest-and-provision", service.device), body)?;
            let certificate = &issued["certificate"];
            let pem = certificate["certificate"].as_str().ok_or_else(|| anyhow!("no certificate in {issued}"))?;
            let chain: Vec<&str> = certificate["chain"]
                .as_array()
                .map(|c| c.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            write_key(&out, &key)?;
            write(&out.join("cert.pem"), pem.as_bytes())?;
            write(&out.join("chain.pem"), chain.concat().as_bytes())?;
            println!(
                "{}",
                json!({
                    "certificateId": certificate["id"],
                    "serialNumber": certificate["serialNumber"],
                    "attestation": certificate["attestation"],
                    "certificate": out.join("cert.pem"),
                    "chain": out.join("chain.pem"),
                    "keyPublic": out.join("key.pub"),
                    "keyPrivate": out.join("key.priv"),
                })
            );
            Ok(())
        }
        Command::Evidence { evidence, nonce, out } => {
            let (csr, evidence, key) = attest(&cli.tcti, &cli.state, &nonce, &evidence)?;
            if let Some(out) = out {
                write_key(&out, &key)?;
            }
            println!("{}", json!({ "csr": csr, "evidence": evidence }));
            Ok(())
        }
    }
}

fn enroll(tcti: &str, state: &Path, service: &Service, ek_chain: Option<&Path>, challenge_only: bool) -> Result<()> {
    let api = Api::new(service)?;
    let mut tpm = Tpm::open(tcti)?;
    let ek_certificate = tpm.ek_certificate()?;
    let ek_public = tpm.ek_public()?;
    let ak = tpm.create_ak()?;
    std::fs::create_dir_all(state).with_context(|| format!("cannot create {}", state.display()))?;
    write(&state.join("ak.pub"), &ak.public_file()?)?;
    write(&state.join("ak.priv"), &ak.private_file()?)?;
    let chain = match ek_chain {
        Some(path) => pem_certificates(&read(path)?)?,
        None => Vec::new(),
    };
    let device = service.device;
    let nonce =
        api.post(&format!("/api/iot/devices/{device}/attestation/challenge"), json!({ "purpose": "ak_enrollment" }))?;
    let challenge = api.post(
        &format!("/api/iot/devices/{device}/enroll"),
        json!({
            "nonce": nonce["nonce"],
            "ekCertificate": B64.encode(&ek_certificate),
            "ekChain": chain,
            "ekPublic": B64.encode(&ek_public),
            "akPublic": B64.encode(ak.public.marshall()?),
        }),
    )?;
    if challenge_only {
        println!("{challenge}");
        return Ok(());
    }
    let member = |name: &str| -> Result<Vec<u8>> {
        let text = challenge[name].as_str().ok_or_else(|| anyhow!("no {name} in the challenge {challenge}"))?;
        B64.decode(text).with_context(|| format!("{name} is not base64"))
    };
    let secret = tpm.activate(&ak, &member("credentialBlob")?, &member("encryptedSecret")?)?;
    let device =
        api.post(&format!("/api/iot/devices/{device}/enroll/activate"), json!({ "secret": B64.encode(secret) }))?;
    println!("{device}");
    Ok(())
}

/// The CSR (PEM), the evidence object of docs/api.md, and the new key's blobs.
fn attest(tcti: &str, state: &Path, nonce_hex: &str, options: &EvidenceOptions) -> Result<(String, Value, KeyBlobs)> {
    let nonce = hex::decode(nonce_hex.trim()).context("the nonce is not hex")?;
    let ak = KeyBlobs::from_files(&read(&state.join("ak.pub"))?, &read(&state.join("ak.priv"))?)
        .context("the AK blobs in the state directory do not load; run `trellis-agent enroll` first")?;
    let mut tpm = Tpm::open(tcti)?;
    let key = tpm.create_csr_key(&options.key_attributes)?;
    let point = tpm::ecc_point(&key.public)?;
    let csr = csr::build(&options.cn, &options.dns, &point, |tbs| tpm.sign(&key, tbs))?;
    let (certification, quote) = tpm.attest(&ak, &key, &nonce, &options.pcrs)?;
    let mut evidence = json!({
        "nonce": hex::encode(&nonce),
        "quoteBlob": B64.encode(&quote.attest),
        "quoteSignature": B64.encode(&quote.signature),
        "pcrs": quote.pcrs,
        "certifyBlob": B64.encode(&certification.attest),
        "certifySignature": B64.encode(&certification.signature),
        "csrKeyPublic": B64.encode(key.public.marshall()?),
    });
    let firmware_log = Path::new("/sys/kernel/security/tpm0/binary_bios_measurements");
    let event_log = match &options.event_log {
        Some(path) => Some(read(path)?),
        None if (tcti.starts_with("device:") || tcti.starts_with('/')) && firmware_log.exists() => {
            std::fs::read(firmware_log).ok()
        }
        None => None,
    };
    if let Some(log) = event_log {
        evidence["eventLog"] = json!(B64.encode(log));
    }
    Ok((csr, evidence, key))
}

fn write_key(dir: &Path, key: &KeyBlobs) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write(&dir.join("key.pub"), &key.public_file()?)?;
    write(&dir.join("key.priv"), &key.private_file()?)
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

/// Each `-----BEGIN CERTIFICATE-----` block of a PEM file.
fn pem_certificates(pem: &[u8]) -> Result<Vec<String>> {
    let text = std::str::from_utf8(pem).context("the EK chain is not a PEM file")?;
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN CERTIFICATE-----") {
        let end_marker = "-----END CERTIFICATE-----";
        let end = rest[start..].find(end_marker).ok_or_else(|| anyhow!("unterminated PEM certificate"))?;
        out.push(rest[start..start + end + end_marker.len()].to_owned() + "\n");
        rest = &rest[start + end + end_marker.len()..];
    }
    if out.is_empty() {
        bail!("no PEM certificate in the EK chain file");
    }
    Ok(out)
}

/// The service: JSON over HTTP(S) with the API key; any non-2xx answer is an error carrying the
/// service's body (`failures` of a refused attestation included).
struct Api {
    runtime: tokio::runtime::Runtime,
    http: reqwest::Client,
    base: String,
    key: String,
}

/// Where the API key comes from: never the command line, which every local user can read.
fn api_key(service: &Service, env_key: Option<String>, stdin: impl std::io::Read) -> Result<String> {
    if service.api_key.is_some() {
        bail!(
            "--api-key is refused: the command line is visible to every user (ps). \
             Set TRELLIS_API_KEY, or pass --api-key-file FILE (or --api-key-file - to read stdin)"
        );
    }
    let key = match &service.api_key_file {
        Some(path) if path.as_os_str() == "-" => {
            use std::io::Read as _;
            let mut text = String::new();
            stdin.take(4096).read_to_string(&mut text).context("cannot read the API key from stdin")?;
            text
        }
        Some(path) => {
            check_private(path)?;
            String::from_utf8(read(path)?).with_context(|| format!("{} is not UTF-8", path.display()))?
        }
        None => env_key.unwrap_or_default(),
    };
    let key = key.trim().to_owned();
    if key.is_empty() {
        bail!("no API key: set TRELLIS_API_KEY, or pass --api-key-file FILE (or - for stdin)");
    }
    Ok(key)
}

/// A key file others can read is refused (as ssh does for private keys).
#[cfg(unix)]
fn check_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?.permissions().mode();
    if mode & 0o077 != 0 {
        bail!("{} is readable by others (mode {:o}): chmod 600 it", path.display(), mode & 0o777);
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_: &Path) -> Result<()> {
    Ok(())
}

/// The base URL, refused when it would send the API key in clear text off this machine.
fn base_url(server: &str, allow_insecure_http: bool) -> Result<String> {
    let url = reqwest::Url::parse(server).with_context(|| format!("--server {server:?} is not a URL"))?;
    match url.scheme() {
        "https" => {}
        "http" if allow_insecure_http || is_loopback(&url) => {}
        "http" => bail!(
            "--server {server} is plain http: the API key would cross the network in clear text. \
             Use https://, or pass --allow-insecure-http"
        ),
        other => bail!("--server {server}: unsupported scheme {other}"),
    }
    Ok(server.trim_end_matches('/').to_owned())
}

fn is_loopback(url: &reqwest::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

impl Api {
    fn new(service: &Service) -> Result<Api> {
        let base = base_url(&service.server, service.allow_insecure_http)?;
        let key = api_key(service, std::env::var("TRELLIS_API_KEY").ok(), std::io::stdin())?;
        let mut builder = reqwest::Client::builder().timeout(std::time::Duration::from_secs(60));
        if let Some(path) = &service.ca_cert {
            builder = builder.add_root_certificate(reqwest::Certificate::from_pem(&read(path)?)?);
        }
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        Ok(Api { runtime, http: builder.build()?, base, key })
    }

    fn post(&self, path: &str, body: Value) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        self.runtime.block_on(async {
            let res = self
                .http
                .post(&url)
                .header("X-API-Key", &self.key)
                .json(&body)
                .send()
                .await
                .with_context(|| format!("POST {url}"))?;
            let status = res.status();
            let text = res.text().await.unwrap_or_default();
            if !status.is_success() {
                bail!("POST {path}: {status}: {text}");
            }
            serde_json::from_str(&text).with_context(|| format!("POST {path}: not JSON: {text}"))
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn service(api_key: Option<&str>, file: Option<&str>) -> Service {
        Service {
            server: "https://trellis.example".into(),
            allow_insecure_http: false,
            api_key_file: file.map(PathBuf::from),
            api_key: api_key.map(str::to_owned),
            ca_cert: None,
            device: 1,
        }
    }

    #[test]
    fn the_key_never_comes_from_the_command_line() {
        let err = api_key(&service(Some("tk_secret"), None), Some("tk_env".into()), &b""[..]).unwrap_err().to_string();
        assert!(err.contains("TRELLIS_API_KEY") && err.contains("--api-key-file"), "{err}");
        assert!(!err.contains("tk_secret"), "the refused key is not echoed: {err}");
    }

    #[test]
    fn the_key_comes_from_the_environment_a_private_file_or_stdin() {
        assert_eq!(api_key(&service(None, None), Some("tk_env\n".into()), &b""[..]).unwrap(), "tk_env");
        assert_eq!(api_key(&service(None, Some("-")), None, &b"tk_stdin\n"[..]).unwrap(), "tk_stdin");
        assert!(api_key(&service(None, None), None, &b""[..]).is_err(), "no key at all");

        let dir = std::env::temp_dir().join(format!("trellis-agent-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("key");
        std::fs::write(&file, "tk_file\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
            let err = api_key(&service(None, file.to_str()), None, &b""[..]).unwrap_err().to_string();
            assert!(err.contains("chmod 600"), "{err}");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        assert_eq!(api_key(&service(None, file.to_str()), Some("tk_env".into()), &b""[..]).unwrap(), "tk_file");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plain_http_only_to_loopback_unless_allowed() {
        for ok in ["https://trellis.example/", "http://127.0.0.1:8080", "http://localhost:3000", "http://[::1]:80"] {
            assert!(base_url(ok, false).is_ok(), "{ok}");
        }
        assert_eq!(base_url("https://trellis.example/", false).unwrap(), "https://trellis.example");
        let err = base_url("http://trellis.example", false).unwrap_err().to_string();
        assert!(err.contains("--allow-insecure-http"), "{err}");
        assert!(base_url("http://10.0.0.5", false).is_err());
        assert!(base_url("http://localhost.evil.example", false).is_err());
        assert!(base_url("http://trellis.example", true).is_ok());
        assert!(base_url("ftp://trellis.example", true).is_err());
        assert!(base_url("not a url", false).is_err());
    }
}
