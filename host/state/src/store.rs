//! The store behind the lanes, as a trait so a server database (MySQL or MariaDB) can replace
//! the SQLite file when replicas share state (see docs/delivery.md, "Clusters spread over
//! replicas").

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::cursor::Cursor;
use super::dead_letter::DeadLetter;
use super::error::StoreError;
use super::inbox::{INBOX_PAGE, Inbox, Stored, WriteBatch};
use jobrelay_contract::event::JobEvent;

/// What the lanes record of their deliveries, durably: per plugin, the cursors (what was
/// delivered of each job, and jobs first seen), the install time, the dead letters and the
/// operator's replay requests; and whether the store answers at all (readiness).
///
/// Shared as `Arc<dyn DeliveryStore>` by every lane of the daemon; a CLI process opens the same
/// store beside the running daemon, so every method must be safe against a second process
/// using the store at the same time.
#[async_trait]
pub trait DeliveryStore: Send + Sync {
    /// All cursors of one plugin (loaded once per lane at start; a lane keeps them in memory).
    async fn cursors(&self, plugin: &str) -> Result<Vec<Cursor>, StoreError>;

    /// Up to `limit` cursors of one plugin by (cluster, uid), byte order, from just after
    /// `after` (`None`: from the start): a lane opening on a million jobs reads them a page at
    /// a time instead of holding them all at once. The default reads them all and picks the
    /// page (test stores).
    async fn cursors_page(
        &self,
        plugin: &str,
        after: Option<(&str, &str)>,
        limit: u32,
    ) -> Result<Vec<Cursor>, StoreError> {
        let mut all = self.cursors(plugin).await?;
        all.sort_by(|a, b| (&a.cluster, &a.uid).cmp(&(&b.cluster, &b.uid)));
        Ok(all
            .into_iter()
            .filter(|c| {
                after.is_none_or(|(cluster, uid)| {
                    (c.cluster.as_str(), c.uid.as_str()) > (cluster, uid)
                })
            })
            .take(limit as usize)
            .collect())
    }

    /// Upsert by (plugin, cluster, uid).
    async fn save_cursor(&self, cursor: &Cursor) -> Result<(), StoreError>;

    /// Records that a plugin's lane has seen a job, without overwriting a cursor that exists:
    /// a job seen but never delivered (its versions did not match the delivery mode) must
    /// still get its deletion if it vanishes while jobrelay is down. Stored with an empty
    /// resourceVersion, meaning "nothing delivered".
    async fn note_first_sight(&self, cursor: &Cursor) -> Result<(), StoreError>;

    /// [`note_first_sight`](DeliveryStore::note_first_sight) for several jobs at once, in statements of
    /// up to 500 jobs. The default remembers them one by one.
    async fn note_first_sights(&self, cursors: &[Cursor]) -> Result<(), StoreError> {
        for cursor in cursors {
            self.note_first_sight(cursor).await?;
        }
        Ok(())
    }

    /// When `plugin` was first installed: records `now` (RFC 3339) if nothing is stored for
    /// it and returns what is stored, so the first call's time stays for good. Kept when the
    /// plugin is removed, so adding it back is not a new install; shared by replicas, so the
    /// first one to open the plugin's lane sets it.
    async fn install_time(&self, plugin: &str, now: &str) -> Result<String, StoreError>;

    /// Carries out one batch of a lane's writes in one transaction — the events it took, the
    /// jobs it saw first, the cursors it saved and removed, and the inbox marks those settle
    /// (see [`WriteBatch`]): all of it is stored or none.
    async fn write(&self, batch: WriteBatch) -> Result<(), StoreError>;

    /// One page of `plugin`'s inbox: up to `limit` of the events it took and has not settled,
    /// oldest first, from just after `after` (0: from the start), and the marks whose event
    /// could not be read (see [`Inbox`]; marks whose event is missing are named with the first
    /// page).
    async fn inbox_page(&self, plugin: &str, after: i64, limit: u32) -> Result<Inbox, StoreError>;

