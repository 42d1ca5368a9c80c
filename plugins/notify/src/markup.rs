//! One neutraliser per chat service and kind of text: what text from a cluster (a job's name,
//! namespace, kind, API version, labels, reason and message; a cluster's name; a fleet rule and
//! summary; the digest lines made of them) becomes before it is put into a message.
//!
//! Text from a cluster is untrusted: anyone who can create a job can write its message, and a
//! chat message is a place where `<at id=all></at>`, `<!channel>` or `<@userid>` pages a whole
//! company and `[docs](https://evil.example)` is a link that lies about where it goes. Each
//! service parses a different markup, so each gets its own function, kept together here so the
//! whole promise can be read (and tested) in one place; every sink's README lists what its
//! function changes, and its tests check the list against the function.
//!
//! The functions share three steps:
//!
//! - **Characters** that start markup in that service are replaced: by the service's own escape
//!   where it documents one (Slack's and Feishu's `&amp;`, `&lt;`, `&gt;`), else by a look-alike
//!   (`*` → `∗`), so the text reads as written but cannot format.
//! - **Addresses**: every `//` gets a [`WORD_JOINER`] between its slashes, so `https://…` (or
//!   any `scheme://`, or a protocol-relative `//host`) is not turned into a link by the chat's
//!   link detection. A bare domain name without a scheme (`evil.example`) is left alone: breaking
//!   every dot would also break job names copied out of a message, and a link made of a bare
//!   name shows where it goes. The READMEs say so.
//! - **Lines** (markdown only): line breaks are normalised to `\n` (a lone `\r`, U+2028 and
//!   U+2029 are line breaks to some renderers), and a line that could start a block — a list
//!   (`-`, `+`, `1.`, `1)`), a quote (`>`), a heading (`#`, or `===`/`---` under a line), a code
//!   block (indentation, a fence), a table or a blank line ending the surrounding item — gets a
//!   [`WORD_JOINER`] first. The joiner is invisible and not whitespace, so the line is plain text
//!   that continues the paragraph it is in.
//!
//! A backslash is sent as written: it escapes only ASCII punctuation, which never follows it
//! unreplaced except a line break (a hard break, within the same field), and no job text is
//! directly followed by the message's own markup.

/// U+2060 WORD JOINER: invisible, no line break, not whitespace. Put between the slashes of `//`
/// and before a line that could start a block.
pub const WORD_JOINER: char = '\u{2060}';

/// How one kind of text is neutralised.
struct Dialect {
    /// Characters replaced wherever they are, and by what.
    replace: &'static [(char, &'static str)],
    /// Whether block syntax applies (markdown): lines are guarded.
    lines: bool,
}

/// Look-alikes for the markdown services without an escape of their own (DingTalk, WeCom).
const MARKDOWN_LOOK_ALIKES: &[(char, &str)] = &[
    ('<', "‹"),
    ('>', "›"),
    ('&', "＆"),
    ('*', "∗"),
    ('_', "ˍ"),
    ('`', "ˋ"),
    ('[', "［"),
    (']', "］"),
    ('#', "＃"),
    ('~', "∼"),
    ('|', "¦"),
    ('@', "＠"),
];

/// Feishu `lark_md`: tags (`<at id=all></at>`, `<font>`) and entities escaped as HTML, which
/// Feishu's cards decode for display; emphasis (`**`, `*`, `~~`, `_`), links (`[x](url)`) and
/// code (`` ` ``) by look-alikes, since `lark_md` has no escape for them. `@` needs nothing:
/// Feishu mentions only with `<at>`.
const FEISHU_LARK_MD: Dialect = Dialect {
    replace: &[
        ('&', "&amp;"),
        ('<', "&lt;"),
        ('>', "&gt;"),
        ('*', "∗"),
        ('_', "ˍ"),
        ('~', "∼"),
        ('`', "ˋ"),
        ('[', "［"),
        (']', "］"),
    ],
    lines: true,
};

/// DingTalk markdown: headings, quotes, emphasis, links and images, lists, HTML such as
/// `<font color>`, and `@mobile` / `@userId` names (which DingTalk highlights).
const DINGTALK_MARKDOWN: Dialect = Dialect {
    replace: MARKDOWN_LOOK_ALIKES,
    lines: true,
};

/// WeCom markdown: headings, bold, links, inline code, quotes, `<font color>` and the
/// `<@userid>` mention.
const WECOM_MARKDOWN: Dialect = Dialect {
    replace: MARKDOWN_LOOK_ALIKES,
    lines: true,
};

