//! A job's story that changed with no version of the job — a Workload admitted, requeued or
//! evicted while the job itself stays as it was, a pod failing — reaches the view at once
//! ([`StoryNews`]): its queue, its timeline and the SLIs follow as they would from a version
//! carrying the story, and so the timers judge a job that went back to waiting for quota as
//! queued without waiting for the job to change.

use super::stays::set_queued;
use super::{ClusterJobs, JobView, timeline, write};
use crate::interner::Interner;
use crate::record::{JobRecord, Secs, now_secs};
use jobrelay_contract::story::Story;
use jobrelay_contract::uid::Uid;
use jobrelay_watch::tracker::StoryNews;

impl JobView {
    /// What `story` says, taken onto `rec` — whether Kueue holds the job and where, its trail
    /// — and the SLIs' news of it; from a version of the job (after its phase is entered) or
    /// from the story alone. `now` stamps what Kueue writes no time for.
    pub(super) fn take_story(
        &self,
        cluster: &str,
        strings: &mut Interner<String>,
        rec: &mut JobRecord,
        story: Option<&Story>,
        now: Secs,
    ) {
        let phase = rec.phase;
        set_queued(rec, strings, story, phase);
        let news = timeline::note(rec, story, now, self.began);
        self.sample_kueue(cluster, strings, rec, news);
    }

    /// A job's story changed through one of its objects alone. A job the view does not hold
    /// (not seen yet, or let go) or holds as deleted is left as it is.
    pub fn story_changed(&self, news: &StoryNews) {
        let Some(shard) = self.shard(&news.cluster) else {
            return;
        };
        let mut guard = write(&shard);
        let ClusterJobs { jobs, strings, .. } = &mut *guard;
        let Some(rec) = jobs.get_mut(&Uid::new(&news.uid)) else {
            return;
        };
        if rec.gone != 0 {
            return;
        }
        self.take_story(&news.cluster, strings, rec, Some(&news.story), now_secs());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::jobs::test_support::{bare, queued, version};
    use crate::record::Secs;
    use crate::timers::TimedState;
    use jobrelay_contract::story::QueueState;
    use jobrelay_watch::kinds::JobKind;
    use jobrelay_watch::tracker::Observed;

    /// A job seen once, with no story; its Workload then goes queued and is admitted with no
    /// version of the job: the view's stay follows (queued, then not), the admission is counted
    /// once, and news of a job the view does not hold changes nothing.
    #[test]
    fn a_workload_alone_moves_the_jobs_stay_and_counts_its_admission() {
        let view = JobView::default();
        let now = now_secs();
        let mut event = bare();
        event.transition_time = crate::record::rfc3339(now).unwrap_or_default();
        view.observe(&Observed {
            event,
            kind: Arc::new(JobKind::builtin("batch-job").expect("built in")),
            from_list: false,
            created: Some(i64::from(now)),
        });
        let news = |story: jobrelay_contract::event::JobEvent, uid: &str| StoryNews {
            cluster: "c".into(),
            uid: uid.to_string(),
            story: story.story.expect("a story"),
        };
        let stays = |view: &JobView| {
            let mut seen: Vec<(TimedState, Secs)> = Vec::new();
            view.for_each_stay(|s| seen.push((s.state, s.since)));
            seen
        };
        view.story_changed(&news(version(queued(), None, now - 30, 0), "u"));
        assert_eq!(stays(&view), [(TimedState::Queued, now - 30)]);
        let admitted = news(
            version(QueueState::Admitted, Some(now + 5), now - 30, 0),
            "u",
        );
        view.story_changed(&admitted);
        view.story_changed(&admitted);
        assert_eq!(stays(&view), [(TimedState::Pending, now)]);
        let rows = view.slis().snapshot();
        let waits: Vec<u64> = rows
            .iter()
            .flat_map(|r| r.queues.iter().map(|q| q.admission_wait.count))
            .collect();
        assert_eq!(waits, [1], "one admission, counted once: {rows:?}");
        view.story_changed(&news(version(queued(), None, now, 0), "someone-else"));
        assert_eq!(stays(&view), [(TimedState::Pending, now)]);
    }
}
