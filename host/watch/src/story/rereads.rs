//! A job stream's reads of jobs whose story changed alone: a Workload that put a job into a
//! stay of Kueue's queue (`queued`, `preempted`) with no version of the job — a requeue while
//! the job stays suspended, or an eviction seen after the job's own suspension — makes no
//! event through the job's watch, so the stream reads the job again and hands it to its
//! tracker ([`Tracker::restory`](crate::tracker::Tracker::restory)).
//!
//! Bounded: at most [`IN_FLIGHT`] reads at once, at most [`WAITING`] jobs waiting for one
//! (each once); past that a change is let go (logged, counted), as is a read that fails
//! (logged at debug). Then the stay reaches plugins only if the job changes during it (its
//! next version carries the story), and the job view has it all the same; nothing here holds
//! up the stream.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use kube::Api;
use kube::api::ApiResource;
use kube::client::Client;
use tokio::task::JoinSet;

use super::sources::Restory;
use crate::kinds::JobKind;
use crate::lenient::LenientObject;

/// Reads at once, per stream.
pub const IN_FLIGHT: usize = 4;

/// Jobs waiting for a read, per stream.
pub const WAITING: usize = 1024;

/// The reads of one stream.
pub struct Rereads {
    resource: ApiResource,
    running: JoinSet<(String, Option<LenientObject>)>,
    waiting: VecDeque<Arc<Restory>>,
    /// The jobs being read or waiting for a read: each once.
    queued: HashSet<String>,
    /// Changes let go for room since the stream began.
    dropped: u64,
}

impl Rereads {
    /// No reads yet, for jobs of `kind`.
    pub fn new(kind: &JobKind) -> Rereads {
        Rereads {
            resource: kind.api_resource(),
            running: JoinSet::new(),
            waiting: VecDeque::new(),
            queued: HashSet::new(),
            dropped: 0,
        }
    }

    /// Reads the job `restory` names, now or once a read is free.
    pub fn read(&mut self, client: &Client, restory: Arc<Restory>) {
        if self.queued.contains(&restory.uid) {
            return;
        }
        if self.running.len() < IN_FLIGHT {
            self.queued.insert(restory.uid.clone());
            self.start(client, restory);
        } else if self.waiting.len() < WAITING {
            self.queued.insert(restory.uid.clone());
            self.waiting.push_back(restory);
        } else {
            self.dropped += 1;
            // Said on the first and then at each power of two, so a flood is seen in the log
            // without a line per change.
            if self.dropped.is_power_of_two() {
                tracing::warn!(job = %restory.name, namespace = %restory.namespace,
                    dropped = self.dropped, "too many jobs to read again for their queue stays; \
                    this one is let go (its stay reaches plugins only if the job changes during \
                    it; the job view has it)");
            }
        }
    }

    /// Whether a read is under way.
    pub fn busy(&self) -> bool {
        !self.running.is_empty()
    }

    /// The next read done: the job as read, `None` when it is gone or the read failed. The
    /// next waiting job's read starts.
    pub async fn next(&mut self, client: &Client) -> Option<LenientObject> {
        let done = self.running.join_next().await.and_then(Result::ok);
        if let Some((uid, _)) = &done {
            self.queued.remove(uid);
        }
        if let Some(next) = self.waiting.pop_front() {
            self.start(client, next);
        }
        done.and_then(|(_, read)| read)
    }

    fn start(&mut self, client: &Client, restory: Arc<Restory>) {
        let api: Api<LenientObject> =
            Api::namespaced_with(client.clone(), &restory.namespace, &self.resource);
        self.running.spawn(async move {
            let read = match api.get_opt(&restory.name).await {
                Ok(found) => found,
                Err(e) => {
                    tracing::debug!(namespace = %restory.namespace, job = %restory.name,
                        error = %e, "cannot read a job whose story changed; its next version \
                        carries the story");
                    None
                }
            };
            (restory.uid.clone(), read)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restory(n: usize) -> Arc<Restory> {
        Arc::new(Restory {
            uid: format!("u-{n}"),
            namespace: "ml".into(),
            name: format!("job-{n}"),
        })
    }

    /// A flood of story changes holds at most [`IN_FLIGHT`] reads and [`WAITING`] jobs, each
    /// job once; the rest is let go and counted. A read that fails (nothing listens at the
    /// address) gives nothing, and the next waiting job's read starts.
    #[tokio::test]
    async fn reads_are_bounded_and_each_job_waits_once() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("a URL"));
        let client = Client::try_from(config).expect("a client");
        let kind = JobKind::builtin("batch-job").expect("built-in");
        let mut rereads = Rereads::new(&kind);
        let flood = IN_FLIGHT + WAITING + 10;
        for n in 0..flood {
            rereads.read(&client, restory(n));
        }
        for n in 0..flood {
            rereads.read(&client, restory(n));
        }
        assert_eq!(rereads.running.len(), IN_FLIGHT);
        assert_eq!(rereads.waiting.len(), WAITING);
        assert_eq!(rereads.dropped, 20, "the overflow, on each of two floods");
        assert_eq!(rereads.queued.len(), IN_FLIGHT + WAITING, "each job once");
        assert!(rereads.busy());
        assert!(
            rereads.next(&client).await.is_none(),
            "a failed read gives nothing"
        );
        assert_eq!(
            rereads.running.len(),
            IN_FLIGHT,
            "the next waiting read started"
        );
        assert_eq!(rereads.waiting.len(), WAITING - 1);
    }
}
