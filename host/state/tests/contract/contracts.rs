//! Every promise of the store traits, each run on both backends by `on_both_backends!`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jobrelay_contract::event::Phase;
use jobrelay_state::{
    Cursor, READ_BACK_BATCH, Settled, StoreError, Stored, Taken, WriteBatch, open_store,
};

use crate::support::{Backend, cursor, event, on_both_backends};

on_both_backends! {
    cursor_upsert_overwrites_and_plugins_are_isolated => contract_upsert_and_isolation("upsert");
    batch_save_is_all_or_nothing => contract_batch_all_or_nothing("batch");
    everything_survives_closing_and_reopening => contract_survives_reopen("reopen");
    dead_letter_event_round_trips_exactly => contract_dead_letter_round_trip("roundtrip");
    dead_letters_drop_by_seq_by_plugin_and_all => contract_drop_selection("drop");
    replay_marks_and_take_removes_once => contract_replay_selection("replay");
    two_takers_never_get_the_same_dead_letter => contract_two_takers("takers");
    daemon_and_cli_share_the_store_without_lock_errors => contract_two_stores_share("share");
    remembering_a_job_never_overwrites_a_delivered_cursor => contract_note_first_sight("remember");
    plugin_kv_entries_are_per_plugin_and_expire => contract_kv_expiry("kv");
    keys_compare_byte_for_byte => contract_exact_keys("keys");
    a_plugins_first_install_time_is_kept_for_good => contract_install_time("install");
    kv_usage_counts_a_plugins_live_entries => contract_kv_usage("kvusage");
    damaged_rows_are_refused_naming_the_store_and_kept => contract_damaged_rows("damaged");
    remembering_many_jobs_at_once_keeps_delivered_cursors => contract_note_first_sights("rememberx");
    the_inbox_keeps_each_event_once_per_plugin_in_order => contract_inbox_order("inbox");
    a_batch_settles_marks_with_its_cursors_or_not_at_all => contract_inbox_atomic("inboxtx");
    damaged_inbox_rows_are_named_and_the_rest_flow => contract_inbox_damaged("inboxbad");
    the_inbox_reads_in_pages_and_by_id_one_or_many => contract_inbox_pages("inboxpage");
    cursors_read_in_pages_give_each_once_in_key_order => contract_cursor_pages("cursorpage");
    a_plugins_inbox_keeps_the_order_it_took_events_in => contract_inbox_mark_order("inboxorder");
    a_version_4_inbox_keeps_its_order_through_the_migration => contract_inbox_v4("inboxv4");
    events_stored_whole_before_version_6_read_back_after_it => contract_inbox_v5_rows("inboxv5");
    a_sweep_takes_the_old_unmarked_events_and_nothing_else => contract_inbox_sweep("inboxsweep");
}

async fn contract_upsert_and_isolation(b: &Backend) {
    let store = b.store().await;
    assert!(store.cursors("a").await.expect("empty").is_empty());

    store
        .save_cursor(&cursor("a", "c1", "u1", "10", Phase::Pending))
        .await
        .expect("save");
    store
        .save_cursor(&cursor("b", "c1", "u1", "11", Phase::Running))
        .await
        .expect("save");
    let newer = cursor("a", "c1", "u1", "12", Phase::Succeeded);
    store.save_cursor(&newer).await.expect("overwrite");

    assert_eq!(store.cursors("a").await.expect("load a"), vec![newer]);
    let b_cursors = store.cursors("b").await.expect("load b");
    assert_eq!(b_cursors.len(), 1);
    assert_eq!(b_cursors[0].resource_version, "11");
    assert_eq!(b_cursors[0].phase, Phase::Running);
    assert!(store.cursors("c").await.expect("load c").is_empty());

    // The same uid on another cluster is another job.
    store
        .save_cursor(&cursor("a", "c2", "u1", "5", Phase::Deleted))
        .await
        .expect("save");
    let a = store.cursors("a").await.expect("load a");
    assert_eq!(a.len(), 2);
    assert!(a[1].deleted);

    store.remove_cursor("a", "c1", "u1").await.expect("remove");
    store
        .remove_cursor("a", "c1", "nope")
        .await
        .expect("removing a missing cursor is fine");
    let a = store.cursors("a").await.expect("load a");
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].cluster, "c2");
    assert_eq!(store.cursors("b").await.expect("load b").len(), 1);
    store.close().await;
}

async fn contract_batch_all_or_nothing(b: &Backend) {
    let store = b.store().await;
    let batch: Vec<Cursor> = (0..50)
        .map(|i| cursor("p", "c", &format!("u{i}"), &i.to_string(), Phase::Running))
        .collect();
    store.save_cursors(batch.clone()).await.expect("batch");
    store
        .save_cursors(Vec::new())
        .await
        .expect("an empty batch is a no-op");
    assert_eq!(store.cursors("p").await.expect("load").len(), 50);

    // Make one upsert near the end of a large batch fail (a trigger refuses it) and check that
    // everything before it was rolled back with it, including what a backend wrote in
    // earlier statements of the same transaction.
    b.refuse_cursor_uid("poison").await;
    let mut failing: Vec<Cursor> = (0..1200)
        .map(|i| cursor("p", "c", &format!("u{i}"), "999", Phase::Failed))
        .collect();
    failing.insert(1100, cursor("p", "c", "poison", "1", Phase::Failed));
    let err = store
        .save_cursors(failing.clone())
        .await
        .expect_err("the poisoned row fails the batch");
    assert!(err.to_string().contains(&b.location()), "{err}");
    let after = store.cursors("p").await.expect("load");
    assert_eq!(after.len(), 50);
    assert!(
        after.iter().all(|c| c.resource_version != "999"),
        "a failed batch left some of its upserts behind"
    );

    // The failure leaves nothing half-open: the next batch is written in full.
    let next: Vec<Cursor> = (0..60)
        .map(|i| cursor("p", "c", &format!("u{i}"), "1000", Phase::Succeeded))
        .collect();
    store
        .save_cursors(next.clone())
        .await
        .expect("the next batch");
    let after = store.cursors("p").await.expect("load");
    assert_eq!(after.len(), 60);
    assert!(after.iter().all(|c| c.resource_version == "1000"));
    store.close().await;
}

