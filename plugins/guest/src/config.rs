//! The manifest's `config` map, read into a plugin's own settings type with serde.
//!
//! The host hands `init` the map as text pairs. A plugin describes its settings as a struct and
//! lets serde do the reading: each key is a field, and a value is parsed into the field's type
//! when the field asks for one (a number, a boolean, an enum's variant name, an `Option`, a
//! comma-separated list). Whatever is wrong is reported naming the key:
//!
//! ```ignore
//! #[derive(serde::Deserialize)]
//! #[serde(deny_unknown_fields, default)]
//! struct Settings { dir: String, chunk_kib: u32 }
//!
//! // in init:
//! let settings: Settings = jobrelay_guest::config::read(&config)?;
//! ```
//!
//! Checks serde cannot express (a value's range, two keys that must differ) stay in the plugin,
//! after `read`.

use std::fmt;

use serde::de::value::{MapDeserializer, SeqDeserializer};
use serde::de::{self, DeserializeOwned, Deserializer, IntoDeserializer, Visitor};

use crate::{PHASES, Phase, phase_from_name, phase_name};

/// Reads `config` into `T`. The error names the key at fault (`config \`chunk_kib\`: ...`), or
/// lists the known keys for an unknown one (with `#[serde(deny_unknown_fields)]`).
pub fn read<T: DeserializeOwned>(config: &[(String, String)]) -> Result<T, String> {
    let pairs = config
        .iter()
        .map(|(key, value)| (key.as_str(), Text(value.as_str())));
    let map = MapDeserializer::<_, Error>::new(pairs);
    serde_path_to_error::deserialize(map).map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner();
        if key.is_empty() || key == "." {
            format!("config: {inner}")
        } else {
            format!("config `{key}`: {inner}")
        }
    })
}

/// For `#[serde(deserialize_with = "...")]` on a `Vec<Phase>`: a comma-separated list of WIT
/// phase names (`failed, succeeded`), at least one.
pub fn phase_list<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Phase>, D::Error> {
    let text = <String as serde::Deserialize>::deserialize(deserializer)?;
    let mut phases = Vec::new();
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let phase = phase_from_name(&name.to_ascii_lowercase()).ok_or_else(|| {
            let known: Vec<&str> = PHASES.into_iter().map(phase_name).collect();
            de::Error::custom(format!(
                "`{name}` is not a phase (known: {})",
                known.join(", ")
            ))
        })?;
        phases.push(phase);
    }
    if phases.is_empty() {
        return Err(de::Error::custom("name at least one phase"));
    }
    Ok(phases)
}

/// The error of reading a config map; its text is what the plugin's `init` refusal says.
#[derive(Debug)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Error {
        Error(msg.to_string())
    }
}

/// One value of the map: text, parsed into whatever type the field asks for.
#[derive(Clone, Copy)]
struct Text<'a>(&'a str);

impl<'de> IntoDeserializer<'de, Error> for Text<'de> {
    type Deserializer = Text<'de>;

    fn into_deserializer(self) -> Text<'de> {
        self
    }
}

impl Text<'_> {
    fn parse<T: std::str::FromStr>(self, what: &str) -> Result<T, Error> {
        self.0
            .trim()
            .parse()
            .map_err(|_| Error(format!("expected {what}, got `{}`", self.0)))
    }
}

macro_rules! parse_as {
    ($($method:ident => $visit:ident: $ty:ty, $what:literal;)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
                visitor.$visit(self.parse::<$ty>($what)?)
            }
        )*
    };
}

impl<'de> Deserializer<'de> for Text<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_borrowed_str(self.0)
    }

    parse_as! {
        deserialize_bool => visit_bool: bool, "true or false";
        deserialize_u8 => visit_u8: u8, "a whole number";
        deserialize_u16 => visit_u16: u16, "a whole number";
        deserialize_u32 => visit_u32: u32, "a whole number";
        deserialize_u64 => visit_u64: u64, "a whole number";
        deserialize_i8 => visit_i8: i8, "a whole number";
        deserialize_i16 => visit_i16: i16, "a whole number";
        deserialize_i32 => visit_i32: i32, "a whole number";
        deserialize_i64 => visit_i64: i64, "a whole number";
        deserialize_f32 => visit_f32: f32, "a number";
        deserialize_f64 => visit_f64: f64, "a number";
    }

    /// A key that is present has a value; an absent one is the field's default.
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    /// A comma-separated list; empty items are skipped.
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let items = self
            .0
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(Text);
        visitor.visit_seq(SeqDeserializer::new(items))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_enum(self.0.trim().into_deserializer())
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        char str string bytes byte_buf unit unit_struct tuple tuple_struct map struct
        identifier ignored_any i128 u128
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Example {
        dir: String,
        chunk_kib: u32,
        verbose: bool,
        limit: Option<u64>,
        tags: Vec<String>,
        #[serde(deserialize_with = "phase_list")]
        phases: Vec<Phase>,
        mode: Mode,
    }

    #[derive(Debug, Deserialize, PartialEq, Default)]
    #[serde(rename_all = "kebab-case")]
    enum Mode {
        #[default]
        Quiet,
        Loud,
    }

    impl Default for Example {
        fn default() -> Example {
            Example {
                dir: "/data".into(),
                chunk_kib: 256,
                verbose: false,
                limit: None,
                tags: Vec::new(),
                phases: vec![Phase::Failed],
                mode: Mode::Quiet,
            }
        }
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn absent_keys_keep_their_defaults() {
        assert_eq!(read::<Example>(&[]), Ok(Example::default()));
    }

    #[test]
    fn values_are_parsed_into_the_fields_types() {
        let got: Example = read(&pairs(&[
            ("dir", "/logs"),
            ("chunk_kib", " 64 "),
            ("verbose", "true"),
            ("limit", "10"),
            ("tags", "a, b,,c"),
            ("phases", "Succeeded, failed"),
            ("mode", "loud"),
        ]))
        .expect("valid");
        assert_eq!(
            got,
            Example {
                dir: "/logs".into(),
                chunk_kib: 64,
                verbose: true,
                limit: Some(10),
                tags: vec!["a".into(), "b".into(), "c".into()],
                phases: vec![Phase::Succeeded, Phase::Failed],
                mode: Mode::Loud,
            }
        );
    }

    #[test]
    fn errors_name_the_key() {
        let e = read::<Example>(&pairs(&[("chunk_kib", "lots")])).unwrap_err();
        assert!(
            e.starts_with("config `chunk_kib`:") && e.contains("`lots`"),
            "{e}"
        );
        let e = read::<Example>(&pairs(&[("phases", "failed,done")])).unwrap_err();
        assert!(
            e.starts_with("config `phases`:") && e.contains("`done` is not a phase"),
            "{e}"
        );
        let e = read::<Example>(&pairs(&[("phases", " , ")])).unwrap_err();
        assert!(e.contains("at least one phase"), "{e}");
        let e = read::<Example>(&pairs(&[("mode", "shout")])).unwrap_err();
        assert!(
            e.starts_with("config `mode`:") && e.contains("shout"),
            "{e}"
        );
        let e = read::<Example>(&pairs(&[("dri", "/x")])).unwrap_err();
        assert!(
            e.contains("unknown field `dri`") && e.contains("`dir`"),
            "{e}"
        );
    }
}
