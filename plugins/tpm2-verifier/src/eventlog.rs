//! The TCG PC Client crypto-agile event log (`binary_bios_measurements`, little-endian): parsed
//! strictly, replayed per bank, and read for the secure-boot state measured into PCR 7.
//!
//! Layout: one TCG_PCClientPCREvent (SHA-1 format) holding the "Spec ID Event03" header that
//! lists the log's algorithms and digest sizes, then TCG_PCR_EVENT2 records: pcrIndex,
//! eventType, TPML_DIGEST_VALUES (one digest per algorithm of the header), eventSize, event.

use std::collections::BTreeMap;

use crate::codes;
use crate::tpm::{Bank, HashAlg, PCR_COUNT};
use crate::wire::{ParseError, Reader};

/// EV_NO_ACTION: logged, never extended.
pub const EV_NO_ACTION: u32 = 0x0000_0003;
/// EV_SEPARATOR.
pub const EV_SEPARATOR: u32 = 0x0000_0004;
/// EV_EFI_VARIABLE_DRIVER_CONFIG.
pub const EV_EFI_VARIABLE_DRIVER_CONFIG: u32 = 0x8000_0001;
/// EV_EFI_ACTION.
pub const EV_EFI_ACTION: u32 = 0x8000_0007;
/// EV_EFI_VARIABLE_AUTHORITY.
pub const EV_EFI_VARIABLE_AUTHORITY: u32 = 0x8000_00e0;

/// EFI_GLOBAL_VARIABLE (8be4df61-93ca-11d2-aa0d-00e098032b8c) as UEFI marshals a GUID.
pub const EFI_GLOBAL_VARIABLE: [u8; 16] =
    [0x61, 0xdf, 0xe4, 0x8b, 0xca, 0x93, 0xd2, 0x11, 0xaa, 0x0d, 0x00, 0xe0, 0x98, 0x03, 0x2b, 0x8c];

const SPEC_ID_SIGNATURE: &[u8; 16] = b"Spec ID Event03\0";
const STARTUP_LOCALITY_SIGNATURE: &[u8; 16] = b"StartupLocality\0";
const MAX_ALGORITHMS: u32 = 16;
const MAX_DIGEST_SIZE: u16 = 64;
const MAX_EVENTS: usize = 100_000;

/// One measured event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Position in the log (the header is 0).
    pub sequence: usize,
    pub pcr: u32,
    pub event_type: u32,
    /// (algorithm id, digest), in the order logged.
    pub digests: Vec<(u16, Vec<u8>)>,
    pub data: Vec<u8>,
}

impl Event {
    /// This event's digest in `algorithm`.
    pub fn digest(&self, algorithm: u16) -> Option<&[u8]> {
        self.digests.iter().find(|(a, _)| *a == algorithm).map(|(_, d)| d.as_slice())
    }
}

/// A parsed log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventLog {
    /// (algorithm id, digest size) from the Spec ID header.
    pub algorithms: Vec<(u16, u16)>,
    pub events: Vec<Event>,
}

impl EventLog {
    /// Parses a crypto-agile log, consuming every byte.
    pub fn parse(bytes: &[u8]) -> Result<EventLog, ParseError> {
        let mut r = Reader::new(bytes);
        // TCG_PCClientPCREvent carrying TCG_EfiSpecIdEvent.
        let pcr = r.u32_le("header.pcrIndex")?;
        let event_type = r.u32_le("header.eventType")?;
        if pcr != 0 || event_type != EV_NO_ACTION {
            return Err(ParseError::new("header: not the EV_NO_ACTION Spec ID event (not a crypto-agile log)"));
        }
        let digest = r.bytes(20, "header.digest")?;
        if digest.iter().any(|b| *b != 0) {
            return Err(ParseError::new("header: digest not zero"));
        }
        let size = r.u32_le("header.eventSize")? as usize;
        let spec = r.bytes(size, "header.event")?;
        let algorithms = parse_spec_id(spec)?;

        let mut events = Vec::new();
        while r.remaining() > 0 {
            if events.len() >= MAX_EVENTS {
                return Err(ParseError::new("too many events"));
            }
            let sequence = events.len() + 1;
            // The event's number is only formatted into an error, never on the way to success.
            let event = parse_event(&mut r, sequence, &algorithms)
                .map_err(|e| ParseError::new(format!("event {sequence}: {e}")))?;
            events.push(event);
        }
        Ok(EventLog { algorithms, events })
    }

