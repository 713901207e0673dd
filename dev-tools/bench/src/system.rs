//! What `/proc` says about processes and the machine: resident memory,
//! CPU time, parent processes, the load average.

/// The resident memory of a process, in MiB, from `/proc`.
pub(crate) fn resident_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// The peak resident memory of a process while something runs: sampled
/// every 20 ms by a thread of its own from [`PeakMemory::start`] to
/// [`PeakMemory::stop`].
pub(crate) struct PeakMemory {
    sampling: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sampler: std::thread::JoinHandle<f64>,
}

impl PeakMemory {
    pub(crate) fn start(pid: u32) -> PeakMemory {
        use std::sync::atomic::Ordering;
        let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let sampler = {
            let sampling = sampling.clone();
            std::thread::spawn(move || {
                let mut peak: f64 = 0.0;
                while sampling.load(Ordering::Relaxed) {
                    peak = peak.max(resident_mib(pid));
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                peak
            })
        };
        PeakMemory { sampling, sampler }
    }

    /// The peak, in MiB.
    pub(crate) fn stop(self) -> anyhow::Result<f64> {
        self.sampling.store(false, std::sync::atomic::Ordering::Relaxed);
        self.sampler.join().map_err(|_| anyhow::anyhow!("the memory sampler failed"))
    }
}

/// The CPU time (user and system) of the processes `pick` chooses by pid,
/// in seconds, from `/proc`.
pub(crate) fn cpu_seconds(pick: impl Fn(u32) -> bool) -> f64 {
    let ticks_per_second = 100.0; // USER_HZ on Linux
    let mut ticks = 0u64;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        if !pick(pid) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
        let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
        ticks += fields.get(11).and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
        ticks += fields.get(12).and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
    }
    ticks as f64 / ticks_per_second
}

pub(crate) fn parent_pid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| line.strip_prefix("PPid:")).and_then(|ppid| ppid.trim().parse().ok())
}

/// The load average as `/proc/loadavg` gives it (1, 5 and 15 minutes).
pub(crate) fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}
