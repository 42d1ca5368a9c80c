//! Feishu's custom-bot signature.
//!
//! Unusual on purpose, so worth stating: the HMAC-SHA256 *key* is `timestamp + "\n" + secret`
//! and the *message* is empty; the signature is the Base64 of the digest. The timestamp is in
//! seconds, sent as a string, and Feishu refuses it when more than an hour off its clock.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The `sign` field for a message sent at `timestamp` (unix seconds).
pub fn sign(timestamp: i64, secret: &str) -> String {
    let key = format!("{timestamp}\n{secret}");
    // HMAC accepts keys of any length, so construction cannot fail; an empty signature (which
    // Feishu refuses with a clear code) beats a panic if it ever did.
    match Hmac::<Sha256>::new_from_slice(key.as_bytes()) {
        Ok(mac) => BASE64.encode(mac.finalize().into_bytes()),
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_an_independent_computation() {
        // Computed outside Rust: Python's `hmac.new(b"1599360473\ndemo-secret", b"",
        // hashlib.sha256)`, Base64-encoded. The test kit's receiver checks the same vector.
        assert_eq!(
            sign(1_599_360_473, "demo-secret"),
            "3/MaVZ8JLIy4TUG+7KSFJqvUkTKd+HWY8g+56DZWq8s="
        );
    }

    #[test]
    fn matches_hmac_over_an_empty_message() {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(b"1700000000\nSEC123").expect("any key length");
        mac.update(&[]);
        assert_eq!(
            sign(1_700_000_000, "SEC123"),
            BASE64.encode(mac.finalize().into_bytes())
        );
        assert_ne!(sign(1_700_000_001, "SEC123"), sign(1_700_000_000, "SEC123"));
    }
}
