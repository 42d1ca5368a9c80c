//! Every `jobrelay …` command line the docs write must be one the binary accepts: the README,
//! `docs/`, the plugins' READMEs and the chart's NOTES.txt are read, each command line found in
//! them (in code blocks and in inline code) is expanded from its synopsis notation into the
//! concrete lines it stands for, and each is parsed by the real command-line definition, so a
//! renamed flag or a flag in the wrong place fails here rather than in an operator's shell.

use std::path::{Path, PathBuf};

use clap::Parser;
use jobrelay::cli::Cli;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The files whose command lines are checked.
fn documents() -> Vec<PathBuf> {
    let root = repo();
    let mut files = vec![
        root.join("README.md"),
        root.join("deploy/helm/jobrelay/templates/NOTES.txt"),
    ];
    for dir in ["docs", "plugins"] {
        let mut stack = vec![root.join(dir)];
        while let Some(folder) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&folder) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() && !path.ends_with("target") {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "md") {
                    files.push(path);
                }
            }
        }
    }
    files.sort();
    files
}

/// A command line found in a document.
struct Found {
    line: usize,
    /// The text from the word after `jobrelay` on.
    args: String,
    /// Named in prose (inline code) rather than written out to run: it may leave out what a
    /// run needs (`jobrelay check`, `jobrelay dead-letters`), but what it writes must be right.
    prose: bool,
}

/// The jobrelay command lines of one document. In code blocks, a line (with its `\` continuations) that runs jobrelay as a
/// command: at its start, after a path, or after `-- ` (`cargo run … -- ARGS`, `kubectl exec …
/// -- jobrelay ARGS`); in prose, an inline code span that starts with `jobrelay `.
fn command_lines(text: &str) -> Vec<Found> {
    let mut found = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut in_block = false;
    // Prose is read a paragraph at a time, since inline code may wrap: (first line, text).
    let mut paragraph: Option<(usize, String)> = None;
    let mut i = 0;
    while i < lines.len() {
        let number = i + 1;
        let line = lines[i];
        let fence = line.trim_start().starts_with("```");
        if (fence || in_block || line.trim().is_empty())
            && let Some((first, text)) = paragraph.take()
        {
            prose_spans(first, &text, &mut found);
        }
        if fence {
            in_block = !in_block;
        } else if in_block {
            let mut full = line.trim_end().to_string();
            while full.ends_with('\\') && i + 1 < lines.len() {
                full.pop();
                i += 1;
                full.push(' ');
                full.push_str(lines[i].trim());
            }
            for command in pipeline(&full) {
                if let Some(args) = invocation(command) {
                    found.push(Found {
                        line: number,
                        args,
                        prose: false,
                    });
                }
            }
        } else if !line.trim().is_empty() {
            let (_, text) = paragraph.get_or_insert_with(|| (number, String::new()));
            text.push(' ');
            text.push_str(line.trim());
        }
        i += 1;
    }
    if let Some((first, text)) = paragraph {
        prose_spans(first, &text, &mut found);
    }
    found
}

/// The inline code spans of a paragraph that start with `jobrelay `.
fn prose_spans(line: usize, paragraph: &str, found: &mut Vec<Found>) {
    for (k, span) in paragraph.split('`').enumerate() {
        if k % 2 == 1
            && let Some(args) = span.strip_prefix("jobrelay ")
        {
            found.push(Found {
                line,
                args: args.to_string(),
                prose: true,
            });
        }
    }
}

