//! `plugin test --update`'s edit of a case's `expect.yaml`: the `outcomes:` list rewritten in
//! the file's own text, each status replaced where it stands, so the author's comments, blank
//! lines, key order and the list's own form (`[ok, retry]` on one line or over several, or one
//! `- ok` a line) stay as they were. Re-serialising the document would drop every comment (a
//! YAML parser does not keep them), which is what an author loses most.
//!
//! Only a top-level `outcomes:` whose statuses are plain or quoted scalars is edited; the
//! result is read back and must equal the old document with only `outcomes` changed, so a
//! layout this does not know is refused with a message, never written wrong.

use anyhow::{Context, bail};
use serde_yaml_ng::Value;

/// `text` with its top-level `outcomes:` list made `now`, all else as it was.
pub fn rewrite_outcomes(text: &str, now: &[&str]) -> anyhow::Result<String> {
    let key = outcomes_key(text).context("no top-level `outcomes:` line to rewrite")?;
    let after_key = key + "outcomes:".len();
    let line_end = text[after_key..]
        .find('\n')
        .map_or(text.len(), |n| after_key + n);
    let value = without_comment(&text[after_key..line_end]).trim();
    let edited = if value.starts_with('[') {
        let open = after_key + text[after_key..line_end].find('[').unwrap_or(0);
        flow(text, open, now)?
    } else if value.is_empty() {
        block(text, line_end, now)
    } else {
        bail!("`outcomes:` is `{value}`, not a list");
    };
    check(text, &edited, now)?;
    Ok(edited)
}

/// Where the line `outcomes:` starts, at the document's top level (column 0).
fn outcomes_key(text: &str) -> Option<usize> {
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with("outcomes:") {
            return Some(start);
        }
        start += line.len();
    }
    None
}

/// A line's text before its comment (` #…` or a line that is one).
fn without_comment(line: &str) -> &str {
    if line.trim_start().starts_with('#') {
        return "";
    }
    match line.find(" #") {
        Some(n) => &line[..n],
        None => line,
    }
}

/// One item's place in the text, as byte offsets.
type Span = (usize, usize);

/// A flow list `[a, b]` from `open` (its `[`), over one line or several, comments kept.
fn flow(text: &str, open: usize, now: &[&str]) -> anyhow::Result<String> {
    let bytes = text.as_bytes();
    let mut items: Vec<Span> = Vec::new();
    let mut item: Option<Span> = None;
    let mut close = None;
    let mut at = open + 1;
    while at < bytes.len() {
        match bytes[at] {
            b'#' if at == 0 || bytes[at - 1].is_ascii_whitespace() => {
                at = text[at..].find('\n').map_or(text.len(), |n| at + n);
                continue;
            }
            quote @ (b'\'' | b'"') => {
                let end = text[at + 1..]
                    .find(char::from(quote))
                    .map(|n| at + 1 + n + 1)
                    .context("a quoted status without its closing quote")?;
                item = Some((item.map_or(at, |(s, _)| s), end));
                at = end;
                continue;
            }
            b',' => items.extend(item.take()),
            b']' => {
                items.extend(item.take());
                close = Some(at);
                break;
            }
            b if b.is_ascii_whitespace() => {}
            _ => item = Some((item.map_or(at, |(s, _)| s), at + 1)),
        }
        at += 1;
    }
    close.context("`outcomes: [` without its closing `]`")?;
    let mut edits: Vec<(Span, String)> = items
        .iter()
        .zip(now)
        .map(|(span, status)| (*span, (*status).to_string()))
        .collect();
    if now.len() > items.len() {
        let added = now[items.len()..].join(", ");
        match items.last() {
            Some(&(_, end)) => edits.push(((end, end), format!(", {added}"))),
            None => edits.push(((open + 1, open + 1), added)),
        }
    } else if now.len() < items.len() {
        let from = match now.len() {
            0 => open + 1,
            n => items[n - 1].1,
        };
        let to = items[items.len() - 1].1;
        edits.push(((from, to), String::new()));
    }
    Ok(apply(text, edits))
}

/// A block list, one `- status` a line, from the line after `outcomes:` (`line_end`, its
/// newline); comment and blank lines among its items stay.
fn block(text: &str, line_end: usize, now: &[&str]) -> String {
    let mut items: Vec<(Span, Span)> = Vec::new(); // (the whole line, the status)
    let mut indent = "  ";
    let mut start = (line_end + 1).min(text.len());
    for line in text[start..].split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let trimmed = body.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            start += line.len();
            continue;
        }
        let Some(rest) = trimmed.strip_prefix('-') else {
            break;
        };
        if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
            break;
        }
        let lead = body.len() - trimmed.len();
        indent = &body[..lead];
        let value_from = start + lead + 1 + (rest.len() - rest.trim_start().len());
        let value = without_comment(&text[value_from..start + body.len()]).trim_end();
        items.push((
            (start, start + line.len()),
            (value_from, value_from + value.len()),
        ));
        start += line.len();
    }
    let mut edits: Vec<(Span, String)> = items
        .iter()
        .zip(now)
        .map(|((_, value), status)| (*value, (*status).to_string()))
        .collect();
    if now.len() > items.len() {
        let at = items
            .last()
            .map_or((line_end + 1).min(text.len()), |(l, _)| l.1);
        let newline = if text[..at].ends_with('\n') || at == 0 {
            ""
        } else {
            "\n"
        };
        let added: String = now[items.len()..]
            .iter()
            .map(|status| format!("{indent}- {status}\n"))
            .collect();
        edits.push(((at, at), format!("{newline}{added}")));
    } else {
        for (line, _) in &items[now.len()..] {
            edits.push((*line, String::new()));
        }
    }
    apply(text, edits)
}