async fn contract_survives_reopen(b: &Backend) {
    let ev = event("c", "u", "3", Phase::Failed);
    {
        let (store, kv) = b.open().await;
        store
            .save_cursors(vec![
                cursor("p", "c", "u1", "1", Phase::Running),
                cursor("p", "c", "u2", "2", Phase::Succeeded),
            ])
            .await
            .expect("save");
        store
            .add_dead_letter("p", &ev, "boom", 5)
            .await
            .expect("dead letter");
        kv.kv_set("p", "k", b"kept", None).await.expect("kv");
        store.close().await;
    }
    let store = open_store(&b.state()).await.expect("reopen");
    let cursors = store.cursors("p").await.expect("load");
    assert_eq!(cursors.len(), 2);
    assert_eq!(cursors[1].phase, Phase::Succeeded);
    let letters = store.dead_letters(None).await.expect("list");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].event, ev);
    assert_eq!(letters[0].attempts, 5);
    store.close().await;
    let (_, kv) = b.open().await;
    assert_eq!(
        kv.kv_get("p", "k").await.expect("get"),
        Some(b"kept".to_vec())
    );
}

async fn contract_dead_letter_round_trip(b: &Backend) {
    let store = b.store().await;
    let ev = event("c", "u", "42", Phase::Succeeded);
    let seq = store
        .add_dead_letter("p", &ev, "line one\nline two", 3)
        .await
        .expect("add");
    let letters = store.dead_letters(Some("p")).await.expect("list");
    assert_eq!(letters.len(), 1);
    let l = &letters[0];
    assert_eq!(l.seq, seq);
    assert_eq!(l.plugin, "p");
    assert_eq!(l.event, ev);
    assert_eq!(&*l.event.object_json, &*ev.object_json);
    assert!(l.event.synthetic);
    assert_eq!(l.error, "line one\nline two");
    assert_eq!(l.attempts, 3);
    assert!(!l.replay_requested);
    assert!(
        chrono::DateTime::parse_from_rfc3339(&l.at).is_ok(),
        "at is RFC 3339: {}",
        l.at
    );
    assert!(
        store
            .dead_letters(Some("q"))
            .await
            .expect("list")
            .is_empty()
    );
    store.close().await;
}

async fn contract_drop_selection(b: &Backend) {
    let store = b.store().await;
    let mut seqs = Vec::new();
    for (plugin, uid) in [("a", "1"), ("a", "2"), ("b", "3"), ("b", "4"), ("c", "5")] {
        let seq = store
            .add_dead_letter(plugin, &event("c", uid, "1", Phase::Failed), "err", 1)
            .await
            .expect("add");
        seqs.push(seq);
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seqs grow: {seqs:?}");
    assert_eq!(store.dead_letters(None).await.expect("all").len(), 5);
    assert_eq!(store.dead_letters(Some("b")).await.expect("b").len(), 2);

    // Refusals: nothing selected, or ids and --all together.
    for (plugin, ids, all) in [(None, &[][..], false), (None, &seqs[..1], true)] {
        let err = store
            .drop_dead_letters(plugin, ids, all)
            .await
            .expect_err("refused");
        assert!(matches!(err, StoreError::InvalidSelection(_)), "{err}");
    }
    assert_eq!(store.dead_letters(None).await.expect("all").len(), 5);

    // By seq, restricted to a plugin: b's seq is not a's.
    assert_eq!(
        store
            .drop_dead_letters(Some("a"), &[seqs[0], seqs[2]], false)
            .await
            .expect("drop"),
        1
    );
    // By seq alone; an id given twice counts once.
    assert_eq!(
        store
            .drop_dead_letters(None, &[seqs[2], 9999, seqs[2]], false)
            .await
            .expect("drop"),
        1
    );
    // A whole plugin.
    assert_eq!(
        store
            .drop_dead_letters(Some("b"), &[], false)
            .await
            .expect("drop"),
        1
    );
    let left: Vec<i64> = store
        .dead_letters(None)
        .await
        .expect("list")
        .iter()
        .map(|l| l.seq)
        .collect();
    assert_eq!(left, vec![seqs[1], seqs[4]]);
    // Everything, explicitly.
    assert_eq!(
        store
            .drop_dead_letters(None, &[], true)
            .await
            .expect("drop"),
        2
    );
    assert!(store.dead_letters(None).await.expect("list").is_empty());

    // Seqs are never reused after a drop, not even after a reopen.
    store.close().await;
    let store = b.store().await;
    let next = store
        .add_dead_letter("a", &event("c", "6", "1", Phase::Failed), "err", 1)
        .await
        .expect("add");
    assert!(next > seqs[4], "{next} after {seqs:?}");
    store.close().await;
}

async fn contract_replay_selection(b: &Backend) {
    let store = b.store().await;
    let mut seqs = Vec::new();
    for (plugin, uid) in [("a", "1"), ("a", "2"), ("a", "3"), ("b", "4")] {
        seqs.push(
            store
                .add_dead_letter(plugin, &event("c", uid, "1", Phase::Failed), "err", 2)
                .await
                .expect("add"),
        );
    }
    assert!(
        store
            .take_replays("a", None)
            .await
            .expect("take")
            .is_empty()
    );
    let err = store
        .request_replay(None, &[], false)
        .await
        .expect_err("refused");
    assert!(matches!(err, StoreError::InvalidSelection(_)));

    assert_eq!(
        store
            .request_replay(Some("a"), &[seqs[2], seqs[0], seqs[3]], false)
            .await
            .expect("mark"),
        2
    );
    // Letters already marked count as selected.
    assert_eq!(
        store
            .request_replay(Some("a"), &[seqs[0]], false)
            .await
            .expect("mark again"),
        1
    );
    let listed = store.dead_letters(Some("a")).await.expect("list");
    assert_eq!(
        listed
            .iter()
            .map(|l| l.replay_requested)
            .collect::<Vec<_>>(),
        vec![true, false, true]
    );

    let taken = store.take_replays("a", None).await.expect("take");
    assert_eq!(
        taken.iter().map(|l| l.seq).collect::<Vec<_>>(),
        vec![seqs[0], seqs[2]]
    );
    assert_eq!(taken[0].event.uid, "1");
    assert!(
        store
            .take_replays("a", None)
            .await
            .expect("take again")
            .is_empty()
    );
    assert!(
        store
            .take_replays("b", None)
            .await
            .expect("b unmarked")
            .is_empty()
    );
    assert_eq!(store.dead_letters(None).await.expect("list").len(), 2);

    assert_eq!(store.request_replay(None, &[], true).await.expect("all"), 2);
    assert_eq!(
        store.take_replays("b", None).await.expect("take b").len(),
        1
    );
    assert_eq!(
        store.take_replays("a", None).await.expect("take a").len(),
        1
    );
    assert!(store.dead_letters(None).await.expect("list").is_empty());
    store.close().await;
}

async fn contract_two_takers(b: &Backend) {
    const N: usize = 120;
    let producer = b.store().await;
    let takers = [b.store().await, b.store().await];

    // Each taker loops until all N were taken by someone.
    let taken = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for taker in takers {
        let taken = taken.clone();
        handles.push(tokio::spawn(async move {
            let mut got = Vec::new();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while taken.load(Ordering::SeqCst) < N && tokio::time::Instant::now() < deadline {
                let batch = taker.take_replays("p", None).await.expect("take");
                taken.fetch_add(batch.len(), Ordering::SeqCst);
                got.extend(batch.into_iter().map(|l| l.seq));
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            taker.close().await;
            got
        }));
    }
    for i in 0..N {
        let seq = producer
            .add_dead_letter(
                "p",
                &event("c", &i.to_string(), "1", Phase::Failed),
                "err",
                1,
            )
            .await
            .expect("add");
        producer
            .request_replay(Some("p"), &[seq], false)
            .await
            .expect("mark");
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.expect("taker task"));
    }
    let unique: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len(), "a dead letter was taken twice");
    assert_eq!(unique.len(), N, "every dead letter is taken once");
    producer.close().await;
}

