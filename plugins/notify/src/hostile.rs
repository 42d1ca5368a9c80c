//! For the chat plugins' tests only (feature `hostile`): random hostile job text, and oracles
//! that list the markup a service would act on in a text.
//!
//! The property each chat plugin checks: a message about a job whose every field from the
//! cluster is hostile — mentions, links, emphasis, code, tags, addresses, line breaks that start
//! blocks, any unicode — has exactly the markup of a message about a job with harmless values in
//! the same fields. Whatever markup the body has is then the plugin's own (its labels in bold,
//! its configured links and mentions), never the cluster's.
//!
//! The oracles are written from each service's documented syntax, not from the neutralisers'
//! tables ([`crate::markup`]), and over-approximate it: every character that can begin markup
//! counts, wherever it is. A neutraliser that forgets one is caught.
//!
//! The README helpers read a sink's promise as written — a table of what it changes, and
//! examples — so a test can hold the plugin to it.

use proptest::prelude::*;
use serde_json::Value;

use crate::fleet::{FleetEvent, FleetEventKind};
use crate::job::{JobEvent, sample};

/// Pieces of hostile text: every service's mentions, links, emphasis, code and tags, addresses,
/// entities that decode to markup, and lines that start blocks.
pub const FRAGMENTS: &[&str] = &[
    "<at id=all></at>",
    "<at user_id=\"ou_x\">x</at>",
    "<@U999EVIL>",
    "<@all>",
    "@all",
    "@13800000000",
    "<!channel>",
    "<!here>",
    "<!subteam^S1>",
    "<#C123>",
    "<http://evil.example|click>",
    "[x](http://evil.example)",
    "![i](http://evil.example/i.png)",
    "[ref]: http://evil.example",
    "http://evil.example/a",
    "https://evil.example",
    "//evil.example",
    "www.evil.example",
    "**BOLD**",
    "*it*",
    "_it_",
    "__u__",
    "~~st~~",
    "~st~",
    "`code`",
    "```",
    "<font color=\"warning\">",
    "</font>",
    "<b>",
    "&lt;",
    "&gt;",
    "&amp;",
    "&#60;",
    "&#42;",
    "\\",
    "|",
    "# ",
    "\n",
    "\r\n",
    "\r",
    "\u{2028}",
    "\n# head",
    "\n- item",
    "\n+ item",
    "\n1. one",
    "\n2) two",
    "\n> quote",
    "\n&gt; quote",
    "\n    code",
    "\n---",
    "\n===",
    "\n\n",
    "\n| a | b |",
    ":smile:",
    "训练",
    "🙂",
    "\u{202E}",
    "\u{2060}",
];

/// Hostile text: a mix of [`FRAGMENTS`], single characters of any kind and plain words,
/// `pieces` of them. It ends with `z`, so it is never empty or blank (a blank value is left out
/// of a message, which would change its shape).
pub fn text(pieces: std::ops::Range<usize>) -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        5 => proptest::sample::select(FRAGMENTS).prop_map(str::to_string),
        2 => any::<char>().prop_map(String::from),
        2 => "[a-z0-9 .:/]{1,6}",
    ];
    proptest::collection::vec(piece, pieces).prop_map(|pieces| pieces.concat() + "z")
}

/// A failed job (the usual [`sample`]) whose every field from the cluster is hostile: cluster,
/// API version, kind, namespace, name, raw phase, labels, reason and message.
pub fn job() -> impl Strategy<Value = JobEvent> {
    let short = || text(0..3);
    (
        (short(), short(), short(), short(), short(), short()),
        proptest::collection::vec((short(), short()), 1..3),
        text(0..8),
        text(0..8),
    )
        .prop_map(
            |(
                (cluster, api_version, kind, namespace, name, raw_phase),
                labels,
                reason,
                message,
            )| {
                JobEvent {
                    cluster,
                    api_version,
                    kind,
                    namespace,
                    name,
                    raw_phase,
                    labels,
                    reason: Some(reason),
                    message: Some(message),
                    ..sample()
                }
            },
        )
}

