use parking_lot::Mutex;
use std::collections::BTreeMap;

use async_trait::async_trait;
use jobrelay_contract::event::{JobEvent, Phase};
use jobrelay_state::{DeadLetter, Inbox, StoreError, WriteBatch};

use super::*;

/// A store that records each batch and holds every write until told to go on, so that
/// cursors gather behind a write in progress.
struct Recording {
    batches: Mutex<Vec<Vec<String>>>,
    gate: tokio::sync::Semaphore,
    fail: std::sync::atomic::AtomicBool,
    /// Fails every batch, saves or not (a full disk).
    fail_all: std::sync::atomic::AtomicBool,
}

impl Recording {
    /// The entries written so far, batch by batch.
    fn written(&self) -> Vec<Vec<String>> {
        self.batches.lock().clone()
    }

    /// How many written entries hold `entry`.
    fn batches_with(&self, entry: &str) -> usize {
        self.written()
            .iter()
            .filter(|b| b.iter().any(|e| e == entry))
            .count()
    }
}

impl Default for Recording {
    fn default() -> Recording {
        Recording {
            batches: Mutex::default(),
            gate: tokio::sync::Semaphore::new(0),
            fail: std::sync::atomic::AtomicBool::new(false),
            fail_all: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

#[async_trait]
impl DeliveryStore for Recording {
    async fn cursors(&self, _: &str) -> Result<Vec<Cursor>, StoreError> {
        Ok(Vec::new())
    }
    async fn save_cursor(&self, c: &Cursor) -> Result<(), StoreError> {
        self.save_cursors(vec![c.clone()]).await
    }
    async fn note_first_sight(&self, _: &Cursor) -> Result<(), StoreError> {
        Ok(())
    }
    async fn note_first_sights(&self, cursors: &[Cursor]) -> Result<(), StoreError> {
        self.batches.lock().push(
            cursors
                .iter()
                .map(|c| format!("first sight {}", c.uid))
                .collect(),
        );
        Ok(())
    }
    async fn install_time(&self, _: &str, now: &str) -> Result<String, StoreError> {
        Ok(now.to_string())
    }
    /// Records the batch's parts in its order, each as an entry of its own (takes, notes,
    /// saves, each removal, settles); holds a batch with saves at the gate and fails it
    /// when told to.
    async fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        if !batch.saved.is_empty() {
            self.gate.acquire().await.map(|p| p.forget()).ok();
        }
        let mut entries: Vec<Vec<String>> = Vec::new();
        let mut part = |items: Vec<String>| {
            if !items.is_empty() {
                entries.push(items);
            }
        };
        part(
            batch
                .taken
                .iter()
                .map(|t| format!("take {}", t.event_id))
                .collect(),
        );
        part(
            batch
                .first_sights
                .iter()
                .map(|c| format!("first sight {}", c.uid))
                .collect(),
        );
        part(batch.saved.iter().map(|c| c.uid.clone()).collect());
        for c in &batch.removed {
            part(vec![format!("remove {}", c.uid)]);
        }
        part(
            batch
                .settled
                .iter()
                .map(|s| format!("settle {}", s.event_id))
                .collect(),
        );
        self.batches.lock().extend(entries);
        if self.fail_all.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::InvalidSelection("disk full".into()));
        }
        if self.fail.load(std::sync::atomic::Ordering::SeqCst) && !batch.saved.is_empty() {
            return Err(StoreError::InvalidSelection("disk full".into()));
        }
        Ok(())
    }
    async fn inbox_page(&self, _: &str, _: i64, _: u32) -> Result<Inbox, StoreError> {
        Ok(Inbox::default())
    }
    async fn inbox_event(&self, _: &str) -> Result<jobrelay_state::Stored, StoreError> {
        Ok(jobrelay_state::Stored::Missing)
    }
    async fn save_cursors(&self, cursors: Vec<Cursor>) -> Result<(), StoreError> {
        self.gate.acquire().await.map(|p| p.forget()).ok();
        self.batches
            .lock()
            .push(cursors.iter().map(|c| c.uid.clone()).collect());
        if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::InvalidSelection("disk full".into()));
        }
        Ok(())
    }
    async fn remove_cursor(&self, _: &str, _: &str, uid: &str) -> Result<(), StoreError> {
        self.batches.lock().push(vec![format!("remove {uid}")]);
        Ok(())
    }
    async fn add_dead_letter(
        &self,
        _: &str,
        _: &JobEvent,
        _: &str,
        _: u32,
    ) -> Result<i64, StoreError> {
        Ok(1)
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

/// A save of `uid`'s cursor running on its own task, as a lane's worker would make it.
fn saving(writer: &LaneWriter, uid: &str) -> tokio::task::JoinHandle<Result<(), String>> {
    let (writer, cursor) = (writer.clone(), cursor(uid));
    tokio::spawn(async move { writer.save(cursor, None).await.map_err(|e| e.to_string()) })
}

/// Long enough for spawned saves to reach the writer's queue.
async fn settle() {
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
}

fn cursor(uid: &str) -> Cursor {
    Cursor {
        plugin: "p".into(),
        cluster: "c".into(),
        uid: uid.into(),
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        namespace: "ns".into(),
        name: uid.into(),
        resource_version: "1".into(),
        phase: Phase::Running,
        transition_time: String::new(),
        deleted: false,
    }
}

/// Cursors handed in while a write is in progress are stored together by the next write,
/// and no save returns before the write holding its cursor has finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursors_gather_behind_a_write_and_each_save_waits_for_its_own() {
    let store = Arc::new(Recording::default());
    let writer = LaneWriter::start("p", store.clone(), MemoryBudget::unbounded());
    let first = saving(&writer, "a");
    settle().await;
    let rest: Vec<_> = ["b", "c", "d"].map(|uid| saving(&writer, uid)).into();
    settle().await;
    assert!(
        !first.is_finished(),
        "a save returned before its write finished"
    );
    assert!(rest.iter().all(|r| !r.is_finished()));
    store.gate.add_permits(2);
    assert_eq!(first.await.expect("join"), Ok(()));
    for r in rest {
        assert_eq!(r.await.expect("join"), Ok(()));
    }
    let mut batches = store.batches.lock().clone();
    // The three saves are tasks of their own: the order they reach the writer in, and so
    // their order inside the batch, is the scheduler's (different jobs, so it does not
    // matter). Which batch each is in is the point.
    for batch in &mut batches {
        batch.sort();
    }
    assert_eq!(batches, vec![vec!["a"], vec!["b", "c", "d"]]);
}

