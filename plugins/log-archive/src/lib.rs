//! `log-archive`: when a job finishes, or is being deleted, copies the logs of all its pods
//! and containers (and of the previous instance of restarted containers) into the archive,
//! gzipped, with a `manifest.json` describing what was archived and what was missing.
//!
//! Layout under the plugin's prefix:
//! `cluster/namespace/job-uid/pod/container[.previous].log.gz` and
//! `cluster/namespace/job-uid/manifest.json`.
//!
//! Logs are streamed: a chunk read from the host goes through the gzip encoder and straight
//! into an archive writer, so a large log never sits whole in the plugin's memory. The manifest
//! is written last, so its presence means the archive is complete. A re-delivered event
//! rewrites the same keys. With the `kv` grant, a job archived once (at its end, or when its
//! deletion began) is not archived again by a later deletion event (its pods may be gone by
//! then, and the first archive is the good one), nor by the same transition delivered again
//! (same `transition-key`: a retry, a restart, a reconstruction of a live transition).
//!
//! With `grants.job: {annotations: ["archive.jobrelay.io/"]}` the job gets the annotation
//! `archive.jobrelay.io/logs`: its manifest's key under the plugin's archive prefix, so whoever
//! looks at the job finds its logs.

mod layout;

pub use layout::{Settings, job_dir, log_key};

#[cfg(target_arch = "wasm32")]
mod plugin {
    use std::io::Write;

    use flate2::Compression;
    use flate2::write::GzEncoder;
    use sha2::{Digest, Sha256};

    use super::layout::{self, ContainerEntry, JobRef, LogEntry, Manifest, PodEntry, Settings};

    use jobrelay_guest::archive::{self, Error as ArchiveError, Writer};
    use jobrelay_guest::job;
    use jobrelay_guest::log::{self as host_log, Level};
    use jobrelay_guest::pod_logs::{self, Error as LogError};
    use jobrelay_guest::{
        Configured, FleetEvent, Guest, HandlerError, JobEvent, is_terminal, kv, phase_name,
    };

    static SETTINGS: Configured<Settings> = Configured::new();

    /// The annotation that says where a job's logs were archived.
    const ANNOTATION: &str = "archive.jobrelay.io/logs";

    struct LogArchive;

    jobrelay_guest::export_plugin!(LogArchive);

    impl Guest for LogArchive {
        fn init(config: Vec<(String, String)>) -> Result<(), String> {
            SETTINGS.set(Settings::from_config(&config)?)
        }

        fn handle(event: JobEvent) -> Result<(), HandlerError> {
            let settings = SETTINGS.get()?;
            let phase = phase_name(event.phase);
            if !settings.phases.iter().any(|p| p == phase) {
                return Ok(());
            }
            let terminal = is_terminal(event.phase);
            // Holds the transition key of the transition the job was archived at.
            let done_key = format!("archived/{}/{}", event.cluster, event.uid);
            if let Ok(Some(done)) = kv::get(&done_key) {
                // Being deleted after an archive (at its end, or when its deletion began):
                // that archive stands, its pods may be gone by now. The same transition
                // again (re-delivered, or reconstructed after being delivered live): done.
                if !terminal || done == event.transition_key.as_bytes() {
                    return Ok(());
                }
            }
            archive_job(&event, &settings)?;
            let done = event.transition_key.as_bytes();
            if let Err(e) = kv::set(&done_key, done, Some(30 * 24 * 3600)) {
                host_log::write(
                    Level::Debug,
                    &format!(
                        "not remembering the archive (kv: {e}); a later deletion event will \
                         archive again"
                    ),
                );
            }
            Ok(())
        }

        /// A fleet event has no pods to archive: acknowledged and dropped.
        fn handle_fleet(_event: FleetEvent) -> Result<(), HandlerError> {
            Ok(())
        }
    }

    fn archive_job(event: &JobEvent, settings: &Settings) -> Result<(), HandlerError> {
        let dir = layout::job_dir(&event.cluster, &event.namespace, &event.uid);
        let pods = pod_logs::pods().map_err(log_error)?;
        let mut entries = Vec::with_capacity(pods.len());
        for pod in &pods {
            let mut containers = Vec::with_capacity(pod.containers.len());
            for container in &pod.containers {
                let mut logs = vec![archive_log(
                    &dir,
                    &pod.name,
                    &container.name,
                    false,
                    settings,
                )?];
                if container.restart_count > 0 {
                    logs.push(archive_log(
                        &dir,
                        &pod.name,
                        &container.name,
                        true,
                        settings,
                    )?);
                }
                containers.push(ContainerEntry {
                    name: container.name.clone(),
                    init: container.init,
                    restart_count: container.restart_count,
                    logs,
                });
            }
            entries.push(PodEntry {
                name: pod.name.clone(),
                phase: pod.phase.clone(),
                node: pod.node.clone(),
                containers,
            });
        }
        let manifest = Manifest {
            job: JobRef {
                cluster: event.cluster.clone(),
                namespace: event.namespace.clone(),
                name: event.name.clone(),
                uid: event.uid.clone(),
                api_version: event.api_version.clone(),
                kind: event.kind.clone(),
            },
            phase: phase_name(event.phase).to_string(),
            event_id: event.id.clone(),
            archived_at: now(),
            no_pods: entries.is_empty(),
            pods: entries,
        };
        let text = serde_json::to_vec_pretty(&manifest)
            .map_err(|e| HandlerError::GiveUp(format!("manifest: {e}")))?;
        let manifest_key = format!("{dir}/manifest.json");
        archive::put(&manifest_key, &text).map_err(archive_error)?;
        point_to(&manifest_key);
        host_log::write(
            Level::Info,
            &format!(
                "archived {} pod(s) of {}/{} ({})",
                manifest.pods.len(),
                event.namespace,
                event.name,
                manifest.phase
            ),
        );
        Ok(())
    }

