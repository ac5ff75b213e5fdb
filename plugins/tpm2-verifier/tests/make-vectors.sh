#!/usr/bin/env bash
# Regenerates tests/vectors/ from a real software TPM: swtpm 0.7 (libtpms) with an EK
# certificate from swtpm_setup's local CA, driven by tpm2-tools 5.4 (Debian bookworm).
#
#   apt-get update && apt-get install -y swtpm swtpm-tools tpm2-tools   # as root
#   plugins/tpm2-verifier/tests/make-vectors.sh
#
# What it records (tests/vectors/MANIFEST.md lists every file):
#   - two TPMs (each its own local CA): TPM A is the device, TPM B supplies a foreign root and a
#     foreign EK;
#   - TPM A's EK certificates (RSA-2048 and ECC P-384, read from NV) and EK public areas, the
#     local CA's root and intermediate;
#   - four AKs under the RSA EK (RSASSA-SHA256 twice, ECDSA-P256-SHA256, RSAPSS-SHA256) and
#     quotes of sha1+sha256 PCRs 0-4,7 over one nonce by three of them, after a synthetic
#     crypto-agile event log (secure boot on) was extended into the PCRs;
#   - TPM2_Certify by the RSA AK of a TPM-resident P-256 signing key (and of the AK itself, a
#     restricted key), with the keys' SubjectPublicKeyInfos as tpm2-tools exports them;
#   - after a TPM reset (resetCount + 1), a second quote with a secure-boot-off event log;
#   - credential activation: tpm2_makecredential's and the verifier's own pure-Rust
#     MakeCredential (examples/make_credential.rs, RSA and ECC EKs, fixed secret and entropy)
#     each activated by a real tpm2_activatecredential; the results go to activation.txt and
#     the verifier's outputs are kept as known answers (mc_rsa.cred, mc_ecc.cred).
#
# Binary TPM structures are stored as the contract passes them: TPMT_PUBLIC (the TPM2B_PUBLIC
# size prefix of tpm2-tools' files stripped), TPMS_ATTEST, TPMT_SIGNATURE; PCR values as text
# lines "BANK INDEX HEX".
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CRATE="$(dirname "$HERE")"
ROOT="$(cd "$CRATE/../.." && pwd)"
OUT="$HERE/vectors"
PORT="${TPM2_VECTORS_PORT:-23310}"

for tool in swtpm swtpm_setup swtpm_localca tpm2_createak tpm2_quote tpm2_certify tpm2_activatecredential \
    tpm2_makecredential openssl python3 xxd; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "make-vectors: $tool missing; as root: apt-get update && apt-get install -y swtpm swtpm-tools tpm2-tools openssl xxd" >&2
        exit 1
    }
done

