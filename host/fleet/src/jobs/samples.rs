//! What a version means for the SLIs ([`crate::sli`]): a live transition's wait, run and end
//! (with its failure cause), and the Kueue news of its story (an admission's wait, new
//! preemptions).

use super::timeline::KueueNews;
use super::{JobView, Sample};
use crate::interner::Interner;
use crate::record::{JobRecord, Secs};
use jobrelay_contract::event::{JobEvent, Phase};

impl JobView {
    /// Records what a version's Workload facts mean for the SLIs (the [`KueueNews`] its
    /// story's trail found): a new admission's wait, new preemptions. From any version, listed
    /// or not: the news is what changed since the story last read, which a re-list after a
    /// gap tells as well.
    pub(super) fn sample_kueue(
        &self,
        cluster: &str,
        strings: &Interner<String>,
        rec: &JobRecord,
        news: Option<KueueNews>,
    ) {
        let Some(news) = news else {
            return;
        };
        let text = |sym| strings.get(sym).map_or("", String::as_str);
        let (namespace, kind) = (text(rec.namespace), text(rec.kind));
        if let Some(waited) = news.admitted_after {
            let sample = Sample::Admitted {
                queue: &news.queue,
                waited,
            };
            self.slis.record(cluster, namespace, kind, sample);
        }
        if news.preempted > 0 {
            let sample = Sample::Preempted {
                queue: &news.queue,
                times: news.preempted,
            };
            self.slis.record(cluster, namespace, kind, sample);
        }
    }

    /// Records what a live transition means for the SLIs: `before` is the job's phase and
    /// start before it.
    pub(super) fn sample(
        &self,
        cluster: &str,
        strings: &Interner<String>,
        rec: &JobRecord,
        (was, started_before): (Phase, Secs),
        event: &JobEvent,
    ) {
        if rec.phase == was {
            return;
        }
        let sample = match rec.phase {
            Phase::Running if started_before == 0 && rec.started != 0 => Sample::Started {
                waited: f64::from(rec.started) - f64::from(rec.created),
            },
            Phase::Succeeded | Phase::Failed => Sample::Ended {
                succeeded: rec.phase == Phase::Succeeded,
                ran: (rec.started != 0).then(|| f64::from(rec.finished) - f64::from(rec.started)),
                cause: event
                    .story
                    .as_deref()
                    .and_then(|s| s.failure.as_ref())
                    .map(|f| f.reason.as_str())
                    .filter(|r| !r.is_empty()),
            },
            Phase::Restarting => Sample::Restarted,
            _ => return,
        };
        let text = |sym| strings.get(sym).map_or("", String::as_str);
        self.slis
            .record(cluster, text(rec.namespace), text(rec.kind), sample);
    }
}