/// WeCom `msgtype: text`: no formatting, but `<@userid>` in the content mentions that member and
/// the clients link addresses.
const WECOM_TEXT: Dialect = Dialect {
    replace: &[('<', "‹"), ('>', "›"), ('@', "＠")],
    lines: false,
};

/// Slack mrkdwn: `&`, `<`, `>` escaped as Slack documents (so no `<!channel>`, `<!here>`,
/// `<@U…>`, `<#C…>` or `<http…|…>` can be written), emphasis (`*`, `_`, `~`) and code
/// (`` ` ``) by look-alikes (Slack has no escape for them), and `@` too, so a plain `@here`
/// stays text wherever Slack would parse names. A quote is `&gt;` at a line's start in Slack's
/// own storage, which is why lines are guarded too.
const SLACK_MRKDWN: Dialect = Dialect {
    replace: &[
        ('&', "&amp;"),
        ('<', "&lt;"),
        ('>', "&gt;"),
        ('*', "∗"),
        ('_', "ˍ"),
        ('~', "∼"),
        ('`', "ˋ"),
        ('@', "＠"),
    ],
    lines: true,
};

/// A `plain_text` object (Feishu's card header, Slack's header block): nothing is markup, only
/// addresses would be linked.
const PLAIN_TEXT: Dialect = Dialect {
    replace: &[],
    lines: false,
};

/// Job text for a Feishu card's `lark_md` field.
pub fn feishu_lark_md(text: &str) -> String {
    neutralise(text, &FEISHU_LARK_MD)
}

/// Job text for a Feishu card's `plain_text` header.
pub fn feishu_plain_text(text: &str) -> String {
    neutralise(text, &PLAIN_TEXT)
}

/// Job text for a DingTalk markdown message (and its `title`, shown in notifications).
pub fn dingtalk_markdown(text: &str) -> String {
    neutralise(text, &DINGTALK_MARKDOWN)
}

/// Job text for a WeCom `msgtype: markdown` message.
pub fn wecom_markdown(text: &str) -> String {
    neutralise(text, &WECOM_MARKDOWN)
}

/// Job text for a WeCom `msgtype: text` message.
pub fn wecom_text(text: &str) -> String {
    neutralise(text, &WECOM_TEXT)
}

/// Job text for a Slack `mrkdwn` text object (and the message's `text`, what notifications
/// show).
pub fn slack_mrkdwn(text: &str) -> String {
    neutralise(text, &SLACK_MRKDWN)
}

/// Job text for a Slack `plain_text` object (the header block).
pub fn slack_plain_text(text: &str) -> String {
    neutralise(text, &PLAIN_TEXT)
}

fn neutralise(text: &str, dialect: &Dialect) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    // The character before, as read (for `\r\n`) and as written (for `//`).
    let (mut read, mut written) = (None, None);
    for c in text.chars() {
        let crlf = dialect.lines && c == '\n' && read == Some('\r');
        read = Some(c);
        if crlf {
            // `\r\n` was already one break.
            continue;
        }
        let c = if dialect.lines && is_line_break(c) {
            '\n'
        } else {
            c
        };
        if c == '/' && written == Some('/') {
            out.push(WORD_JOINER);
        }
        match dialect.replace.iter().find(|(from, _)| *from == c) {
            Some((_, to)) => out.push_str(to),
            None => out.push(c),
        }
        written = Some(c);
    }
    if dialect.lines {
        guard_lines(&out)
    } else {
        out
    }
}

/// What some renderer takes for the end of a line (normalised to `\n` before guarding).
fn is_line_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{0085}' | '\u{2028}' | '\u{2029}')
}

/// `text` with a [`WORD_JOINER`] before every line that could start a block. The first line
/// counts too: several services put a value at the start of a line (`**Label**\nvalue`).
fn guard_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for (n, line) in text.split('\n').enumerate() {
        if n > 0 {
            out.push('\n');
        }
        // An empty line ends the item or quote it is in (the first one too: the value may
        // follow a line of the message's own). Only an empty text has nothing to guard.
        if (line.is_empty() && !text.is_empty()) || could_start_a_block(line) {
            out.push(WORD_JOINER);
        }
        out.push_str(line);
    }
    out
}

