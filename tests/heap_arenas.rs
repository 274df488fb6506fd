//! xlurmd's allocator keeps one arena for all its threads
//! (`daemon::heap::tune`): glibc would otherwise give threads that allocate
//! at the same time arenas of their own, each keeping its free memory
//! resident. Without libtest's harness (`harness = false`): the setting
//! counts only if made before any second thread allocates, as xlurmd's
//! `main` does, and libtest starts its threads first.

use std::sync::{Arc, Barrier};

/// The arenas glibc's allocator has now (`<heap nr=...>` in malloc_info).
fn arenas() -> usize {
    let dir = tempfile::tempdir().unwrap();
    let path = std::ffi::CString::new(dir.path().join("info.xml").to_str().unwrap()).unwrap();
    // SAFETY: a FILE opened here, written by glibc and closed here.
    unsafe {
        let f = libc::fopen(path.as_ptr(), c"w".as_ptr());
        assert!(!f.is_null());
        assert_eq!(libc::malloc_info(0, f), 0);
        libc::fclose(f);
    }
    let xml = std::fs::read_to_string(dir.path().join("info.xml")).unwrap();
    xml.matches("<heap nr=").count()
}

fn main() {
    xlurm::daemon::heap::tune();
    threads_allocating_at_once_share_one_arena();
    println!("test threads_allocating_at_once_share_one_arena ... ok");
}

fn threads_allocating_at_once_share_one_arena() {
    let threads = 8;
    let together = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let together = together.clone();
            std::thread::spawn(move || {
                together.wait();
                // Many small blocks at the same moment as every other thread.
                let blocks: Vec<Vec<u8>> =
                    (0..20_000).map(|i| vec![t as u8; 16 + i % 256]).collect();
                together.wait();
                blocks.iter().map(Vec::len).sum::<usize>()
            })
        })
        .collect();
    let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(total > 0);
    assert_eq!(arenas(), xlurm::daemon::heap::ARENAS);
}
