//! `mysql-sync`: keeps the current state of every job in a `jobs` table and one row per
//! delivered transition in a `job_transitions` table, on MySQL/MariaDB or SQLite.
//!
//! The plugin reaches the database only through the host's `sql` interface, on a connection
//! the manifest grants by name; the host owns the pool and the credentials. Each event is two
//! idempotent writes (see `statements`), so at-least-once delivery, retries and replays never
//! duplicate a transition or roll a job back to an older state.
//!
//! The schema is created at load time (`lifecycle.loading`), not on every event: the `init`
//! of each event's fresh instance only parses the config.

mod row;
mod settings;
mod statements;

pub use row::VersionKey;
pub use settings::Settings;
pub use statements::Dialect;

#[cfg(target_arch = "wasm32")]
mod plugin {
    use std::sync::Mutex;

    use super::row;
    use super::settings::Settings;
    use super::statements::{self, Dialect};

    use jobrelay_guest::sql::{self, Error as SqlError, Statement, Value};
    use jobrelay_guest::story::{JobStory, QueueState};
    use jobrelay_guest::{
        FleetEvent, Guest, HandlerError, JobEvent, Phase, is_terminal, lifecycle, log, phase_name,
    };

    /// What `init` prepares; `init` always runs first on an instance. The statement texts
    /// are built once per instance, which pays off when the host reuses instances.
    static STATE: Mutex<Option<Prepared>> = Mutex::new(None);

    #[derive(Clone)]
    struct Prepared {
        connection: String,
        insert_transition: String,
        transition_by_key: String,
        upsert_job: String,
        count_restarts: String,
        team_label: Option<String>,
    }

    struct MysqlSync;

    jobrelay_guest::export_plugin!(MysqlSync);

    impl Guest for MysqlSync {
        fn init(config: Vec<(String, String)>) -> Result<(), String> {
            let settings = Settings::from_config(&config)?;
            let dialect =
                match sql::connection_dialect(&settings.connection).map_err(|e| describe(&e))? {
                    sql::Dialect::Mysql => Dialect::MySql,
                    sql::Dialect::Sqlite => Dialect::Sqlite,
                };
            if lifecycle::loading() {
                for ddl in
                    statements::schema(dialect, &settings.jobs_table, &settings.transitions_table)
                {
                    sql::execute(
                        &settings.connection,
                        &Statement {
                            sql: ddl,
                            params: Vec::new(),
                        },
                    )
                    .map_err(|e| format!("creating the tables: {}", describe(&e)))?;
                }
                migrate(dialect, &settings)?;
            }
            *STATE
                .lock()
                .map_err(|_| "state lock poisoned".to_string())? = Some(Prepared {
                insert_transition: statements::insert_transition(
                    dialect,
                    &settings.transitions_table,
                ),
                transition_by_key: statements::transition_by_key(&settings.transitions_table),
                upsert_job: statements::upsert_job(dialect, &settings.jobs_table),
                count_restarts: statements::count_restarts(
                    &settings.jobs_table,
                    &settings.transitions_table,
                ),
                team_label: settings.team_label,
                connection: settings.connection,
            });
            Ok(())
        }

        fn handle(event: JobEvent) -> Result<(), HandlerError> {
            let prepared = STATE
                .lock()
                .ok()
                .and_then(|s| s.clone())
                .ok_or_else(|| HandlerError::GiveUp("handle before init".into()))?;
            let object: serde_json::Value =
                serde_json::from_str(&event.object_json).unwrap_or(serde_json::Value::Null);
            let now = row::sql_now();

            if event.previous_phase != Some(event.phase) {
                let statement = Statement {
                    sql: prepared.insert_transition.clone(),
                    params: transition_values(&event, &now),
                };
                let inserted =
                    sql::execute(&prepared.connection, &statement).map_err(handler_error)?;
                if inserted == 0 {
                    check_repeat(&prepared, &event)?;
                }
            }
            let statement = Statement {
                sql: prepared.upsert_job.clone(),
                params: job_values(&event, &object, &now, prepared.team_label.as_deref()),
            };
            sql::execute(&prepared.connection, &statement).map_err(handler_error)?;
            if event.phase == Phase::Restarting {
                let job = [text(&event.cluster), text(&event.uid)];
                let statement = Statement {
                    sql: prepared.count_restarts.clone(),
                    params: [job.clone(), job].concat(),
                };
                sql::execute(&prepared.connection, &statement).map_err(handler_error)?;
            }
            Ok(())
        }

