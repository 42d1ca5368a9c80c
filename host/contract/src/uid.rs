//! A job's uid as the per-job records keep it.
//!
//! Watchers and lanes keep a record for every job they track, keyed by uid, and a fleet can
//! have a million jobs. API servers make uids as lowercase hyphenated UUIDs: 36 bytes of text
//! in a heap allocation of its own, or 16 bytes as a number. [`Uid`] keeps such a uid as the
//! number, and any other uid (a simulator's, an aggregated API's) as the text it was, so
//! turning it back into text always gives exactly what came in.

use std::fmt;

/// A uid kept in 16 bytes when it is a canonical UUID, as text otherwise.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Uid(Repr);

/// `Text` never holds a canonical UUID ([`Uid::new`] makes those `Uuid`), so the derived
/// equality and hash agree with equality of the texts.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    Uuid([u8; 16]),
    Text(Box<str>),
}

impl Uid {
    pub fn new(text: &str) -> Uid {
        Uid(match parse_uuid(text) {
            Some(bytes) => Repr::Uuid(bytes),
            None => Repr::Text(text.into()),
        })
    }
}

impl From<&str> for Uid {
    fn from(text: &str) -> Uid {
        Uid::new(text)
    }
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Text(text) => f.write_str(text),
            Repr::Uuid(bytes) => {
                for (i, byte) in bytes.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        f.write_str("-")?;
                    }
                    write!(f, "{byte:02x}")?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Debug for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// The 16 bytes of `8-4-4-4-12` lowercase hex digits; `None` for anything else (uppercase
/// included, which would not print back the same).
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let text = text.as_bytes();
    if text.len() != 36 || [8, 13, 18, 23].iter().any(|&i| text[i] != b'-') {
        return None;
    }
    let mut bytes = [0u8; 16];
    let mut at = 0;
    for byte in &mut bytes {
        if matches!(at, 8 | 13 | 18 | 23) {
            at += 1;
        }
        *byte = (hex_digit(text[at])? << 4) | hex_digit(text[at + 1])?;
        at += 2;
    }
    Some(bytes)
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_canonical_uuid_is_kept_as_its_bytes_and_prints_back_the_same() {
        let text = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
        let uid = Uid::new(text);
        assert!(matches!(uid.0, Repr::Uuid(_)));
        assert_eq!(uid.to_string(), text);
        assert_eq!(uid, Uid::new(text));
    }

    #[test]
    fn anything_else_is_kept_as_text_exactly() {
        for text in [
            "",
            "u1",
            "0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0",
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f",
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f00",
            "0f1e2d3c+4b5a-6978-8796-a5b4c3d2e1f0",
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1fg",
            "0f1e2d3c4b5a-6978-8796-a5b4c3d2e1f0-",
            "ü1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
        ] {
            let uid = Uid::new(text);
            assert!(matches!(uid.0, Repr::Text(_)), "{text:?}");
            assert_eq!(uid.to_string(), text);
        }
    }

    #[test]
    fn equal_uids_are_equal_texts() {
        let a = Uid::new("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
        let b = Uid::new("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f1");
        assert_ne!(a, b);
        assert_ne!(Uid::new("u1"), Uid::new("u2"));
        assert_eq!(Uid::new("u1"), Uid::from("u1"));
    }

    #[test]
    fn a_uid_takes_no_more_room_than_a_boxed_str_and_its_tag() {
        assert!(std::mem::size_of::<Uid>() <= 24);
    }
}