/// The characters a block can start with in markdown: a list item (`-`, `+`, `*`), a quote
/// (`>`), a heading (`#`, or `=`/`-` under a line), a thematic break (`_`, `*`, `-`), a fence
/// (`` ` ``, `~`), a table row (`|`), HTML (`<`) and a link reference definition (`[`).
const BLOCK_STARTS: &[char] = &['-', '+', '*', '>', '#', '=', '_', '`', '~', '|', '<', '['];

/// Whether a line (after replacement) starts with what markdown reads as block syntax: one of
/// [`BLOCK_STARTS`], `&gt;` (a quote, as Slack stores it), whitespace (indentation, or a blank
/// line) or an ordered list's marker (up to nine digits, `.` or `)`, then a space or nothing).
fn could_start_a_block(line: &str) -> bool {
    let Some(first) = line.chars().next() else {
        return false;
    };
    if first.is_whitespace() || BLOCK_STARTS.contains(&first) || line.starts_with("&gt;") {
        return true;
    }
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    let marker = line[digits..].strip_prefix(['.', ')']);
    (1..=9).contains(&digits)
        && marker.is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
}

#[cfg(test)]
mod tests {
    use super::*;

    const WJ: &str = "\u{2060}";

    #[test]
    fn each_service_neutralises_its_own_markup() {
        assert_eq!(
            feishu_lark_md("<at id=all></at> **x** [a](b) & `c`"),
            "&lt;at id=all&gt;&lt;/at&gt; ∗∗x∗∗ ［a］(b) &amp; ˋcˋ"
        );
        assert_eq!(
            dingtalk_markdown("<@all> **x** [a](b) <font>"),
            "‹＠all› ∗∗x∗∗ ［a］(b) ‹font›"
        );
        assert_eq!(wecom_markdown("<@U1> #h"), "‹＠U1› ＃h");
        assert_eq!(wecom_text("<@U1> @all **x**"), "‹＠U1› ＠all **x**");
        assert_eq!(
            slack_mrkdwn("<!channel> <http://x|y> *b* _i_ ~s~ `c` @here"),
            format!("&lt;!channel&gt; &lt;http:/{WJ}/x|y&gt; ∗b∗ ˍiˍ ∼s∼ ˋcˋ ＠here")
        );
        assert_eq!(slack_plain_text("*x* <y>"), "*x* <y>");
        assert_eq!(
            feishu_plain_text("https://a.example"),
            format!("https:/{WJ}/a.example")
        );
    }

    #[test]
    fn ordinary_text_is_untouched() {
        for text in [
            "exit code 137, OOM",
            "worker-0 exited (code 1): see ml/train-1",
            "2026-11-28T10:00:00Z",
            "0.31",
            "kubeflow.org/v1",
            "训练失败",
        ] {
            assert_eq!(dingtalk_markdown(text), text);
            assert_eq!(feishu_lark_md(text), text);
            assert_eq!(slack_mrkdwn(text), text);
            assert_eq!(wecom_text(text), text);
        }
    }

    #[test]
    fn addresses_are_not_linked() {
        assert_eq!(
            wecom_text("see https://evil.example//x and //cdn"),
            format!("see https:/{WJ}/evil.example/{WJ}/x and /{WJ}/cdn")
        );
        // Three slashes: each pair broken.
        assert_eq!(dingtalk_markdown("///"), format!("/{WJ}/{WJ}/"));
    }

    #[test]
    fn lines_that_could_start_a_block_are_guarded() {
        assert_eq!(
            dingtalk_markdown("a\n- item\n1. one\n2) two\n   code\n\n---\nb"),
            format!("a\n{WJ}- item\n{WJ}1. one\n{WJ}2) two\n{WJ}   code\n{WJ}\n{WJ}---\nb")
        );
        // Every kind of line break, normalised; `\r\n` is one.
        assert_eq!(
            slack_mrkdwn("a\r\n> q\rb\u{2028}c\u{2029}-"),
            format!("a\n{WJ}&gt; q\nb\nc\n{WJ}-")
        );
        // The first line counts; a number that is no list marker does not, nor an entity that
        // is no quote.
        assert_eq!(feishu_lark_md("- x"), format!("{WJ}- x"));
        assert_eq!(feishu_lark_md("1."), format!("{WJ}1."));
        for text in ["137 exited", "0.31", "1.5 GB", "2026-11-28", "<at>"] {
            assert!(!feishu_lark_md(text).starts_with(WJ), "{text}");
        }
        // Plain text has no blocks.
        assert_eq!(wecom_text("a\n- b"), "a\n- b");
    }
}