/// `job` with a harmless value in every field [`job`] makes hostile: the same message shape.
pub fn benign(job: &JobEvent) -> JobEvent {
    JobEvent {
        cluster: "x".into(),
        api_version: "x".into(),
        kind: "x".into(),
        namespace: "x".into(),
        name: "x".into(),
        raw_phase: "x".into(),
        labels: (0..job.labels.len())
            .map(|n| (format!("x{n}"), "x".to_string()))
            .collect(),
        reason: job.reason.as_ref().map(|_| "x".into()),
        message: job.message.as_ref().map(|_| "x".into()),
        ..job.clone()
    }
}

/// A firing fleet rule whose cluster, rule and summary are hostile.
pub fn fleet() -> impl Strategy<Value = FleetEvent> {
    (text(0..3), text(0..3), text(0..8)).prop_map(|(cluster, rule, summary)| FleetEvent {
        kind: FleetEventKind::RuleFiring,
        cluster,
        rule: Some(rule),
        summary,
        ..crate::fleet::sample_firing()
    })
}

/// `event` with harmless values where [`fleet`] puts hostile ones.
pub fn benign_fleet(event: &FleetEvent) -> FleetEvent {
    FleetEvent {
        cluster: "x".into(),
        rule: Some("x".into()),
        summary: "x".into(),
        ..event.clone()
    }
}

/// What a service would act on in a text: its syntax, over-approximated.
#[derive(Debug, Clone, Copy)]
pub struct Oracle {
    /// Characters that begin (or are part of) inline markup anywhere in a line.
    pub inline: &'static [char],
    /// Whether `&` starts an entity that the service decodes: then only its own escapes
    /// (`&amp;`, `&lt;`, `&gt;`) are plain text, any other `&` counts.
    pub entities: bool,
    /// Whether block syntax applies (markdown): lines are read for what they start with.
    pub blocks: bool,
    /// Whether `[text](destination)` makes links: a destination, up to its `)`, is a URL, where
    /// `_` or `~` (which percent-encoding keeps) format nothing. The `]` before it counts, so
    /// job text cannot open one unnoticed.
    pub links: bool,
}

/// Feishu `lark_md`: tags (`<at>`, `<font>`), emphasis (`*`, `_`, `~`), links (`[`, `]`), code
/// (`` ` ``), entities; blocks in the newer cards' markdown.
pub const FEISHU_LARK_MD: Oracle = Oracle {
    inline: &['<', '>', '*', '_', '~', '`', '[', ']'],
    entities: true,
    blocks: true,
    links: true,
};

/// DingTalk and WeCom markdown: the above, `#` headings, `|` tables, `@` names, and `&`
/// (HTML is passed through).
pub const CHINESE_MARKDOWN: Oracle = Oracle {
    inline: &['<', '>', '&', '*', '_', '~', '`', '[', ']', '#', '|', '@'],
    entities: false,
    blocks: true,
    links: true,
};

/// WeCom `msgtype: text`: `<@userid>` and `@all`.
pub const WECOM_TEXT: Oracle = Oracle {
    inline: &['<', '>', '@'],
    entities: false,
    blocks: false,
    links: false,
};

/// Slack mrkdwn: `<…>` control sequences (mentions, links), emphasis (`*`, `_`, `~`), code
/// (`` ` ``), `@` names, entities; quotes (`>` or `&gt;`) and fences start lines.
pub const SLACK_MRKDWN: Oracle = Oracle {
    inline: &['<', '>', '*', '_', '~', '`', '@'],
    entities: true,
    blocks: true,
    links: false,
};

/// A `plain_text` object: only a linked address would act.
pub const PLAIN_TEXT: Oracle = Oracle {
    inline: &[],
    entities: false,
    blocks: false,
    links: false,
};

/// One piece of markup an [`Oracle`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// An inline markup character.
    Char(char),
    /// An entity that is not one of the service's own escapes.
    Entity,
    /// `//`: an address a chat would link.
    Slashes,
    /// A line that starts a block, by its first character.
    Block(char),
    /// An empty line (it ends the item or quote around it).
    Blank,
}