    /// Replays the log in `bank`: PCR ← H(PCR ‖ digest) from zero for every event but
    /// EV_NO_ACTION (PCR 0 starts at the locality of a StartupLocality event). Returns the
    /// PCRs that at least one event extended.
    pub fn replay(&self, bank: HashAlg) -> Result<BTreeMap<u32, Vec<u8>>, ParseError> {
        let mut pcrs: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        let mut pcr0_start = vec![0u8; bank.size()];
        let mut extended_pcr0 = false;
        for event in &self.events {
            if event.event_type == EV_NO_ACTION {
                if let Some(locality) = startup_locality(event) {
                    if event.pcr != 0 || extended_pcr0 {
                        return Err(ParseError::new(format!(
                            "event {}: StartupLocality after PCR 0 was extended",
                            event.sequence
                        )));
                    }
                    if let Some(last) = pcr0_start.last_mut() {
                        *last = locality;
                    }
                }
                continue;
            }
            let digest = event
                .digest(bank.id())
                .ok_or_else(|| ParseError::new(format!("event {}: no {} digest", event.sequence, bank.name())))?;
            if event.pcr == 0 && !extended_pcr0 {
                extended_pcr0 = true;
                pcrs.insert(0, pcr0_start.clone());
            }
            let current = pcrs.entry(event.pcr).or_insert_with(|| vec![0u8; bank.size()]);
            *current = bank.digest(&[current, digest]);
        }
        Ok(pcrs)
    }

    /// The banks of the log the verifier can replay.
    pub fn replayable_banks(&self) -> Vec<Bank> {
        self.algorithms.iter().filter_map(|(a, _)| Bank::from_id(*a)).filter(|b| b.hash().is_some()).collect()
    }
}

/// One TCG_PCR_EVENT2 with a digest for each of the header's `algorithms`; errors without the
/// event's number (the caller adds it).
fn parse_event(r: &mut Reader<'_>, sequence: usize, algorithms: &[(u16, u16)]) -> Result<Event, ParseError> {
    let pcr = r.u32_le("pcrIndex")?;
    if pcr >= PCR_COUNT {
        return Err(ParseError::new(format!("PCR {pcr} out of range")));
    }
    let event_type = r.u32_le("eventType")?;
    let count = r.u32_le("digests.count")?;
    if count as usize != algorithms.len() {
        return Err(ParseError::new(format!("{count} digests for the header's {} algorithms", algorithms.len())));
    }
    let mut digests: Vec<(u16, Vec<u8>)> = Vec::with_capacity(algorithms.len());
    for _ in 0..count {
        let algorithm = r.u16_le("digest.hashAlg")?;
        let size = algorithms
            .iter()
            .find(|(a, _)| *a == algorithm)
            .map(|(_, s)| usize::from(*s))
            .ok_or_else(|| ParseError::new(format!("algorithm 0x{algorithm:04x} not in the header")))?;
        if digests.iter().any(|(a, _)| *a == algorithm) {
            return Err(ParseError::new(format!("algorithm 0x{algorithm:04x} twice")));
        }
        digests.push((algorithm, r.bytes(size, "digest")?.to_vec()));
    }
    let size = r.u32_le("eventSize")? as usize;
    let data = r.bytes(size, "event")?.to_vec();
    Ok(Event { sequence, pcr, event_type, digests, data })
}

