//! Checks of free-text fields shared by every area: trimmed, bounded, no control characters.

use crate::error::{Error, Result};

fn too_long(field: &str, max: usize) -> Error {
    Error::invalid_field(field, format!("must be at most {max} characters without control characters"))
}

/// `value` trimmed; at most `max` characters and no control characters (it may be empty).
pub fn bounded_text(field: &str, value: &str, max: usize) -> Result<String> {
    let trimmed = value.trim();
    if trimmed.chars().count() > max || trimmed.chars().any(char::is_control) {
        return Err(too_long(field, max));
    }
    Ok(trimmed.to_owned())
}

/// As [`bounded_text`] for an optional field; blank reads as absent.
pub fn optional_text(field: &str, value: Option<&str>, max: usize) -> Result<Option<String>> {
    match value.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => bounded_text(field, v, max).map(Some),
    }
}

/// A display name (a workspace's, a key's, a certificate's): trimmed, 1–200 characters without
/// control characters.
pub fn validate_name(field: &str, name: &str) -> Result<String> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(Error::invalid_field(field, "must be 1 to 200 printable characters"));
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimmed_bounded_and_printable() {
        assert_eq!(bounded_text("name", "  a  ", 3).unwrap(), "a");
        assert!(bounded_text("name", "abcd", 3).is_err());
        assert!(bounded_text("name", "a\u{7}", 3).is_err());
        assert_eq!(optional_text("name", Some("   "), 3).unwrap(), None);
        assert_eq!(optional_text("name", None, 3).unwrap(), None);
        assert_eq!(optional_text("name", Some(" x "), 3).unwrap().as_deref(), Some("x"));
    }
}
