//! What a case of `plugin test` may say about the capability calls its plugin makes, beside
//! (or instead of) comparing them with the tape: "an HTTP POST to a URL like X whose JSON body
//! has `msgtype: markdown`", "one `kv.set`". A tape pins every byte; an assertion pins what the
//! case is about, so it survives changes that do not matter to it.
//!
//! In `expect.yaml`:
//!
//! ```yaml
//! outcomes: [ok]
//! calls:
//!   - call: http.request                     # the call's name, as on the tape
//!     args: {method: POST, url: "https://oapi.dingtalk.com/robot/send*"}
//!     json: {msgtype: markdown}              # the request body, read as JSON
//!     count: 1                               # optional: exactly this many; else at least one
//! ```
//!
//! `args` and `json` are partial: every key they give must be there with a matching value
//! (objects recursively; lists item by item, of the same length); a string with `*` or `?`
//! matches as a wildcard pattern, any other value must be equal.

use serde::Deserialize;
use serde_json::Value;
use wildmatch::WildMatch;

use jobrelay_capabilities::tape::Entry;

/// One assertion of `expect.yaml`'s `calls:`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectCall {
    /// The call's name (`http.request`, `kv.set`, `sql.execute`, …).
    pub call: String,
    /// What the call's arguments hold (partially).
    #[serde(default)]
    pub args: Option<Value>,
    /// What the request body, read as JSON, holds (partially): for calls with a `body`.
    #[serde(default)]
    pub json: Option<Value>,
    /// Exactly this many matching calls; at least one without it.
    #[serde(default)]
    pub count: Option<usize>,
}

impl ExpectCall {
    /// `None` when the calls made satisfy it; else why not, naming the assertion.
    pub fn check(&self, made: &[Entry], index: usize) -> Option<String> {
        let matching = made.iter().filter(|entry| self.matches(entry)).count();
        let holds = match self.count {
            Some(count) => matching == count,
            None => matching > 0,
        };
        if holds {
            return None;
        }
        let wanted = match self.count {
            Some(count) => format!("exactly {count}"),
            None => "at least one".to_string(),
        };
        let same_name: Vec<&Entry> = made.iter().filter(|e| e.call == self.call).collect();
        // Why the first call of the name is not one, when none is: the place that differs.
        let first_miss = match (matching, same_name.first()) {
            (0, Some(entry)) => self
                .mismatch(entry)
                .map(|why| format!("; the first differs at {why}"))
                .unwrap_or_default(),
            _ => String::new(),
        };
        Some(format!(
            "calls[{index}]: expected {wanted} {} call{}, found {matching} ({} {} calls \
             in all){first_miss}",
            self.call,
            self.describe(),
            same_name.len(),
            self.call
        ))
    }

    /// Where `entry` (a call of this name) does not hold what the assertion says.
    fn mismatch(&self, entry: &Entry) -> Option<String> {
        if let Some(want) = &self.args
            && let Some(why) = differs(want, &entry.args, "args")
        {
            return Some(why);
        }
        let want = self.json.as_ref()?;
        match body_json(&entry.args) {
            Some(got) => differs(want, &got, "json"),
            None => Some("json: the call has no JSON body".to_string()),
        }
    }

    fn matches(&self, entry: &Entry) -> bool {
        entry.call == self.call
            && self
                .args
                .as_ref()
                .is_none_or(|want| holds(want, &entry.args))
            && self
                .json
                .as_ref()
                .is_none_or(|want| body_json(&entry.args).is_some_and(|got| holds(want, &got)))
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(args) = &self.args {
            parts.push(format!("with arguments like {args}"));
        }
        if let Some(json) = &self.json {
            parts.push(format!("whose JSON body has {json}"));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!(" {}", parts.join(" and "))
        }
    }
}

/// A call's body (`{"text": …}` on a tape) read as JSON.
fn body_json(args: &Value) -> Option<Value> {
    let text = args.get("body")?.get("text")?.as_str()?;
    serde_json::from_str(text).ok()
}

