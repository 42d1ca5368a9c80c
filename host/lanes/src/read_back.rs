//! Read-backs of a lane's spilled events, gathered into batches.
//!
//! An event the [`MemoryBudget`](crate::budget::MemoryBudget) had no room for waits in the
//! lane's queue as its place alone, and the job's worker reads it back from the store's inbox
//! by id when its turn comes. Asked one by one, each read-back is a query of its own (on
//! SQLite a hand-over to a connection's thread and back), and a restart on a backlog of
//! 200,000 such events delivered them at about a thousand a second, the pool's connections
//! the bottleneck. Here every read-back of a lane goes through one task, which asks the store
//! for whatever has gathered while its previous query ran — up to [`READ_BACK_BATCH`] ids in
//! one query — and answers each worker. A lone read-back waits for nothing: the batches grow
//! only when workers ask faster than one query answers.
//!
//! The channel is unbounded because what can wait in it is bounded already: a worker asks
//! for one event and waits for the answer, and a lane runs at most
//! [`MAX_WORKERS`](crate::queue::MAX_WORKERS) workers.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use jobrelay_state::{DeliveryStore, READ_BACK_BATCH, StoreError, Stored};

/// Why a read-back got no answer from the store.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReadError {
    /// The store refused the query holding the id. Shared: every id of the batch gets it.
    #[error("{0}")]
    Store(Arc<StoreError>),
    /// The store answered another number of events than it was asked for (a bug of the
    /// store's); the worker asks again.
    #[error("the state store answered {answered} inbox events for {asked} ids")]
    Miscounted {
        /// Ids in the query.
        asked: usize,
        /// Events the store answered.
        answered: usize,
    },
    /// The reading task is gone (the lane is being dropped).
    #[error("the inbox reader has stopped")]
    Stopped,
}

struct Request {
    id: Box<str>,
    answer: oneshot::Sender<Result<Stored, ReadError>>,
}

/// A lane's reader of spilled events; dropping it ends the task once the asked are answered.
#[derive(Debug)]
pub(crate) struct ReadBacks {
    requests: mpsc::UnboundedSender<Request>,
}

impl ReadBacks {
    /// Starts the lane's reading task on the current runtime.
    pub(crate) fn start(store: Arc<dyn DeliveryStore>) -> ReadBacks {
        ReadBacks::reading_with(move |ids| {
            let store = store.clone();
            async move {
                let ids: Vec<&str> = ids.iter().map(|id| &**id).collect();
                store.inbox_events(&ids).await
            }
        })
    }

    /// Starts the reading task with `read` answering each batch of ids.
    fn reading_with<R, F>(read: R) -> ReadBacks
    where
        R: Fn(Vec<Box<str>>) -> F + Send + 'static,
        F: Future<Output = Result<Vec<Stored>, StoreError>> + Send + 'static,
    {
        let (requests, asked) = mpsc::unbounded_channel();
        tokio::spawn(read_batches(read, asked));
        ReadBacks { requests }
    }

    /// The inbox's event `id`, read in a batch with whatever else the lane's workers ask.
    pub(crate) async fn read(&self, id: &str) -> Result<Stored, ReadError> {
        let (answer, answered) = oneshot::channel();
        let request = Request {
            id: id.into(),
            answer,
        };
        if self.requests.send(request).is_err() {
            return Err(ReadError::Stopped);
        }
        answered.await.unwrap_or(Err(ReadError::Stopped))
    }
}

