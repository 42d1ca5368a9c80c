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
    /// Keeps `text` as 16 bytes when it is a canonical (lowercase, hyphenated) UUID, else as
    /// the text itself.
    pub fn new(text: &str) -> Uid {
        Uid(match parse_uuid(text) {
            Some(bytes) => Repr::Uuid(bytes),
            None => Repr::Text(text.into()),
        })
    }
}

impl Uid {
    /// A number from the uid's own bits, for [`UidMap`](crate::uid_map::UidMap) to pick a
    /// table: a UUID's last byte is random; any other text is hashed.
    pub(crate) fn spread(&self) -> usize {
        match &self.0 {
            Repr::Uuid(bytes) => usize::from(bytes[15]),
            Repr::Text(text) => text.bytes().fold(0usize, |h, b| {
                h.wrapping_mul(31).wrapping_add(usize::from(b))
            }),
        }
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
/// included, which would not print back the same). Every job's uid is parsed a few times per
/// event (each per-job map is keyed by it), so the digits are read through a table with one
/// check at the end instead of a branch per digit.
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let text: &[u8; 36] = text.as_bytes().try_into().ok()?;
    if text[8] != b'-' || text[13] != b'-' || text[18] != b'-' || text[23] != b'-' {
        return None;
    }
    let mut bytes = [0u8; 16];
    let mut bad = 0u8;
    for (byte, &at) in bytes.iter_mut().zip(&DIGIT_PAIRS) {
        let (high, low) = (HEX[usize::from(text[at])], HEX[usize::from(text[at + 1])]);
        bad |= high | low;
        *byte = (high << 4) | (low & 0x0f);
    }
    (bad & NOT_HEX == 0).then_some(bytes)
}

/// Where each byte's two digits start in the text.
const DIGIT_PAIRS: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];

/// Marks a character that is not a lowercase hex digit in [`HEX`].
const NOT_HEX: u8 = 0x80;

/// Each character's value as a lowercase hex digit, or [`NOT_HEX`].
const HEX: [u8; 256] = {
    let mut table = [NOT_HEX; 256];
    let mut c = 0;
    while c < 10 {
        table[b'0' as usize + c] = c as u8;
        c += 1;
    }
    let mut c = 0;
    while c < 6 {
        table[b'a' as usize + c] = 10 + c as u8;
        c += 1;
    }
    table
};

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

    proptest::proptest! {
        /// The digits' reading, against a plain one: a text of the UUID's shape over lowercase
        /// digits, uppercase, dashes and other characters (one of them two bytes long) is kept
        /// as bytes exactly when it is canonical, and always prints back as it came.
        #[test]
        fn canonical_exactly_when_lowercase_hex_in_place(
            mut chars in proptest::collection::vec(
                proptest::prop_oneof![8 => "[0-9a-f]", 1 => "[A-Fg/:é-]"],
                36..=37,
            ),
            dashes in proptest::collection::vec(proptest::bool::weighted(0.9), 4),
        ) {
            for (at, dash) in [8, 13, 18, 23].into_iter().zip(dashes) {
                if dash {
                    chars[at] = "-".to_string();
                }
            }
            let text = chars.concat();
            let canonical = text.len() == 36
                && text.bytes().enumerate().all(|(i, c)| {
                    if matches!(i, 8 | 13 | 18 | 23) {
                        c == b'-'
                    } else {
                        c.is_ascii_digit() || (b'a'..=b'f').contains(&c)
                    }
                });
            let uid = Uid::new(&text);
            proptest::prop_assert_eq!(matches!(uid.0, Repr::Uuid(_)), canonical, "{}", text);
            proptest::prop_assert_eq!(uid.to_string(), text);
        }
    }

    #[test]
    fn a_uid_takes_no_more_room_than_a_boxed_str_and_its_tag() {
        assert!(std::mem::size_of::<Uid>() <= 24);
    }
}
