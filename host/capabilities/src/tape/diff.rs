//! Where a call's arguments differ from the tape's: the differing paths, not the two whole
//! values. A request body is a JSON document inside a JSON string (`{"text": "{\"card\":…}"}`),
//! so a string that holds a JSON object or array on both sides is compared as JSON too: one
//! changed word in a card's title reads as that field, not as kilobytes of escaped text.

use serde_json::Value;

/// At most this many differing paths are listed; the rest are counted.
const MOST_LINES: usize = 12;
/// A value shown longer than this is cut (with its length said).
const MOST_CHARS: usize = 160;

/// How a difference is said: of a replay (the tape against the call) or of an update (the old
/// tape against the new one).
#[derive(Debug, Clone, Copy)]
pub enum Said {
    Replay,
    Update,
}

impl Said {
    /// (the old value, the new value, a key only old, a key only new)
    fn words(self) -> [&'static str; 4] {
        match self {
            Said::Replay => [
                "the tape has",
                "the plugin sent",
                "only on the tape",
                "only in the call",
            ],
            Said::Update => ["was", "now", "was there, now gone", "new"],
        }
    }
}

/// One line per differing path (`path: the tape has A, the plugin sent B`, in the words of
/// `said`); empty when equal.
pub fn differences(tape: &Value, made: &Value, said: Said) -> Vec<String> {
    let mut lines = Vec::new();
    walk(tape, made, "", said.words(), &mut lines);
    if lines.len() > MOST_LINES {
        let more = lines.len() - MOST_LINES;
        lines.truncate(MOST_LINES);
        lines.push(format!("… and {more} more"));
    }
    lines
}

fn walk(tape: &Value, made: &Value, path: &str, words: [&str; 4], lines: &mut Vec<String>) {
    match (tape, made) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let inner = format!("{path}.{key}");
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => walk(x, y, &inner, words, lines),
                    (Some(x), None) => lines.push(format!("{inner}: {}: {}", words[2], shown(x))),
                    (None, Some(y)) => lines.push(format!("{inner}: {}: {}", words[3], shown(y))),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (index, (x, y)) in a.iter().zip(b).enumerate() {
                walk(x, y, &format!("{path}[{index}]"), words, lines);
            }
            if a.len() != b.len() {
                lines.push(format!(
                    "{path}: {} items on the tape, {} in the call",
                    a.len(),
                    b.len()
                ));
            }
        }
        (Value::String(a), Value::String(b)) if a != b => match (as_document(a), as_document(b)) {
            (Some(x), Some(y)) => walk(&x, &y, &format!("{path} (JSON)"), words, lines),
            _ => lines.push(changed(path, tape, made, words)),
        },
        (a, b) if a != b => lines.push(changed(path, a, b, words)),
        _ => {}
    }
}

/// A string holding a JSON object or array, parsed; anything else is compared as text.
fn as_document(text: &str) -> Option<Value> {
    let trimmed = text.trim_start();
    if !(trimmed.starts_with('{') || trimmed.starts_with('[')) {
        return None;
    }
    serde_json::from_str(text).ok()
}

fn changed(path: &str, tape: &Value, made: &Value, words: [&str; 4]) -> String {
    let path = if path.is_empty() { "(the value)" } else { path };
    format!(
        "{path}: {} {}, {} {}",
        words[0],
        shown(tape),
        words[1],
        shown(made)
    )
}

fn shown(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= MOST_CHARS {
        return text;
    }
    let cut: String = text.chars().take(MOST_CHARS).collect();
    format!("{cut}… ({} characters)", text.chars().count())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// One word changed in a card title inside a body's JSON text: one line, naming the
    /// field inside the document and both words.
    #[test]
    fn a_changed_field_inside_a_json_body_is_named() {
        let card = |title: &str| {
            json!({"card": {"header": {"title": {"content": title}}, "elements": [1, 2, 3]}})
                .to_string()
        };
        let tape = json!({"method": "POST", "body": {"text": card("Job failed")}});
        let made = json!({"method": "POST", "body": {"text": card("Job FAILED")}});
        assert_eq!(
            differences(&tape, &made, Said::Replay),
            vec![
                ".body.text (JSON).card.header.title.content: the tape has \"Job failed\", \
                 the plugin sent \"Job FAILED\""
                    .to_string()
            ]
        );
        assert!(differences(&tape, &tape, Said::Replay).is_empty());
    }

    #[test]
    fn missing_and_extra_keys_and_lengths_are_said() {
        let tape = json!({"a": 1, "list": [1, 2], "text": "plain"});
        let made = json!({"b": 2, "list": [1, 2, 3], "text": "other"});
        let lines = differences(&tape, &made, Said::Replay);
        assert_eq!(
            lines,
            vec![
                ".a: only on the tape: 1".to_string(),
                ".b: only in the call: 2".to_string(),
                ".list: 2 items on the tape, 3 in the call".to_string(),
                ".text: the tape has \"plain\", the plugin sent \"other\"".to_string(),
            ]
        );
    }

    #[test]
    fn long_values_and_many_lines_are_cut() {
        let tape = json!({"x": "a".repeat(1000)});
        let made = json!({"x": "b".repeat(1000)});
        let line = &differences(&tape, &made, Said::Replay)[0];
        assert!(line.contains("(1002 characters)"), "{line}");
        assert!(line.len() < 500, "{line}");
        let tape = Value::Array((0..30).map(|i| json!(i)).collect());
        let made = Value::Array((0..30).map(|i| json!(i + 1)).collect());
        let lines = differences(&tape, &made, Said::Replay);
        assert_eq!(lines.len(), MOST_LINES + 1);
        assert_eq!(lines[MOST_LINES], "… and 18 more");
    }
}