/// Under a light load a save waits a moment for company: one handed in just after goes
/// in the same statement; a save alone is still written once the linger is over.
#[tokio::test(start_paused = true)]
async fn a_small_batch_waits_a_moment_for_company_and_no_longer() {
    let store = Arc::new(Recording::default());
    store.gate.add_permits(10);
    let writer = LaneWriter::start("p", store.clone(), MemoryBudget::unbounded());
    let first = saving(&writer, "a");
    // The writer has taken `a` and, without the linger, would be writing it alone.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let second = saving(&writer, "b");
    assert_eq!(first.await.expect("join"), Ok(()));
    assert_eq!(second.await.expect("join"), Ok(()));

    let before = tokio::time::Instant::now();
    assert_eq!(saving(&writer, "c").await.expect("join"), Ok(()));
    let waited = before.elapsed();
    assert!(
        waited >= LINGER && waited <= LINGER + Duration::from_millis(2),
        "a save alone waited {waited:?}"
    );
    let batches = store.batches.lock().clone();
    assert_eq!(batches, vec![vec!["a", "b"], vec!["c"]]);
}

/// First sights of jobs ride with the next batch, written before its saves (an insert
/// that keeps what is there, so it cannot undo an acknowledgement), and hold nobody up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_sights_go_with_the_next_batch_before_its_saves() {
    let store = Arc::new(Recording::default());
    let writer = LaneWriter::start("p", store.clone(), MemoryBudget::unbounded());
    let first = saving(&writer, "a");
    settle().await;
    writer.note_first_sight(cursor("new"));
    let second = saving(&writer, "b");
    settle().await;
    store.gate.add_permits(2);
    assert_eq!(first.await.expect("join"), Ok(()));
    assert_eq!(second.await.expect("join"), Ok(()));
    let batches = store.batches.lock().clone();
    assert_eq!(batches, vec![vec!["a"], vec!["first sight new"], vec!["b"]]);
}

/// A job noted and then removed before the writer got to either: the note is written
/// first, so the removal is what stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_is_never_overtaken_by_an_earlier_note() {
    let store = Arc::new(Recording::default());
    let writer = LaneWriter::start("p", store.clone(), MemoryBudget::unbounded());
    let first = saving(&writer, "a");
    settle().await;
    writer.note_first_sight(cursor("gone"));
    let removed = tokio::spawn({
        let writer = writer.clone();
        async move { writer.remove(cursor("gone"), None).await }
    });
    settle().await;
    store.gate.add_permits(1);
    assert_eq!(first.await.expect("join"), Ok(()));
    assert!(removed.await.expect("join").is_ok());
    let batches = store.batches.lock().clone();
    assert_eq!(
        batches,
        vec![vec!["a"], vec!["first sight gone"], vec!["remove gone"]]
    );
}