/// `text` with each span replaced, the last first so the earlier offsets hold.
fn apply(text: &str, mut edits: Vec<(Span, String)>) -> String {
    edits.sort_by_key(|((start, end), _)| (*start, *end));
    let mut out = text.to_string();
    for ((start, end), with) in edits.into_iter().rev() {
        out.replace_range(start..end, &with);
    }
    out
}

/// The edit is what was meant: the new text reads as the old document with `outcomes` as
/// `now` and nothing else changed.
fn check(old: &str, new: &str, now: &[&str]) -> anyhow::Result<()> {
    let mut want: Value = serde_yaml_ng::from_str(old).context("not YAML")?;
    let got: Value = serde_yaml_ng::from_str(new).context("the edit is not YAML")?;
    let Value::Mapping(map) = &mut want else {
        bail!("not a mapping of keys");
    };
    map.insert(
        "outcomes".into(),
        Value::Sequence(now.iter().map(|s| (*s).into()).collect()),
    );
    if got != want {
        bail!("its layout is not one this edits in place");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_list_on_one_line_keeps_its_comments() {
        let text =
            "# why this case\noutcomes: [retry, ok]   # the second one matters\ntape: answers\n";
        assert_eq!(
            rewrite_outcomes(text, &["ok", "ok"]).expect("edited"),
            "# why this case\noutcomes: [ok, ok]   # the second one matters\ntape: answers\n"
        );
        assert_eq!(
            rewrite_outcomes(text, &["ok", "ok", "give_up"]).expect("edited"),
            "# why this case\noutcomes: [ok, ok, give_up]   # the second one matters\ntape: answers\n"
        );
        assert_eq!(
            rewrite_outcomes(text, &["ok"]).expect("edited"),
            "# why this case\noutcomes: [ok]   # the second one matters\ntape: answers\n"
        );
        assert_eq!(
            rewrite_outcomes("outcomes: []\n", &["ok"]).expect("edited"),
            "outcomes: [ok]\n"
        );
        assert_eq!(
            rewrite_outcomes("outcomes: ['retry', \"ok\"]\n", &["ok", "retry"]).expect("edited"),
            "outcomes: [ok, retry]\n"
        );
    }

    #[test]
    fn a_flow_list_over_lines_keeps_each_items_comment() {
        let text = "outcomes: [\n  retry,  # the failure\n  ok,     # the success\n]\n";
        assert_eq!(
            rewrite_outcomes(text, &["ok", "skipped"]).expect("edited"),
            "outcomes: [\n  ok,  # the failure\n  skipped,     # the success\n]\n"
        );
    }

    #[test]
    fn a_block_list_keeps_its_comments_and_indent() {
        let text = "# the case\noutcomes:\n  # first the failure\n  - retry  # was ok before the fix\n\n  - ok\ncalls:\n  - call: kv.set\n";
        assert_eq!(
            rewrite_outcomes(text, &["ok", "ok"]).expect("edited"),
            "# the case\noutcomes:\n  # first the failure\n  - ok  # was ok before the fix\n\n  - ok\ncalls:\n  - call: kv.set\n"
        );
        assert_eq!(
            rewrite_outcomes(text, &["ok", "ok", "retry"]).expect("edited"),
            "# the case\noutcomes:\n  # first the failure\n  - ok  # was ok before the fix\n\n  - ok\n  - retry\ncalls:\n  - call: kv.set\n"
        );
        assert_eq!(
            rewrite_outcomes(text, &["give_up"]).expect("edited"),
            "# the case\noutcomes:\n  # first the failure\n  - give_up  # was ok before the fix\n\ncalls:\n  - call: kv.set\n"
        );
        assert_eq!(
            rewrite_outcomes("outcomes:\n- ok\n- ok", &["retry", "ok"]).expect("edited"),
            "outcomes:\n- retry\n- ok"
        );
        assert_eq!(
            rewrite_outcomes("outcomes:\n- ok", &["ok", "retry"]).expect("edited"),
            "outcomes:\n- ok\n- retry\n"
        );
    }

    #[test]
    fn what_it_cannot_edit_in_place_is_refused() {
        for text in [
            "calls: []\n",
            "outcomes: ok\n",
            "{outcomes: [ok]}\n",
            "outcomes: [ok\n",
            "outcomes: &a [ok]\nother: *a\n",
        ] {
            assert!(rewrite_outcomes(text, &["retry"]).is_err(), "{text}");
        }
    }
}