fn startup_locality(event: &Event) -> Option<u8> {
    match event.data.as_slice() {
        [signature @ .., locality] if signature == STARTUP_LOCALITY_SIGNATURE => Some(*locality),
        _ => None,
    }
}

fn parse_spec_id(bytes: &[u8]) -> Result<Vec<(u16, u16)>, ParseError> {
    let mut r = Reader::new(bytes);
    if r.bytes(16, "specId.signature")? != SPEC_ID_SIGNATURE {
        return Err(ParseError::new("header: no \"Spec ID Event03\" signature (not a crypto-agile log)"));
    }
    r.u32_le("specId.platformClass")?;
    r.u8("specId.specVersionMinor")?;
    let major = r.u8("specId.specVersionMajor")?;
    if major != 2 {
        return Err(ParseError::new(format!("specId: version {major}, expected 2")));
    }
    r.u8("specId.specErrata")?;
    let uintn = r.u8("specId.uintnSize")?;
    if uintn != 1 && uintn != 2 {
        return Err(ParseError::new(format!("specId: uintnSize {uintn}")));
    }
    let count = r.u32_le("specId.numberOfAlgorithms")?;
    if count == 0 || count > MAX_ALGORITHMS {
        return Err(ParseError::new(format!("specId: {count} algorithms")));
    }
    let mut algorithms: Vec<(u16, u16)> = Vec::new();
    for _ in 0..count {
        let algorithm = r.u16_le("specId.algorithmId")?;
        let size = r.u16_le("specId.digestSize")?;
        if size == 0 || size > MAX_DIGEST_SIZE {
            return Err(ParseError::new(format!("specId: digest size {size} for 0x{algorithm:04x}")));
        }
        if let Some(bank) = Bank::from_id(algorithm) {
            if usize::from(size) != bank.size() {
                return Err(ParseError::new(format!("specId: {} digests of {size} bytes", bank.name())));
            }
        }
        if algorithms.iter().any(|(a, _)| *a == algorithm) {
            return Err(ParseError::new(format!("specId: algorithm 0x{algorithm:04x} twice")));
        }
        algorithms.push((algorithm, size));
    }
    let vendor = usize::from(r.u8("specId.vendorInfoSize")?);
    r.bytes(vendor, "specId.vendorInfo")?;
    r.finish("specId")?;
    Ok(algorithms)
}

/// UEFI_VARIABLE_DATA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariableData {
    pub guid: [u8; 16],
    pub name: String,
    pub data: Vec<u8>,
}

impl VariableData {
    /// Parses UEFI_VARIABLE_DATA: GUID, u64 name length (UTF-16 units), u64 data length, the
    /// UTF-16LE name, the data; every byte consumed.
    pub fn parse(bytes: &[u8]) -> Result<VariableData, ParseError> {
        let mut r = Reader::new(bytes);
        let guid = r.array::<16>("VariableName")?;
        let name_units = r.u64_le("UnicodeNameLength")?;
        let data_len = r.u64_le("VariableDataLength")?;
        let name_bytes = usize::try_from(name_units)
            .ok()
            .and_then(|n| n.checked_mul(2))
            .ok_or_else(|| ParseError::new("UnicodeNameLength too large"))?;
        let raw_name = r.bytes(name_bytes, "UnicodeName")?;
        let units: Vec<u16> = raw_name
            .chunks_exact(2)
            .map(|c| match c {
                [lo, hi] => u16::from_le_bytes([*lo, *hi]),
                _ => 0,
            })
            .collect();
        let name = String::from_utf16(&units).map_err(|_| ParseError::new("UnicodeName is not UTF-16"))?;
        let data_len = usize::try_from(data_len).map_err(|_| ParseError::new("VariableDataLength too large"))?;
        let data = r.bytes(data_len, "VariableData")?.to_vec();
        r.finish("UEFI_VARIABLE_DATA")?;
        Ok(VariableData { guid, name, data })
    }
}