/// A failed write fails every save in its batch, with the store's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_fails_each_of_its_saves() {
    let store = Arc::new(Recording::default());
    store.fail.store(true, std::sync::atomic::Ordering::SeqCst);
    store.gate.add_permits(10);
    let writer = LaneWriter::start("p", store.clone(), MemoryBudget::unbounded());
    let err = writer.save(cursor("a"), None).await.expect_err("disk full");
    assert!(err.to_string().contains("disk full"), "{err}");
}

/// A writer on a store that refuses every batch (a full disk), with a budget of 1 MiB.
fn refusing_store() -> (Arc<Recording>, Arc<MemoryBudget>, LaneWriter) {
    let store = Arc::new(Recording::default());
    store
        .fail_all
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let budget = MemoryBudget::new(1 << 20);
    let writer = LaneWriter::start("p", store.clone(), budget.clone());
    (store, budget, writer)
}

fn event(uid: &str, rv: &str) -> JobEvent {
    serde_json::from_value(serde_json::json!({
        "id": format!("c/{uid}/{rv}"), "cluster": "c", "api_version": "batch/v1",
        "kind": "Job", "namespace": "ns", "name": uid, "uid": uid, "resource_version": rv,
        "phase": "running", "transition_time": "", "object_json": "{}"
    }))
    .expect("an event")
}

/// What a round does with the waiting takes, against a plain list: takes come in order,
/// some are settled, a round takes those due (all of them for a flush, the oldest past an
/// excess of bytes) and may fail and put them back. The takes waiting, their order, the
/// next time due, the charges given back and the marks to remove are the list's.
#[test]
fn round_takes_behave_as_a_list_in_order() {
    use proptest::prelude::*;
    #[derive(Debug, Clone)]
    enum Op {
        Take(u64),
        Settle(usize),
        Round {
            later: u64,
            all: bool,
            excess: u64,
            fail: bool,
        },
    }
    let op = prop_oneof![
        3 => (1u64..50).prop_map(Op::Take),
        2 => (0usize..40).prop_map(Op::Settle),
        2 => (0u64..40, any::<bool>(), 0u64..120, any::<bool>())
            .prop_map(|(later, all, excess, fail)| Op::Round { later, all, excess, fail }),
    ];
    proptest!(|(ops in proptest::collection::vec(op, 1..60))| {
        let start = Instant::now();
        let budget = MemoryBudget::new(1 << 30);
        let mut takes = TakeSchedule::default();
        // (id, charge, due), in order.
        let mut model: Vec<(String, u64, Instant)> = Vec::new();
        let mut now = start;
        let mut next = 0;
        // Charged by takes, less those settled while they waited (given back).
        let mut unstored = 0;
        for op in ops {
            match op {
                Op::Take(charge) => {
                    let e = event(&format!("u{next}"), "1");
                    next += 1;
                    let due = now + TAKE_DELAY;
                    budget.hold(charge);
                    unstored += charge;
                    model.push((e.id.clone(), charge, due));
                    takes.take(Arc::new(e), charge, due);
                }
                Op::Settle(n) => {
                    let id = format!("c/u{n}/1");
                    let mut batch = WriteBatch::default();
                    takes.settle(&mut batch, "p", Some(id.clone()), &budget);
                    let waited = model.iter().position(|(i, _, _)| *i == id);
                    if let Some(i) = waited {
                        unstored -= model.remove(i).1;
                    }
                    prop_assert_eq!(batch.settled.is_empty(), waited.is_some());
                }
                Op::Round { later, all, excess, fail } => {
                    now += Duration::from_millis(later);
                    let got = takes.due(now, all, excess);
                    let mut covered = 0;
                    let mut want = 0;
                    for (_, charge, due) in &model {
                        if all || *due <= now || covered < excess {
                            covered += charge;
                            want += 1;
                        } else {
                            break;
                        }
                    }
                    let taken: Vec<_> = model.drain(..want).collect();
                    prop_assert_eq!(
                        got.iter().map(|(e, _, _)| e.id.clone()).collect::<Vec<_>>(),
                        taken.iter().map(|(i, _, _)| i.clone()).collect::<Vec<_>>()
                    );
                    if fail {
                        takes.put_back(got);
                        model.splice(0..0, taken);
                    }
                }
            }
            prop_assert_eq!(budget.unstored(), unstored);
            prop_assert_eq!(takes.is_empty(), model.is_empty());
            prop_assert_eq!(takes.next_due(), model.first().map(|(_, _, d)| *d));
        }
        let left: Vec<String> = takes.drain().map(|(e, _)| e.id.clone()).collect();
        prop_assert_eq!(left, model.iter().map(|(i, _, _)| i.clone()).collect::<Vec<_>>());
    });
}