async fn contract_two_stores_share(b: &Backend) {
    // Opened at once, as a daemon and a CLI starting together on a new store would.
    let state = b.state();
    let (daemon, cli) = tokio::join!(open_store(&state), open_store(&state));
    let daemon = daemon.expect("daemon opens");
    let cli = cli.expect("cli opens");

    let seqs: Vec<i64> = {
        let mut v = Vec::new();
        for i in 0..40 {
            v.push(
                daemon
                    .add_dead_letter("p", &event("c", &i.to_string(), "1", Phase::Failed), "e", 1)
                    .await
                    .expect("add"),
            );
        }
        v
    };

    let writer = {
        let daemon = daemon.clone();
        tokio::spawn(async move {
            for round in 0..150 {
                let batch: Vec<Cursor> = (0..20)
                    .map(|j| {
                        cursor(
                            "p",
                            "c",
                            &format!("u{j}"),
                            &round.to_string(),
                            Phase::Running,
                        )
                    })
                    .collect();
                daemon.save_cursors(batch.clone()).await?;
                daemon
                    .save_cursor(&cursor(
                        "q",
                        "c",
                        "solo",
                        &round.to_string(),
                        Phase::Running,
                    ))
                    .await?;
                if round % 10 == 0 {
                    daemon.take_replays("p", None).await?;
                }
            }
            Ok::<_, StoreError>(())
        })
    };
    let operator = {
        let cli = cli.clone();
        tokio::spawn(async move {
            for (i, seq) in seqs.iter().enumerate() {
                cli.request_replay(Some("p"), &[*seq], false).await?;
                cli.dead_letters(None).await?;
                cli.cursors("p").await?;
                if i % 5 == 0 {
                    cli.request_replay(None, &[], true).await?;
                }
            }
            Ok::<_, StoreError>(())
        })
    };
    writer
        .await
        .expect("writer task")
        .expect("the daemon's writes never fail");
    operator
        .await
        .expect("operator task")
        .expect("the CLI's writes never fail");

    let cursors = cli.cursors("p").await.expect("load");
    assert_eq!(cursors.len(), 20);
    assert!(cursors.iter().all(|c| c.resource_version == "149"));
    daemon.close().await;
    cli.close().await;
}

async fn contract_note_first_sight(b: &Backend) {
    let store = b.store().await;
    // First sight: stored with an empty version ("nothing delivered").
    store
        .note_first_sight(&cursor("p", "c", "seen", "5", Phase::Running))
        .await
        .expect("remember");
    // Delivered first, its first sight noted late: the delivered cursor wins.
    store
        .save_cursor(&cursor("p", "c", "done", "9", Phase::Succeeded))
        .await
        .expect("save");
    store
        .note_first_sight(&cursor("p", "c", "done", "3", Phase::Pending))
        .await
        .expect("remember");
    // Remembered twice: still nothing delivered.
    store
        .note_first_sight(&cursor("p", "c", "seen", "6", Phase::Running))
        .await
        .expect("remember again");
    let mut all = store.cursors("p").await.expect("cursors");
    all.sort_by(|a, b| a.uid.cmp(&b.uid));
    assert_eq!(all.len(), 2);
    assert_eq!(
        (all[0].uid.as_str(), all[0].resource_version.as_str()),
        ("done", "9")
    );
    assert_eq!(all[0].phase, Phase::Succeeded);
    assert_eq!(
        (all[1].uid.as_str(), all[1].resource_version.as_str()),
        ("seen", "")
    );
    store.close().await;
}