    /// `plugin`'s whole inbox, read page by page (tools and tests; a lane reads it a page at
    /// a time).
    async fn inbox(&self, plugin: &str) -> Result<Inbox, StoreError> {
        let mut whole = Inbox::default();
        let mut after = 0;
        loop {
            let page = self.inbox_page(plugin, after, INBOX_PAGE).await?;
            whole.events.extend(page.events);
            whole.taken_at.extend(page.taken_at);
            whole.damaged.extend(page.damaged);
            match page.next {
                Some(next) => after = next,
                None => return Ok(whole),
            }
        }
    }

    /// The inbox's event `event_id`, for a lane that queued it as its place alone and reads
    /// it back when its turn comes.
    async fn inbox_event(&self, event_id: &str) -> Result<Stored, StoreError>;

    /// Several events of the inbox by id, answered in the order asked (an id may repeat):
    /// a lane's read-backs gathered into few queries instead of one each. One at a time
    /// unless the store knows better.
    async fn inbox_events(&self, ids: &[&str]) -> Result<Vec<Stored>, StoreError> {
        let mut stored = Vec::with_capacity(ids.len());
        for id in ids {
            stored.push(self.inbox_event(id).await?);
        }
        Ok(stored)
    }

    /// Several upserts in one transaction: all are stored or none. Batching acks this way
    /// costs one disk sync instead of one per event. The batch is handed over, so a store that
    /// writes on a thread of its own takes it without a copy.
    async fn save_cursors(&self, cursors: Vec<Cursor>) -> Result<(), StoreError>;

    /// Forgets one job for one plugin. Removing a cursor that does not exist is not an error.
    async fn remove_cursor(&self, plugin: &str, cluster: &str, uid: &str)
    -> Result<(), StoreError>;

    /// Stores a dead letter; returns its seq, unique in the store and never reused.
    async fn add_dead_letter(
        &self,
        plugin: &str,
        event: &JobEvent,
        error: &str,
        attempts: u32,
    ) -> Result<i64, StoreError>;

    /// Dead letters, oldest (lowest seq) first; of one plugin, or of all.
    async fn dead_letters(&self, plugin: Option<&str>) -> Result<Vec<DeadLetter>, StoreError>;

    /// Removes dead letters: the given seqs (restricted to `plugin` if given), or, with empty
    /// `seqs`, all of `plugin`, or with neither, everything, but only if `all` is set.
    /// Seqs together with `all` are refused as ambiguous. Returns how many were removed.
    async fn drop_dead_letters(
        &self,
        plugin: Option<&str>,
        seqs: &[i64],
        all: bool,
    ) -> Result<u64, StoreError>;

    /// Marks dead letters for replay, with the selection rules of
    /// [`drop_dead_letters`](DeliveryStore::drop_dead_letters). Returns how many were selected
    /// (including any already marked).
    async fn request_replay(
        &self,
        plugin: Option<&str>,
        seqs: &[i64],
        all: bool,
    ) -> Result<u64, StoreError>;

    /// The daemon's side: atomically takes (removes and returns, oldest first) the dead letters
    /// of `plugin` that are marked for replay; with `clusters`, only those of these clusters
    /// (a sharded replica takes only its own). Two takers never get the same dead letter; a
    /// taken letter that fails again comes back as a new dead letter with a new seq.
    async fn take_replays(
        &self,
        plugin: &str,
        clusters: Option<&[String]>,
    ) -> Result<Vec<DeadLetter>, StoreError>;

    /// How many dead letters are stored, by plugin (plugins with none are absent): the backlog
    /// an operator has to look at, across restarts and replicas.
    async fn dead_letter_counts(&self) -> Result<BTreeMap<String, u64>, StoreError>;

    /// The plugins with a dead letter of the job `uid` of `cluster` stored: what holds a
    /// finished job back from clean-up until the letter is replayed and delivered, or dropped.
    /// The default reads every dead letter; the SQL store asks for this job's only.
    async fn dead_lettered_plugins(
        &self,
        cluster: &str,
        uid: &str,
    ) -> Result<Vec<String>, StoreError> {
        let mut plugins: Vec<String> = self
            .dead_letters(None)
            .await?
            .into_iter()
            .filter(|d| d.event.cluster == cluster && d.event.uid == uid)
            .map(|d| d.plugin)
            .collect();
        plugins.sort();
        plugins.dedup();
        Ok(plugins)
    }

