//! xlurmd's heap: how glibc's allocator is set up for a daemon whose queue
//! can grow to 100,000 jobs and shrink again, and how freed memory goes back
//! to the system.
//!
//! glibc raises its mmap threshold to the size of any large block freed (a
//! listing of 100,000 jobs, a `SubmitMany` message: tens of MiB) and its trim
//! threshold to twice that. From then on the top of each thread's arena is
//! given back only past that size, and `malloc_trim` never trims the top of
//! any arena but the main one. A daemon that once held 100,000 pending jobs
//! kept 20-45 MiB of free arena tops resident (`cargo bench --bench daemon`,
//! "RSS with finished jobs retained"). Fixed thresholds keep both where they
//! start: blocks of 1 MiB and more are mapped on their own, and an arena's
//! free top over 2 MiB goes back at once.
//!
//! glibc also gives a thread that allocates while another holds an arena an
//! arena of its own (up to eight per core), and each keeps its own free
//! memory resident. xlurmd's worker threads, and the threads that look up
//! accounts and read the journal, made five or more, about 6 MiB between
//! them with 10,000 jobs queued (`cargo bench --bench cli`: 26.3 MiB
//! resident against 20.6 MiB with one arena, 23.1 MiB with two). One arena
//! is enough: the daemon's work is serialized by its state lock anyway, and
//! each thread's small-block cache (tcache) takes most allocations without
//! the arena's lock.

/// Blocks this large or larger are mapped on their own, and unmapped when freed.
pub const MMAP_THRESHOLD: usize = 1 << 20;
/// An arena's free top over this goes back to the system when memory is freed.
pub const TRIM_THRESHOLD: usize = 2 << 20;
/// Allocator arenas, for all threads.
pub const ARENAS: usize = 1;

/// Sets the allocator's thresholds; call first thing in `main`.
pub fn tune() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes the allocator's parameters (under its own
    // lock).
    unsafe {
        nix::libc::mallopt(nix::libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as i32);
        nix::libc::mallopt(nix::libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD as i32);
        nix::libc::mallopt(nix::libc::M_ARENA_MAX, ARENAS as i32);
    }
}

/// Hands free heap pages back to the system (glibc keeps them otherwise).
pub fn give_back() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free heap pages to the kernel.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}