/// The first install time stays: a later open (a restart, another replica, the plugin removed
/// and added back) reads it instead of recording its own.
/// Rows changed by hand (an unknown phase, event JSON cut short) are
/// refused with an error naming the store and the row kind, never read as something else; a
/// damaged dead letter marked for replay is not taken, so it stays for an operator.
async fn contract_damaged_rows(b: &Backend) {
    let store = b.store().await;
    store
        .save_cursor(&cursor("p", "c", "u1", "5", Phase::Running))
        .await
        .expect("save");
    let seq = store
        .add_dead_letter("p", &event("c", "u2", "7", Phase::Failed), "err", 3)
        .await
        .expect("add");
    assert_eq!(
        store
            .request_replay(Some("p"), &[], false)
            .await
            .expect("mark"),
        1
    );

    assert_eq!(b.raw("UPDATE {p}cursors SET phase = 'Bogus'", &[]).await, 1);
    let err = store.cursors("p").await.expect_err("an unknown phase");
    let text = err.to_string();
    assert!(
        matches!(err, StoreError::Corrupt { what: "cursor", .. }),
        "{text}"
    );
    assert!(
        text.contains(&b.location()) && text.contains("Bogus"),
        "{text}"
    );

    assert_eq!(
        b.raw("UPDATE {p}dead_letters SET event_json = '{\"id\": '", &[])
            .await,
        1
    );
    for err in [
        store.dead_letters(Some("p")).await.expect_err("cut JSON"),
        store.take_replays("p", None).await.expect_err("cut JSON"),
    ] {
        let text = err.to_string();
        assert!(
            matches!(
                err,
                StoreError::Corrupt {
                    what: "dead letter",
                    ..
                }
            ),
            "{text}"
        );
        assert!(
            text.contains(&b.location()) && text.contains(&format!("seq {seq}")),
            "{text}"
        );
    }
    // Not taken: repaired, it is still there and still marked.
    let json = serde_json::to_string(&event("c", "u2", "7", Phase::Failed)).expect("json");
    b.raw(
        "UPDATE {p}dead_letters SET event_json = ?, attempts = 99",
        &[&json],
    )
    .await;
    let taken = store.take_replays("p", None).await.expect("repaired");
    assert_eq!(
        taken
            .iter()
            .map(|l| (l.seq, l.attempts))
            .collect::<Vec<_>>(),
        vec![(seq, 99)]
    );
    store.close().await;
}

/// The batched form the cursor writer uses: one statement for many jobs, with the same rule
/// as one at a time (a delivered cursor is never overwritten), across more jobs than one
/// statement holds.
async fn contract_note_first_sights(b: &Backend) {
    let store = b.store().await;
    store
        .save_cursor(&cursor("p", "c", "done", "9", Phase::Succeeded))
        .await
        .expect("save");
    let mut seen: Vec<Cursor> = (0..700)
        .map(|i| cursor("p", "c", &format!("u{i:03}"), "4", Phase::Running))
        .collect();
    seen.push(cursor("p", "c", "done", "3", Phase::Pending));
    store.note_first_sights(&seen).await.expect("remember");
    store.note_first_sights(&seen[..10]).await.expect("again");
    let all = store.cursors("p").await.expect("cursors");
    assert_eq!(all.len(), 701);
    let done = all.iter().find(|c| c.uid == "done").expect("done");
    assert_eq!(
        (done.resource_version.as_str(), done.phase),
        ("9", Phase::Succeeded)
    );
    assert!(
        all.iter()
            .filter(|c| c.uid != "done")
            .all(|c| c.resource_version.is_empty() && c.phase == Phase::Running),
        "remembered jobs have nothing delivered"
    );
    store.close().await;
}

async fn contract_install_time(b: &Backend) {
    let first = "2026-01-02T03:04:05Z";
    {
        let store = b.store().await;
        assert_eq!(
            store.install_time("p", first).await.expect("install"),
            first
        );
        assert_eq!(
            store
                .install_time("p", "2026-06-01T00:00:00Z")
                .await
                .expect("again"),
            first,
            "a second call is not an install"
        );
        assert_eq!(
            store
                .install_time("other", "2026-06-01T00:00:00Z")
                .await
                .expect("other"),
            "2026-06-01T00:00:00Z",
            "each plugin has its own"
        );
        store.close().await;
    }
    let store = open_store(&b.state()).await.expect("reopen");
    assert_eq!(
        store
            .install_time("p", "2027-01-01T00:00:00Z")
            .await
            .expect("after reopen"),
        first
    );
    store.close().await;
}

async fn contract_kv_usage(b: &Backend) {
    let (store, kv) = b.open().await;
    assert_eq!(kv.kv_usage("a", "x").await.expect("usage"), (0, 0));
    kv.kv_set("a", "k1", b"12345", None).await.expect("set");
    kv.kv_set("a", "k22", b"1234567890", None)
        .await
        .expect("set");
    kv.kv_set("a", "gone", b"xx", Some(0))
        .await
        .expect("set expired");
    kv.kv_set("b", "k1", &[0u8; 100], None)
        .await
        .expect("set other plugin");
    // k1: 2 + 5 bytes; k22: 3 + 10 bytes; the expired entry and plugin b do not count.
    assert_eq!(kv.kv_usage("a", "x").await.expect("usage"), (2, 20));
    assert_eq!(kv.kv_usage("a", "k22").await.expect("usage"), (1, 7));
    assert_eq!(kv.kv_usage("b", "x").await.expect("usage"), (1, 102));
    // The host's read of an owner's entries: live ones only, in key order, of that owner.
    assert_eq!(
        kv.kv_entries("a").await.expect("entries"),
        [
            ("k1".to_string(), b"12345".to_vec()),
            ("k22".to_string(), b"1234567890".to_vec())
        ]
    );
    assert_eq!(kv.kv_entries("none").await.expect("entries"), []);
    store.close().await;
}