/// The markup `oracle` finds in `text`, in order.
pub fn tokens(text: &str, oracle: Oracle) -> Vec<Token> {
    let mut found = Vec::new();
    let mut chars = text.char_indices().peekable();
    let mut previous = None;
    while let Some((at, c)) = chars.next() {
        if c == '/' && previous == Some('/') {
            found.push(Token::Slashes);
        }
        previous = Some(c);
        if c == '&' && oracle.entities {
            let own = ["&amp;", "&lt;", "&gt;"]
                .into_iter()
                .find(|escape| text[at..].starts_with(escape));
            match own {
                Some(escape) => {
                    // Plain text: skip the rest of it.
                    for _ in 1..escape.len() {
                        chars.next();
                    }
                    previous = Some(';');
                }
                None => found.push(Token::Entity),
            }
            continue;
        }
        if oracle.inline.contains(&c) {
            found.push(Token::Char(c));
        }
        if oracle.links && c == ']' && text[at..].starts_with("](") {
            // The destination: counted only for `//`.
            for (_, d) in chars.by_ref() {
                if d == ')' {
                    break;
                }
                if d == '/' && previous == Some('/') {
                    found.push(Token::Slashes);
                }
                previous = Some(d);
            }
            previous = Some(')');
        }
    }
    if oracle.blocks {
        let lines = text.split(['\n', '\r', '\u{0085}', '\u{2028}', '\u{2029}']);
        for (n, line) in lines.enumerate() {
            if let Some(token) = block_start(line, n > 0) {
                found.push(token);
            }
        }
    }
    found
}

/// What a line starts, read as CommonMark (and Slack) would: a list (`-`, `+`, `*`, `1.`,
/// `1)`), a quote (`>`, Slack's `&gt;`), a heading (`#`, a `=`/`-` underline), a thematic
/// break, a fence, a table row, HTML, a link reference definition, indented code; or a blank
/// line between two others.
fn block_start(line: &str, after_a_break: bool) -> Option<Token> {
    let Some(first) = line.chars().next() else {
        return after_a_break.then_some(Token::Blank);
    };
    let starts = [
        '-', '+', '*', '>', '#', '=', '_', '`', '~', '|', '<', '[', ' ', '\t',
    ];
    if starts.contains(&first) || first.is_whitespace() || line.starts_with("&gt;") {
        return Some(Token::Block(first));
    }
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    let marker = line[digits..].strip_prefix(['.', ')']);
    let ordered = (1..=9).contains(&digits)
        && marker.is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']));
    ordered.then_some(Token::Block(first))
}

/// Every string in `body` with its JSON pointer (`/card/elements/0/fields/1/text/content`).
fn strings<'a>(body: &'a Value, at: String, out: &mut Vec<(String, &'a str)>) {
    match body {
        Value::String(text) => out.push((at, text)),
        Value::Array(items) => {
            for (n, item) in items.iter().enumerate() {
                strings(item, format!("{at}/{n}"), out);
            }
        }
        Value::Object(members) => {
            for (key, item) in members {
                strings(item, format!("{at}/{key}"), out);
            }
        }
        _ => {}
    }
}

/// Whether `hostile` (a body about hostile job text) has exactly the markup of `benign` (the
/// same message about harmless values): the same strings at the same places, and in each that
/// `oracle` says is read as text (by its JSON pointer) the same [`tokens`]. `Err` says where
/// and what differs.
pub fn same_markup(
    hostile: &Value,
    benign: &Value,
    oracle: impl Fn(&str) -> Option<Oracle>,
) -> Result<(), String> {
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    strings(hostile, String::new(), &mut ours);
    strings(benign, String::new(), &mut theirs);
    let places = |list: &[(String, &str)]| list.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>();
    if places(&ours) != places(&theirs) {
        return Err(format!(
            "the bodies differ in shape:\n{:?}\n{:?}",
            places(&ours),
            places(&theirs)
        ));
    }
    for ((at, text), (_, harmless)) in ours.iter().zip(&theirs) {
        let Some(oracle) = oracle(at) else {
            continue;
        };
        let (found, expected) = (tokens(text, oracle), tokens(harmless, oracle));
        if found != expected {
            return Err(format!(
                "{at}: markup {found:?} where the message's own is {expected:?}:\n{text:?}"
            ));
        }
    }
    Ok(())
}

/// The rows of the first Markdown table after the line `<!-- {marker} -->` in `readme`, header
/// and separator left out, each as its cells (`\|` kept as written).
pub fn table(readme: &str, marker: &str) -> Vec<Vec<String>> {
    let comment = format!("<!-- {marker} -->");
    let Some(start) = readme.find(&comment) else {
        return Vec::new();
    };
    readme[start + comment.len()..]
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2)
        .map(cells)
        .collect()
}