    /// The dead letters stored of each of `jobs` (cluster, uid), by plugin: how many, and
    /// the error of the latest. What the job view shows per plugin for a page of jobs, in one
    /// read. The default reads every dead letter; the SQL store asks for these jobs' only.
    async fn dead_letters_of_jobs(
        &self,
        jobs: &[(String, String)],
    ) -> Result<Vec<JobDeadLetters>, StoreError> {
        let letters = self.dead_letters(None).await?;
        Ok(summarize_dead_letters(
            letters
                .into_iter()
                .filter(|d| {
                    jobs.iter()
                        .any(|(c, u)| *c == d.event.cluster && *u == d.event.uid)
                })
                .map(|d| (d.plugin, d.event.cluster, d.event.uid, d.seq, d.error)),
        ))
    }

    /// Whether the store answers now: one trivial statement through the pool. The daemon's
    /// readiness follows it, since a replica whose acknowledgements cannot be written cannot
    /// do its part. (A store that answers but refuses writes — a full disk still takes a
    /// small write — is seen by the lanes' writers instead: `jobrelay_lanes::store_writes`.)
    async fn check(&self) -> Result<(), StoreError>;

    /// Releases the store's connections at shutdown. Everything acknowledged is already
    /// committed, so this only tidies up (for SQLite: folds the write-ahead log back into the
    /// file); the default does nothing.
    async fn close(&self) {}
}

/// The plugins' small key-value entries (the `kv` capability), namespaced by plugin name.
#[async_trait]
pub trait PluginKv: Send + Sync {
    /// The value under `key`, unless absent or expired.
    async fn kv_get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// Stores `value` under `key`; with `ttl_seconds`, it expires that long from now.
    async fn kv_set(
        &self,
        plugin: &str,
        key: &str,
        value: &[u8],
        ttl_seconds: Option<u32>,
    ) -> Result<(), StoreError>;

    /// What `plugin`'s live (unexpired) entries other than `except_key` take: their number,
    /// and their keys' and values' bytes. For the per-plugin quota checked before a write.
    async fn kv_usage(&self, plugin: &str, except_key: &str) -> Result<(u64, u64), StoreError>;

    /// Removes `key`; whether a live entry was there.
    async fn kv_delete(&self, plugin: &str, key: &str) -> Result<bool, StoreError>;

    /// Every live entry of `plugin`, `(key, value)`, in key order. Not offered to plugins: the
    /// host reads its own entries with it (the counting timers' times, kept under an owner no
    /// plugin can be named; see `jobrelay::daemon::fleet_events`).
    async fn kv_entries(&self, plugin: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError>;
}

/// The dead letters of one job for one plugin (see
/// [`DeliveryStore::dead_letters_of_jobs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobDeadLetters {
    /// The plugin that gave up on them.
    pub plugin: String,
    /// The job's cluster.
    pub cluster: String,
    /// The job's uid.
    pub uid: String,
    /// How many of the job's events are dead letters of this plugin.
    pub count: u64,
    /// The error of the latest.
    pub last_error: String,
}

/// Groups (plugin, cluster, uid, seq, error) rows by job and plugin.
pub fn summarize_dead_letters(
    rows: impl IntoIterator<Item = (String, String, String, i64, String)>,
) -> Vec<JobDeadLetters> {
    let mut by_job: std::collections::BTreeMap<(String, String, String), (u64, i64, String)> =
        std::collections::BTreeMap::new();
    for (plugin, cluster, uid, seq, error) in rows {
        let entry = by_job
            .entry((plugin, cluster, uid))
            .or_insert((0, i64::MIN, String::new()));
        entry.0 += 1;
        if seq > entry.1 {
            entry.1 = seq;
            entry.2 = error;
        }
    }
    by_job
        .into_iter()
        .map(
            |((plugin, cluster, uid), (count, _, last_error))| JobDeadLetters {
                plugin,
                cluster,
                uid,
                count,
                last_error,
            },
        )
        .collect()
}