        /// Fleet events are not job state: nothing to write. A manifest that asks for them
        /// gets each acknowledged and dropped.
        fn handle_fleet(_event: FleetEvent) -> Result<(), HandlerError> {
            Ok(())
        }
    }

    /// A transition row that was not written because one with its event id or transition key
    /// exists. The same event again (a retry, a replay) or the same transition from another
    /// version (live, then rebuilt after a gap) is what the unique key is for. The same key
    /// from another phase means two transitions were given one key: the stored row is kept,
    /// and the plugin says so at `warn` (counted in `jobrelay_plugin_log_lines_total`), never
    /// skipping it in silence.
    fn check_repeat(prepared: &Prepared, event: &JobEvent) -> Result<(), HandlerError> {
        let statement = Statement {
            sql: prepared.transition_by_key.clone(),
            params: vec![text(&event.transition_key)],
        };
        let rows = sql::query(&prepared.connection, &statement).map_err(handler_error)?;
        let Some(row) = rows.rows.first() else {
            return Ok(()); // kept out by its event id alone: this very event again
        };
        let stored = |i: usize| match row.get(i) {
            Some(Value::Text(t)) => Some(t.clone()),
            _ => None,
        };
        let (stored_event, stored_from) = (stored(0), stored(1));
        let from = event.previous_phase.map(|p| phase_name(p).to_string());
        if stored_event.as_deref() != Some(event.id.as_str()) && stored_from != from {
            log::write(
                log::Level::Warn,
                &format!(
                    "transition key {} was recorded from {} (event {}); event {} brings it \
                     from {}: the row is kept as recorded",
                    event.transition_key,
                    stored_from.as_deref().unwrap_or("nothing"),
                    stored_event.as_deref().unwrap_or("?"),
                    event.id,
                    from.as_deref().unwrap_or("nothing"),
                ),
            );
        }
        Ok(())
    }

    fn text(value: impl Into<String>) -> Value {
        Value::Text(value.into())
    }

    fn optional(value: Option<String>) -> Value {
        value.map_or(Value::Null, Value::Text)
    }

    fn transition_values(event: &JobEvent, now: &str) -> Vec<Value> {
        let mut values = vec![
            text(&event.id),
            text(&event.cluster),
            text(&event.uid),
            text(&event.namespace),
            text(&event.name),
            text(&event.kind),
            optional(event.previous_phase.map(|p| phase_name(p).to_string())),
            text(phase_name(event.phase)),
        ];
        values.extend(wording(event));
        values.extend([
            optional(row::sql_time(&event.transition_time)),
            Value::Int(i64::from(event.synthetic)),
            text(now),
            text(&event.transition_key),
        ]);
        values
    }

    /// `raw_phase`, `reason` and `message`, cut to what the columns keep.
    fn wording(event: &JobEvent) -> [Value; 3] {
        [
            text(row::cut(&event.raw_phase, 256)),
            optional(
                event
                    .reason
                    .as_deref()
                    .map(|r| row::cut(r, row::MAX_REASON_BYTES)),
            ),
            optional(
                event
                    .message
                    .as_deref()
                    .map(|m| row::cut(m, row::MAX_MESSAGE_BYTES)),
            ),
        ]
    }