/// The commands of a shell pipeline (`a | b`), split only outside the synopsis notation's
/// brackets, where `[--all | ID...]` uses the same bar for alternatives.
fn pipeline(line: &str) -> Vec<&str> {
    let mut commands = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    let bytes = line.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b'[' => depth += 1,
            b']' => depth -= 1,
            b'|' if depth == 0
                && i > 0
                && bytes[i - 1] == b' '
                && bytes.get(i + 1) == Some(&b' ') =>
            {
                commands.push(&line[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    commands.push(&line[start..]);
    commands
}

/// The arguments of a code-block line that runs jobrelay, without a trailing comment.
fn invocation(line: &str) -> Option<String> {
    let line = line.split("  #").next().unwrap_or_default().trim();
    let line = line.strip_prefix("$ ").unwrap_or(line);
    let words: Vec<&str> = line.split_whitespace().collect();
    let start = words.iter().enumerate().find_map(|(k, word)| {
        let runs_jobrelay = *word == "jobrelay" || word.ends_with("/jobrelay");
        let at_command_position = k == 0 || words[k - 1] == "--" || words[k - 1] == "&&";
        if runs_jobrelay && at_command_position {
            return Some(k + 1);
        }
        // `cargo run -p jobrelay -- ARGS`
        if *word == "--" && words[..k].windows(2).any(|w| w == ["cargo", "run"]) {
            return Some(k + 1);
        }
        None
    })?;
    // A shell's redirection (`> FILE`) is the shell's, not an argument.
    let end = words[start..]
        .iter()
        .position(|w| matches!(*w, ">" | ">>" | "<" | "2>" | "2>&1"))
        .map_or(words.len(), |k| start + k);
    let args = words[start..end].join(" ");
    // An arrow or a box-drawing line is a diagram, not a command.
    (!args.is_empty() && !args.contains('─') && !args.contains('(')).then_some(args)
}

/// The concrete lines a synopsis stands for: with no optional group, then with each
/// alternative of each optional group `[a | b]` alone; each `x|y|z` word once per choice.
/// Placeholders that must be of a type get a sample value.
fn expand(synopsis: &str) -> Vec<Vec<String>> {
    // Split into required words and optional groups.
    let mut base: Vec<String> = Vec::new();
    let mut groups: Vec<(usize, Vec<String>)> = Vec::new();
    let mut rest = synopsis;
    while let Some(open) = rest.find('[') {
        base.extend(rest[..open].split_whitespace().map(str::to_string));
        let close = rest[open..].find(']').map_or(rest.len(), |c| open + c);
        let inner = &rest[open + 1..close.min(rest.len())];
        groups.push((
            base.len(),
            inner.split(" | ").map(|a| a.trim().to_string()).collect(),
        ));
        rest = rest.get(close + 1..).unwrap_or_default();
    }
    base.extend(rest.split_whitespace().map(str::to_string));

    let mut variants: Vec<Vec<String>> = vec![base.clone()];
    for (at, alternatives) in &groups {
        for alternative in alternatives {
            let mut words = base.clone();
            let inserted: Vec<String> =
                alternative.split_whitespace().map(str::to_string).collect();
            words.splice(*at..*at, inserted);
            variants.push(words);
        }
    }
    // Each `a|b|c` word once per choice.
    let mut concrete = Vec::new();
    for words in variants {
        let Some(k) = words.iter().position(|w| w.contains('|')) else {
            concrete.push(words);
            continue;
        };
        for choice in words[k].split('|') {
            let mut chosen = words.clone();
            chosen[k] = choice.to_string();
            concrete.push(chosen);
        }
    }
    concrete
        .into_iter()
        .map(|words| words.into_iter().map(|w| sample(&w)).collect())
        .collect()
}

/// A sample for a placeholder whose type the parser checks.
fn sample(word: &str) -> String {
    match word.trim_end_matches("...") {
        "N" => "3".into(),
        "ID" => "7".into(),
        "SHELL" => "bash".into(),
        other => other.to_string(),
    }
}

#[test]
fn every_documented_command_line_parses() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for file in documents() {
        let text = std::fs::read_to_string(&file).expect("read a document");
        for found in command_lines(&text) {
            let line = found.line;
            for words in expand(&found.args) {
                // Without the `demo` feature the binary has no `demo` command; the default
                // build checks those lines.
                if cfg!(not(feature = "demo")) && words.first().is_some_and(|w| w == "demo") {
                    continue;
                }
                checked += 1;
                let argv = std::iter::once("jobrelay".to_string()).chain(words.iter().cloned());
                if let Err(e) = Cli::try_parse_from(argv) {
                    use clap::error::ErrorKind;
                    let incomplete = matches!(
                        e.kind(),
                        ErrorKind::MissingRequiredArgument
                            | ErrorKind::MissingSubcommand
                            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                    );
                    let accepted =
                        matches!(e.kind(), ErrorKind::DisplayHelp) || (found.prose && incomplete);
                    if !accepted {
                        failures.push(format!(
                            "{}:{line}: `jobrelay {}`: {}",
                            file.strip_prefix(repo()).unwrap_or(&file).display(),
                            words.join(" "),
                            e.render().to_string().lines().next().unwrap_or_default()
                        ));
                    }
                }
            }
        }
    }
    // The docs name well over this many; fewer means the reader stopped finding them.
    assert!(
        checked >= 20,
        "only {checked} command lines found in the docs"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_reader_finds_expands_and_refuses() {
    let doc = "Run `jobrelay check --config DIR` first.\n\
               ```sh\n\
               jobrelay dead-letters list|drop --config DIR [--plugin P] [--all | ID...]  # x\n\
               cargo run -p jobrelay -- demo --jobs N\n\
               kubectl exec deploy/jobrelay -- jobrelay run \\\n  --config /etc/jobrelay\n\
               jobrelay (host/src) ──► jobrelay-state\n\
               jobrelay plugin sample-event --kind batch-job --phase failed | jobrelay plugin run x.wasm --event -\n\
               ```\n";
    let found = command_lines(doc);
    let args: Vec<&str> = found.iter().map(|f| f.args.as_str()).collect();
    assert_eq!(
        found.iter().map(|f| (f.line, f.prose)).collect::<Vec<_>>(),
        [
            (1, true),
            (3, false),
            (4, false),
            (5, false),
            (8, false),
            (8, false)
        ]
    );
    assert_eq!(
        args,
        [
            "check --config DIR",
            "dead-letters list|drop --config DIR [--plugin P] [--all | ID...]",
            "demo --jobs N",
            "run --config /etc/jobrelay",
            "plugin sample-event --kind batch-job --phase failed",
            "plugin run x.wasm --event -",
        ]
    );
    let lines: Vec<String> = expand(args[1]).iter().map(|w| w.join(" ")).collect();
    for wanted in [
        "dead-letters list --config DIR",
        "dead-letters drop --config DIR",
        "dead-letters list --config DIR --plugin P",
        "dead-letters drop --config DIR --all",
        "dead-letters list --config DIR 7",
    ] {
        assert!(
            lines.iter().any(|l| l == wanted),
            "{wanted} not in {lines:?}"
        );
    }
    // A flag the binary does not have is refused by the same parse the test uses.
    assert!(Cli::try_parse_from(["jobrelay", "dead-letters", "list", "--confg", "x"]).is_err());
    assert!(Cli::try_parse_from(["jobrelay", "demo", "--jobs", "N"]).is_err());
}
