//! Component memory on a host that swaps. A test binary of its own: it
//! turns swap on for the whole machine, which no other test may see, and
//! cargo runs test binaries one after another. It needs root (swapon, and
//! `process_madvise` on the server), as `make test` in CI runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(unsafe_code)]

#[path = "it/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Server, plugins_dir, plugins_dir_with, test_plugins_dir, workspace};

/// A swap file turned on for as long as this lives, off when dropped (a
/// failed test included). One fixed path on the build's disk (a temporary
/// directory may be a tmpfs, which cannot hold one), turned off first
/// should a killed run have left it on.
struct SwapArea {
    file: PathBuf,
}

impl SwapArea {
    fn on(bytes: usize) -> SwapArea {
        let file = workspace().join("target/esr-test-swapfile");
        if file.exists() {
            let _ = Command::new("/sbin/swapoff").arg(&file).output();
            std::fs::remove_file(&file).unwrap();
        }
        std::fs::write(&file, vec![0u8; bytes]).unwrap();
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        for program in ["/sbin/mkswap", "/sbin/swapon"] {
            let output = Command::new(program).arg(&file).output().unwrap();
            assert!(
                output.status.success(),
                "{program} {}: {} (turning swap on takes root, as `make test` in CI runs)",
                file.display(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        SwapArea { file }
    }
}

impl Drop for SwapArea {
    fn drop(&mut self) {
        let output = Command::new("/sbin/swapoff").arg(&self.file).output().unwrap();
        assert!(output.status.success(), "swapoff: {}", String::from_utf8_lossy(&output.stderr));
        std::fs::remove_file(&self.file).unwrap();
    }
}

/// Starts a server whose threads all run on one CPU (the affinity a child
/// takes from the thread that spawns it), so that wasmtime's pool has one
/// shard and a component's calls reuse the slot its last call had.
fn start_on_one_cpu(plugins: &std::path::Path, extra: &[&str]) -> Server {
    on_one_cpu(|| Server::start_with(plugins, extra))
}

/// `work` done with this thread on CPU 0 only, its affinity restored after.
fn on_one_cpu<T>(work: impl FnOnce() -> T) -> T {
    // SAFETY: affinity calls on this thread with sets made here.
    let mut before: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    assert_eq!(unsafe { libc::sched_getaffinity(0, size, &mut before) }, 0);
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(0, &mut one) };
    assert_eq!(unsafe { libc::sched_setaffinity(0, size, &one) }, 0);
    let result = work();
    assert_eq!(unsafe { libc::sched_setaffinity(0, size, &before) }, 0);
    result
}

/// The writable regions of process `pid`: (start, end).
fn writable_regions(pid: u32) -> Vec<(u64, u64)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (range, permissions) = (fields.next()?, fields.next()?);
            let (start, end) = range.split_once('-')?;
            permissions
                .starts_with("rw")
                .then(|| (u64::from_str_radix(start, 16).unwrap(), u64::from_str_radix(end, 16).unwrap()))
        })
        .collect()
}

/// The address of a page of process `pid` that begins with `secret`:
/// where the component's page-aligned scratch is (the host's own copies of
/// the request are not page-aligned). Reading a page swaps it in, so this
/// runs before the page-out.
fn page_beginning_with(pid: u32, secret: &[u8]) -> Option<u64> {
    let memory = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut head = vec![0u8; secret.len()];
    for (start, end) in writable_regions(pid) {
        for page in (start..end).step_by(4096) {
            let read = std::os::unix::fs::FileExt::read_at(&memory, &mut head, page);
            if read.is_ok_and(|read| read == secret.len()) && head == secret {
                return Some(page);
            }
        }
    }
    None
}

/// Whether a page of process `pid` is in swap now (`/proc/<pid>/pagemap`:
/// bit 62 swapped, bit 63 present).
fn in_swap(pid: u32, address: u64) -> bool {
    let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap")).unwrap();
    let mut entry = [0u8; 8];
    std::os::unix::fs::FileExt::read_exact_at(&pagemap, &mut entry, address / 4096 * 8).unwrap();
    let entry = u64::from_le_bytes(entry);
    entry & (1 << 62) != 0 && entry & (1 << 63) == 0
}