/// The cells of one table row: split at `|` not escaped as `\|`.
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut cells = vec![String::new()];
    let mut escaped = false;
    for c in inner.chars() {
        match c {
            '|' if !escaped => cells.push(String::new()),
            _ => {
                if let Some(cell) = cells.last_mut() {
                    cell.push(c);
                }
            }
        }
        escaped = c == '\\';
    }
    cells.into_iter().map(|c| c.trim().to_string()).collect()
}

/// The text of a cell that is one code span (`` `x` `` or ``` `` ` `` ```), as a reader takes it:
/// `\|` is `|`, `{U+2060}` the character it names, `\n` a line break. `None` for any other cell.
pub fn code(cell: &str) -> Option<String> {
    let ticks = cell.chars().take_while(|&c| c == '`').count();
    if ticks == 0 || cell.len() < 2 * ticks + 1 {
        return None;
    }
    let fence = "`".repeat(ticks);
    let inner = cell.strip_prefix(&fence)?.strip_suffix(&fence)?;
    // CommonMark strips one space from each side of a span that has one on both.
    let inner = match inner.strip_prefix(' ').and_then(|i| i.strip_suffix(' ')) {
        Some(stripped) if !stripped.is_empty() => stripped,
        _ => inner,
    };
    let mut text = inner.replace("\\|", "|").replace("\\n", "\n");
    while let Some(at) = text.find("{U+") {
        let end = text[at..].find('}').map(|e| at + e)?;
        let code = u32::from_str_radix(&text[at + 3..end], 16).ok()?;
        text.replace_range(at..=end, &char::from_u32(code)?.to_string());
    }
    Some(text)
}

/// Checks a README's table of what a neutraliser changes (rows `| \`c\` | \`sent as\` | … |`)
/// against it, and "everything else is sent as written" for every other printable ASCII
/// character and some that are not: every mismatch, described.
pub fn check_table(rows: &[Vec<String>], neutralise: fn(&str) -> String) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut listed = Vec::new();
    for row in rows {
        let (Some(from), Some(to)) = (
            row.first().and_then(|c| code(c)),
            row.get(1).and_then(|c| code(c)),
        ) else {
            continue;
        };
        // Between letters: no line starts with it, no address is made of it.
        let sent = neutralise(&format!("a{from}a"));
        if sent != format!("a{to}a") {
            wrong.push(format!("{from:?}: the README says {to:?}, sent {sent:?}"));
        }
        listed.push(from);
    }
    if listed.is_empty() {
        wrong.push("no rows in the table".to_string());
    }
    let others = (0x20u8..0x7f)
        .map(char::from)
        .map(String::from)
        .chain(["é", "训练", "🙂", "∗", "＠"].map(String::from));
    for other in others.filter(|c| !listed.contains(c)) {
        let text = format!("a{other}a");
        let sent = neutralise(&text);
        if sent != text {
            wrong.push(format!(
                "{other:?} is not in the README's table but is sent as {sent:?}"
            ));
        }
    }
    wrong
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oracles_find_markup_and_not_escapes() {
        assert_eq!(
            tokens("**x** &lt;at&gt; &#60;", FEISHU_LARK_MD),
            [
                Token::Char('*'),
                Token::Char('*'),
                Token::Char('*'),
                Token::Char('*'),
                Token::Entity,
                // Over-approximated: a line starting with `*` may be a list item.
                Token::Block('*'),
            ]
        );
        assert_eq!(
            tokens("a\n- b\n\nc https://x", SLACK_MRKDWN),
            [Token::Slashes, Token::Block('-'), Token::Blank]
        );
        assert_eq!(tokens("<@U1>", WECOM_TEXT).len(), 3);
        assert!(tokens("plain words, 0.31 and 1.5", CHINESE_MARKDOWN).is_empty());
    }

    #[test]
    fn readme_tables_and_code_spans() {
        let readme = "x\n<!-- m -->\n\n| a | b |\n|---|---|\n| `\\|` | ``` `` ` `` ``` |\n| `/{U+2060}/` | prose |\n\nafter";
        let rows = table(readme, "m");
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(code(&rows[0][0]).as_deref(), Some("|"));
        assert_eq!(code("`` ` ``").as_deref(), Some("`"));
        assert_eq!(code(&rows[1][0]).as_deref(), Some("/\u{2060}/"));
        assert_eq!(code(&rows[1][1]), None);
    }
}
