//! A software TPM per test: `swtpm_setup` makes a fresh TPM state whose EK certificate (and
//! platform certificate) come from swtpm's local CA (`swtpm_localca`), configured in a directory
//! of its own so tests run in parallel; `swtpm socket` then serves it on two free loopback ports
//! (the TCTI's control port is always the server port + 1). Dropping it kills exactly that
//! swtpm. Also builds synthetic UEFI event logs and extends them into the TPM's PCRs.
//!
//! Needs swtpm, swtpm-tools and tpm2-tools (scripts/install-deps.sh tpm); a missing tool fails
//! the test with the install command.

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sha2::{Digest, Sha256};

const INSTALL: &str = "apt-get install -y swtpm swtpm-tools tpm2-tools (scripts/install-deps.sh tpm)";

/// A running swtpm with its own state and local CA; killed on drop.
pub struct SwTpm {
    pub dir: tempfile::TempDir,
    pub port: u16,
    child: Child,
}

impl SwTpm {
    /// A new TPM (sha1 and sha256 PCR banks, RSA and ECC EKs with certificates) started on free ports.
    pub fn start() -> SwTpm {
        Self::try_start().unwrap_or_else(|err| panic!("swtpm: {err:#}"))
    }

    fn try_start() -> anyhow::Result<SwTpm> {
        let dir = tempfile::tempdir()?;
        let (state, ca) = (dir.path().join("state"), dir.path().join("ca"));
        std::fs::create_dir_all(&state)?;
        std::fs::create_dir_all(&ca)?;
        std::fs::write(
            ca.join("swtpm-localca.conf"),
            format!(
                "statedir = {ca}\nsigningkey = {ca}/signkey.pem\nissuercert = {ca}/issuercert.pem\ncertserial = {ca}/certserial\n",
                ca = ca.display()
            ),
        )?;
        std::fs::write(
            dir.path().join("swtpm_setup.conf"),
            format!(
                "create_certs_tool = /usr/bin/swtpm_localca\ncreate_certs_tool_config = {}\ncreate_certs_tool_options = /etc/swtpm-localca.options\n",
                ca.join("swtpm-localca.conf").display()
            ),
        )?;
        let setup = Command::new("swtpm_setup")
            .args(["--tpm2", "--tpmstate"])
            .arg(&state)
            .arg("--config")
            .arg(dir.path().join("swtpm_setup.conf"))
            .args(["--create-ek-cert", "--create-platform-cert", "--pcr-banks", "sha1,sha256", "--overwrite"])
            .arg("--logfile")
            .arg(dir.path().join("setup.log"))
            .output()
            .with_context(|| format!("swtpm_setup is missing: {INSTALL}"))?;
        if !setup.status.success() {
            let log = std::fs::read_to_string(dir.path().join("setup.log")).unwrap_or_default();
            bail!("swtpm_setup failed: {}{log}", String::from_utf8_lossy(&setup.stderr));
        }
        // Another process may take the ports between probing and binding: try a few pairs.
        let mut last = anyhow::anyhow!("no free port pair");
        for _ in 0..5 {
            let port = free_port_pair()?;
            match spawn(&state, port) {
                Ok(child) => return Ok(SwTpm { dir, port, child }),
                Err(err) => last = err,
            }
        }
        Err(last)
    }

    /// The TCTI for tss-esapi and tpm2-tools.
    pub fn tcti(&self) -> String {
        format!("swtpm:host=127.0.0.1,port={}", self.port)
    }