/// Asks the kernel to swap out every writable page of process `pid` it can
/// (`process_madvise` with `MADV_PAGEOUT`, Linux 5.10+).
fn page_out(pid: u32) {
    // SAFETY: plain system calls on a process id; the iovecs name the
    // other process's memory, which this process never dereferences.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) } as libc::c_int;
    assert!(pidfd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
    for (start, end) in writable_regions(pid) {
        let region = libc::iovec { iov_base: start as usize as *mut libc::c_void, iov_len: (end - start) as usize };
        // Some regions cannot be paged out (the vDSO's, locked ones): skipped.
        unsafe {
            libc::syscall(libc::SYS_process_madvise, pidfd, &region as *const libc::iovec, 1, libc::MADV_PAGEOUT, 0)
        };
    }
    unsafe { libc::close(pidfd) };
}

/// What a call leaves in its memory is gone for the next, on a host that
/// swaps too. wasmtime 48 resets a pooled slot in place from the pages the
/// kernel reports present, so a written page swapped out would keep its
/// bytes: the server resets in place only where it cannot swap, and says
/// which it does. With swap on, one call writes a secret and holds while
/// the page holding it is swapped out; the next calls of the same component
/// (in the same slot) find only zeros.
#[test]
fn a_calls_memory_never_reaches_the_next_call_even_swapped_out() {
    let logging = "ESR_LOG=warn,esr::server=info,esr_runtime=info";
    let in_place = "component memory is reset in place after each call";
    let released = "swap is on for this process: each component call's memory is released after it";
    let source = test_plugins_dir().join("remnant.wasm");
    let dir = plugins_dir_with(&["endpoints.wasm"], &[("remnant.wasm", &source)]);

    // As this machine is: in place where swap is off.
    let mut server = Server::start_with(dir.path(), &[logging]);
    server.wait_for_log(30, |log| log.contains(in_place) || log.contains(released));
    let expected = if esr_system::swap::may_swap() { released } else { in_place };
    assert!(server.log().contains(expected), "expected {expected:?}:\n{}", server.log());
    server.stop();

    let swap = SwapArea::on(256 << 20);
    assert!(esr_system::swap::may_swap(), "an active swap area and no cgroup cap: swap is possible");
    let server = start_on_one_cpu(dir.path(), &[logging, "--plugin-deadline-ms", "20000"]);
    server.wait_for_log(30, |log| log.contains(released));
    assert!(!server.log().contains(in_place));
    let secret = format!("secret-of-an-earlier-call-{}", uuid::Uuid::new_v4());
    let before = server.json("/v1/endpoints?read");
    assert_eq!(before["data"][0]["nonzero_bytes"], 0, "a fresh slot: {before}");
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| server.json(&format!("/v1/endpoints?write={secret}&hold-ms=8000")));
        let found = Instant::now();
        let page = loop {
            if let Some(page) = page_beginning_with(server.pid(), secret.as_bytes()) {
                break page;
            }
            assert!(found.elapsed() < Duration::from_secs(4), "the secret never appeared in the server's memory");
            std::thread::sleep(Duration::from_millis(50));
        };
        // A page the server just faulted in may wait in CPU 0's batch for
        // the LRU lists, where reclaim cannot take it yet; asked again from
        // that CPU, the batch is drained first.
        let paging = Instant::now();
        while !in_swap(server.pid(), page) {
            assert!(
                paging.elapsed() < Duration::from_secs(3),
                "the page holding the secret was not swapped out: the test did not test"
            );
            on_one_cpu(|| page_out(server.pid()));
        }
        assert_eq!(writer.join().unwrap()["data"][0]["wrote"], secret.as_str());
    });
    for _ in 0..8 {
        let after = server.json("/v1/endpoints?read");
        assert_eq!(after["data"][0]["nonzero_bytes"], 0, "the next call read the earlier call's memory: {after}");
    }
    // The stock components serve as well with every page released.
    drop(server);
    let server = Server::start(&plugins_dir());
    let finding = server.all(0, "vulnerability-findings")[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(server.json(&format!("/v1/vulnerability-findings/{finding}"))["id"], finding.as_str());
    drop(server);
    drop(swap);
}