/// A take is charged to the budget until stored. One whose batch failed is not dropped
/// (the lane may hold it only as its place): it is written again, and its charge is given
/// back once it is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_whose_batch_failed_is_written_with_the_next() {
    let (store, budget, writer) = refusing_store();
    writer.take(event("u", "7"), 1_000);
    assert!(budget.held() > 0, "a take is charged");
    let started = std::time::Instant::now();
    while store.batches_with("take c/u/7") == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the take is never written"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(budget.held() > 0, "a take not stored keeps its charge");
    store
        .fail_all
        .store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(writer.flush().await, "every take is stored");
    assert_eq!(budget.held(), 0, "a stored take gives its charge back");
    assert_eq!(
        store.batches_with("take c/u/7"),
        2,
        "written with the failed batch, then with the next"
    );
}

/// A take waits a little before it is written: one whose event is settled meanwhile (the
/// plugin kept up) is never written, nor its mark; one still waiting when it is due is
/// written with nothing else coming.
#[tokio::test(start_paused = true)]
async fn a_take_settled_before_it_is_due_is_never_written() {
    let store = Arc::new(Recording::default());
    store.gate.add_permits(10);
    let budget = MemoryBudget::new(1 << 20);
    let writer = LaneWriter::start("p", store.clone(), budget.clone());
    writer.take(event("u", "7"), 1_000);
    writer.take(event("w", "8"), 1_000);
    tokio::time::sleep(TAKE_DELAY / 4).await;
    writer
        .save(cursor("u"), Some("c/u/7".into()))
        .await
        .expect("saved");
    tokio::time::sleep(TAKE_DELAY * 2).await;
    let entries: Vec<String> = store.batches.lock().iter().flatten().cloned().collect();
    assert!(
        !entries.iter().any(|e| e.contains("c/u/7")),
        "the settled take or its mark was written: {entries:?}"
    );
    assert!(
        entries.iter().any(|e| e == "take c/w/8"),
        "the unsettled take was not written when due: {entries:?}"
    );
    assert_eq!(budget.held(), 0, "both charges given back");
}

/// Past half the write-ahead, only the oldest takes go early — as many as bring the bytes
/// waiting back under it — and the younger ones still wait their delay (they are the
/// likeliest to be settled before it ends).
#[tokio::test(start_paused = true)]
async fn under_pressure_only_the_oldest_takes_go_early() {
    let store = Arc::new(Recording::default());
    let budget = MemoryBudget::new(1 << 20);
    let half = budget.write_ahead() / 2;
    let writer = LaneWriter::start("p", store.clone(), budget.clone());
    // Three takes of 40% of half the write-ahead each: 120%, so one must go early.
    for (uid, rv) in [("a", "1"), ("b", "2"), ("c", "3")] {
        writer.take(event(uid, rv), half * 2 / 5);
    }
    tokio::time::sleep(TAKE_DELAY / 4).await;
    assert_eq!(store.written(), vec![vec!["take c/a/1".to_string()]]);
    tokio::time::sleep(TAKE_DELAY * 2).await;
    assert_eq!(
        store.written()[1..],
        [vec!["take c/b/2".to_string(), "take c/c/3".to_string()]],
        "the others when due"
    );
}

/// Takes kept from a failed batch do not wait for their retry time once the store takes
/// writes again: they go with the next round that comes, ahead of later takes, so a full
/// disk freed again stores them at once and in the order they came.
#[tokio::test(start_paused = true)]
async fn kept_takes_go_with_the_next_round_first() {
    let store = Arc::new(Recording::default());
    store.gate.add_permits(10);
    store
        .fail_all
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let budget = MemoryBudget::new(1 << 20);
    let writer = LaneWriter::start("p", store.clone(), budget.clone());
    writer.take(event("u", "7"), 1_000);
    tokio::time::sleep(TAKE_DELAY * 2).await;
    assert_eq!(store.written(), vec![vec!["take c/u/7".to_string()]]);
    store
        .fail_all
        .store(false, std::sync::atomic::Ordering::SeqCst);
    writer.take(event("w", "8"), 1_000);
    // Well before the retry time: only this round's arrival can carry the kept take.
    writer.save(cursor("x"), None).await.expect("saved");
    assert_eq!(
        store.written()[1..],
        [vec!["take c/u/7".to_string()], vec!["x".to_string()]],
        "the kept take went with the save's round; the new one is not due yet"
    );
    assert!(writer.flush().await, "every take is stored");
    assert_eq!(store.written()[3..], [vec!["take c/w/8".to_string()]]);
    assert_eq!(budget.held(), 0, "both charges given back");
}

