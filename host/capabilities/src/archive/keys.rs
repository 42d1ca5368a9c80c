//! Which keys a plugin may write: relative, `/`-separated, no empty, `.` or `..` segments, no
//! backslashes or control characters, at most [`MAX_KEY_BYTES`].
//!
//! Apart because it is the one rule that keeps every write under the plugin's prefix; it is
//! checked (and tested) on its own, before anything reaches the store.

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// A key a plugin may not write, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Empty, or longer than [`MAX_KEY_BYTES`]; the length.
    #[error("a key must be 1 to {MAX_KEY_BYTES} bytes, got {0}")]
    Length(usize),
    /// Starts with `/`; the key.
    #[error("key `{0}` is absolute; keys are relative to the plugin's prefix")]
    Absolute(String),
    /// Holds a backslash (a path separator to some file systems) or a control character;
    /// the key.
    #[error("key `{}` contains a backslash or a control character", .0.escape_debug())]
    Character(String),
    /// A segment that is empty (`a//b`), `.` or `..`, which could climb out of the prefix;
    /// the key.
    #[error("key `{0}` has an empty, `.` or `..` segment; it must stay under the prefix")]
    Segment(String),
}

/// Checks a relative key: `a/b/c.log.gz`.
pub fn check_key(key: &str) -> Result<(), KeyError> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(KeyError::Length(key.len()));
    }
    if key.starts_with('/') {
        return Err(KeyError::Absolute(key.to_string()));
    }
    if key.contains('\\') || key.chars().any(char::is_control) {
        return Err(KeyError::Character(key.to_string()));
    }
    for segment in key.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err(KeyError::Segment(key.to_string()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_stay_under_the_prefix() {
        assert!(check_key("east/ml/uid/pod/container.log.gz").is_ok());
        assert!(check_key("manifest.json").is_ok());
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "a/./b",
            "a\\b",
            "a\nb",
            "a/",
        ] {
            assert!(check_key(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(check_key(&"k".repeat(MAX_KEY_BYTES + 1)).is_err());
    }
}
