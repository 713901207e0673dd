//! Whether the kernel may write this process's memory to swap.
//!
//! The component runtime resets a pooled instance's memory in place, asking
//! the kernel which pages were written (`PAGEMAP_SCAN`). wasmtime 48.0.10
//! asks only for pages that are present, so a page written by one request and
//! then swapped out would keep that request's bytes for the next instance
//! in the slot. Where swap is possible the runtime releases every page
//! instead (crates/runtime/src/engine.rs).

use std::path::Path;

/// Whether a page of this process may be swapped out: a swap area is active
/// and no cgroup (v2) of the process caps its swap at 0. When a file cannot
/// be read, swap counts as possible.
pub fn may_swap() -> bool {
    if !cfg!(target_os = "linux") {
        return false;
    }
    let Ok(swaps) = std::fs::read_to_string("/proc/swaps") else { return true };
    if !has_active_swap(&swaps) {
        return false;
    }
    let Ok(cgroups) = std::fs::read_to_string("/proc/self/cgroup") else { return true };
    !cgroup_forbids_swap(&cgroups, |cgroup| {
        std::fs::read_to_string(Path::new("/sys/fs/cgroup").join(cgroup).join("memory.swap.max")).ok()
    })
}

/// Whether `/proc/swaps` lists a swap area (its first line is a header).
pub fn has_active_swap(proc_swaps: &str) -> bool {
    proc_swaps.lines().skip(1).any(|line| !line.trim().is_empty())
}

/// Whether the process's cgroup v2 (from `/proc/self/cgroup`), or one of its
/// ancestors, has `memory.swap.max` 0. `swap_max` reads that file of a
/// cgroup, given as a path relative to the cgroup root (`None` when absent:
/// the memory controller is off there, so that cgroup sets no cap). A
/// process under cgroup v1 alone is not capped here.
pub fn cgroup_forbids_swap(proc_self_cgroup: &str, swap_max: impl Fn(&str) -> Option<String>) -> bool {
    let Some(path) = proc_self_cgroup.lines().find_map(|line| line.strip_prefix("0::")) else { return false };
    let mut cgroup = path.trim().trim_matches('/');
    // A cgroup outside this process's cgroup namespace shows as `/../…`:
    // its files are not under this mount, so nothing is known of its cap.
    if cgroup.split('/').any(|part| part == "..") {
        return false;
    }
    // Up to the root as this process sees it: the machine's root has no
    // `memory.swap.max`, but in a container's cgroup namespace the root is
    // the container's own cgroup, which does.
    loop {
        if swap_max(cgroup).is_some_and(|max| max.trim() == "0") {
            return true;
        }
        if cgroup.is_empty() {
            return false;
        }
        cgroup = cgroup.rsplit_once('/').map_or("", |(parent, _)| parent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";

    #[test]
    fn an_active_swap_area_is_one_line_past_the_header() {
        assert!(!has_active_swap(HEADER));
        assert!(!has_active_swap(""));
        assert!(has_active_swap(&format!(
            "{HEADER}/swapfile                               file\t\t1048572\t\t0\t\t-2\n"
        )));
        assert!(has_active_swap(&format!("{HEADER}/dev/zram0 partition\t4194300\t0\t100\n")));
    }

    #[test]
    fn a_zero_swap_cap_on_the_cgroup_or_an_ancestor_forbids_swap() {
        let caps = |zero_at: &'static str| {
            move |cgroup: &str| match cgroup {
                "system.slice/esr.service" | "system.slice" => {
                    Some(if cgroup == zero_at { "0\n" } else { "max\n" }.to_owned())
                }
                _ => None,
            }
        };
        let own = "0::/system.slice/esr.service\n";
        assert!(cgroup_forbids_swap(own, caps("system.slice/esr.service")));
        assert!(cgroup_forbids_swap(own, caps("system.slice")), "a parent's cap holds for its children");
        assert!(!cgroup_forbids_swap(own, caps("")), "`max` everywhere");
        assert!(!cgroup_forbids_swap("0::/\n", caps("system.slice")), "the machine's root cgroup has no cap");
        // Outside this process's cgroup namespace (entered from the host):
        // the mount's root is someone else's cgroup, so no cap is known.
        assert!(!cgroup_forbids_swap("0::/../../system.slice/esr.service\n", |_: &str| Some("0\n".to_owned())));
        // In a container's cgroup namespace its own cgroup is the root.
        assert!(cgroup_forbids_swap("0::/\n", |cgroup: &str| cgroup.is_empty().then(|| "0\n".to_owned())));
        // cgroup v1 only: no `0::` line.
        assert!(!cgroup_forbids_swap("4:memory:/system.slice/esr.service\n", caps("system.slice")));
        // A hybrid host lists both; the v2 line decides.
        assert!(cgroup_forbids_swap(
            "4:memory:/user.slice\n0::/system.slice/esr.service\n",
            caps("system.slice/esr.service")
        ));
    }
}
