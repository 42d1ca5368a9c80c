//! Text a plugin hands the host — log lines, retry and give-up reasons, `init` refusals, trap
//! output — made safe to keep and print.
//!
//! Such text ends up in log lines, in `/status`, and in dead-letter rows. Unbounded, a plugin
//! could turn one call into megabytes of logs and a megabyte database row; with a newline or a
//! terminal escape in it, a plugin could forge a whole log line (of jobrelay's own, in the human
//! format) or rewrite an operator's terminal. So every such text is cut to a bound and its
//! control characters are escaped (`\n`, `\r`, `\t`, `\u{1b}`, …, and the Unicode line and
//! paragraph separators) before the host keeps it.

/// Longest reason (retry, give-up, refusal, trap) kept, in bytes.
pub const MAX_REASON_BYTES: usize = 4 * 1024;

/// `text` with control characters escaped, cut to at most `max` bytes (plus a note saying how
/// much was cut).
pub fn tame(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max) + 16);
    for (at, c) in text.char_indices() {
        let before = out.len();
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => {
                out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
            }
            c => out.push(c),
        }
        if out.len() > max {
            out.truncate(before);
            out.push_str(&format!("… ({} more bytes cut)", text.len() - at));
            break;
        }
    }
    out
}

/// A reason from a plugin, tamed with [`MAX_REASON_BYTES`].
pub fn reason(text: &str) -> String {
    tame(text, MAX_REASON_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_cannot_forge_a_line() {
        let forged = "ok\n2026-11-24T00:00:00Z  INFO jobrelay: all good\r\u{1b}[2J\u{2028}x";
        let tamed = tame(forged, 1_000);
        assert!(
            !tamed.contains(['\n', '\r', '\u{1b}', '\u{2028}']),
            "{tamed}"
        );
        assert!(tamed.starts_with("ok\\n2026"), "{tamed}");
        assert!(tamed.contains("\\u{1b}[2J"), "{tamed}");
    }

    #[test]
    fn long_text_is_cut_and_says_so() {
        let long = "é".repeat(10_000);
        let tamed = tame(&long, 100);
        assert!(tamed.len() < 140, "{}", tamed.len());
        assert!(tamed.contains("more bytes cut"), "{tamed}");
        assert_eq!(tame("short", 100), "short");
        let sixteen_mib = "x".repeat(16 << 20);
        assert!(reason(&sixteen_mib).len() <= MAX_REASON_BYTES + 40);
    }

    #[test]
    fn backslashes_are_kept_as_they_are() {
        assert_eq!(tame(r"C:\path", 100), r"C:\path");
    }
}
