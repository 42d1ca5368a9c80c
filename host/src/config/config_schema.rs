//! A plugin's declared config schema: `NAME.schema.json`, a JSON Schema beside the component
//! `NAME.wasm`, that says which `config:` keys the plugin takes and what their values look
//! like — so `check --no-init` can refuse a manifest that breaks it, naming the key, without
//! running any plugin code, and `plugin inspect` can show the keys.
//!
//! Why a file beside the component and not a custom section inside it: a component built by
//! any toolchain (Rust, componentize-py) can ship one without a post-processing step, and an
//! operator can read it. The cost: a component pulled from a registry carries none (its
//! manifest's config is then checked only by its `init`).
//!
//! A config is a map of strings, so the schema describes an object of string properties. A
//! value that is a secret reference (`env:NAME`, `file:/path`) stands for a value not known
//! until load, so only its key is checked (allowed, required), not its value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use jobrelay_contract::secret;
use serde_json::Value;

/// Why a schema file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("cannot read the config schema {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the config schema {path} is not JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("the config schema {path} is not a valid JSON Schema: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

/// A plugin's config schema, compiled.
pub struct ConfigSchema {
    pub path: PathBuf,
    pub schema: Value,
    validator: jsonschema::Validator,
}

impl ConfigSchema {
    /// The schema beside the component `wasm` (`NAME.schema.json` for `NAME.wasm`), if there
    /// is one.
    pub fn beside(wasm: &Path) -> Result<Option<ConfigSchema>, SchemaError> {
        let Some(stem) = wasm.file_stem() else {
            return Ok(None);
        };
        let path = wasm.with_file_name(format!("{}.schema.json", stem.to_string_lossy()));
        if !path.is_file() {
            return Ok(None);
        }
        ConfigSchema::read(&path).map(Some)
    }