async fn contract_kv_expiry(b: &Backend) {
    let (store, kv) = b.open().await;
    kv.kv_set("a", "k", b"one", None).await.expect("set");
    kv.kv_set("b", "k", b"two", None).await.expect("set");
    assert_eq!(
        kv.kv_get("a", "k").await.expect("get"),
        Some(b"one".to_vec())
    );
    assert_eq!(
        kv.kv_get("b", "k").await.expect("get"),
        Some(b"two".to_vec())
    );
    kv.kv_set("a", "k", b"three", None).await.expect("replace");
    assert_eq!(
        kv.kv_get("a", "k").await.expect("get"),
        Some(b"three".to_vec())
    );
    assert!(kv.kv_delete("a", "k").await.expect("delete"));
    assert!(!kv.kv_delete("a", "k").await.expect("delete again"));
    assert_eq!(kv.kv_get("a", "k").await.expect("get"), None);
    assert_eq!(
        kv.kv_get("b", "k").await.expect("get"),
        Some(b"two".to_vec()),
        "untouched"
    );

    // Binary values come back byte for byte.
    let binary: Vec<u8> = (0..=255).collect();
    kv.kv_set("a", "bin", &binary, None).await.expect("set");
    assert_eq!(kv.kv_get("a", "bin").await.expect("get"), Some(binary));

    // An entry with a zero TTL is expired at once: invisible, not deletable, and swept by
    // later writes.
    kv.kv_set("a", "short", b"x", Some(0)).await.expect("set");
    assert_eq!(kv.kv_get("a", "short").await.expect("get"), None);
    assert!(
        !kv.kv_delete("a", "short").await.expect("delete"),
        "an expired entry is not there"
    );
    kv.kv_set("a", "other", b"y", Some(3600))
        .await
        .expect("set");
    assert_eq!(
        kv.kv_get("a", "other").await.expect("get"),
        Some(b"y".to_vec())
    );
    // A TTL replaced by none: the entry stays.
    kv.kv_set("a", "later", b"z", Some(0)).await.expect("set");
    kv.kv_set("a", "later", b"z", None).await.expect("set");
    assert_eq!(
        kv.kv_get("a", "later").await.expect("get"),
        Some(b"z".to_vec())
    );
    store.close().await;

    // Entries survive a reopen.
    let (store, kv) = b.open().await;
    assert_eq!(
        kv.kv_get("b", "k").await.expect("get"),
        Some(b"two".to_vec())
    );
    assert_eq!(b.kv_rows("short").await, 0, "the expired entry was swept");
    store.close().await;
}

async fn contract_exact_keys(b: &Backend) {
    let (store, kv) = b.open().await;
    // Keys that a case-insensitive or space-padding comparison would merge.
    for (i, key) in ["k", "K", "k ", "ü", "u"].into_iter().enumerate() {
        kv.kv_set("p", key, &[u8::try_from(i).expect("small")], None)
            .await
            .expect("set");
    }
    for (i, key) in ["k", "K", "k ", "ü", "u"].into_iter().enumerate() {
        assert_eq!(
            kv.kv_get("p", key).await.expect("get"),
            Some(vec![u8::try_from(i).expect("small")]),
            "key {key:?}"
        );
    }
    assert_eq!(kv.kv_get("P", "k").await.expect("get"), None);
    // A key at the kv capability's limit of 512 bytes.
    let long = "x".repeat(512);
    kv.kv_set("p", &long, b"long", None).await.expect("set");
    assert_eq!(
        kv.kv_get("p", &long).await.expect("get"),
        Some(b"long".to_vec())
    );

    for uid in ["job", "Job", "job "] {
        store
            .save_cursor(&cursor("p", "c", uid, uid, Phase::Running))
            .await
            .expect("save");
    }
    let cursors = store.cursors("p").await.expect("load");
    let mut versions: Vec<&str> = cursors
        .iter()
        .map(|c| c.resource_version.as_str())
        .collect();
    versions.sort_unstable();
    assert_eq!(versions, vec!["Job", "job", "job "]);
    assert!(store.cursors("P").await.expect("load").is_empty());
    store.close().await;
}

/// What `plugin` took of the event, as a batch would carry it.
fn taken(plugin: &str, event: &jobrelay_contract::event::JobEvent) -> Taken {
    Taken::of(plugin, event).expect("an event encodes")
}

fn settled(plugin: &str, event: &jobrelay_contract::event::JobEvent) -> Settled {
    Settled {
        plugin: plugin.to_string(),
        event_id: event.id.clone(),
    }
}

fn ids(events: &[jobrelay_contract::event::JobEvent]) -> Vec<&str> {
    events.iter().map(|e| e.id.as_str()).collect()
}

