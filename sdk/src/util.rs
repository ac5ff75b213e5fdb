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
    }
}