/// Answers the requests, a batch of whatever has gathered at a time, until every sender is
/// gone.
async fn read_batches<R, F>(read: R, mut asked: mpsc::UnboundedReceiver<Request>)
where
    R: Fn(Vec<Box<str>>) -> F,
    F: Future<Output = Result<Vec<Stored>, StoreError>>,
{
    let mut batch = Vec::with_capacity(READ_BACK_BATCH);
    while asked.recv_many(&mut batch, READ_BACK_BATCH).await > 0 {
        let ids = batch.iter().map(|request| request.id.clone()).collect();
        let answers: Vec<Result<Stored, ReadError>> = match read(ids).await {
            Ok(found) if found.len() == batch.len() => found.into_iter().map(Ok).collect(),
            Ok(found) => {
                let miscounted = ReadError::Miscounted {
                    asked: batch.len(),
                    answered: found.len(),
                };
                vec![Err(miscounted); batch.len()]
            }
            Err(e) => vec![Err(ReadError::Store(Arc::new(e))); batch.len()],
        };
        for (request, answer) in batch.drain(..).zip(answers) {
            // The asker may have stopped waiting (its lane closed); nothing to tell it then.
            let _ = request.answer.send(answer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use parking_lot::Mutex;

    use tokio::sync::Semaphore;

    /// What the test store answers for `id`: a different answer per id, so a mixed-up batch
    /// shows; ids starting with `gone` are missing.
    fn answer_for(id: &str) -> Stored {
        if id.starts_with("gone") {
            Stored::Missing
        } else {
            Stored::Damaged(format!("answer for {id}"))
        }
    }

    /// A reader whose queries wait at `gate` (one permit each), record their ids, and fail
    /// or miscount when told to.
    struct Store {
        gate: Arc<Semaphore>,
        batches: Arc<Mutex<Vec<Vec<Box<str>>>>>,
        fail: Arc<Mutex<Option<&'static str>>>,
        /// Queries begun (before the gate).
        begun: Arc<std::sync::atomic::AtomicUsize>,
    }

    fn reader() -> (ReadBacks, Store) {
        let store = Store {
            gate: Arc::new(Semaphore::new(0)),
            batches: Arc::default(),
            fail: Arc::default(),
            begun: Arc::default(),
        };
        let (gate, batches, fail, begun) = (
            store.gate.clone(),
            store.batches.clone(),
            store.fail.clone(),
            store.begun.clone(),
        );
        let reads = ReadBacks::reading_with(move |ids: Vec<Box<str>>| {
            let (gate, batches, fail) = (gate.clone(), batches.clone(), fail.clone());
            begun.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                gate.acquire().await.map(|p| p.forget()).ok();
                let answers = ids.iter().map(|id| answer_for(id)).collect::<Vec<_>>();
                batches.lock().push(ids);
                let failing = fail.lock().take();
                match failing {
                    Some("refuse") => Err(StoreError::BadUrl("refused".into())),
                    Some(_) => Ok(answers[1..].to_vec()),
                    None => Ok(answers),
                }
            }
        });
        (reads, store)
    }

    fn sizes(store: &Store) -> Vec<usize> {
        let batches = store.batches.lock();
        batches.iter().map(Vec::len).collect()
    }

    /// Read-backs asked while a query runs are gathered into the next ones (at most
    /// `READ_BACK_BATCH` ids each), and every asker gets its own id's answer, repeats and
    /// missing ids included.
    #[tokio::test]
    async fn reads_asked_meanwhile_share_a_query_and_each_gets_its_own_answer() {
        let (reads, store) = reader();
        let ids: Vec<String> = (0..300)
            .map(|i| match i % 7 {
                0 => format!("gone-{i}"),
                1 => "repeated".to_string(),
                _ => format!("event-{i}"),
            })
            .collect();
        let (first, rest) = tokio::join!(reads.read("first"), async {
            // The first query holds the reader; everything below is asked meanwhile.
            while store.begun.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
            let all = futures::future::join_all(ids.iter().map(|id| reads.read(id)));
            let (answers, ()) = tokio::join!(all, async { store.gate.add_permits(3) });
            answers
        });
        assert_eq!(first.expect("answered"), answer_for("first"));
        for (id, answer) in ids.iter().zip(rest) {
            assert_eq!(
                answer.expect("answered"),
                answer_for(id),
                "the answer of {id}"
            );
        }
        assert_eq!(
            sizes(&store),
            [1, READ_BACK_BATCH, 300 - READ_BACK_BATCH],
            "one query for the first, the rest gathered"
        );
    }

    /// A query the store refuses or miscounts fails every read of its batch, with why, and
    /// the reader goes on answering the next ones.
    #[tokio::test]
    async fn a_failed_query_fails_its_batch_and_the_reader_goes_on() {
        let (reads, store) = reader();
        store.gate.add_permits(3);
        *store.fail.lock() = Some("refuse");
        let refused = reads.read("a").await;
        assert!(
            matches!(&refused, Err(ReadError::Store(e)) if e.to_string().contains("refused")),
            "{refused:?}"
        );
        *store.fail.lock() = Some("miscount");
        let miscounted = reads.read("b").await;
        assert!(
            matches!(
                miscounted,
                Err(ReadError::Miscounted {
                    asked: 1,
                    answered: 0
                })
            ),
            "{miscounted:?}"
        );
        assert_eq!(reads.read("c").await.expect("answered"), answer_for("c"));
    }
}