    pub fn read(path: &Path) -> Result<ConfigSchema, SchemaError> {
        let text = std::fs::read_to_string(path).map_err(|source| SchemaError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let schema: Value = serde_json::from_str(&text).map_err(|source| SchemaError::Json {
            path: path.to_path_buf(),
            source,
        })?;
        let validator = jsonschema::validator_for(&schema).map_err(|e| SchemaError::Invalid {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        Ok(ConfigSchema {
            path: path.to_path_buf(),
            schema,
            validator,
        })
    }

    /// Every way `config` breaks the schema, one line each naming the key
    /// (`config.phases: …`); empty when it holds.
    pub fn check(&self, config: &BTreeMap<String, String>) -> Vec<String> {
        let instance = Value::Object(
            config
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
        );
        let mut problems: Vec<String> = self
            .validator
            .iter_errors(&instance)
            .filter_map(|error| {
                let pointer = error.instance_path().to_string();
                let key = pointer
                    .strip_prefix('/')
                    .map(|k| k.replace("~1", "/").replace("~0", "~"));
                match key {
                    // A secret reference's value is not known here.
                    Some(key) if config.get(&key).is_some_and(|v| secret::is_reference(v)) => None,
                    Some(key) if !key.is_empty() => match self.description(&key) {
                        // The author's words for what the key takes say more than the rule's
                        // raw form (a regex, a `not`), and the value, which may be a
                        // credential, is not repeated.
                        Some(what) => Some(format!(
                            "config.{key}: the value breaks the schema's `{}` rule; the key \
                             takes: {what}",
                            error.kind().keyword()
                        )),
                        None => Some(format!("config.{key}: {error}")),
                    },
                    _ => Some(format!("config: {error}")),
                }
            })
            .collect();
        problems.sort();
        problems.dedup();
        problems
    }

    /// The description the schema gives the key `key` (under `properties`), if any.
    fn description(&self, key: &str) -> Option<&str> {
        self.schema
            .get("properties")?
            .get(key)?
            .get("description")?
            .as_str()
            .filter(|d| !d.trim().is_empty())
    }

    /// The keys the schema names (`properties`), with their descriptions; patterns of keys
    /// (`patternProperties`) as written.
    pub fn keys(&self) -> Vec<(String, String)> {
        let describe = |value: &Value| {
            value
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let mut keys = Vec::new();
        for section in ["properties", "patternProperties"] {
            if let Some(Value::Object(map)) = self.schema.get(section) {
                keys.extend(map.iter().map(|(k, v)| (k.clone(), describe(v))));
            }
        }
        keys
    }
}

/// The marker line before a plugin README's table of config keys.
pub const KEYS_TABLE_MARKER: &str = "<!-- config keys, from config.schema.json -->";

impl ConfigSchema {
    /// The keys as a Markdown table (`| key | what |`), after [`KEYS_TABLE_MARKER`]: what a
    /// shipped plugin's README carries, so its documented keys are its schema's.
    pub fn keys_table(&self) -> String {
        let mut table = format!("{KEYS_TABLE_MARKER}\n| key | what |\n|---|---|\n");
        // A `|` would end a cell, even inside code.
        let cell = |text: &str| text.replace('|', "\\|");
        for (key, what) in self.keys() {
            table.push_str(&format!("| `{}` | {} |\n", cell(&key), cell(&what)));
        }
        table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(dir: &Path, text: &str) -> ConfigSchema {
        let wasm = dir.join("p.wasm");
        std::fs::write(dir.join("p.schema.json"), text).expect("write");
        ConfigSchema::beside(&wasm).expect("valid").expect("found")
    }

    fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn problems_name_the_key_and_secret_references_pass() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = schema(
            dir.path(),
            r#"{"type": "object", "additionalProperties": false, "required": ["webhook"],
                "properties": {"webhook": {"type": "string", "pattern": "^https://"},
                               "phases": {"type": "string", "enum": ["failed", "running"]}}}"#,
        );
        assert!(s.check(&config(&[("webhook", "https://x")])).is_empty());
        let problems = s.check(&config(&[
            ("webhook", "http://x"),
            ("phases", "runing"),
            ("fiel", "a"),
        ]));
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems.iter().any(|p| p.starts_with("config.webhook: ")),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("config.phases: ") && p.contains("runing")),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("config: ") && p.contains("fiel")),
            "{problems:?}"
        );
        // A key with a description is told in the author's words, not the rule's raw form.
        let described = schema(
            dir.path(),
            r#"{"type": "object", "properties": {"file": {"type": "string",
                "pattern": "^[^/]+$", "description": "a plain file name, without `/`"}}}"#,
        );
        let told = described.check(&config(&[("file", "nested/secret-ish")]));
        assert_eq!(
            told,
            [
                "config.file: the value breaks the schema's `pattern` rule; the key takes: \
              a plain file name, without `/`"
            ],
        );
        // A reference's value is not known before load: only the key is judged.
        assert!(s.check(&config(&[("webhook", "env:HOOK")])).is_empty());
        let missing = s.check(&config(&[]));
        assert!(missing.iter().any(|p| p.contains("webhook")), "{missing:?}");
    }

    #[test]
    fn a_broken_schema_file_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wasm = dir.path().join("p.wasm");
        assert!(ConfigSchema::beside(&wasm).expect("none is fine").is_none());
        std::fs::write(dir.path().join("p.schema.json"), "{not json").expect("write");
        let e = ConfigSchema::beside(&wasm).err().expect("refused");
        assert!(e.to_string().contains("p.schema.json is not JSON"), "{e}");
        std::fs::write(dir.path().join("p.schema.json"), r#"{"type": 7}"#).expect("write");
        let e = ConfigSchema::beside(&wasm).err().expect("refused");
        assert!(e.to_string().contains("not a valid JSON Schema"), "{e}");
    }

    /// Each shipped plugin's README lists its config keys as its schema gives them: every
    /// folder of `plugins/` with a `config.schema.json`, so a new plugin cannot be left out.
    #[test]
    fn each_shipped_readme_lists_the_keys_of_its_schema() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut plugins: Vec<String> = std::fs::read_dir(repo.join("plugins"))
            .expect("plugins/")
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.path().join("config.schema.json").is_file())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        plugins.sort();
        for known in [
            "feishu-notify",
            "dingtalk-notify",
            "wecom-notify",
            "slack-notify",
        ] {
            assert!(plugins.iter().any(|p| p == known), "{known}: {plugins:?}");
        }
        for plugin in &plugins {
            let dir = repo.join("plugins").join(plugin);
            let s = ConfigSchema::read(&dir.join("config.schema.json")).expect("schema");
            let readme = std::fs::read_to_string(dir.join("README.md")).expect("README");
            let table = s.keys_table();
            assert!(
                readme.contains(&table),
                "plugins/{plugin}/README.md must carry its keys as the schema gives them:\n{table}"
            );
        }
    }

    /// The shipped plugins' schemas compile and accept the configs their docs show.
    #[test]
    fn the_shipped_schemas_accept_their_documented_configs() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let cases: [(&str, &[(&str, &str)]); 8] = [
            ("event-log", &[("file", "events.jsonl")]),
            (
                "mysql-sync",
                &[("connection", "main"), ("jobs_table", "jobs")],
            ),
            (
                "log-archive",
                &[("phases", "failed, succeeded"), ("chunk_kib", "256")],
            ),
            (
                "feishu-notify",
                &[
                    ("webhook", "env:FEISHU_WEBHOOK"),
                    ("phases", "failed,succeeded"),
                    ("link.Logs", "https://logs/{name}"),
                    ("route.1.namespace", "nlp-*"),
                    ("route.1.webhook", "env:NLP_HOOK"),
                    ("digest_window", "10m"),
                    ("quiet_hours", "22:00-08:00"),
                    ("quiet_utc_offset", "+08:00"),
                ],
            ),
            (
                "dingtalk-notify",
                &[
                    ("webhook", "env:DINGTALK_WEBHOOK"),
                    ("secret", "env:DINGTALK_SECRET"),
                    ("mention", "manager01"),
                    ("mention_mobiles", "13800000000"),
                    ("style", "markdown"),
                ],
            ),
            (
                "wecom-notify",
                &[
                    ("webhook", "env:WECOM_WEBHOOK"),
                    ("msgtype", "text"),
                    ("mention", "zhangsan,all"),
                ],
            ),
            (
                "slack-notify",
                &[
                    ("webhook", "env:SLACK_WEBHOOK"),
                    ("mention", "U012AB3CD"),
                    ("link.Dashboard", "https://grafana/{name}"),
                ],
            ),
            (
                "webhook-notify",
                &[
                    ("url", "env:WEBHOOK_URL"),
                    ("secret", "env:WEBHOOK_SECRET"),
                    ("mode", "structured"),
                ],
            ),
        ];
        for (plugin, pairs) in cases {
            let s = ConfigSchema::read(&repo.join(format!("plugins/{plugin}/config.schema.json")))
                .unwrap_or_else(|e| panic!("{plugin}: {e}"));
            assert_eq!(s.check(&config(pairs)), Vec::<String>::new(), "{plugin}");
            assert!(
                !s.check(&config(&[("no_such_key", "x")])).is_empty(),
                "{plugin}"
            );
        }
    }
}