    fn job_values(
        event: &JobEvent,
        object: &serde_json::Value,
        now: &str,
        team_label: Option<&str>,
    ) -> Vec<Value> {
        let terminal = is_terminal(event.phase);
        let start = row::start_time(object)
            .or_else(|| (event.phase == Phase::Running).then(|| event.transition_time.clone()));
        let finish = row::completion_time(object)
            .or_else(|| terminal.then(|| event.transition_time.clone()));
        let duration = match (&start, &finish) {
            (Some(s), Some(f)) => row::seconds_between(s, f),
            _ => None,
        };
        let version =
            row::VersionKey::parse(&event.resource_version, event.phase == Phase::Deleted);
        let mut values = vec![
            text(&event.cluster),
            text(&event.uid),
            text(&event.namespace),
            text(&event.name),
            text(&event.api_version),
            text(&event.kind),
            text(phase_name(event.phase)),
        ];
        values.extend(wording(event));
        values.extend([
            optional(start.as_deref().and_then(row::sql_time)),
            optional(finish.as_deref().and_then(row::sql_time)),
            duration.map_or(Value::Null, Value::Int),
            text(row::labels_json(&event.labels)),
            text(row::cut(&event.resource_version, 128)),
            optional(row::sql_time(&event.transition_time)),
            text(now),
            optional(terminal.then(|| phase_name(event.phase).to_string())),
            optional(
                (event.phase == Phase::Deleted)
                    .then(|| row::sql_time(&event.transition_time).unwrap_or_else(|| now.into())),
            ),
        ]);
        let end = finish.as_deref().unwrap_or(&event.transition_time);
        let story = jobrelay_guest::story::get();
        // The team: the configured label's value, else the Kueue LocalQueue; NULL (the stored
        // value kept) when neither is known.
        let label = team_label.and_then(|key| {
            event
                .labels
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        });
        let local_queue = story
            .as_ref()
            .and_then(|s| s.workload.as_ref())
            .and_then(|w| w.local_queue.clone());
        values.push(optional(label.or(local_queue).map(|t| row::cut(&t, 253))));
        values.push(Value::Null); // restarts: counted by `count_restarts`
        values.extend(story_values(story.as_ref(), end));
        values.extend([Value::Int(version.minor), Value::Int(version.major)]);
        values
    }

    /// The story columns (`statements::STORY_COLUMNS`, in order): what the job's Kueue
    /// Workload and pods said, NULL for what the event does not know (the stored value stays).
    /// `end` is the job's finish, else the event's time: where the current admission's run
    /// is counted to.
    fn story_values(story: Option<&JobStory>, end: &str) -> Vec<Value> {
        let workload = story.and_then(|s| s.workload.as_ref());
        let failure = story.and_then(|s| s.failure.as_ref());
        let int = |n: Option<i64>| n.map_or(Value::Null, Value::Int);
        let state = workload.map(|w| {
            match (w.state, w.preempted.is_some()) {
                (QueueState::Evicted, true) => "preempted",
                (QueueState::Evicted, false) => "evicted",
                (QueueState::Queued, _) => "queued",
                (QueueState::Reserved, _) => "reserved",
                (QueueState::Admitted, _) => "admitted",
                (QueueState::Finished, _) => "finished",
            }
            .to_string()
        });
        let queued = workload.and_then(|w| match (&w.waiting_since, &w.admitted_at) {
            (Some(since), Some(admitted)) => row::seconds_between(since, admitted),
            _ => None,
        });
        let accelerators = workload
            .filter(|w| !w.accelerators.is_empty())
            .map(|w| row::accelerators_json(&w.accelerators));
        // Kueue's own count of the time admitted: the earlier admissions' (which it adds up
        // at each eviction) and the current one's, to the job's end or to this event.
        let admitted = workload.map(|w| {
            let current = match (w.state, &w.admitted_at) {
                (QueueState::Admitted | QueueState::Finished, Some(at)) => {
                    row::seconds_between(at, end).unwrap_or(0)
                }
                _ => 0,
            };
            w.past_execution_seconds.max(0).saturating_add(current)
        });
        let accelerator_seconds = workload
            .zip(admitted)
            .filter(|(w, _)| !w.accelerators.is_empty())
            .map(|(w, seconds)| row::accelerator_seconds_json(&w.accelerators, seconds));
        vec![
            optional(workload.and_then(|w| w.local_queue.as_deref().map(|q| row::cut(q, 253)))),
            optional(workload.and_then(|w| w.cluster_queue.as_deref().map(|q| row::cut(q, 253)))),
            optional(state),
            optional(workload.and_then(|w| w.waiting_since.as_deref().and_then(row::sql_time))),
            optional(workload.and_then(|w| w.admitted_at.as_deref().and_then(row::sql_time))),
            int(queued),
            int(workload.map(|w| i64::from(jobrelay_guest::story::preemptions(&w.evictions)))),
            int(workload.map(|w| i64::from(w.requeues))),
            optional(accelerators),
            int(admitted),
            optional(accelerator_seconds),
            optional(failure.map(|f| row::cut(&f.reason, 128))),
            int(failure.and_then(|f| f.exit_code).map(i64::from)),
            optional(failure.map(|f| row::cut(&f.container, 253))),
        ]
    }

