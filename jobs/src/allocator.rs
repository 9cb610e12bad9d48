//! The process allocator of `weir` and of the benchmarks that measure it: jemalloc, with
//! transparent huge pages for large blocks only.
//!
//! Window state is hash tables read at random keys. One table of tens of MB (a live window
//! holding ~100 k keys) misses the TLB on nearly every record with 4 KiB pages, and 2 MiB
//! pages make those updates ~1.3–1.5× faster (BENCHMARKS.md, "Window updates per window
//! kind": `one_window_*`). Huge pages for *every* block (jemalloc's `thp:always`, used before)
//! also back each thread arena's partly used 2 MiB regions, which doubled a features run's
//! resident memory (run F: 34 → 17 MB with 1 worker, 61 → 37 MB with 2) for no speed there
//! (BENCHMARKS.md, F, fix 26). So jemalloc runs with its default (`.cargo/config.toml`) and
//! this wrapper asks the kernel for huge pages (`madvise(MADV_HUGEPAGE)`) on the whole 2 MiB
//! pages inside each block of at least [`HUGE_BLOCK_MIN`]: big tables and buffers get them,
//! small objects do not. A kernel built without THP refuses the advice and one whose THP mode
//! is `never` ignores it; the block is then used with small pages.

use std::alloc::{GlobalAlloc, Layout};

use tikv_jemallocator::Jemalloc;

/// The size of a transparent huge page on x86-64 and of the regions advised.
const HUGE_PAGE: usize = 2 << 20;

/// Blocks of at least this many bytes are advised into huge pages.
pub const HUGE_BLOCK_MIN: usize = HUGE_PAGE;

/// jemalloc, advising blocks of [`HUGE_BLOCK_MIN`] or more into transparent huge pages.
pub struct JobAllocator;

/// The whole huge pages inside `[start, start + len)`: (first byte, length), if any.
fn huge_pages_within(start: usize, len: usize) -> Option<(usize, usize)> {
    let first = start.checked_next_multiple_of(HUGE_PAGE)?;
    let end = (start + len) / HUGE_PAGE * HUGE_PAGE;
    (end > first).then(|| (first, end - first))
}

/// Asks for huge pages under the block at `ptr` of `len` bytes. Advice only: a refusal
/// (THP off in this kernel) leaves the block as it was.
fn advise_huge(ptr: *mut u8, len: usize) {
    if ptr.is_null() || len < HUGE_BLOCK_MIN {
        return;
    }
    if let Some((first, len)) = huge_pages_within(ptr as usize, len) {
        // SAFETY: `[first, first + len)` lies inside a block the allocator just handed out
        // (whole pages of it, page-aligned); MADV_HUGEPAGE changes only how the kernel backs
        // those pages, never their contents or their mapping.
        let _refused = unsafe {
            rustix::mm::madvise(
                ptr.with_addr(first).cast(),
                len,
                rustix::mm::Advice::LinuxHugepage,
            )
        };
    }
}

// SAFETY: every method forwards to jemalloc with the caller's arguments unchanged and returns
// its result; the advice on large blocks does not touch their memory.
unsafe impl GlobalAlloc for JobAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `GlobalAlloc::alloc`, passed on.
        let ptr = unsafe { Jemalloc.alloc(layout) };
        advise_huge(ptr, layout.size());
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { Jemalloc.alloc_zeroed(layout) };
        advise_huge(ptr, layout.size());
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `GlobalAlloc::dealloc`, passed on.
        unsafe { Jemalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `GlobalAlloc::realloc`, passed on.
        let new = unsafe { Jemalloc.realloc(ptr, layout, new_size) };
        if new_size > layout.size() {
            advise_huge(new, new_size);
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_huge_pages_inside_the_block_are_advised() {
        let mib = 1 << 20;
        assert_eq!(huge_pages_within(0, HUGE_PAGE), Some((0, HUGE_PAGE)));
        assert_eq!(huge_pages_within(mib, HUGE_PAGE), None);
        assert_eq!(
            huge_pages_within(mib, 3 * mib),
            Some((HUGE_PAGE, HUGE_PAGE))
        );
        assert_eq!(
            huge_pages_within(HUGE_PAGE + 4096, 3 * HUGE_PAGE),
            Some((2 * HUGE_PAGE, 2 * HUGE_PAGE))
        );
    }

    /// The smaps `VmFlags` of the mapping that holds `addr` in this process.
    fn vm_flags_at(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
        let mut inside = false;
        for line in smaps.lines() {
            let range = line
                .split_whitespace()
                .next()
                .and_then(|r| r.split_once('-'));
            if let Some((Ok(lo), Ok(hi))) =
                range.map(|(lo, hi)| (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16)))
            {
                inside = (lo..hi).contains(&addr);
            } else if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return flags.to_string();
                }
            }
        }
        panic!("no mapping holds {addr:#x}")
    }

    #[test]
    fn a_large_block_is_advised_into_huge_pages_and_a_small_one_is_not() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            eprintln!("skipped: this kernel has no transparent huge pages");
            return;
        }
        let large = Layout::from_size_align(4 * HUGE_BLOCK_MIN, 8).expect("layout");
        let small = Layout::from_size_align(4096, 8).expect("layout");
        // SAFETY: non-zero-sized layouts, freed with the layouts they were allocated with.
        unsafe {
            let large_ptr = JobAllocator.alloc(large);
            let small_ptr = JobAllocator.alloc(small);
            let (first, _) = huge_pages_within(large_ptr as usize, large.size()).expect("pages");
            let large_flags = vm_flags_at(first);
            let small_flags = vm_flags_at(small_ptr as usize);
            JobAllocator.dealloc(large_ptr, large);
            JobAllocator.dealloc(small_ptr, small);
            assert!(large_flags.contains(" hg"), "large block: {large_flags}");
            assert!(!small_flags.contains(" hg"), "small block: {small_flags}");
        }
    }

    #[test]
    fn blocks_on_both_sides_of_the_threshold_hold_what_is_written() {
        for size in [
            64,
            HUGE_BLOCK_MIN - 8,
            HUGE_BLOCK_MIN,
            3 * HUGE_BLOCK_MIN + 100,
        ] {
            let layout = Layout::from_size_align(size, 8).expect("layout");
            // SAFETY: a non-zero-sized layout; the block is written within its size, read
            // back, grown with realloc and freed with its current layout.
            unsafe {
                let ptr = JobAllocator.alloc_zeroed(layout);
                assert!(!ptr.is_null());
                assert_eq!(*ptr.add(size - 1), 0);
                ptr.add(size - 1).write(7);
                let grown = JobAllocator.realloc(ptr, layout, 2 * size);
                assert_eq!(*grown.add(size - 1), 7);
                let grown_layout = Layout::from_size_align(2 * size, 8).expect("layout");
                JobAllocator.dealloc(grown, grown_layout);
            }
        }
    }
}