/// What PCR 7's events say about secure boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecureBootFinding {
    /// SecureBoot = 1, no debug mode.
    Enabled,
    /// A failure code and its detail.
    Failed(&'static str, String),
}

/// Reads the secure-boot state from PCR 7's events: only the event types firmware logs there;
/// each event's data must hash to its digests in every bank the verifier can compute (the
/// event type is not covered by the PCR, the data is); the EFI variables measured once each,
/// before the PCR 7 separator; SecureBoot exactly one byte, 1; no "UEFI Debug Mode" action.
pub fn secure_boot_state(log: &EventLog) -> SecureBootFinding {
    let mut separator_seen = false;
    let mut variables: Vec<([u8; 16], String)> = Vec::new();
    let mut secure_boot: Option<Vec<u8>> = None;
    for event in log.events.iter().filter(|e| e.pcr == 7) {
        let seq = event.sequence;
        match event.event_type {
            EV_NO_ACTION => continue,
            EV_SEPARATOR | EV_EFI_VARIABLE_DRIVER_CONFIG | EV_EFI_VARIABLE_AUTHORITY | EV_EFI_ACTION => {}
            other => {
                return SecureBootFinding::Failed(
                    codes::EVENTLOG_UNEXPECTED_EVENT,
                    format!("event {seq}: type 0x{other:08x} in PCR 7"),
                )
            }
        }
        for (algorithm, digest) in &event.digests {
            if let Some(hash) = HashAlg::from_id(*algorithm) {
                if hash.digest(&[&event.data]) != *digest {
                    return SecureBootFinding::Failed(
                        codes::EVENTLOG_DIGEST_MISMATCH,
                        format!("event {seq}: PCR 7 event data does not hash to its {} digest", hash.name()),
                    );
                }
            }
        }
        match event.event_type {
            EV_SEPARATOR => {
                if separator_seen {
                    return SecureBootFinding::Failed(
                        codes::EVENTLOG_UNEXPECTED_EVENT,
                        format!("event {seq}: second PCR 7 separator"),
                    );
                }
                if event.data != [0, 0, 0, 0] {
                    return SecureBootFinding::Failed(
                        codes::EVENTLOG_UNEXPECTED_EVENT,
                        format!("event {seq}: PCR 7 separator signals an error"),
                    );
                }
                separator_seen = true;
            }
            EV_EFI_VARIABLE_DRIVER_CONFIG => {
                if separator_seen {
                    return SecureBootFinding::Failed(
                        codes::EVENTLOG_UNEXPECTED_EVENT,
                        format!("event {seq}: secure-boot configuration measured after the separator"),
                    );
                }
                let variable = match VariableData::parse(&event.data) {
                    Ok(v) => v,
                    Err(e) => return SecureBootFinding::Failed(codes::EVENTLOG_MALFORMED, format!("event {seq}: {e}")),
                };
                let key = (variable.guid, variable.name.clone());
                if variables.contains(&key) {
                    return SecureBootFinding::Failed(
                        codes::EVENTLOG_UNEXPECTED_EVENT,
                        format!("event {seq}: variable {} measured twice", variable.name),
                    );
                }
                variables.push(key);
                if variable.guid == EFI_GLOBAL_VARIABLE && variable.name == "SecureBoot" {
                    secure_boot = Some(variable.data);
                }
            }
            EV_EFI_ACTION if event.data == b"UEFI Debug Mode" => {
                return SecureBootFinding::Failed(codes::SECURE_BOOT_DISABLED, format!("event {seq}: UEFI Debug Mode"));
            }
            _ => {}
        }
    }
    if !separator_seen {
        return SecureBootFinding::Failed(codes::EVENTLOG_UNEXPECTED_EVENT, "no PCR 7 separator".to_owned());
    }
    match secure_boot.as_deref() {
        Some([1]) => SecureBootFinding::Enabled,
        Some([value]) => SecureBootFinding::Failed(codes::SECURE_BOOT_DISABLED, format!("SecureBoot = {value}")),
        Some(other) => SecureBootFinding::Failed(
            codes::EVENTLOG_MALFORMED,
            format!("SecureBoot variable of {} bytes", other.len()),
        ),
        None => {
            SecureBootFinding::Failed(codes::SECURE_BOOT_STATE_UNKNOWN, "SecureBoot variable not measured".to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crypto-agile log builder (SHA-1 and SHA-256), digests over the data unless given.
    struct Log {
        bytes: Vec<u8>,
    }

    impl Log {
        fn new() -> Log {
            let mut spec = SPEC_ID_SIGNATURE.to_vec();
            spec.extend(0u32.to_le_bytes());
            spec.extend([0, 2, 0, 2]);
            spec.extend(2u32.to_le_bytes());
            spec.extend([0x04, 0x00, 20, 0x00, 0x0b, 0x00, 32, 0x00, 0x00]);
            let mut bytes = 0u32.to_le_bytes().to_vec();
            bytes.extend(EV_NO_ACTION.to_le_bytes());
            bytes.extend([0; 20]);
            bytes.extend((spec.len() as u32).to_le_bytes());
            bytes.extend(spec);
            Log { bytes }
        }

        fn event(mut self, pcr: u32, kind: u32, data: &[u8]) -> Log {
            let (s1, s256) = if kind == EV_NO_ACTION {
                (vec![0; 20], vec![0; 32])
            } else {
                (HashAlg::Sha1.digest(&[data]), HashAlg::Sha256.digest(&[data]))
            };
            self.bytes.extend(pcr.to_le_bytes());
            self.bytes.extend(kind.to_le_bytes());
            self.bytes.extend(2u32.to_le_bytes());
            self.bytes.extend([0x04, 0x00]);
            self.bytes.extend(s1);
            self.bytes.extend([0x0b, 0x00]);
            self.bytes.extend(s256);
            self.bytes.extend((data.len() as u32).to_le_bytes());
            self.bytes.extend(data);
            self
        }

        fn variable(self, name: &str, value: &[u8]) -> Log {
            let mut data = EFI_GLOBAL_VARIABLE.to_vec();
            data.extend((name.encode_utf16().count() as u64).to_le_bytes());
            data.extend((value.len() as u64).to_le_bytes());
            data.extend(name.encode_utf16().flat_map(u16::to_le_bytes));
            data.extend(value);
            self.event(7, EV_EFI_VARIABLE_DRIVER_CONFIG, &data)
        }

        fn separator(self) -> Log {
            self.event(7, EV_SEPARATOR, &[0; 4])
        }

        fn state(&self) -> SecureBootFinding {
            secure_boot_state(&EventLog::parse(&self.bytes).unwrap())
        }
    }

    fn code(finding: SecureBootFinding) -> &'static str {
        match finding {
            SecureBootFinding::Enabled => "enabled",
            SecureBootFinding::Failed(code, _) => code,
        }
    }

    #[test]
    fn secure_boot_is_read_from_pcr_7_only_as_firmware_logs_it() {
        let on = || Log::new().variable("SecureBoot", &[1]).variable("PK", b"pk");
        assert_eq!(code(on().separator().state()), "enabled");
        assert_eq!(code(Log::new().variable("SecureBoot", &[0]).separator().state()), codes::SECURE_BOOT_DISABLED);
        assert_eq!(code(Log::new().variable("PK", b"pk").separator().state()), codes::SECURE_BOOT_STATE_UNKNOWN);
        assert_eq!(code(on().state()), codes::EVENTLOG_UNEXPECTED_EVENT, "no separator");
        assert_eq!(code(on().separator().separator().state()), codes::EVENTLOG_UNEXPECTED_EVENT);
        assert_eq!(
            code(on().event(7, EV_SEPARATOR, &[0xff; 4]).state()),
            codes::EVENTLOG_UNEXPECTED_EVENT,
            "an error separator"
        );
        assert_eq!(
            code(on().variable("PK", b"again").separator().state()),
            codes::EVENTLOG_UNEXPECTED_EVENT,
            "a variable measured twice"
        );
        assert_eq!(
            code(Log::new().separator().variable("SecureBoot", &[1]).state()),
            codes::EVENTLOG_UNEXPECTED_EVENT,
            "configuration after the separator"
        );
        assert_eq!(
            code(on().event(7, 0x8000_0003, b"an application").separator().state()),
            codes::EVENTLOG_UNEXPECTED_EVENT
        );
        assert_eq!(
            code(on().separator().event(7, EV_EFI_ACTION, b"UEFI Debug Mode").state()),
            codes::SECURE_BOOT_DISABLED
        );
        assert_eq!(code(Log::new().variable("SecureBoot", &[1, 0]).separator().state()), codes::EVENTLOG_MALFORMED);
        // Other PCRs' events do not matter here (the replay covers them).
        assert_eq!(code(on().event(4, 0x8000_0003, b"an application").separator().state()), "enabled");
        // A variable whose data does not hash to its digests.
        let mut log = on().separator();
        let last_pk_byte = log.bytes.windows(2).rposition(|w| w == b"pk").unwrap();
        log.bytes[last_pk_byte] = b'P';
        assert_eq!(code(log.state()), codes::EVENTLOG_DIGEST_MISMATCH);
    }

    #[test]
    fn replay_extends_from_zero_and_startup_locality() {
        let log = Log::new()
            .event(0, EV_NO_ACTION, b"StartupLocality\0\x03")
            .event(0, EV_SEPARATOR, &[0; 4])
            .event(7, EV_SEPARATOR, &[0; 4])
            .event(7, EV_NO_ACTION, b"not extended");
        let log = EventLog::parse(&log.bytes).unwrap();
        let pcrs = log.replay(HashAlg::Sha256).unwrap();
        let sep = HashAlg::Sha256.digest(&[&[0u8; 4]]);
        let mut locality = vec![0u8; 32];
        locality[31] = 3;
        assert_eq!(pcrs[&0], HashAlg::Sha256.digest(&[&locality, &sep]));
        assert_eq!(pcrs[&7], HashAlg::Sha256.digest(&[&[0u8; 32], &sep]));
        assert_eq!(pcrs.len(), 2);
        assert_eq!(log.replayable_banks(), vec![Bank::Sha1, Bank::Sha256]);
        // StartupLocality after PCR 0 was extended is refused.
        let late = Log::new().event(0, EV_SEPARATOR, &[0; 4]).event(0, EV_NO_ACTION, b"StartupLocality\0\x03");
        assert!(EventLog::parse(&late.bytes).unwrap().replay(HashAlg::Sha256).is_err());
        // A bank the log does not carry cannot be replayed.
        assert!(log.replay(HashAlg::Sha384).is_err());
    }

    #[test]
    fn the_log_is_parsed_strictly() {
        let good = Log::new().separator().bytes;
        assert!(EventLog::parse(&good).is_ok());
        // A SHA-1 (TCG 1.2 style) log: no Spec ID event.
        let mut legacy = good.clone();
        legacy[32] = b'X';
        assert!(EventLog::parse(&legacy).is_err());
        // An event with one digest for a two-algorithm header.
        let mut short = good.clone();
        let count_at = Log::new().bytes.len() + 8;
        short[count_at] = 1;
        assert!(EventLog::parse(&short).is_err());
        // A PCR index out of range.
        let mut high = good.clone();
        high[Log::new().bytes.len()] = 24;
        assert!(EventLog::parse(&high).is_err());
        // A digest size that contradicts the algorithm.
        let mut size = good;
        let header_sizes = 32 + 16 + 4 + 4 + 4 + 2;
        size[header_sizes] = 21;
        assert!(EventLog::parse(&size).is_err());
        assert!(EventLog::parse(&[]).is_err());
    }
}