    /// Brings tables created by an earlier release up to date (see
    /// `statements::migrate_jobs` and `statements::migrate_transitions`). Run at load time
    /// only, after the tables exist.
    fn migrate(dialect: Dialect, settings: &Settings) -> Result<(), String> {
        let existing = columns_of(dialect, settings, &settings.jobs_table)?;
        let jobs = statements::migrate_jobs(
            dialect,
            &settings.jobs_table,
            &settings.transitions_table,
            &existing,
        );
        run_steps(settings, &settings.jobs_table, jobs)?;
        let existing = columns_of(dialect, settings, &settings.transitions_table)?;
        let mut transitions =
            statements::migrate_transitions(dialect, &settings.transitions_table, &existing);
        transitions.extend(statements::indexes_after_migration(
            dialect,
            &settings.transitions_table,
        ));
        run_steps(settings, &settings.transitions_table, transitions)
    }

    fn columns_of(
        dialect: Dialect,
        settings: &Settings,
        table: &str,
    ) -> Result<Vec<String>, String> {
        let listed = sql::query(
            &settings.connection,
            &Statement {
                sql: statements::column_names(dialect).to_string(),
                params: vec![text(table)],
            },
        )
        .map_err(|e| format!("reading the columns of {table}: {}", describe(&e)))?;
        Ok(listed
            .rows
            .iter()
            .filter_map(|r| match r.first() {
                Some(Value::Text(name)) => Some(name.clone()),
                Some(Value::Blob(name)) => String::from_utf8(name.clone()).ok(),
                _ => None,
            })
            .collect())
    }

    fn run_steps(settings: &Settings, table: &str, steps: Vec<String>) -> Result<(), String> {
        for step in steps {
            sql::execute(
                &settings.connection,
                &Statement {
                    sql: step,
                    params: Vec::new(),
                },
            )
            .map_err(|e| format!("migrating {table}: {}", describe(&e)))?;
        }
        Ok(())
    }

    fn describe(error: &SqlError) -> String {
        match error {
            SqlError::Denied(m) => format!("sql denied: {m}"),
            SqlError::Unavailable(m) => format!("sql unavailable: {m}"),
            SqlError::Rejected(m) => format!("sql rejected: {m}"),
        }
    }

    /// A database that is down or busy is worth retrying; a statement it refuses, or a
    /// connection not granted, is not.
    fn handler_error(error: SqlError) -> HandlerError {
        match &error {
            SqlError::Unavailable(_) => HandlerError::Retry(describe(&error)),
            SqlError::Denied(_) | SqlError::Rejected(_) => HandlerError::GiveUp(describe(&error)),
        }
    }
}