async fn contract_inbox_order(b: &Backend) {
    let store = b.store().await;
    let before = unix_now() - 2;
    let e1 = event("c", "u1", "10", Phase::Running);
    let e2 = event("c", "u2", "11", Phase::Running);
    let e3 = event("c", "u1", "12", Phase::Succeeded);
    // Two plugins take e1 (two batches, as two lanes would); only `a` takes e2 and e3.
    store
        .write(WriteBatch {
            taken: vec![taken("a", &e1), taken("a", &e2)],
            ..WriteBatch::default()
        })
        .await
        .expect("a takes");
    store
        .write(WriteBatch {
            taken: vec![taken("b", &e1)],
            ..WriteBatch::default()
        })
        .await
        .expect("b takes");
    store
        .write(WriteBatch {
            taken: vec![taken("a", &e3), taken("a", &e1)],
            ..WriteBatch::default()
        })
        .await
        .expect("taking again changes nothing");
    let a = store.inbox("a").await.expect("a's inbox");
    assert_eq!(ids(&a.events), [&e1.id, &e2.id, &e3.id], "oldest first");
    assert_eq!(a.events[2], e3, "an event comes back exactly");
    // When each was taken, by the store's clock: what a restarted lane counts its age from.
    assert_eq!(a.taken_at.len(), a.events.len());
    let after = unix_now() + 2;
    assert!(
        a.taken_at.iter().all(|at| (before..=after).contains(at)),
        "{:?} not within {before}..={after}",
        a.taken_at
    );
    assert!(a.damaged.is_empty());
    assert_eq!(ids(&store.inbox("b").await.expect("b").events), [&e1.id]);
    // Stored once however many plugins took it.
    assert_eq!(
        b.raw(
            "UPDATE {p}inbox_events SET at = at + 1 WHERE event_id = ?",
            &[&e1.id]
        )
        .await,
        1
    );

    // `a` settles e1 with its cursor: b still has it; the cursor moved.
    store
        .write(WriteBatch {
            saved: vec![cursor("a", "c", "u1", "10", Phase::Running)],
            settled: vec![settled("a", &e1)],
            ..WriteBatch::default()
        })
        .await
        .expect("settle");
    assert_eq!(
        ids(&store.inbox("a").await.expect("a").events),
        [&e2.id, &e3.id]
    );
    assert_eq!(ids(&store.inbox("b").await.expect("b").events), [&e1.id]);
    assert_eq!(
        store.cursors("a").await.expect("cursors")[0].resource_version,
        "10"
    );

    // Taken and settled in one batch: gone at its end.
    let e4 = event("c", "u3", "13", Phase::Pending);
    store
        .write(WriteBatch {
            taken: vec![taken("a", &e4)],
            settled: vec![settled("a", &e4)],
            ..WriteBatch::default()
        })
        .await
        .expect("take and settle");
    assert_eq!(store.inbox("a").await.expect("a").events.len(), 2);

    // A removal settles too; what is left survives closing and reopening.
    store
        .write(WriteBatch {
            removed: vec![cursor("a", "c", "u2", "11", Phase::Deleted)],
            settled: vec![settled("a", &e2)],
            ..WriteBatch::default()
        })
        .await
        .expect("remove");
    store.close().await;
    let store = b.store().await;
    assert_eq!(ids(&store.inbox("a").await.expect("a").events), [&e3.id]);
    assert_eq!(ids(&store.inbox("b").await.expect("b").events), [&e1.id]);

    // An event no plugin marks any more is swept once it is old enough, not before.
    store
        .write(WriteBatch {
            settled: vec![settled("b", &e1)],
            sweep: true,
            ..WriteBatch::default()
        })
        .await
        .expect("b settles");
    assert_eq!(
        b.raw(
            "UPDATE {p}inbox_events SET at = at + 1 WHERE event_id = ?",
            &[&e1.id]
        )
        .await,
        1,
        "kept for a while after its last mark"
    );
    b.raw("UPDATE {p}inbox_events SET at = at - 100000", &[])
        .await;
    store
        .write(WriteBatch {
            settled: vec![settled("a", &e3)],
            sweep: true,
            ..WriteBatch::default()
        })
        .await
        .expect("a settles");
    assert_eq!(
        b.raw("UPDATE {p}inbox_events SET at = at + 1", &[]).await,
        0,
        "old events without marks are swept"
    );
    store.close().await;
}

/// The sweep among many events of mixed ages (SQLite finds where the young begin by a binary
/// search over the events' numbers, a server database by an age index): every old event
/// without a mark goes, an old one still marked stays, and no young one goes.
async fn contract_inbox_sweep(b: &Backend) {
    let store = b.store().await;
    let events: Vec<_> = (0..40)
        .map(|i| {
            event(
                "c",
                &format!("s{i}"),
                &format!("{}", 100 + i),
                Phase::Running,
            )
        })
        .collect();
    store
        .write(WriteBatch {
            taken: events.iter().map(|e| taken("p", e)).collect(),
            ..WriteBatch::default()
        })
        .await
        .expect("take");
    // The first 23 taken long ago (older the earlier), the rest just now; all settled but s7.
    for (i, e) in events.iter().enumerate().take(23) {
        let age = format!("{}", 100_000 - i);
        b.raw(
            "UPDATE {p}inbox_events SET at = at - ? WHERE event_id = ?",
            &[&age, &e.id],
        )
        .await;
    }
    store
        .write(WriteBatch {
            settled: events
                .iter()
                .filter(|e| e.uid != "s7")
                .map(|e| settled("p", e))
                .collect(),
            sweep: true,
            ..WriteBatch::default()
        })
        .await
        .expect("settle and sweep");
    let mut kept = Vec::new();
    for e in &events {
        if b.raw(
            "UPDATE {p}inbox_events SET at = at + 1 WHERE event_id = ?",
            &[&e.id],
        )
        .await
            > 0
        {
            kept.push(e.uid.clone());
        }
    }
    let mut expected = vec!["s7".to_string()];
    expected.extend((23..40).map(|i| format!("s{i}")));
    assert_eq!(kept, expected, "old and unmarked swept, the rest kept");
    assert_eq!(
        ids(&store.inbox("p").await.expect("inbox").events),
        [&events[7].id]
    );
    store.close().await;
}