/// The first place where `got` does not hold what `want` says (`path` leading to it), said
/// for the author: a key missing, a list of another length, another value.
fn differs(want: &Value, got: &Value, path: &str) -> Option<String> {
    match (want, got) {
        (Value::Object(want), Value::Object(got)) => want.iter().find_map(|(key, w)| {
            let at = format!("{path}.{key}");
            match got.get(key) {
                Some(g) => differs(w, g, &at),
                None => Some(format!("{at}: the call has no such key")),
            }
        }),
        (Value::Array(want), Value::Array(got)) if want.len() != got.len() => Some(format!(
            "{path}: the case lists {} item{}, the call has {} (lists are matched item by item, \
             whole)",
            want.len(),
            if want.len() == 1 { "" } else { "s" },
            got.len()
        )),
        (Value::Array(want), Value::Array(got)) => want
            .iter()
            .zip(got)
            .enumerate()
            .find_map(|(n, (w, g))| differs(w, g, &format!("{path}[{n}]"))),
        _ if holds(want, got) => None,
        _ => Some(format!("{path}: the case has {want}, the call {got}")),
    }
}

/// Whether `got` holds everything `want` says.
fn holds(want: &Value, got: &Value) -> bool {
    match (want, got) {
        (Value::Object(want), Value::Object(got)) => want
            .iter()
            .all(|(key, w)| got.get(key).is_some_and(|g| holds(w, g))),
        (Value::Array(want), Value::Array(got)) => {
            want.len() == got.len() && want.iter().zip(got).all(|(w, g)| holds(w, g))
        }
        (Value::String(pattern), Value::String(text))
            if pattern.contains('*') || pattern.contains('?') =>
        {
            WildMatch::new(pattern).matches(text)
        }
        (want, got) => want == got,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn post(url: &str, body: Value) -> Entry {
        Entry {
            event: Some("e".into()),
            call: "http.request".into(),
            args: json!({"method": "POST", "url": url, "body": {"text": body.to_string()}}),
            answer: json!({"ok": {"status": 200}}),
        }
    }

    fn expect(yaml: &str) -> ExpectCall {
        serde_yaml_ng::from_str(yaml).expect("an assertion")
    }

    #[test]
    fn partial_arguments_wildcards_and_the_json_body() {
        let made = [post(
            "https://oapi.dingtalk.com/robot/send?access_token=t",
            json!({"msgtype": "markdown", "markdown": {"title": "Job failed", "text": "…"}}),
        )];
        let good = expect(
            "call: http.request\nargs: {method: POST, url: \"https://oapi.dingtalk.com/robot/send*\"}\njson: {msgtype: markdown, markdown: {title: \"Job *\"}}\ncount: 1\n",
        );
        assert_eq!(good.check(&made, 0), None);
        let other_type = expect("call: http.request\njson: {msgtype: actionCard}\n");
        let why = other_type.check(&made, 1).expect("fails");
        assert!(
            why.starts_with(
                "calls[1]: expected at least one http.request call whose JSON body has"
            ),
            "{why}"
        );
        assert!(
            why.contains("found 0 (1 http.request calls in all)"),
            "{why}"
        );
        let twice = expect("call: http.request\ncount: 2\n");
        assert!(twice.check(&made, 0).is_some());
        let none = expect("call: kv.set\ncount: 0\n");
        assert_eq!(none.check(&made, 0), None);
    }

    /// A call that is not one says where: a list of another length, a value, a key.
    #[test]
    fn a_miss_says_where_the_first_call_differs() {
        let made = [post(
            "https://example.test/hook",
            json!({"to": ["a", "b", "c"], "card": {"title": "Job failed"}}),
        )];
        let cases = [
            (
                "call: http.request\njson: {to: [a, b]}\n",
                "; the first differs at json.to: the case lists 2 items, the call has 3 \
                 (lists are matched item by item, whole)",
            ),
            (
                "call: http.request\njson: {to: [a, x, c]}\n",
                "; the first differs at json.to[1]: the case has \"x\", the call \"b\"",
            ),
            (
                "call: http.request\njson: {card: {text: hi}}\n",
                "; the first differs at json.card.text: the call has no such key",
            ),
            (
                "call: http.request\nargs: {method: GET}\n",
                "; the first differs at args.method: the case has \"GET\", the call \"POST\"",
            ),
        ];
        for (yaml, said) in cases {
            let why = expect(yaml).check(&made, 0).expect("fails");
            assert!(why.ends_with(said), "{yaml}: {why}");
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(serde_yaml_ng::from_str::<ExpectCall>("call: x\nbody: {}\n").is_err());
    }
}