    /// The local CA's root certificate (PEM): the trust anchor of the EK certificate.
    pub fn root_pem(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("ca/swtpm-localca-rootca-cert.pem")).unwrap_or_default()
    }

    /// The local CA's intermediate (PEM), which issued the EK certificate.
    pub fn intermediate_path(&self) -> PathBuf {
        self.dir.path().join("ca/issuercert.pem")
    }

    /// Runs a tpm2-tools command against this TPM; panics with its stderr when it fails.
    pub fn tpm2(&self, tool: &str, args: &[&str]) -> String {
        let out = Command::new(tool)
            .args(args)
            .env("TPM2TOOLS_TCTI", self.tcti())
            .output()
            .unwrap_or_else(|_| panic!("{tool} is missing: {INSTALL}"));
        assert!(out.status.success(), "{tool} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Extends each event's digests into the TPM (one tpm2_pcrextend for all of them).
    pub fn extend(&self, log: &EventLog) {
        if !log.extends.is_empty() {
            let args: Vec<&str> = log.extends.iter().map(String::as_str).collect();
            self.tpm2("tpm2_pcrextend", &args);
        }
    }
}

impl Drop for SwTpm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port_pair() -> anyhow::Result<u16> {
    for _ in 0..50 {
        let first = TcpListener::bind("127.0.0.1:0")?;
        let port = first.local_addr()?.port();
        if port < u16::MAX && TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no two consecutive free ports on 127.0.0.1")
}

fn spawn(state: &Path, port: u16) -> anyhow::Result<Child> {
    let mut child = Command::new("swtpm")
        .args(["socket", "--tpm2", "--tpmstate"])
        .arg(format!("dir={}", state.display()))
        .args(["--server", &format!("type=tcp,port={port},bindaddr=127.0.0.1")])
        .args(["--ctrl", &format!("type=tcp,port={},bindaddr=127.0.0.1", port + 1)])
        .args(["--flags", "not-need-init,startup-clear"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("swtpm is missing: {INSTALL}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            let mut err = String::new();
            if let Some(mut stderr) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut stderr, &mut err);
            }
            bail!("swtpm exited ({status}): {err}");
        }
        if TcpStream::connect(("127.0.0.1", port + 1)).is_ok() {
            return Ok(child);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    bail!("swtpm did not listen on port {} within 10 s", port + 1)
}

// ---- synthetic UEFI event logs -----------------------------------------------------------------

const EV_POST_CODE: u32 = 0x1;
const EV_NO_ACTION: u32 = 0x3;
const EV_SEPARATOR: u32 = 0x4;
const EV_S_CRTM_VERSION: u32 = 0x8;
const EV_EFI_VARIABLE_DRIVER_CONFIG: u32 = 0x8000_0001;
const EV_EFI_BOOT_SERVICES_APPLICATION: u32 = 0x8000_0003;
const EV_EFI_ACTION: u32 = 0x8000_0007;
const EV_EFI_VARIABLE_AUTHORITY: u32 = 0x8000_00E0;

/// A TCG PC Client crypto-agile event log (sha1 and sha256 digests), the `tpm2_pcrextend`
/// arguments that put the same measurements into a TPM, and the PCR values they replay to.
#[derive(Debug, Clone, Default)]
pub struct EventLog {
    pub bytes: Vec<u8>,
    pub extends: Vec<String>,
    /// SHA-256 bank: PCR index → value after the replay (from zero).
    pub sha256: BTreeMap<u32, [u8; 32]>,
}

impl EventLog {
    /// A firmware boot: CRTM and firmware in PCR 0, the secure-boot variables (`SecureBoot` =
    /// `secure_boot`), separators in PCRs 0-7, a boot loader in PCR 4, the db authority that
    /// verified it (when secure boot is on) in PCR 7.
    pub fn firmware(secure_boot: bool) -> EventLog {
        let global = guid(0x8be4df61, 0x93ca, 0x11d2, [0xaa, 0x0d, 0x00, 0xe0, 0x98, 0x03, 0x2b, 0x8c]);
        let image_security = guid(0xd719b2cb, 0x3d3a, 0x4596, [0xa3, 0xbc, 0xda, 0xd0, 0x0e, 0x67, 0x65, 0x6f]);
        let mut log = EventLog::header();
        log.event(0, EV_NO_ACTION, b"StartupLocality\0\0", None);
        log.event(0, EV_S_CRTM_VERSION, &utf16("1.0\0"), None);
        log.event(0, EV_POST_CODE, b"POST CODE", Some(b"trellis test firmware volume"));
        log.event(7, EV_EFI_VARIABLE_DRIVER_CONFIG, &variable(&global, "SecureBoot", &[u8::from(secure_boot)]), None);
        log.event(7, EV_EFI_VARIABLE_DRIVER_CONFIG, &variable(&global, "PK", b"test platform key"), None);
        log.event(7, EV_EFI_VARIABLE_DRIVER_CONFIG, &variable(&global, "KEK", b"test key exchange key"), None);
        log.event(7, EV_EFI_VARIABLE_DRIVER_CONFIG, &variable(&image_security, "db", b"test signature database"), None);
        log.event(7, EV_EFI_VARIABLE_DRIVER_CONFIG, &variable(&image_security, "dbx", b"test forbidden"), None);
        for pcr in 0..8 {
            log.event(pcr, EV_SEPARATOR, &[0, 0, 0, 0], None);
        }
        log.event(4, EV_EFI_BOOT_SERVICES_APPLICATION, b"\\EFI\\BOOT\\BOOTX64.EFI", Some(b"test boot loader image"));
        if secure_boot {
            log.event(7, EV_EFI_VARIABLE_AUTHORITY, &variable(&image_security, "db", b"test db certificate"), None);
        }
        log.event(4, EV_EFI_ACTION, b"Exit Boot Services Invocation", None);
        log
    }

    fn header() -> EventLog {
        // "Spec ID Event03": platformClass 0, spec 2.0 errata 2, uintnSize 2 (64-bit), two
        // algorithms (sha1/20, sha256/32), no vendor info.
        let mut spec = b"Spec ID Event03\0".to_vec();
        spec.extend_from_slice(&0u32.to_le_bytes());
        spec.extend_from_slice(&[0, 2, 0, 2]);
        spec.extend_from_slice(&2u32.to_le_bytes());
        for (alg, size) in [(4u16, 20u16), (0xb, 32)] {
            spec.extend_from_slice(&alg.to_le_bytes());
            spec.extend_from_slice(&size.to_le_bytes());
        }
        spec.push(0);
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&EV_NO_ACTION.to_le_bytes());
        bytes.extend_from_slice(&[0u8; 20]);
        bytes.extend_from_slice(&(spec.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&spec);
        EventLog { bytes, ..EventLog::default() }
    }

    /// Appends an event whose digests are of `measured` (default: the event data itself).
    pub fn event(&mut self, pcr: u32, kind: u32, data: &[u8], measured: Option<&[u8]>) {
        let m = measured.unwrap_or(data);
        let (s1, s256): (Vec<u8>, [u8; 32]) = if kind == EV_NO_ACTION {
            (vec![0; 20], [0; 32])
        } else {
            use sha1::Digest as _;
            (sha1::Sha1::digest(m).to_vec(), Sha256::digest(m).into())
        };
        if kind != EV_NO_ACTION {
            self.extends.push(format!("{pcr}:sha1={},sha256={}", hex::encode(&s1), hex::encode(s256)));
            let value = self.sha256.entry(pcr).or_insert([0; 32]);
            *value = Sha256::digest([&value[..], &s256[..]].concat()).into();
        }
        for value in [pcr, kind, 2] {
            self.bytes.extend_from_slice(&value.to_le_bytes());
        }
        self.bytes.extend_from_slice(&4u16.to_le_bytes());
        self.bytes.extend_from_slice(&s1);
        self.bytes.extend_from_slice(&0xbu16.to_le_bytes());
        self.bytes.extend_from_slice(&s256);
        self.bytes.extend_from_slice(&(data.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(data);
    }

    /// The replayed SHA-256 value of `pcr` (zero when no event extends it), hex.
    pub fn sha256_hex(&self, pcr: u32) -> String {
        hex::encode(self.sha256.get(&pcr).copied().unwrap_or([0; 32]))
    }
}

fn guid(a: u32, b: u16, c: u16, d: [u8; 8]) -> Vec<u8> {
    [&a.to_le_bytes()[..], &b.to_le_bytes(), &c.to_le_bytes(), &d].concat()
}

fn utf16(text: &str) -> Vec<u8> {
    text.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

/// UEFI_VARIABLE_DATA: GUID, name length (chars), data length, UTF-16 name, data.
fn variable(guid: &[u8], name: &str, value: &[u8]) -> Vec<u8> {
    let mut out = guid.to_vec();
    out.extend_from_slice(&(name.encode_utf16().count() as u64).to_le_bytes());
    out.extend_from_slice(&(value.len() as u64).to_le_bytes());
    out.extend_from_slice(&utf16(name));
    out.extend_from_slice(value);
    out
}