async fn contract_inbox_atomic(b: &Backend) {
    let store = b.store().await;
    let e1 = event("c", "u1", "10", Phase::Running);
    let e2 = event("c", "u2", "11", Phase::Running);
    store
        .write(WriteBatch {
            taken: vec![taken("p", &e1)],
            ..WriteBatch::default()
        })
        .await
        .expect("take");
    b.refuse_cursor_uid("poison").await;
    // One batch: a new event taken, e1 settled with its cursor, and a poisoned cursor.
    let err = store
        .write(WriteBatch {
            taken: vec![taken("p", &e2)],
            saved: vec![
                cursor("p", "c", "u1", "10", Phase::Running),
                cursor("p", "c", "poison", "1", Phase::Running),
            ],
            settled: vec![settled("p", &e1)],
            ..WriteBatch::default()
        })
        .await
        .expect_err("the poisoned cursor fails the batch");
    assert!(err.to_string().contains(&b.location()), "{err}");
    // Nothing of it stayed: e1 still marked, e2 not taken, no cursor.
    assert_eq!(
        ids(&store.inbox("p").await.expect("inbox").events),
        [&e1.id]
    );
    assert!(store.cursors("p").await.expect("cursors").is_empty());
    // The store goes on: the same batch without the poison is written whole.
    store
        .write(WriteBatch {
            taken: vec![taken("p", &e2)],
            saved: vec![cursor("p", "c", "u1", "10", Phase::Running)],
            settled: vec![settled("p", &e1)],
            ..WriteBatch::default()
        })
        .await
        .expect("the batch without the poison");
    assert_eq!(
        ids(&store.inbox("p").await.expect("inbox").events),
        [&e2.id]
    );
    assert_eq!(store.cursors("p").await.expect("cursors").len(), 1);
    store.close().await;
}

async fn contract_inbox_damaged(b: &Backend) {
    let store = b.store().await;
    let events: Vec<_> = (0..4)
        .map(|i| {
            event(
                "c",
                &format!("u{i}"),
                &format!("{}", 20 + i),
                Phase::Running,
            )
        })
        .collect();
    store
        .write(WriteBatch {
            taken: events.iter().map(|e| taken("p", e)).collect(),
            ..WriteBatch::default()
        })
        .await
        .expect("take");
    // One event cut short, one gone from under its mark.
    assert_eq!(
        b.raw(
            "UPDATE {p}inbox_events SET event_json = '{\"id\": ' WHERE event_id = ?",
            &[&events[1].id]
        )
        .await,
        1
    );
    assert_eq!(
        b.raw(
            "DELETE FROM {p}inbox_events WHERE event_id = ?",
            &[&events[2].id]
        )
        .await,
        1
    );
    let inbox = store.inbox("p").await.expect("the rest is read");
    assert_eq!(ids(&inbox.events), [&events[0].id, &events[3].id]);
    let damaged: Vec<(&str, &str)> = inbox
        .damaged
        .iter()
        .map(|d| (d.event_id.as_str(), d.reason.as_str()))
        .collect();
    assert_eq!(damaged.len(), 2, "{damaged:?}");
    assert!(
        damaged
            .iter()
            .any(|(id, why)| *id == events[1].id && why.contains("does not decode")),
        "{damaged:?}"
    );
    assert!(
        damaged
            .iter()
            .any(|(id, why)| *id == events[2].id && why.contains("missing")),
        "{damaged:?}"
    );
    store.close().await;
}

async fn contract_inbox_pages(b: &Backend) {
    let store = b.store().await;
    let events: Vec<_> = (0..7)
        .map(|i| {
            event(
                "c",
                &format!("u{i}"),
                &format!("{}", 30 + i),
                Phase::Running,
            )
        })
        .collect();
    // Another plugin's marks between `p`'s: a page holds only `p`'s, and still `limit` of them.
    for (i, e) in events.iter().enumerate() {
        let mut taken = vec![taken("p", e)];
        if i % 2 == 0 {
            let other = event(
                "c",
                &format!("q{i}"),
                &format!("{}", 50 + i),
                Phase::Running,
            );
            taken.push(self::taken("q", &other));
        }
        store
            .write(WriteBatch {
                taken,
                ..WriteBatch::default()
            })
            .await
            .expect("take");
    }
    let (mut after, mut read, mut pages) = (0, Vec::new(), 0);
    loop {
        let page = store.inbox_page("p", after, 3).await.expect("a page");
        assert!(page.events.len() <= 3);
        read.extend(page.events);
        pages += 1;
        match page.next {
            Some(next) => after = next,
            None => break,
        }
    }
    assert_eq!(ids(&read), ids(&events), "every event once, oldest first");
    assert!((3..=4).contains(&pages), "{pages} pages of 3 for 7 events");

    assert_eq!(
        store.inbox_event(&events[4].id).await.expect("read back"),
        Stored::Event(Box::new(events[4].clone()))
    );
    assert_eq!(
        store.inbox_event("c/nobody/1").await.expect("read back"),
        Stored::Missing
    );
    assert_eq!(
        b.raw(
            "UPDATE {p}inbox_events SET event_json = 'not json' WHERE event_id = ?",
            &[&events[5].id]
        )
        .await,
        1
    );
    assert!(
        matches!(
            store.inbox_event(&events[5].id).await.expect("read back"),
            Stored::Damaged(why) if why.contains("does not decode")
        ),
        "a damaged row is refused with why"
    );

    // Many at once: more than one query's worth, an id asked twice, missing and damaged
    // ones among them; each answered in the order asked.
    let mut asked: Vec<String> = Vec::new();
    for i in 0..READ_BACK_BATCH + 45 {
        asked.push(match i % 9 {
            0 => format!("c/nobody/{i}"),
            _ => events[i % events.len()].id.clone(),
        });
    }
    let refs: Vec<&str> = asked.iter().map(String::as_str).collect();
    let answers = store.inbox_events(&refs).await.expect("read back many");
    assert_eq!(answers.len(), asked.len(), "an answer per id asked");
    for (id, answer) in asked.iter().zip(&answers) {
        let expected = events.iter().find(|e| &e.id == id);
        match (expected, answer) {
            (None, Stored::Missing) => {}
            (Some(e), Stored::Damaged(_)) if e.id == events[5].id => {}
            (Some(e), Stored::Event(got)) if **got == *e => {}
            _ => panic!("{id} was answered {answer:?}"),
        }
    }
    store.close().await;
}

