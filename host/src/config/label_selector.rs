//! Checking a label selector's syntax before it reaches any API server.
//!
//! A selector the API server cannot parse makes every list and watch of every kind fail, on
//! every cluster, forever: delivery stops everywhere while the config looks accepted. So the
//! main file's `watch.label_selector` is checked when the file is read (by `jobrelay check` and
//! the running daemon alike), and a bad one is refused with the last good file kept.
//!
//! The grammar is Kubernetes' (`k8s.io/apimachinery/pkg/labels`): requirements separated by
//! commas, each `key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (v, …)` or
//! `key notin (v, …)`. Keys are an optional DNS-subdomain prefix and `/`, then a name of at
//! most 63 characters; values are at most 63 characters, possibly empty.

/// Checks `selector`; the error says which requirement is wrong and why.
pub fn check(selector: &str) -> Result<(), String> {
    if selector.trim().is_empty() {
        return Err("is empty; leave it out to select every job".into());
    }
    for requirement in split_requirements(selector)? {
        check_requirement(requirement.trim())
            .map_err(|why| format!("`{}`: {why}", requirement.trim()))?;
    }
    Ok(())
}

/// Splits at commas outside parentheses.
fn split_requirements(selector: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0u32, 0usize);
    for (i, c) in selector.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            '(' => return Err("nested parentheses".into()),
            ')' if depth == 1 => depth = 0,
            ')' => return Err("a `)` without its `(`".into()),
            ',' if depth == 0 => {
                parts.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("a `(` without its `)`".into());
    }
    parts.push(&selector[start..]);
    Ok(parts)
}

fn check_requirement(req: &str) -> Result<(), String> {
    if req.is_empty() {
        return Err("empty requirement (two commas in a row, or a trailing comma)".into());
    }
    if let Some(key) = req.strip_prefix('!') {
        return check_key(key.trim());
    }
    let end = req
        .find(|c: char| c.is_whitespace() || matches!(c, '=' | '!' | '('))
        .unwrap_or(req.len());
    let (key, rest) = (&req[..end], req[end..].trim_start());
    check_key(key)?;
    if rest.is_empty() {
        return Ok(());
    }
    for op in ["==", "!=", "="] {
        if let Some(value) = rest.strip_prefix(op) {
            return check_value(value.trim());
        }
    }
    for op in ["notin", "in"] {
        if let Some(set) = rest.strip_prefix(op)
            && (set.starts_with('(') || set.starts_with(char::is_whitespace))
        {
            let set = set.trim();
            let inner = set
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .ok_or_else(|| format!("`{op}` needs a list of values in parentheses"))?;
            if inner.trim().is_empty() {
                return Err(format!("`{op}` needs at least one value"));
            }
            return inner.split(',').try_for_each(|v| check_value(v.trim()));
        }
    }
    Err(format!(
        "expected `=`, `==`, `!=`, `in` or `notin` after the key, found `{rest}`"
    ))
}

fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let ok = !prefix.is_empty()
            && prefix.len() <= 253
            && prefix.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            });
        if !ok {
            return Err(format!(
                "key prefix `{prefix}` is not a DNS subdomain (lowercase letters, digits, `-` \
                 and `.`, at most 253 characters)"
            ));
        }
    }
    if name.is_empty() {
        return Err("a key is missing".into());
    }
    check_name(name).map_err(|why| format!("key `{key}`: {why}"))
}

fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    check_name(value).map_err(|why| format!("value `{value}`: {why}"))
}

/// A key's name part or a value: at most 63 characters, alphanumerics with `-`, `_` and `.`
/// inside.
fn check_name(s: &str) -> Result<(), String> {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if s.len() > 63 {
        return Err("longer than 63 characters".into());
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        || !edge(s.chars().next())
        || !edge(s.chars().last())
    {
        return Err(
            "must be letters, digits, `-`, `_` and `.`, starting and ending with a letter or \
             digit"
                .into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_selectors_pass() {
        for s in [
            "team=ml",
            "team==ml,!skip-relay",
            "team != ml",
            "env in (prod, staging),tier notin (cache)",
            "jobrelay.io/watch",
            "app.kubernetes.io/name=trainer",
            "a=",
            "x in (a,b,c),y,!z",
        ] {
            assert_eq!(check(s), Ok(()), "{s}");
        }
    }

    #[test]
    fn invalid_selectors_are_named() {
        for (s, needle) in [
            ("", "empty"),
            ("team=ml,", "empty requirement"),
            ("team===ml", "value"),
            ("team=m l", "value"),
            ("env in prod", "parentheses"),
            ("env in ()", "at least one"),
            ("env in (a,(b))", "nested"),
            ("env in (a", "without its"),
            ("Bad_Prefix.io/x=1", "prefix"),
            ("=ml", "missing"),
            ("team ~ ml", "expected"),
            ("-team=ml", "letters"),
            (&format!("k={}", "v".repeat(64)), "63"),
        ] {
            let err = check(s).expect_err(s);
            assert!(err.contains(needle), "{s}: {err}");
        }
    }
}
