//! Noticing config changes: inotify (through `notify`) on the config *folders*, debounced, plus
//! a periodic re-scan.
//!
//! Folders, not files, are watched because of how the kubelet updates a mounted ConfigMap: it
//! writes a new timestamped folder and atomically renames a `..data` link over the old one, so a
//! watch on a file follows the old inode and dies. Any event in a watched folder only says
//! "something changed"; the caller then re-reads everything and compares content hashes. The
//! periodic re-scan covers what inotify can miss (queue overflow, a folder replaced wholesale).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};
use tokio::sync::mpsc;
use tokio::time::{Interval, MissedTickBehavior};

use super::read_once;

/// Why the folder should be re-read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// A file event arrived (after the debounce delay).
    FileEvent,
    /// The periodic re-scan is due.
    Rescan,
}

/// A folder to watch: the whole tree under it, or only its own entries (a folder outside the
/// config that holds a component named by an absolute `wasm:` path; watching all below it
/// could mean watching a whole system folder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedDir {
    pub path: PathBuf,
    pub recursive: bool,
}

impl WatchedDir {
    pub fn tree(path: impl Into<PathBuf>) -> WatchedDir {
        WatchedDir {
            path: path.into(),
            recursive: true,
        }
    }

    pub fn flat(path: impl Into<PathBuf>) -> WatchedDir {
        WatchedDir {
            path: path.into(),
            recursive: false,
        }
    }
}

/// Watches folders and yields [`Trigger`]s.
pub struct FolderWatch {
    debouncer: Debouncer<notify::RecommendedWatcher, RecommendedCache>,
    /// Watched folder → its inode when the watch was set, to notice a replaced folder, and
    /// whether the watch covers the tree below it.
    watched: HashMap<PathBuf, (u64, bool)>,
    events: mpsc::UnboundedReceiver<()>,
    rescan: Interval,
}

impl FolderWatch {
    /// A watch whose events under `ignored` (path prefixes, compared as text so that a file's
    /// prefix also covers its siblings such as `state.db-wal`) never trigger a re-read: the
    /// daemon's own state file and local folder when they live inside the config folder, which
    /// it writes on every acknowledgement.
    pub fn new(
        debounce: Duration,
        rescan: Duration,
        ignored: Vec<PathBuf>,
    ) -> Result<FolderWatch, notify::Error> {
        let (tx, events) = mpsc::unbounded_channel();
        let (quiet, tick) = debounce_timing(debounce);
        let debouncer = new_debouncer(quiet, Some(tick), move |result: DebounceEventResult| {
            match result {
                Ok(events)
                    if !events.iter().any(|e| {
                        changes_content(&e.event.kind) && !all_ignored(&e.event.paths, &ignored)
                    }) => {}
                Ok(_) => {
                    let _ = tx.send(());
                }
                Err(errors) => {
                    for e in errors {
                        tracing::warn!(error = %e, "file watch error; the periodic re-scan covers it");
                    }
                    let _ = tx.send(());
                }
            }
        })?;
        let mut rescan = tokio::time::interval_at(tokio::time::Instant::now() + rescan, rescan);
        rescan.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Ok(FolderWatch {
            debouncer,
            watched: HashMap::new(),
            events,
            rescan,
        })
    }

    /// Make sure each existing folder in `dirs` is watched as it asks (a tree recursively, so
    /// the clusters/ and plugins/ sub-folders and their `..data` swaps are seen), re-watching a
    /// folder that was replaced, and no longer watching one that left the list. Folders that
    /// do not exist yet are picked up by a later call.
    pub fn ensure_watched(&mut self, dirs: &[WatchedDir]) {
        let gone: Vec<PathBuf> = self
            .watched
            .iter()
            .filter(|(p, (_, recursive))| {
                !dirs
                    .iter()
                    .any(|d| &d.path == *p && d.recursive == *recursive)
            })
            .map(|(p, _)| p.clone())
            .collect();
        for path in gone {
            let _ = self.debouncer.unwatch(&path);
            self.watched.remove(&path);
        }
        for WatchedDir {
            path: dir,
            recursive,
        } in dirs
        {
            let Some(ino) = inode(dir) else { continue };
            match self.watched.get(dir) {
                Some((known, _)) if *known == ino => continue,
                Some(_) => {
                    let _ = self.debouncer.unwatch(dir);
                }
                None => {}
            }
            let mode = if *recursive {
                RecursiveMode::Recursive
            } else {
                RecursiveMode::NonRecursive
            };
            match self.debouncer.watch(dir, mode) {
                Ok(()) => {
                    self.watched.insert(dir.clone(), (ino, *recursive));
                }
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot watch folder; relying on re-scans")
                }
            }
        }
    }

    /// Wait for the next reason to re-read. Several file events that arrive together are
    /// folded into one trigger.
    pub async fn next(&mut self) -> Trigger {
        tokio::select! {
            got = self.events.recv() => {
                while self.events.try_recv().is_ok() {}
                match got {
                    Some(()) => Trigger::FileEvent,
                    None => { self.rescan.tick().await; Trigger::Rescan }
                }
            }
            _ = self.rescan.tick() => Trigger::Rescan,
        }
    }
}