/// Takes kept from a failed batch are written again on their own, with nothing else
/// coming: a quiet lane's only copy of an event does not wait for the next event to be
/// stored. The lanes' write health follows (failing, then not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_takes_are_written_again_without_a_new_request() {
    let (store, budget, writer) = refusing_store();
    writer.take(event("u", "7"), 1_000);
    let started = std::time::Instant::now();
    while store.batches_with("take c/u/7") < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never tried again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        budget.writes().failing().is_some(),
        "the failure is reported"
    );
    assert_eq!(budget.held(), 1_000, "kept, and still charged");
    store
        .fail_all
        .store(false, std::sync::atomic::Ordering::SeqCst);
    while budget.held() > 0 {
        assert!(started.elapsed() < Duration::from_secs(20), "never stored");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(budget.writes().failing().is_none(), "writes succeed again");
    drop(writer);
}

/// Takes are handed over without waking the writer while takes keep coming (its tick looks
/// at them); once none came for a while the writer sleeps with no timer, and the next take
/// wakes it — and is still written when due with nothing else coming.
#[tokio::test(start_paused = true)]
async fn a_sleeping_writer_is_woken_by_the_next_take_and_writes_it_when_due() {
    let store = Arc::new(Recording::default());
    let budget = MemoryBudget::new(1 << 20);
    let writer = LaneWriter::start("p", store.clone(), budget.clone());
    writer.take(event("u", "7"), 1_000);
    tokio::time::sleep(TAKE_DELAY + TICK * 2).await;
    assert_eq!(store.batches_with("take c/u/7"), 1, "written when due");
    tokio::time::sleep(AWAKE_FOR + TICK * 2).await;
    assert!(
        writer.handoff.asleep.load(Ordering::SeqCst),
        "an idle writer keeps no timer"
    );
    writer.take(event("w", "8"), 1_000);
    assert!(
        !writer.handoff.asleep.load(Ordering::SeqCst),
        "the take woke it"
    );
    tokio::time::sleep(TAKE_DELAY + TICK * 2).await;
    assert_eq!(store.batches_with("take c/w/8"), 1, "written when due");
    assert_eq!(budget.held(), 0, "both charges given back");
    assert_eq!(writer.written(), 2);
}

/// While the store refuses batches, the writer's tick does not write the kept takes again
/// before their retry time: the backoff holds however often the writer wakes.
#[tokio::test(start_paused = true)]
async fn the_tick_keeps_the_retry_backoff() {
    let (store, _budget, writer) = refusing_store();
    writer.take(event("u", "7"), 1_000);
    // Takes keep coming, so the writer ticks all along.
    for i in 0..40 {
        tokio::time::sleep(TICK).await;
        let id = format!("x{i}");
        writer.take(event(&id, "1"), 10);
        writer.drop_mark(format!("c/{id}/1"));
    }
    // 400 ms: the first write when due (20 ms) failed; the retry is 500 ms after it.
    assert_eq!(store.batches_with("take c/u/7"), 1, "tried again too soon");
    tokio::time::sleep(RETRY_FIRST).await;
    assert_eq!(
        store.batches_with("take c/u/7"),
        2,
        "tried again at its time"
    );
    drop(writer);
}

/// A take settled in the same round (the lane kept up) is written neither as an event nor
/// as a mark; one settled in a later round is written first, and its mark goes with the
/// cursor. A flush returns once what was handed in before it is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_takes_still_waiting_at_the_end_of_a_round_reach_the_inbox() {
    let store = Arc::new(Recording::default());
    store.gate.add_permits(10);
    let writer = LaneWriter::start("p", store.clone(), MemoryBudget::unbounded());
    writer.take(event("u", "7"), 1_000);
    writer
        .save(cursor("u"), Some("c/u/7".into()))
        .await
        .expect("saved");
    writer.take(event("v", "8"), 1_000);
    writer.flush().await;
    writer
        .save(cursor("v"), Some("c/v/8".into()))
        .await
        .expect("saved");
    let batches = store.batches.lock().clone();
    assert_eq!(
        batches,
        vec![
            vec!["u".to_string()],
            vec!["take c/v/8".to_string()],
            vec!["v".to_string()],
            vec!["settle c/v/8".to_string()],
        ]
    );
}
