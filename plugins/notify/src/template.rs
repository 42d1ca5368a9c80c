//! `{placeholder}` templates for the card title and link URLs.
//!
//! Templates are parsed once in `init`, so a typo in a placeholder refuses the configuration
//! instead of producing odd cards at 3 a.m. `{{` and `}}` stand for literal braces.

use jobrelay_guest::phase_name;

use crate::job::JobEvent;

/// What a placeholder stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Var {
    Cluster,
    Namespace,
    Name,
    Kind,
    Uid,
    Phase,
    RawPhase,
}

impl Var {
    const NAMES: [(&'static str, Var); 7] = [
        ("cluster", Var::Cluster),
        ("namespace", Var::Namespace),
        ("name", Var::Name),
        ("kind", Var::Kind),
        ("uid", Var::Uid),
        ("phase", Var::Phase),
        ("raw_phase", Var::RawPhase),
    ];

    fn value(self, job: &JobEvent) -> &str {
        match self {
            Var::Cluster => &job.cluster,
            Var::Namespace => &job.namespace,
            Var::Name => &job.name,
            Var::Kind => &job.kind,
            Var::Uid => &job.uid,
            Var::Phase => phase_name(job.phase),
            Var::RawPhase => &job.raw_phase,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Var(Var),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
}

impl Template {
    /// Parses `text`; an unknown placeholder or an unclosed `{` is an error naming it.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find(['{', '}']) {
            literal.push_str(&rest[..at]);
            let tail = &rest[at..];
            if let Some(after) = tail.strip_prefix("{{") {
                literal.push('{');
                rest = after;
            } else if let Some(after) = tail.strip_prefix("}}") {
                literal.push('}');
                rest = after;
            } else if let Some(after) = tail.strip_prefix('}') {
                // A lone closing brace has no other meaning; keep it.
                literal.push('}');
                rest = after;
            } else {
                let inner = &tail[1..];
                let close = inner.find('}').ok_or_else(|| "unclosed `{`".to_string())?;
                let name = &inner[..close];
                let var = Var::NAMES
                    .iter()
                    .find(|(known, _)| *known == name)
                    .map(|&(_, var)| var)
                    .ok_or_else(|| {
                        let known: Vec<String> =
                            Var::NAMES.iter().map(|(n, _)| format!("{{{n}}}")).collect();
                        format!(
                            "unknown placeholder `{{{name}}}` (known: {})",
                            known.join(" ")
                        )
                    })?;
                if !literal.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut literal)));
                }
                pieces.push(Piece::Var(var));
                rest = &inner[close + 1..];
            }
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Template { pieces })
    }

    /// The text with the job's values substituted as they are (for plain text).
    pub fn render(&self, job: &JobEvent) -> String {
        self.render_with(job, str::to_string)
    }

    /// The text with the job's values percent-encoded (for URLs), so a value can never end a
    /// query parameter or start another.
    pub fn render_url(&self, job: &JobEvent) -> String {
        self.render_with(job, percent_encode)
    }

    fn render_with(&self, job: &JobEvent, encode: impl Fn(&str) -> String) -> String {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Var(var) => out.push_str(&encode(var.value(job))),
            }
        }
        out
    }
}

/// Percent-encodes every byte except RFC 3986's unreserved characters, which is safe in any
/// part of a URL.
pub fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::sample;

    #[test]
    fn renders_every_placeholder() {
        let template =
            Template::parse("{cluster}|{namespace}|{name}|{kind}|{uid}|{phase}|{raw_phase}")
                .expect("valid");
        assert_eq!(
            template.render(&sample()),
            "east|ml|llama-finetune|PyTorchJob|0b0e8d6c|failed|Failed"
        );
    }

    #[test]
    fn default_title_shape() {
        let template = Template::parse("{kind} {namespace}/{name}: {phase}").expect("valid");
        assert_eq!(
            template.render(&sample()),
            "PyTorchJob ml/llama-finetune: failed"
        );
    }

    #[test]
    fn urls_get_encoded_values_and_literal_text_untouched() {
        let mut job = sample();
        job.name = "a b&c=d/é".to_string();
        let template =
            Template::parse("https://grafana.example/d/jobs?var-ns={namespace}&var-job={name}")
                .expect("valid");
        assert_eq!(
            template.render_url(&job),
            "https://grafana.example/d/jobs?var-ns=ml&var-job=a%20b%26c%3Dd%2F%C3%A9"
        );
    }

    #[test]
    fn braces_escape() {
        let template = Template::parse("{{literal}} {name} }").expect("valid");
        assert_eq!(template.render(&sample()), "{literal} llama-finetune }");
    }

    #[test]
    fn errors_name_the_placeholder() {
        let error = Template::parse("{kind} {job}").expect_err("unknown");
        assert!(error.contains("`{job}`"), "{error}");
        assert!(error.contains("{raw_phase}"), "{error}");
        let error = Template::parse("{kind").expect_err("unclosed");
        assert!(error.contains("unclosed"), "{error}");
    }
}
