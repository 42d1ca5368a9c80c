//! A state store in memory for the tests that run on tokio's paused clock: the SQLite store's
//! pool times out at once there (a paused clock jumps to the next timer whenever the runtime
//! waits on the store's thread). It keeps what a restart reads back of a plugin — its install
//! time and its cursors — and nothing of the inbox or the dead letters, which those tests do
//! not read.

use std::collections::{BTreeMap, HashMap};

use parking_lot::Mutex;

use jobrelay_contract::event::JobEvent;
use jobrelay_state::{Cursor, DeadLetter, DeliveryStore, Inbox, StoreError, Stored, WriteBatch};

/// Install times and cursors, shared by the lanes a test opens on it one after the other.
#[derive(Default)]
pub struct MemoryStore {
    installs: Mutex<HashMap<String, String>>,
    cursors: Mutex<BTreeMap<(String, String, String), Cursor>>,
}

impl MemoryStore {
    fn keep(&self, cursor: &Cursor) {
        let key = (
            cursor.plugin.clone(),
            cursor.cluster.clone(),
            cursor.uid.clone(),
        );
        self.cursors.lock().insert(key, cursor.clone());
    }
}

#[async_trait::async_trait]
impl DeliveryStore for MemoryStore {
    async fn cursors(&self, plugin: &str) -> Result<Vec<Cursor>, StoreError> {
        let cursors = self.cursors.lock();
        Ok(cursors
            .values()
            .filter(|c| c.plugin == plugin)
            .cloned()
            .collect())
    }
    async fn save_cursor(&self, cursor: &Cursor) -> Result<(), StoreError> {
        self.keep(cursor);
        Ok(())
    }
    async fn note_first_sight(&self, cursor: &Cursor) -> Result<(), StoreError> {
        self.keep(cursor);
        Ok(())
    }
    async fn install_time(&self, plugin: &str, now: &str) -> Result<String, StoreError> {
        let mut installs = self.installs.lock();
        Ok(installs
            .entry(plugin.to_string())
            .or_insert_with(|| now.to_string())
            .clone())
    }
    async fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        for cursor in batch.first_sights.iter().chain(&batch.saved) {
            self.keep(cursor);
        }
        Ok(())
    }
    async fn inbox_page(&self, _: &str, _: i64, _: u32) -> Result<Inbox, StoreError> {
        Ok(Inbox::default())
    }
    async fn inbox_event(&self, _: &str) -> Result<Stored, StoreError> {
        Ok(Stored::Missing)
    }
    async fn save_cursors(&self, cursors: Vec<Cursor>) -> Result<(), StoreError> {
        for cursor in &cursors {
            self.keep(cursor);
        }
        Ok(())
    }
    async fn remove_cursor(
        &self,
        plugin: &str,
        cluster: &str,
        uid: &str,
    ) -> Result<(), StoreError> {
        let key = (plugin.to_string(), cluster.to_string(), uid.to_string());
        self.cursors.lock().remove(&key);
        Ok(())
    }
    async fn add_dead_letter(
        &self,
        _: &str,
        _: &JobEvent,
        _: &str,
        _: u32,
    ) -> Result<i64, StoreError> {
        Ok(0)
    }
    async fn dead_letters(&self, _: Option<&str>) -> Result<Vec<DeadLetter>, StoreError> {
        Ok(Vec::new())
    }
    async fn drop_dead_letters(
        &self,
        _: Option<&str>,
        _: &[i64],
        _: bool,
    ) -> Result<u64, StoreError> {
        Ok(0)
    }
    async fn request_replay(&self, _: Option<&str>, _: &[i64], _: bool) -> Result<u64, StoreError> {
        Ok(0)
    }
    async fn take_replays(
        &self,
        _: &str,
        _: Option<&[String]>,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        Ok(Vec::new())
    }
    async fn dead_letter_counts(&self) -> Result<BTreeMap<String, u64>, StoreError> {
        Ok(BTreeMap::new())
    }
    async fn check(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
