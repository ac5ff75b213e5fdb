//! Small helpers integration and connector plugins keep needing: text of a JSON member,
//! truncation for error messages, RFC 3339 timestamps without a clock library.

use serde_json::Value;

/// A member of `value` as text (strings, numbers, booleans); `None` when absent, empty or of
/// another type.
pub fn text(value: &Value, key: &str) -> Option<String> {
    match value.get(key)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The first `max` characters of `text` (for upstream answers quoted in error messages).
pub fn truncate(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

/// Milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339(ms: i64) -> String {
    let (secs, millis) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", sod / 3600, sod % 3600 / 60, sod % 60)
}

/// Seconds since the epoch of an RFC 3339 timestamp (`2026-01-01T00:00:00Z`, fractions and
/// `±hh:mm` offsets accepted); `None` when it is not one.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let text = text.trim();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        part.bytes().all(|b| b.is_ascii_digit()).then(|| part.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let separators_ok = text.get(4..5) == Some("-")
        && text.get(7..8) == Some("-")
        && matches!(text.get(10..11), Some("T" | "t" | " "))
        && text.get(13..14) == Some(":")
        && text.get(16..17) == Some(":");
    if !separators_ok
        || !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = text.get(19..)?;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &fraction[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.get(0..1)? {
                "+" => 1,
                "-" => -1,
                _ => return None,
            };
            let (h, m) = (rest.get(1..3)?.parse::<i64>().ok()?, rest.get(4..6)?.parse::<i64>().ok()?);
            if rest.len() != 6 || rest.get(3..4) != Some(":") {
                return None;
            }
            sign * (h * 3600 + m * 60)
        }
    };
    // Days from civil (H. Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second - offset)
}

/// The `CERTIFICATE` blocks of PEM text, each as its own PEM string, in order (a leaf and its
/// chain as CAs deliver them).
pub fn pem_certificates(text: &str) -> Vec<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let Some(len) = rest[start..].find(END) else { break };
        let end = start + len + END.len();
        found.push(format!("{}\n", &rest[start..end]));
        rest = &rest[end..];
    }
    found
}

/// Standard base64 with padding (RFC 4648 §4), as AWS and most JSON APIs take binary members.
pub fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The DER bytes of the first PEM block of `text`; `None` when there is none or it is not base64.
pub fn pem_to_der(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let start = text.find("-----BEGIN ")?;
    let body_start = start + text[start..].find('\n')? + 1;
    let body_len = text[body_start..].find("-----END ")?;
    let body: String = text[body_start..body_start + body_len].chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn text_truncate_and_timestamps() {
        let value = json!({ "s": "x", "n": 7, "b": true, "e": " ", "o": {} });
        assert_eq!(text(&value, "s").as_deref(), Some("x"));
        assert_eq!(text(&value, "n").as_deref(), Some("7"));
        assert_eq!(text(&value, "b").as_deref(), Some("true"));
        assert_eq!((text(&value, "e"), text(&value, "o"), text(&value, "none")), (None, None, None));
        assert_eq!(truncate("héllo", 2), "hé");
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_767_225_600_123), "2026-01-01T00:00:00.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(parse_rfc3339("2026-01-01T00:00:00Z"), Some(1_767_225_600));
        assert_eq!(parse_rfc3339("2000-02-29T00:00:00.123456Z"), Some(951_782_400));
        assert_eq!(parse_rfc3339("2026-01-01T01:30:00+01:30"), Some(1_767_225_600));
        assert_eq!(parse_rfc3339("2025-12-31T22:00:00-02:00"), Some(1_767_225_600));
        for bad in ["", "2026-01-01", "2026-13-01T00:00:00Z", "2026-01-01T00:00:00", "2026-01-01T00:00:00+1"] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn pem_blocks_split_and_decode() {
        let one = crate::pki::certificate_pem(&[1, 2, 3]);
        let two = crate::pki::certificate_pem(&[4, 5]);
        let text = format!("{one}\n{two}");
        assert_eq!(pem_certificates(&text), vec![one.clone(), two.clone()]);
        assert_eq!(pem_to_der(&two), Some(vec![4, 5]));
        assert_eq!(pem_to_der("nothing"), None);
        assert_eq!(base64(b"ab?"), "YWI/");
    }
}
