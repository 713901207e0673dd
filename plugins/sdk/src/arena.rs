//! The component's memory allocator: a bump arena in the module's own
//! zero-initialized memory, then the standard allocator.
//!
//! The host gives every call a fresh instance and resets its memory after
//! it. With Rust's default allocator each call grew linear memory several
//! times (`memory.grow`), and the host then had to shrink it back: each
//! change of the accessible size is an `mprotect`, whose TLB flush
//! interrupts every other core — the largest per-call cost a component
//! added (docs/performance.md). The arena lives in `.bss`, inside the
//! memory the module starts with, so a call that fits in it never grows
//! memory, and the host's reset touches only the pages the call wrote.
//! Bumping is also cheaper than a general allocator, and nothing needs
//! freeing: the instance ends with the call.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, UnsafeCell};

/// Enough for a page of records, a batch of 1,000 scanned records and
/// their copies; beyond it the standard allocator grows memory as before.
const ARENA_BYTES: usize = 8 << 20;

#[repr(C, align(16))]
struct Arena {
    bytes: UnsafeCell<[u8; ARENA_BYTES]>,
    /// Offset of the first free byte.
    next: Cell<usize>,
}

// SAFETY: a component instance runs on one thread; nothing shares it.
#[allow(unsafe_code)]
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena { bytes: UnsafeCell::new([0; ARENA_BYTES]), next: Cell::new(0) };

pub struct InstanceAllocator;

impl InstanceAllocator {
    fn base() -> usize {
        ARENA.bytes.get() as usize
    }

    /// The offset of `ptr` in the arena, if it points into it.
    fn offset(ptr: *mut u8) -> Option<usize> {
        (ptr as usize).checked_sub(Self::base()).filter(|offset| *offset < ARENA_BYTES)
    }

    /// Bump-allocates `layout`, or `None` when the arena is full.
    fn bump(layout: Layout) -> Option<*mut u8> {
        let base = Self::base();
        let start = (base + ARENA.next.get()).checked_next_multiple_of(layout.align())? - base;
        let end = start.checked_add(layout.size()).filter(|end| *end <= ARENA_BYTES)?;
        ARENA.next.set(end);
        Some(ARENA.bytes.get().cast::<u8>().wrapping_add(start))
    }
}

// SAFETY: arena blocks are disjoint ranges of a static that lives as long
// as the instance, aligned as asked; everything else is the standard
// allocator's, passed back to it unchanged.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for InstanceAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match Self::bump(layout) {
            Some(ptr) => ptr,
            // SAFETY: forwarded with the caller's guarantees.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match Self::bump(layout) {
            // SAFETY: `bump` returned `layout.size()` bytes of the arena.
            Some(ptr) => unsafe {
                ptr.write_bytes(0, layout.size());
                ptr
            },
            // SAFETY: forwarded with the caller's guarantees.
            None => unsafe { System.alloc_zeroed(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match Self::offset(ptr) {
            // The last block is given back; others stay until the call ends.
            Some(offset) => {
                if offset + layout.size() == ARENA.next.get() {
                    ARENA.next.set(offset);
                }
            }
            // SAFETY: `ptr` came from `System` with this layout.
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some(offset) = Self::offset(ptr) else {
            // SAFETY: `ptr` came from `System` with this layout.
            return unsafe { System.realloc(ptr, layout, new_size) };
        };
        // The last block grows or shrinks in place (a growing `Vec`).
        if offset + layout.size() == ARENA.next.get() && offset + new_size <= ARENA_BYTES {
            ARENA.next.set(offset + new_size);
            return ptr;
        }
        if new_size <= layout.size() {
            return ptr;
        }
        // SAFETY: the new layout has the old alignment and a nonzero size.
        let grown = unsafe { self.alloc(Layout::from_size_align_unchecked(new_size, layout.align())) };
        if !grown.is_null() {
            // SAFETY: both blocks hold at least `layout.size()` bytes and
            // are disjoint (the new one was allocated after the old).
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, grown, layout.size());
                self.dealloc(ptr, layout);
            }
        }
        grown
    }
}
