//! The standard `process_*` metrics of the whole jobrelay process, read from `/proc/self` at
//! scrape time, under the names every Prometheus client library uses, so the dashboards and
//! alerts teams already have for CPU, memory and file descriptors work unchanged.
//!
//! Hand-written rather than a crate: `prometheus-client` has no process collector, and the
//! few fields needed are two lines of `/proc` (see docs/dependencies.md).

/// What `/proc/self` says about the process now. Fields the kernel did not give are `None`
/// (not Linux, or an unexpected format), and their metrics are left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessStats {
    /// User plus system CPU time, seconds.
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    /// Unix time the process started, seconds.
    pub start_time_seconds: Option<f64>,
}

/// Clock ticks per second of `/proc/self/stat`'s times: 100 on every Linux architecture
/// jobrelay builds for (the kernel's USER_HZ).
const TICKS_PER_SECOND: f64 = 100.0;

impl ProcessStats {
    /// Reads the current figures.
    pub fn read() -> ProcessStats {
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        let fields = stat.as_deref().map(stat_fields).unwrap_or_default();
        let field = |n: usize| fields.get(n).and_then(|f| f.parse::<u64>().ok());
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let boot_time = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| boot_time(&s));
        ProcessStats {
            // Fields after the command, counted from `state` (field 3 of proc(5)) as 0:
            // utime 11, stime 12, starttime 19.
            cpu_seconds: field(11)
                .zip(field(12))
                .map(|(user, system)| (user + system) as f64 / TICKS_PER_SECOND),
            // In kB in /proc/self/status, which needs no page size.
            virtual_bytes: status_kib(&status, "VmSize:").map(|k| k * 1024),
            resident_bytes: status_kib(&status, "VmRSS:").map(|k| k * 1024),
            start_time_seconds: field(19)
                .zip(boot_time)
                .map(|(ticks, boot)| boot as f64 + ticks as f64 / TICKS_PER_SECOND),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|d| d.count() as u64),
            max_fds: std::fs::read_to_string("/proc/self/limits")
                .ok()
                .and_then(|s| max_open_files(&s)),
        }
    }
}

/// The fields of `/proc/self/stat` after the command name, which is in parentheses and may
/// itself hold spaces and parentheses.
fn stat_fields(stat: &str) -> Vec<&str> {
    stat.rfind(')')
        .map(|end| stat[end + 1..].split_whitespace().collect())
        .unwrap_or_default()
}

/// A `NAME: N kB` line of `/proc/self/status`.
fn status_kib(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// `btime` of `/proc/stat`: boot time, Unix seconds.
fn boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of "Max open files" in `/proc/self/limits`.
fn max_open_files(limits: &str) -> Option<u64> {
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|soft| soft.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_survive_a_command_with_spaces_and_parentheses() {
        let stat = "4242 (job relay (x)) S 1 4242 4242 0 -1 4194560 1 0 0 0 250 130 0 0 20 0 9 0 \
                    5000 123456789 2048 18446744073709551615";
        let fields = stat_fields(stat);
        assert_eq!(fields[0], "S");
        assert_eq!(fields[11], "250");
        assert_eq!(fields[12], "130");
        assert_eq!(fields[19], "5000");
        assert_eq!(
            status_kib(
                "Name:\tjobrelay\nVmSize:\t  123456 kB\nVmRSS:\t    2048 kB\n",
                "VmRSS:"
            ),
            Some(2048)
        );
        assert_eq!(
            max_open_files("Limit Soft Limit Hard Limit Units\nMax open files 1024 524288 files\n"),
            Some(1024)
        );
        assert_eq!(
            boot_time("cpu 1 2 3\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reads_plausibly() {
        // Some CPU time spent, so the figure moves.
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let stats = ProcessStats::read();
        let rss = stats.resident_bytes.expect("rss");
        assert!(rss > 1 << 20 && rss < 1 << 40, "{stats:?}");
        assert!(stats.virtual_bytes.expect("vsize") >= rss, "{stats:?}");
        assert!(stats.open_fds.expect("fds") >= 3, "{stats:?}");
        assert!(
            stats.max_fds.expect("limit") >= stats.open_fds.unwrap_or(0),
            "{stats:?}"
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        let started = stats.start_time_seconds.expect("start time");
        assert!(
            started <= now + 1.0 && started > now - 86_400.0,
            "{stats:?}"
        );
        assert!(stats.cpu_seconds.expect("cpu") >= 0.0, "{stats:?}");
    }
}