    /// Annotates the job with where its archive is (`archive.jobrelay.io/logs`: the manifest's
    /// key under the plugin's archive prefix), when `grants.job` allows it. A convenience, not
    /// part of the archive: whatever the answer, the archive stands and the event is done.
    fn point_to(manifest_key: &str) {
        if let Err(e) = job::annotate(ANNOTATION, Some(manifest_key)) {
            let why = match e {
                job::Error::Denied(m)
                | job::Error::Invalid(m)
                | job::Error::Gone(m)
                | job::Error::Unavailable(m) => m,
            };
            host_log::write(Level::Debug, &format!("not annotating the job: {why}"));
        }
    }

    /// Streams one container log into `<key>.log.gz`. A log that does not exist is an entry
    /// saying why, not an error: pods of a deleted job may already be gone.
    fn archive_log(
        dir: &str,
        pod: &str,
        container: &str,
        previous: bool,
        settings: &Settings,
    ) -> Result<LogEntry, HandlerError> {
        let missing = |why: String| LogEntry {
            previous,
            key: None,
            bytes: 0,
            stored_bytes: 0,
            sha256: None,
            truncated: false,
            missing: Some(why),
        };
        let log = match pod_logs::open(pod, container, previous) {
            Ok(log) => log,
            Err(LogError::NotFound(why)) => return Ok(missing(why)),
            Err(other) => return Err(log_error(other)),
        };
        let key = layout::log_key(dir, pod, container, previous);
        let writer = archive::create(&key).map_err(archive_error)?;
        let mut gzip = GzEncoder::new(ChunkSink::new(&writer), Compression::default());
        let mut hash = Sha256::new();
        let mut bytes = 0u64;
        loop {
            let chunk = match log.read(settings.chunk_bytes) {
                Ok(chunk) => chunk,
                // The pod went away while being read: keep what was read, say so.
                Err(LogError::NotFound(_)) => break,
                Err(other) => return Err(log_error(other)),
            };
            if chunk.is_empty() {
                break;
            }
            bytes += chunk.len() as u64;
            hash.update(&chunk);
            gzip.write_all(&chunk).map_err(sink_error)?;
        }
        let sink = gzip.finish().map_err(sink_error)?;
        sink.flush_all()?;
        let stored_bytes = writer.finish().map_err(archive_error)?;
        Ok(LogEntry {
            previous,
            key: Some(key),
            bytes,
            stored_bytes,
            sha256: Some(hex::encode(hash.finalize())),
            truncated: log.truncated(),
            missing: None,
        })
    }

    /// Gathers the encoder's small writes into chunks before they cross into the host.
    struct ChunkSink<'a> {
        writer: &'a Writer,
        buffer: Vec<u8>,
        failed: Option<ArchiveError>,
    }

    const SINK_CHUNK: usize = 64 * 1024;

    impl<'a> ChunkSink<'a> {
        fn new(writer: &'a Writer) -> Self {
            ChunkSink {
                writer,
                buffer: Vec::with_capacity(SINK_CHUNK),
                failed: None,
            }
        }

        fn send(&mut self) -> std::io::Result<()> {
            if self.buffer.is_empty() {
                return Ok(());
            }
            let chunk = std::mem::take(&mut self.buffer);
            if let Err(e) = self.writer.write(&chunk) {
                let text = format!("{e:?}");
                self.failed = Some(e);
                return Err(std::io::Error::other(text));
            }
            Ok(())
        }

        /// Sends what is left; the archive's own error if a write failed.
        fn flush_all(mut self) -> Result<(), HandlerError> {
            if let Some(e) = self.failed.take() {
                return Err(archive_error(e));
            }
            self.send().map_err(sink_error)?;
            match self.failed.take() {
                Some(e) => Err(archive_error(e)),
                None => Ok(()),
            }
        }
    }

    impl Write for ChunkSink<'_> {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.buffer.extend_from_slice(bytes);
            if self.buffer.len() >= SINK_CHUNK {
                self.send()?;
            }
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn sink_error(e: std::io::Error) -> HandlerError {
        HandlerError::Retry(format!("writing to the archive: {e}"))
    }

    fn log_error(e: LogError) -> HandlerError {
        match e {
            LogError::Unavailable(m) => HandlerError::Retry(format!("pod logs unavailable: {m}")),
            LogError::Denied(m) => HandlerError::GiveUp(format!("pod logs denied: {m}")),
            LogError::NotFound(m) => HandlerError::Retry(format!("pod logs not found: {m}")),
        }
    }

    fn archive_error(e: ArchiveError) -> HandlerError {
        match e {
            ArchiveError::Unavailable(m) => {
                HandlerError::Retry(format!("archive unavailable: {m}"))
            }
            ArchiveError::InvalidKey(m) => {
                HandlerError::GiveUp(format!("archive refused the key: {m}"))
            }
            ArchiveError::TooLarge(m) => {
                HandlerError::GiveUp(format!("archive object too large: {m}"))
            }
        }
    }

    fn now() -> String {
        let now: chrono::DateTime<chrono::Utc> = std::time::SystemTime::now().into();
        now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    }
}
