//! Which keys a plugin may write: relative, `/`-separated, no empty, `.` or `..` segments, no
//! backslashes or control characters, at most [`MAX_KEY_BYTES`].
//!
//! Apart because it is the one rule that keeps every write under the plugin's prefix; it is
//! checked (and tested) on its own, before anything reaches the store.

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// Checks a relative key: `a/b/c.log.gz`.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(format!(
            "a key must be 1 to {MAX_KEY_BYTES} bytes, got {}",
            key.len()
        ));
    }
    if key.starts_with('/') {
        return Err(format!(
            "key `{key}` is absolute; keys are relative to the plugin's prefix"
        ));
    }
    if key.contains('\\') || key.chars().any(char::is_control) {
        return Err(format!(
            "key `{}` contains a backslash or a control character",
            key.escape_debug()
        ));
    }
    for segment in key.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err(format!(
                "key `{key}` has an empty, `.` or `..` segment; it must stay under the prefix"
            ));
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