/// Whether every path of an event lies under one of the `ignored` prefixes, or is a probe of a
/// folder's writability ([`read_once::PROBE_PREFIX`]: made and removed at once while an edit
/// is judged, it would otherwise raise the re-read that judges it again). An event without
/// paths is not ignored.
fn all_ignored(paths: &[PathBuf], ignored: &[PathBuf]) -> bool {
    !paths.is_empty()
        && paths.iter().all(|path| {
            let probe = path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(read_once::PROBE_PREFIX));
            let path = path.to_string_lossy();
            probe
                || ignored
                    .iter()
                    .any(|prefix| path.starts_with(prefix.to_string_lossy().as_ref()))
        })
}

fn inode(dir: &Path) -> Option<u64> {
    std::fs::metadata(dir)
        .ok()
        .filter(|m| m.is_dir())
        .map(|m| m.ino())
}

/// The debouncer's thread wakes on every tick, at rest too, so a tick is never shorter than
/// this: at most 100 wake-ups a second whatever `debounce_ms` says.
const MIN_TICK: Duration = Duration::from_millis(10);

/// The quiet time and the tick the debouncer runs with for `debounce`: a tick of a quarter of
/// it (an event is handed on at most a tick after its quiet time), never below [`MIN_TICK`];
/// and a quiet time of at least one tick, which the debouncer requires. A debounce of 0 would
/// otherwise make its thread spin.
fn debounce_timing(debounce: Duration) -> (Duration, Duration) {
    let tick = (debounce / 4).max(MIN_TICK);
    (debounce.max(tick), tick)
}

/// Whether an event may mean a file's content or presence changed. Opening, reading and
/// closing a file unchanged are not: jobrelay's own reads of the folder raise them, and taking
/// them as changes made every re-read trigger the next one, keeping a core busy at rest.
/// Closing a file that was open for writing is a change.
pub(crate) fn changes_content(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode};
    match kind {
        notify::EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        notify::EventKind::Access(_) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RemoveKind};

    use std::time::Duration;

    use super::{all_ignored, changes_content, debounce_timing};

    #[test]
    fn the_debouncer_never_ticks_faster_than_its_floor() {
        let ms = Duration::from_millis;
        assert_eq!(debounce_timing(ms(0)), (ms(10), ms(10)));
        assert_eq!(debounce_timing(ms(20)), (ms(20), ms(10)));
        assert_eq!(
            debounce_timing(ms(50)),
            (ms(50), Duration::from_micros(12_500))
        );
        assert_eq!(debounce_timing(ms(60_000)), (ms(60_000), ms(15_000)));
    }

    #[test]
    fn reads_are_not_changes() {
        for kind in [
            EventKind::Access(AccessKind::Open(AccessMode::Read)),
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Any),
        ] {
            assert!(!changes_content(&kind), "{kind:?}");
        }
        for kind in [
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Any),
            EventKind::Remove(RemoveKind::File),
            EventKind::Any,
        ] {
            assert!(changes_content(&kind), "{kind:?}");
        }
    }

    #[test]
    fn the_state_files_and_local_folder_are_ignored() {
        use std::path::PathBuf;
        let ignored = vec![
            PathBuf::from("/etc/jobrelay/state/jobrelay.db"),
            PathBuf::from("/etc/jobrelay/local"),
        ];
        let p = |s: &str| PathBuf::from(s);
        for quiet in [
            vec![p("/etc/jobrelay/state/jobrelay.db-wal")],
            vec![
                p("/etc/jobrelay/state/jobrelay.db"),
                p("/etc/jobrelay/local/embedded/x.db"),
            ],
            // A probe of a folder's writability, anywhere.
            vec![p("/etc/jobrelay/other/.jobrelay-check-Ab3dEf")],
        ] {
            assert!(all_ignored(&quiet, &ignored), "{quiet:?}");
        }
        for change in [
            vec![p("/etc/jobrelay/plugins/log.yaml")],
            vec![
                p("/etc/jobrelay/state/jobrelay.db-wal"),
                p("/etc/jobrelay/jobrelay.yaml"),
            ],
            vec![],
        ] {
            assert!(!all_ignored(&change, &ignored), "{change:?}");
        }
    }
}
