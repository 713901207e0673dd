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
