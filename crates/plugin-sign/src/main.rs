//! `trellis-plugin-sign`: keys and signatures for plugin components, in the wasmsign2 format
//! (WebAssembly tool-conventions `Signatures.md`), which `TRELLIS_PLUGIN_SIGNATURES` checks.
//!
//! ```text
//! trellis-plugin-sign keygen SECRET.pem PUBLIC.pem
//! trellis-plugin-sign sign SECRET.pem IN.wasm OUT.wasm            # embedded signature
//! trellis-plugin-sign sign --detached SECRET.pem IN.wasm OUT.sig  # detached signature
//! trellis-plugin-sign key-id PUBLIC.pem
//! ```
//!
//! Signatures carry the key's default key id (wasmsign2's), which the trust store shows as the
//! key's id. `scripts/build-plugins.sh` signs the first-party plugins with the development key
//! (`keys/INSECURE-dev-plugin-signing.secret.pem`, public: never trust it in production).

use std::io::Cursor;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("trellis-plugin-sign: {message}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: trellis-plugin-sign keygen SECRET.pem PUBLIC.pem | sign [--detached] SECRET.pem IN.wasm OUT | key-id PUBLIC.pem";

fn run(args: &[String]) -> Result<(), String> {
    let strs: Vec<&str> = args.iter().map(String::as_str).collect();
    match strs.as_slice() {
        ["keygen", secret, public] => {
            let pair = wasmsign2::KeyPair::generate();
            write(secret, pair.sk.to_pem().as_bytes())?;
            write(public, pair.pk.to_pem().as_bytes())?;
            println!("{}", key_id(&pair.pk));
            Ok(())
        }
        ["sign", "--detached", secret, input, output] => sign(secret, input, output, true),
        ["sign", secret, input, output] => sign(secret, input, output, false),
        ["key-id", public] => {
            let pk = wasmsign2::PublicKey::from_any(&read(public)?).map_err(|err| format!("{public}: {err}"))?;
            println!("{}", key_id(&pk));
            Ok(())
        }
        _ => Err(USAGE.into()),
    }
}

fn key_id(pk: &wasmsign2::PublicKey) -> String {
    let with_id = pk.clone().attach_default_key_id();
    with_id.key_id().map(|id| id.iter().map(|b| format!("{b:02x}")).collect()).unwrap_or_default()
}

fn sign(secret: &str, input: &str, output: &str, detached: bool) -> Result<(), String> {
    let sk = wasmsign2::SecretKey::from_any(&read(secret)?).map_err(|err| format!("{secret}: {err}"))?;
    // The public half gives the key id the signature carries.
    let pk = wasmsign2::PublicKey { pk: sk.sk.public_key(), key_id: None }.attach_default_key_id();
    let module =
        wasmsign2::Module::deserialize(&mut Cursor::new(read(input)?)).map_err(|err| format!("{input}: {err}"))?;
    let signed = sk.sign(module, pk.key_id()).map_err(|err| format!("signing {input}: {err}"))?;
    let bytes = if detached {
        let (_, signature) = signed.detach_signature().map_err(|err| format!("detaching: {err}"))?;
        signature
    } else {
        let mut bytes = Vec::new();
        signed.serialize(&mut bytes).map_err(|err| format!("writing {output}: {err}"))?;
        bytes
    };
    write(output, &bytes)
}

fn read(path: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|err| format!("cannot read {path}: {err}"))
}

/// Writes beside the target and renames, so a reader never sees half a file.
fn write(path: &str, bytes: &[u8]) -> Result<(), String> {
    let partial = format!("{path}.partial");
    std::fs::write(&partial, bytes).map_err(|err| format!("cannot write {partial}: {err}"))?;
    std::fs::rename(&partial, path).map_err(|err| format!("cannot write {path}: {err}"))
}
