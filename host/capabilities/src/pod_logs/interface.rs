//! The `jobrelay:plugin/pod-logs` calls as plugins built for the current WIT version make them:
//! listing the job's pods, opening a container's log (at most a few per call), reading it,
//! each through the run's tape.
//!
//! Apart from the pods and the reader so that what a plugin may ask, and what a tape sees of
//! it, reads on its own.

use serde_json::json;
use wasmtime::component::Resource;

use super::reader::LogReader;
use super::{MAX_OPEN_LOGS, PodLogAccess};
use crate::tape;
use jobrelay_bindings::jobrelay::plugin::pod_logs as wit;

use wit::{Error as LogError, Log, Pod as WitPod};

impl wit::Host for PodLogAccess {
    async fn pods(&mut self) -> Result<Vec<WitPod>, LogError> {
        self.check_granted()?;
        let tape = self.tape.clone();
        let real = async { Ok(self.pods().await?.to_vec()) };
        tape::through(tape.as_ref(), "pod-logs.pods", || json!({}), real).await
    }

    async fn open(
        &mut self,
        pod: String,
        container: String,
        previous: bool,
    ) -> Result<Resource<Log>, LogError> {
        self.check_granted()?;
        if self.logs.len() >= MAX_OPEN_LOGS {
            return Err(LogError::Unavailable(format!(
                "at most {MAX_OPEN_LOGS} logs may be open at once; drop one first"
            )));
        }
        let tape = self.tape.clone();
        let args = || json!({ "pod": pod, "container": container, "previous": previous });
        let reader = match &tape {
            Some(tape) if tape.replaying() => {
                let opened: Result<(), LogError> = tape.replay("pod-logs.open", args());
                opened.map(|()| LogReader::replayed())
            }
            _ => {
                let reader = self.open_log(&pod, &container, previous).await;
                if let Some(tape) = &tape {
                    tape.record(
                        "pod-logs.open",
                        args(),
                        &reader.as_ref().map(|_| ()).map_err(Clone::clone),
                    );
                }
                reader
            }
        }?;
        self.logs
            .push(reader)
            .map_err(|e| LogError::Unavailable(format!("cannot open another log: {e}")))
    }
}

impl wit::HostLog for PodLogAccess {
    async fn read(&mut self, log: Resource<Log>, max_bytes: u32) -> Result<Vec<u8>, LogError> {
        let rep = log.rep();
        let reader = self
            .logs
            .get_mut(&log)
            .map_err(|e| LogError::Denied(format!("invalid log handle: {e}")))?;
        let args = || json!({ "log": rep, "max_bytes": max_bytes });
        let real = reader.read_chunk(max_bytes);
        tape::through(self.tape.as_ref(), "pod-logs.read", args, real).await
    }

    async fn truncated(&mut self, log: Resource<Log>) -> bool {
        let truncated = self
            .logs
            .get(&log)
            .map(|reader| reader.truncated)
            .unwrap_or(false);
        let args = || json!({ "log": log.rep() });
        let real = async { truncated };
        tape::through(self.tape.as_ref(), "pod-logs.truncated", args, real).await
    }

    async fn drop(&mut self, log: Resource<Log>) -> wasmtime::Result<()> {
        self.logs.remove(log)?;
        Ok(())
    }
}