SWTPM_VERSION="$(swtpm --version | head -n1 | awk '{print $4}' | tr -d ,)"
TOOLS_VERSION="$(dpkg-query -W -f='${Version}' tpm2-tools 2>/dev/null || echo unknown)"
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
    for pidfile in "${PIDS[@]}"; do
        [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

echo "make-vectors: building the verifier's make_credential example" >&2
(cd "$ROOT" && cargo build -q -p trellis-plugin-tpm2-verifier --example make_credential)
MAKE_CREDENTIAL="${CARGO_TARGET_DIR:-$ROOT/target}/debug/examples/make_credential"

# --- TPMs --------------------------------------------------------------------------------------

# setup_tpm NAME: a TPM state with RSA and ECC EKs, their certificates from a local CA of its own.
setup_tpm() {
    local name=$1 dir="$WORK/$1"
    mkdir -p "$dir/state" "$dir/ca"
    cat >"$dir/ca/swtpm-localca.conf" <<EOF
statedir = $dir/ca
signingkey = $dir/ca/signkey.pem
issuercert = $dir/ca/issuercert.pem
certserial = $dir/ca/certserial
EOF
    cat >"$dir/swtpm_setup.conf" <<EOF
create_certs_tool = /usr/bin/swtpm_localca
create_certs_tool_config = $dir/ca/swtpm-localca.conf
create_certs_tool_options = /etc/swtpm-localca.options
EOF
    swtpm_setup --tpm2 --tpmstate "$dir/state" --config "$dir/swtpm_setup.conf" --create-ek-cert \
        --create-platform-cert --pcr-banks sha1,sha256 --overwrite --logfile "$dir/setup.log"
}

# start_tpm NAME PORT: swtpm on 127.0.0.1:PORT (control PORT+1), started and initialised.
start_tpm() {
    local dir="$WORK/$1" port=$2
    swtpm socket --tpm2 --tpmstate dir="$dir/state" \
        --server type=tcp,port="$port",bindaddr=127.0.0.1 --ctrl type=tcp,port=$((port + 1)),bindaddr=127.0.0.1 \
        --flags not-need-init,startup-clear --pid file="$dir/swtpm.pid" --daemon
    PIDS+=("$dir/swtpm.pid")
    for _ in $(seq 50); do
        TPM2TOOLS_TCTI="swtpm:host=127.0.0.1,port=$port" tpm2_getcap properties-fixed >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "make-vectors: swtpm $1 did not start" >&2
    exit 1
}

stop_tpm() {
    local pid
    pid="$(cat "$WORK/$1/swtpm.pid")"
    kill "$pid"
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
}

# tpmt FILE.pub2b OUT: TPM2B_PUBLIC -> TPMT_PUBLIC.
tpmt() { tail -c +3 "$1" >"$2"; }
# pem2der PEM OUT
pem2der() { openssl x509 -in "$1" -outform der -out "$2"; }
flush() { tpm2_flushcontext -t; tpm2_flushcontext -s 2>/dev/null || true; }

rm -rf "$OUT"
mkdir -p "$OUT"

echo "make-vectors: TPM B (foreign root, foreign EK)" >&2
setup_tpm b
start_tpm b $((PORT + 2))
export TPM2TOOLS_TCTI="swtpm:host=127.0.0.1,port=$((PORT + 2))"
tpm2_readpublic -c 0x81010001 -o "$WORK/b/ek_rsa.pub2b" >/dev/null
tpmt "$WORK/b/ek_rsa.pub2b" "$OUT/other_ek_rsa.tpmt"
pem2der "$WORK/b/ca/swtpm-localca-rootca-cert.pem" "$OUT/other_root.der"
pem2der "$WORK/b/ca/issuercert.pem" "$OUT/other_intermediate.der"
stop_tpm b

echo "make-vectors: TPM A (the device)" >&2
setup_tpm a
start_tpm a "$PORT"
export TPM2TOOLS_TCTI="swtpm:host=127.0.0.1,port=$PORT"
pem2der "$WORK/a/ca/swtpm-localca-rootca-cert.pem" "$OUT/root.der"
pem2der "$WORK/a/ca/issuercert.pem" "$OUT/intermediate.der"

# EK certificates as stored in NV (the whole index), EK public areas of the persisted EKs.
tpm2_nvread 0x01c00002 -o "$OUT/ek_rsa_cert.nv" >/dev/null
tpm2_nvread 0x01c00016 -o "$OUT/ek_ecc_cert.nv" >/dev/null
tpm2_readpublic -c 0x81010001 -o "$WORK/ek_rsa.pub2b" >/dev/null
tpm2_readpublic -c 0x81010016 -o "$WORK/ek_ecc.pub2b" >/dev/null
tpmt "$WORK/ek_rsa.pub2b" "$OUT/ek_rsa.tpmt"
tpmt "$WORK/ek_ecc.pub2b" "$OUT/ek_ecc.tpmt"
openssl verify -CAfile "$WORK/a/ca/swtpm-localca-rootca-cert.pem" -untrusted "$WORK/a/ca/issuercert.pem" \
    <(openssl x509 -inform der -in "$OUT/ek_rsa_cert.nv") >"$WORK/openssl-verify.txt"

# AKs under the RSA EK (endorsement hierarchy: un-obfuscated resetCount/restartCount).
for spec in "rsa rsa rsassa" "ecc ecc256 ecdsa" "pss rsa rsapss" "rsa2 rsa rsassa"; do
    set -- $spec
    tpm2_createak -C 0x81010001 -c "$WORK/ak_$1.ctx" -G "$2" -g sha256 -s "$3" -u "$WORK/ak_$1.pub2b" \
        -n "$OUT/ak_$1.name" -r "$WORK/ak_$1.priv" >/dev/null
    flush
    tpmt "$WORK/ak_$1.pub2b" "$OUT/ak_$1.tpmt"
done

# The synthetic firmware event log: its digests are extended into the PCRs before quoting.
# make_event_log SECUREBOOT OUT EXTENDS
make_event_log() {
    python3 - "$1" "$2" "$3" <<'PY'
import hashlib, struct, sys

secure_boot, out, extends = int(sys.argv[1]), sys.argv[2], sys.argv[3]
EV_POST_CODE, EV_NO_ACTION, EV_SEPARATOR, EV_S_CRTM_VERSION = 0x1, 0x3, 0x4, 0x8
EV_EFI_VARIABLE_DRIVER_CONFIG, EV_EFI_BOOT_SERVICES_APPLICATION = 0x80000001, 0x80000003
EV_EFI_ACTION, EV_EFI_VARIABLE_AUTHORITY = 0x80000007, 0x800000E0

def guid(text):
    a, b, c, d, e = text.split("-")
    return struct.pack("<IHH", int(a, 16), int(b, 16), int(c, 16)) + bytes.fromhex(d + e)

GLOBAL = guid("8be4df61-93ca-11d2-aa0d-00e098032b8c")
IMAGE_SECURITY = guid("d719b2cb-3d3a-4596-a3bc-dad00e67656f")

def variable(g, name, value):
    return g + struct.pack("<QQ", len(name), len(value)) + name.encode("utf-16-le") + value

spec = b"Spec ID Event03\0" + struct.pack("<IBBBBI", 0, 0, 2, 0, 2, 2) + struct.pack("<HHHH", 4, 20, 0xB, 32) + b"\0"
log = struct.pack("<II", 0, EV_NO_ACTION) + b"\0" * 20 + struct.pack("<I", len(spec)) + spec
lines = []

def event(pcr, kind, data, measured=None):
    global log
    m = data if measured is None else measured
    if kind == EV_NO_ACTION:
        s1, s256 = b"\0" * 20, b"\0" * 32
    else:
        s1, s256 = hashlib.sha1(m).digest(), hashlib.sha256(m).digest()
        lines.append(f"{pcr}:sha1={s1.hex()},sha256={s256.hex()}")
    log += struct.pack("<III", pcr, kind, 2) + struct.pack("<H", 4) + s1 + struct.pack("<H", 0xB) + s256
    log += struct.pack("<I", len(data)) + data

event(0, EV_NO_ACTION, b"StartupLocality\0" + b"\0")
event(0, EV_S_CRTM_VERSION, "1.0\0".encode("utf-16-le"))
event(0, EV_POST_CODE, b"POST CODE", measured=b"trellis test firmware volume")
event(7, EV_EFI_VARIABLE_DRIVER_CONFIG, variable(GLOBAL, "SecureBoot", bytes([secure_boot])))
event(7, EV_EFI_VARIABLE_DRIVER_CONFIG, variable(GLOBAL, "PK", b"test platform key"))
event(7, EV_EFI_VARIABLE_DRIVER_CONFIG, variable(GLOBAL, "KEK", b"test key exchange key"))
event(7, EV_EFI_VARIABLE_DRIVER_CONFIG, variable(IMAGE_SECURITY, "db", b"test signature database"))
event(7, EV_EFI_VARIABLE_DRIVER_CONFIG, variable(IMAGE_SECURITY, "dbx", b"test forbidden signatures"))
for pcr in range(8):
    event(pcr, EV_SEPARATOR, b"\0\0\0\0")
event(4, EV_EFI_BOOT_SERVICES_APPLICATION, b"\\EFI\\BOOT\\BOOTX64.EFI", measured=b"test boot loader image")
if secure_boot:
    event(7, EV_EFI_VARIABLE_AUTHORITY, variable(IMAGE_SECURITY, "db", b"test db certificate"))
event(4, EV_EFI_ACTION, b"Exit Boot Services Invocation")
open(out, "wb").write(log)
open(extends, "w").write("\n".join(lines) + "\n")
PY
}

# extend_log EXTENDS: extends every measured digest into the TPM's sha1 and sha256 banks.
extend_log() {
    while read -r line; do
        [ -n "$line" ] && tpm2_pcrextend "$line"
    done <"$1"
}

SELECTION="sha1:0,1,2,3,4,7+sha256:0,1,2,3,4,7"

# read_pcrs OUT: "BANK INDEX HEX" lines for the quoted selection.
read_pcrs() {
    tpm2_pcrread "$SELECTION" | awk '
        /^ *sha1:/ { bank = "SHA1"; next }
        /^ *sha256:/ { bank = "SHA256"; next }
        /:/ { gsub(/ /, ""); split($0, f, ":"); v = tolower(f[2]); sub(/^0x/, "", v); print bank, f[1], v }
    ' >"$1"
}

make_event_log 1 "$OUT/eventlog.bin" "$WORK/extends.txt"
extend_log "$WORK/extends.txt"
read_pcrs "$OUT/pcrs.txt"

head -c 32 /dev/urandom >"$OUT/nonce.bin"
NONCE="$(xxd -p -c 64 "$OUT/nonce.bin")"
for spec in "rsa rsassa" "ecc ecdsa" "pss rsapss"; do
    set -- $spec
    tpm2_quote -c "$WORK/ak_$1.ctx" -l "$SELECTION" -q "$NONCE" -g sha256 --scheme "$2" \
        -m "$OUT/quote_$1.attest" -s "$OUT/quote_$1.sig" >/dev/null
    flush
done
# The PCRs must not have moved while quoting.
read_pcrs "$WORK/pcrs-after.txt"
cmp "$OUT/pcrs.txt" "$WORK/pcrs-after.txt"

# CSR keys: unrestricted P-256 ECDSA signing keys under an owner SRK; tpm2_certify by the RSA AK
# (tpm2-tools 5.4 cannot set qualifyingData: extraData is its fixed 00ff55aa).
tpm2_createprimary -C o -g sha256 -G ecc -c "$WORK/srk.ctx" >/dev/null
flush
for key in key other_key; do
    tpm2_create -C "$WORK/srk.ctx" -G ecc256:ecdsa-sha256 -a 'fixedtpm|fixedparent|sensitivedataorigin|userwithauth|sign' \
        -u "$WORK/$key.pub2b" -r "$WORK/$key.priv" >/dev/null
    flush
    tpm2_load -C "$WORK/srk.ctx" -u "$WORK/$key.pub2b" -r "$WORK/$key.priv" -c "$WORK/$key.ctx" >/dev/null
    flush
    tpmt "$WORK/$key.pub2b" "$OUT/$key.tpmt"
    tpm2_readpublic -c "$WORK/$key.ctx" -f der -o "$OUT/${key}_spki.der" >/dev/null
    flush
done
# A certification the verifier must refuse: tpm2_certify's fixed extraData, not the nonce.
tpm2_certify -c "$WORK/key.ctx" -C "$WORK/ak_rsa.ctx" -g sha256 -o "$OUT/certify_stale.attest" -s "$OUT/certify_stale.sig" >/dev/null
flush

# certify_with_nonce OBJECT SIGNER OUT: TPM2_Certify with the nonce as qualifyingData, sent raw
# (tpm2_send) since tpm2-tools 5.4 has no qualification option. Both keys are persisted first
# so the handles outlive tpm2-tools' processes; password sessions, empty auth.
tpm2_evictcontrol -C o -c "$WORK/key.ctx" 0x81000100 >/dev/null
flush
tpm2_evictcontrol -C o -c "$WORK/ak_rsa.ctx" 0x81000101 >/dev/null
flush
certify_with_nonce() {
    python3 - "$1" "$2" "$OUT/nonce.bin" >"$WORK/certify.cmd" <<'PY'
import struct, sys
obj, signer, nonce = int(sys.argv[1], 16), int(sys.argv[2], 16), open(sys.argv[3], "rb").read()
pw = struct.pack(">IHBH", 0x40000009, 0, 0, 0)
body = struct.pack(">II", obj, signer) + struct.pack(">I", 2 * len(pw)) + pw + pw
body += struct.pack(">H", len(nonce)) + nonce + struct.pack(">H", 0x0010)  # TPM_ALG_NULL scheme
sys.stdout.buffer.write(struct.pack(">HII", 0x8002, 10 + len(body), 0x148) + body)
PY
    tpm2_send -o "$WORK/certify.rsp" <"$WORK/certify.cmd"
    python3 - "$WORK/certify.rsp" "$3" <<'PY'
import struct, sys
rsp = open(sys.argv[1], "rb").read()
tag, size, rc = struct.unpack(">HII", rsp[:10])
assert rc == 0, f"TPM2_Certify rc 0x{rc:x}"
(param_size,) = struct.unpack(">I", rsp[10:14])
params = rsp[14:14 + param_size]
(alen,) = struct.unpack(">H", params[:2])
open(sys.argv[2] + ".attest", "wb").write(params[2:2 + alen])
open(sys.argv[2] + ".sig", "wb").write(params[2 + alen:])
PY
}
certify_with_nonce 0x81000100 0x81000101 "$OUT/certify"
# A restricted key certified: the AK itself.
certify_with_nonce 0x81000101 0x81000101 "$OUT/certify_ak"
tpm2_readpublic -c "$WORK/ak_rsa.ctx" -f der -o "$OUT/ak_rsa_spki.der" >/dev/null
flush

# Credential activation on the real TPM. activate CREDFILE EK_HANDLE OUT
activate() {
    local cred=$1 ek=$2 out=$3 rc=0
    if [ "$ek" = 0x81010001 ]; then
        # The RSA EK's authPolicy is PolicySecret(TPM_RH_ENDORSEMENT).
        tpm2_startauthsession --policy-session -S "$WORK/session.ctx"
        tpm2_policysecret -S "$WORK/session.ctx" -c e >/dev/null
        tpm2_activatecredential -c "$WORK/ak_rsa.ctx" -C "$ek" -i "$cred" -o "$out" -P "session:$WORK/session.ctx" \
            >/dev/null || rc=$?
        tpm2_flushcontext "$WORK/session.ctx"
    else
        # swtpm's ECC EK (P-384, SHA-384, AES-256-CFB) has userWithAuth.
        tpm2_activatecredential -c "$WORK/ak_rsa.ctx" -C "$ek" -i "$cred" -o "$out" >/dev/null || rc=$?
    fi
    flush
    return "$rc"
}

head -c 32 /dev/urandom >"$OUT/secret.bin"
head -c 64 /dev/urandom >"$OUT/entropy.bin"
AK_NAME="$(xxd -p -c 100 "$OUT/ak_rsa.name")"
{
    echo "# Credential activation on swtpm $SWTPM_VERSION / tpm2-tools $TOOLS_VERSION, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "# secret.bin wrapped for the Name of ak_rsa; each challenge given to tpm2_activatecredential with the AK loaded."
} >"$OUT/activation.txt"
record() { # record LABEL RECOVERED
    if cmp -s "$OUT/secret.bin" "$2"; then
        echo "$1: recovered" >>"$OUT/activation.txt"
    else
        echo "$1: FAILED" >>"$OUT/activation.txt"
        echo "make-vectors: $1 did not recover the secret" >&2
        exit 1
    fi
}
tpm2_makecredential -T none -u "$WORK/ek_rsa.pub2b" -s "$OUT/secret.bin" -n "$AK_NAME" -o "$WORK/tools_rsa.cred" >/dev/null 2>&1
activate "$WORK/tools_rsa.cred" 0x81010001 "$WORK/tools_rsa.out"
record "tpm2_makecredential (RSA-2048 EK) -> tpm2_activatecredential" "$WORK/tools_rsa.out"
tpm2_makecredential -T none -u "$WORK/ek_ecc.pub2b" -s "$OUT/secret.bin" -n "$AK_NAME" -o "$WORK/tools_ecc.cred" >/dev/null 2>&1
activate "$WORK/tools_ecc.cred" 0x81010016 "$WORK/tools_ecc.out"
record "tpm2_makecredential (ECC P-384 EK) -> tpm2_activatecredential" "$WORK/tools_ecc.out"
"$MAKE_CREDENTIAL" "$OUT/ek_rsa.tpmt" "$OUT/ak_rsa.name" "$OUT/secret.bin" "$OUT/entropy.bin" "$OUT/mc_rsa.cred"
activate "$OUT/mc_rsa.cred" 0x81010001 "$WORK/mc_rsa.out"
record "verifier make_credential (RSA-2048 EK, mc_rsa.cred) -> tpm2_activatecredential" "$WORK/mc_rsa.out"
"$MAKE_CREDENTIAL" "$OUT/ek_ecc.tpmt" "$OUT/ak_rsa.name" "$OUT/secret.bin" "$OUT/entropy.bin" "$OUT/mc_ecc.cred"
activate "$OUT/mc_ecc.cred" 0x81010016 "$WORK/mc_ecc.out"
record "verifier make_credential (ECC P-384 EK, mc_ecc.cred) -> tpm2_activatecredential" "$WORK/mc_ecc.out"
# A credential for another Name must not activate.
printf '000b%064x' 1 | xxd -r -p >"$WORK/other.name"
"$MAKE_CREDENTIAL" "$OUT/ek_rsa.tpmt" "$WORK/other.name" "$OUT/secret.bin" "$OUT/entropy.bin" "$WORK/mc_other.cred"
if activate "$WORK/mc_other.cred" 0x81010001 "$WORK/mc_other.out" 2>/dev/null; then
    echo "make-vectors: a credential for another Name activated" >&2
    exit 1
fi
flush
echo "verifier make_credential for another Name (RSA-2048 EK) -> tpm2_activatecredential: refused" >>"$OUT/activation.txt"

# TPM reset after an orderly shutdown (swtpm restarted on its state: resetCount + 1, PCRs
# cleared, clock safe), the AK reloaded under the EK, then a secure-boot-off boot and a second
# quote.
tpm2_shutdown -c
stop_tpm a
start_tpm a "$PORT"
tpm2_startauthsession --policy-session -S "$WORK/session.ctx"
tpm2_policysecret -S "$WORK/session.ctx" -c e >/dev/null
tpm2_load -C 0x81010001 -u "$WORK/ak_rsa.pub2b" -r "$WORK/ak_rsa.priv" -c "$WORK/ak_rsa.ctx" -P "session:$WORK/session.ctx" >/dev/null
tpm2_flushcontext "$WORK/session.ctx"
flush
make_event_log 0 "$OUT/eventlog_sb0.bin" "$WORK/extends_sb0.txt"
extend_log "$WORK/extends_sb0.txt"
read_pcrs "$OUT/pcrs_sb0.txt"
head -c 32 /dev/urandom >"$OUT/nonce_sb0.bin"
tpm2_quote -c "$WORK/ak_rsa.ctx" -l "$SELECTION" -q "$(xxd -p -c 64 "$OUT/nonce_sb0.bin")" -g sha256 \
    -m "$OUT/quote_sb0.attest" -s "$OUT/quote_sb0.sig" >/dev/null
flush

# No TPM2_Shutdown before the restart: the TPM cannot vouch that its clock did not go back
# (clockInfo.safe = NO). A quote of the same selection with nonce.bin.
stop_tpm a
start_tpm a "$PORT"
tpm2_startauthsession --policy-session -S "$WORK/session.ctx"
tpm2_policysecret -S "$WORK/session.ctx" -c e >/dev/null
tpm2_load -C 0x81010001 -u "$WORK/ak_rsa.pub2b" -r "$WORK/ak_rsa.priv" -c "$WORK/ak_rsa.ctx" -P "session:$WORK/session.ctx" >/dev/null
tpm2_flushcontext "$WORK/session.ctx"
flush
read_pcrs "$OUT/pcrs_unsafe.txt"
tpm2_quote -c "$WORK/ak_rsa.ctx" -l "$SELECTION" -q "$NONCE" -g sha256 \
    -m "$OUT/quote_unsafe.attest" -s "$OUT/quote_unsafe.sig" >/dev/null
flush
stop_tpm a

cat >"$OUT/MANIFEST.md" <<EOF
# Test vectors from swtpm (regenerate with ../make-vectors.sh)

Generated $(date -u +%Y-%m-%dT%H:%M:%SZ) with swtpm $SWTPM_VERSION, tpm2-tools $TOOLS_VERSION.
TPM structures are stored as the contract passes them (TPMT_PUBLIC without a size prefix,
TPMS_ATTEST, TPMT_SIGNATURE); certificates DER; PCR values as \`BANK INDEX HEX\` lines.

| file | what |
|---|---|
| root.der, intermediate.der | TPM A's swtpm_setup local CA: root (the trust anchor) and the intermediate that issued the EK certificates |
| ek_rsa_cert.nv, ek_ecc_cert.nv | TPM A's EK certificates (RSA-2048, ECC P-384) as read from NV 0x01C00002 / 0x01C00016 |
| ek_rsa.tpmt, ek_ecc.tpmt | TPM A's EK public areas (persistent 0x81010001 / 0x81010016) |
| other_root.der, other_intermediate.der, other_ek_rsa.tpmt | TPM B's local CA root, its intermediate (same subject as TPM A's, another key) and RSA EK public area |
| ak_{rsa,ecc,pss}.tpmt, ak_*.name | AKs under the RSA EK: RSASSA-SHA256 (RSA-2048), ECDSA-SHA256 (P-256), RSAPSS-SHA256 (RSA-2048); Names from tpm2_createak |
| ak_rsa2.tpmt, ak_rsa2.name | a second RSASSA-SHA256 AK (signs nothing here: "another key") |
| ak_rsa_spki.der | the RSA AK's SubjectPublicKeyInfo (tpm2_readpublic -f der) |
| eventlog.bin | synthetic crypto-agile event log, SecureBoot = 1, extended into sha1+sha256 PCRs 0-7 of TPM A |
| pcrs.txt | sha1+sha256 PCRs 0,1,2,3,4,7 after that log |
| nonce.bin | the quotes' qualifyingData |
| quote_{rsa,ecc,pss}.attest/.sig | TPM2_Quote of sha1:0,1,2,3,4,7+sha256:0,1,2,3,4,7 by each AK |
| key.tpmt, key_spki.der | an unrestricted P-256 ECDSA signing key (fixedTPM, fixedParent, sensitiveDataOrigin) under an owner SRK, and its SPKI |
| other_key.tpmt, other_key_spki.der | a second such key (not certified) |
| certify.attest/.sig | TPM2_Certify of key by ak_rsa, qualifyingData nonce.bin (a raw command through tpm2_send: tpm2-tools 5.4 has no qualification option) |
| certify_stale.attest/.sig | tpm2_certify's TPM2_Certify of key by ak_rsa (extraData its fixed 00ff55aa, not the nonce) |
| certify_ak.attest/.sig | TPM2_Certify of ak_rsa (a restricted key) by ak_rsa, qualifyingData nonce.bin |
| eventlog_sb0.bin, pcrs_sb0.txt, nonce_sb0.bin, quote_sb0.attest/.sig | after an orderly TPM reset: SecureBoot = 0 log, PCRs, nonce, quote by ak_rsa |
| pcrs_unsafe.txt, quote_unsafe.attest/.sig | after a restart without TPM2_Shutdown (clockInfo.safe = NO): PCRs (cleared) and a quote by ak_rsa over nonce.bin |
| secret.bin, entropy.bin | MakeCredential inputs |
| mc_rsa.cred, mc_ecc.cred | the verifier's MakeCredential for ak_rsa's Name under the RSA and ECC EKs (tpm2-tools credential file: BADCC0DE, version 1, TPM2B_ID_OBJECT, TPM2B_ENCRYPTED_SECRET) |
| activation.txt | what tpm2_activatecredential on TPM A made of each challenge |
EOF
cp "$WORK/openssl-verify.txt" "$OUT/openssl-verify.txt"
echo "make-vectors: wrote $(ls "$OUT" | wc -l) files to $OUT" >&2
cat "$OUT/activation.txt" >&2
