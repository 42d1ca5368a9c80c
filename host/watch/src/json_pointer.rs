//! JSON pointer lookups that allocate nothing for plain tokens.
//!
//! `serde_json::Value::pointer` makes two new strings for every token of the pointer (it
//! unescapes `~1` and `~0` whether or not they occur), and every version of every job goes
//! through a few lookups (`/metadata/deletionTimestamp`, `/status/conditions`,
//! `/status/state/phase`, a kind's field rule): a visible share of normalizing in a profile.
//! [`at`] answers exactly what `Value::pointer` answers, unescaping only a token that holds a
//! `~`.

use std::borrow::Cow;

use serde_json::Value;

/// The value `pointer` (RFC 6901) names in `value`, as `Value::pointer` finds it: the empty
/// pointer names the whole value, one not starting with `/` names nothing, an array index is
/// decimal without a sign or leading zeros.
pub fn at<'a>(value: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.is_empty() {
        return Some(value);
    }
    let rest = pointer.strip_prefix('/')?;
    rest.split('/').try_fold(value, step)
}

/// The value one token (unescaped here when it holds a `~`) names in `target`: a member of an
/// object, an element of an array.
pub(crate) fn step<'a>(target: &'a Value, token: &str) -> Option<&'a Value> {
    let token = if token.contains('~') {
        Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
    } else {
        Cow::Borrowed(token)
    };
    match target {
        Value::Object(map) => map.get(token.as_ref()),
        Value::Array(list) => index(&token).and_then(|i| list.get(i)),
        _ => None,
    }
}

/// An array index token: `0`, or decimal digits without a sign or a leading zero.
fn index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn plain_escaped_and_indexed_tokens() {
        let v = json!({"status": {"phase": "Running", "a/b": 1, "m~n": 2, "list": [10, 11]},
                       "": {"": 3}, "~1": 4});
        assert_eq!(at(&v, "/status/phase"), Some(&json!("Running")));
        assert_eq!(at(&v, "/status/a~1b"), Some(&json!(1)));
        assert_eq!(at(&v, "/status/m~0n"), Some(&json!(2)));
        assert_eq!(at(&v, "/status/list/1"), Some(&json!(11)));
        assert_eq!(at(&v, "/status/list/01"), None);
        assert_eq!(at(&v, "/status/list/+1"), None);
        assert_eq!(at(&v, "/status/list/2"), None);
        assert_eq!(at(&v, "//"), Some(&json!(3)));
        assert_eq!(at(&v, "/~01"), Some(&json!(4)));
        assert_eq!(at(&v, ""), Some(&v));
        assert_eq!(at(&v, "status"), None);
        assert_eq!(at(&v, "/status/phase/x"), None);
    }

    fn tree() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![Just(Value::Null), any::<i32>().prop_map(|n| json!(n))];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[ab~/0-2]{0,3}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A pointer into `value` made by walking it as `choices` say: an object's key escaped as
    /// RFC 6901 asks, or an array index written plainly, with a leading zero or with a sign;
    /// with a token that names nothing now and then.
    fn walk(value: &Value, choices: &[(u8, u8)]) -> String {
        let mut pointer = String::new();
        let mut here = value;
        for &(pick, form) in choices {
            let (token, next) = match here {
                Value::Object(map) if !map.is_empty() => {
                    let (key, next) = map
                        .iter()
                        .nth(usize::from(pick) % map.len())
                        .expect("in range");
                    (key.replace('~', "~0").replace('/', "~1"), Some(next))
                }
                Value::Array(list) if !list.is_empty() => {
                    let i = usize::from(pick) % list.len();
                    let token = match form % 4 {
                        0 => format!("0{i}"),
                        1 => format!("+{i}"),
                        _ => i.to_string(),
                    };
                    (token, list.get(i))
                }
                _ => ("~01".to_string(), None),
            };
            pointer.push('/');
            pointer.push_str(&token);
            match next {
                Some(next) if form % 8 != 7 => here = next,
                _ => break,
            }
        }
        pointer
    }

    proptest! {
        /// Pointers into a tree whose keys hold the characters that matter (`~`, `/`, digits,
        /// the empty key) find what `Value::pointer` finds.
        #[test]
        fn agrees_with_serde_json(value in tree(), choices in prop::collection::vec(any::<(u8, u8)>(), 0..6)) {
            let pointer = walk(&value, &choices);
            prop_assert_eq!(at(&value, &pointer), value.pointer(&pointer), "{}", pointer);
        }

        /// Any text as a pointer, whether or not it names something.
        #[test]
        fn agrees_on_any_text(value in tree(), pointer in "(/[ab~/0-2+]{0,4}){0,4}|[a~]{0,2}") {
            prop_assert_eq!(at(&value, &pointer), value.pointer(&pointer));
        }
    }
}
