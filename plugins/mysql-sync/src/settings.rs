//! The plugin's configuration (the manifest's `config` map).

use serde::Deserialize;

/// Settings read in `init`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// The host connection to write through (a name granted in `grants.sql`).
    pub connection: String,
    /// Table with one row per job.
    pub jobs_table: String,
    /// Table with one row per delivered transition.
    pub transitions_table: String,
    /// The job label naming its team (`team_label: team`), for the `team` column; without it
    /// (or without the label on a job), the team is the job's Kueue LocalQueue.
    pub team_label: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            connection: "embedded".into(),
            jobs_table: "jobs".into(),
            transitions_table: "job_transitions".into(),
            team_label: None,
        }
    }
}

impl Settings {
    /// Parses the config; unknown keys and unsafe table names are refused, since table names
    /// are written into the SQL text (values never are).
    pub fn from_config(config: &[(String, String)]) -> Result<Settings, String> {
        let settings: Settings = jobrelay_guest::config::read(config)?;
        if settings.connection.is_empty() {
            return Err("config `connection` must not be empty".into());
        }
        for (key, name) in [
            ("jobs_table", &settings.jobs_table),
            ("transitions_table", &settings.transitions_table),
        ] {
            check_identifier(name).map_err(|why| format!("config `{key}`: {why}"))?;
        }
        if settings.team_label.as_deref().is_some_and(str::is_empty) {
            return Err("config `team_label` must not be empty".into());
        }
        if settings.jobs_table == settings.transitions_table {
            return Err("config `jobs_table` and `transitions_table` must differ".into());
        }
        Ok(settings)
    }
}

/// A table name: a letter or `_`, then letters, digits or `_`, at most 48 characters (room
/// for the suffixes of index names within MySQL's 64).
fn check_identifier(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || name.len() > 48 || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "`{name}` is not a plain table name (letters, digits, `_`; at most 48)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(Settings::from_config(&[]), Ok(Settings::default()));
        let s = Settings::from_config(&config(&[
            ("connection", "main"),
            ("jobs_table", "relay_jobs"),
            ("transitions_table", "relay_transitions"),
        ]))
        .expect("valid");
        assert_eq!(s.connection, "main");
        assert_eq!(s.jobs_table, "relay_jobs");
    }

    #[test]
    fn refuses_unknown_keys_and_unsafe_names() {
        assert!(Settings::from_config(&config(&[("tabel", "x")])).is_err());
        for bad in [
            "",
            "1jobs",
            "jobs; DROP TABLE x",
            "a-b",
            "`jobs`",
            &"x".repeat(49),
        ] {
            let err = Settings::from_config(&config(&[("jobs_table", bad)])).unwrap_err();
            assert!(err.contains("jobs_table"), "{err}");
        }
        assert!(Settings::from_config(&config(&[("transitions_table", "jobs")])).is_err());
    }
}