async fn contract_cursor_pages(b: &Backend) {
    let store = b.store().await;
    let mut expected = Vec::new();
    for cluster in ["west", "east", "east-2"] {
        for uid in ["u-3", "u-1", "U-2", "u-10"] {
            let c = cursor("a", cluster, uid, "5", Phase::Running);
            store.save_cursor(&c).await.expect("save");
            expected.push((cluster.to_string(), uid.to_string()));
            let other = cursor("b", cluster, uid, "5", Phase::Running);
            store
                .save_cursor(&other)
                .await
                .expect("save another plugin's");
        }
    }
    expected.sort();
    let mut read = Vec::new();
    let mut after: Option<(String, String)> = None;
    loop {
        let at = after.as_ref().map(|(c, u)| (c.as_str(), u.as_str()));
        let page = store.cursors_page("a", at, 5).await.expect("a page");
        assert!(page.len() <= 5);
        assert!(page.iter().all(|c| c.plugin == "a"));
        read.extend(page.iter().map(|c| (c.cluster.clone(), c.uid.clone())));
        if page.len() < 5 {
            break;
        }
        after = page.last().map(|c| (c.cluster.clone(), c.uid.clone()));
    }
    assert_eq!(
        read, expected,
        "each cursor once, in byte order of (cluster, uid)"
    );
    store.close().await;
}

/// Another plugin stored a job's later version first (its lane wrote only that one): this
/// plugin's inbox still gives the job's versions back in the order it took them.
async fn contract_inbox_mark_order(b: &Backend) {
    let store = b.store().await;
    let early = event("c", "u1", "10", Phase::Running);
    let late = event("c", "u1", "11", Phase::Succeeded);
    store
        .write(WriteBatch {
            taken: vec![taken("q", &late)],
            ..WriteBatch::default()
        })
        .await
        .expect("q takes the later version");
    store
        .write(WriteBatch {
            taken: vec![taken("p", &early), taken("p", &late)],
            ..WriteBatch::default()
        })
        .await
        .expect("p takes both, in order");
    assert_eq!(
        ids(&store.inbox("p").await.expect("p").events),
        [&early.id, &late.id]
    );
    let page = store.inbox_page("p", 0, 1).await.expect("a page of one");
    assert_eq!(ids(&page.events), [&early.id]);
    let next = page.next.expect("more");
    let page = store.inbox_page("p", next, 1).await.expect("the next page");
    assert_eq!(ids(&page.events), [&late.id]);
    store.close().await;
}

/// A store written by version 4 (marks without an order of their own) is migrated with its
/// marks in their events' order, and works on.
async fn contract_inbox_v4(b: &Backend) {
    let store = b.store().await;
    let events: Vec<_> = (0..3)
        .map(|i| {
            event(
                "c",
                &format!("u{i}"),
                &format!("{}", 40 + i),
                Phase::Running,
            )
        })
        .collect();
    store
        .write(WriteBatch {
            taken: events.iter().map(|e| taken("m", e)).collect(),
            ..WriteBatch::default()
        })
        .await
        .expect("take");
    store.close().await;
    for statement in [
        "CREATE TABLE {p}inbox (plugin VARCHAR(255) NOT NULL, event_id VARCHAR(255) NOT NULL, \
         PRIMARY KEY (plugin, event_id))",
        // In key order, not the events' order: the migration must not take this order.
        "INSERT INTO {p}inbox (plugin, event_id) SELECT plugin, event_id FROM {p}inbox_marks \
         ORDER BY event_id DESC",
        "DROP TABLE {p}inbox_marks",
        "UPDATE {p}schema_version SET version = 4",
    ] {
        b.raw(statement, &[]).await;
    }
    let store = b.store().await;
    assert_eq!(
        ids(&store.inbox("m").await.expect("inbox").events),
        ids(&events),
        "the marks keep their events' order"
    );
    crate::support::assert_inbox_works(store.as_ref()).await;
    store.close().await;
}

/// Rows written before version 6 — the whole event's JSON in `event_json`, no `object`
/// column — read back after the upgrade as they were, in order with events taken after it,
/// by page and by id.
async fn contract_inbox_v5_rows(b: &Backend) {
    let store = b.store().await;
    store.close().await;
    let old: Vec<_> = (0..3)
        .map(|i| {
            event(
                "c",
                &format!("o{i}"),
                &format!("{}", 60 + i),
                Phase::Running,
            )
        })
        .collect();
    b.raw("ALTER TABLE {p}inbox_events DROP COLUMN object", &[])
        .await;
    b.raw("UPDATE {p}schema_version SET version = 5", &[]).await;
    for e in &old {
        let json = serde_json::to_string(e).expect("an event encodes");
        b.raw(
            "INSERT INTO {p}inbox_events (event_id, event_json, at) VALUES (?, ?, 0)",
            &[&e.id, &json],
        )
        .await;
        b.raw(
            "INSERT INTO {p}inbox_marks (plugin, event_id) VALUES ('m', ?)",
            &[&e.id],
        )
        .await;
    }

    let store = b.store().await;
    let new = event("c", "n0", "70", Phase::Succeeded);
    store
        .write(WriteBatch {
            taken: vec![taken("m", &new)],
            ..WriteBatch::default()
        })
        .await
        .expect("take after the upgrade");
    let mut expected = old.clone();
    expected.push(new.clone());
    let inbox = store.inbox("m").await.expect("the inbox reads");
    assert!(inbox.damaged.is_empty(), "{:?}", inbox.damaged);
    assert_eq!(
        inbox.events, expected,
        "old rows and new, whole and in order"
    );
    let by_id = store
        .inbox_events(&[&old[1].id, &new.id])
        .await
        .expect("read back by id");
    assert_eq!(
        by_id,
        [
            Stored::Event(Box::new(old[1].clone())),
            Stored::Event(Box::new(new))
        ]
    );
    crate::support::assert_inbox_works(store.as_ref()).await;
    store.close().await;
}

/// Seconds since the epoch now.
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
