//! The journal read in-process through libsystemd's sd-journal API
//! (sd-journal(3)), loaded at run time with `libloading` like the vendors'
//! libraries: no `journalctl` process per page, which under load (and under
//! emulation in the VM) cost a fork, an exec and a scan of every journal file
//! each time. `journal.rs` falls back to `journalctl` where libsystemd does
//! not load, and tests use that path with a double.
//!
//! An `sd_journal` handle is not thread-safe: each query opens, reads and
//! closes one on the calling (blocking) thread.

use anyhow::{bail, Context, Result};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

/// `SD_JOURNAL_LOCAL_ONLY`: this machine's journal files.
const LOCAL_ONLY: c_int = 1;

type Open = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;
type Close = unsafe extern "C" fn(*mut c_void);
type AddMatch = unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> c_int;
type Plain = unsafe extern "C" fn(*mut c_void) -> c_int;
type SeekUsec = unsafe extern "C" fn(*mut c_void, u64) -> c_int;
type WithCursor = unsafe extern "C" fn(*mut c_void, *const c_char) -> c_int;
type GetData =
    unsafe extern "C" fn(*mut c_void, *const c_char, *mut *const c_void, *mut usize) -> c_int;
type GetCursor = unsafe extern "C" fn(*mut c_void, *mut *mut c_char) -> c_int;
type GetUsec = unsafe extern "C" fn(*mut c_void, *mut u64) -> c_int;
type SetThreshold = unsafe extern "C" fn(*mut c_void, usize) -> c_int;
type FlushMatches = unsafe extern "C" fn(*mut c_void);

struct Lib {
    open: Open,
    close: Close,
    add_match: AddMatch,
    add_disjunction: Plain,
    flush_matches: FlushMatches,
    seek_head: Plain,
    seek_realtime_usec: SeekUsec,
    seek_cursor: WithCursor,
    test_cursor: WithCursor,
    next: Plain,
    previous: Plain,
    get_data: GetData,
    get_cursor: GetCursor,
    get_realtime_usec: GetUsec,
    set_data_threshold: SetThreshold,
    _lib: libloading::Library,
}

fn load() -> Result<Lib> {
    // SAFETY: libsystemd's initialisers have no preconditions.
    let lib = unsafe { libloading::Library::new("libsystemd.so.0") }
        .context("loading libsystemd.so.0")?;
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the symbol's type is the one sd-journal.h declares.
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .context(concat!("libsystemd has no ", $name))?
        };
    }
    Ok(Lib {
        open: sym!("sd_journal_open"),
        close: sym!("sd_journal_close"),
        add_match: sym!("sd_journal_add_match"),
        add_disjunction: sym!("sd_journal_add_disjunction"),
        flush_matches: sym!("sd_journal_flush_matches"),
        seek_head: sym!("sd_journal_seek_head"),
        seek_realtime_usec: sym!("sd_journal_seek_realtime_usec"),
        seek_cursor: sym!("sd_journal_seek_cursor"),
        test_cursor: sym!("sd_journal_test_cursor"),
        next: sym!("sd_journal_next"),
        previous: sym!("sd_journal_previous"),
        get_data: sym!("sd_journal_get_data"),
        get_cursor: sym!("sd_journal_get_cursor"),
        get_realtime_usec: sym!("sd_journal_get_realtime_usec"),
        set_data_threshold: sym!("sd_journal_set_data_threshold"),
        _lib: lib,
    })
}

/// libsystemd, once loaded; `None` where it is missing.
fn lib() -> Option<&'static Lib> {
    static LIB: OnceLock<Option<Lib>> = OnceLock::new();
    LIB.get_or_init(|| match load() {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::info!("reading the journal with journalctl: {e:#}");
            None
        }
    })
    .as_ref()
}

/// Whether the journal can be read in-process here.
pub fn available() -> bool {
    lib().is_some()
}

fn check(what: &str, r: c_int) -> Result<c_int> {
    if r < 0 {
        bail!("{what}: {}", std::io::Error::from_raw_os_error(-r));
    }
    Ok(r)
}

/// An open journal (all local files: the system's and every user's).
pub struct Journal {
    lib: &'static Lib,
    j: *mut c_void,
}

impl Drop for Journal {
    fn drop(&mut self) {
        // SAFETY: `j` came from sd_journal_open and is closed once.
        unsafe { (self.lib.close)(self.j) }
    }
}

impl Journal {
    pub fn open() -> Result<Journal> {
        let lib = lib().context("libsystemd is not available")?;
        let mut j = std::ptr::null_mut();
        // SAFETY: `j` is a valid out pointer.
        check("sd_journal_open", unsafe { (lib.open)(&mut j, LOCAL_ONLY) })?;
        let journal = Journal { lib, j };
        // Whole fields, however long (the default cuts them at 64 KiB).
        // SAFETY: `j` is open.
        check("sd_journal_set_data_threshold", unsafe {
            (lib.set_data_threshold)(j, 0)
        })?;
        Ok(journal)
    }

    /// Adds a `FIELD=value` match; matches on different fields are ANDed,
    /// on the same field ORed.
    pub fn add_match(&mut self, m: &str) -> Result<()> {
        // SAFETY: `m` is valid for its length; sd-journal copies it.
        check("sd_journal_add_match", unsafe {
            (self.lib.add_match)(self.j, m.as_ptr().cast(), m.len())
        })?;
        Ok(())
    }

    /// ORs the matches added so far with those added next.
    pub fn or(&mut self) -> Result<()> {
        // SAFETY: `j` is open.
        check("sd_journal_add_disjunction", unsafe {
            (self.lib.add_disjunction)(self.j)
        })?;
        Ok(())
    }

    /// Drops every match: all entries are seen again.
    pub fn flush_matches(&mut self) {
        // SAFETY: `j` is open.
        unsafe { (self.lib.flush_matches)(self.j) }
    }

    pub fn seek_head(&mut self) -> Result<()> {
        // SAFETY: `j` is open.
        check("sd_journal_seek_head", unsafe {
            (self.lib.seek_head)(self.j)
        })?;
        Ok(())
    }

    pub fn seek_realtime(&mut self, usec: u64) -> Result<()> {
        // SAFETY: `j` is open.
        check("sd_journal_seek_realtime_usec", unsafe {
            (self.lib.seek_realtime_usec)(self.j, usec)
        })?;
        Ok(())
    }

    /// Positions just after the entry at `cursor` (as `--after-cursor`).
    pub fn seek_after(&mut self, cursor: &str) -> Result<()> {
        let c = CString::new(cursor).context("a cursor with a NUL byte")?;
        // SAFETY: `j` is open, `c` a valid C string.
        check("sd_journal_seek_cursor", unsafe {
            (self.lib.seek_cursor)(self.j, c.as_ptr())
        })?;
        // The first step() lands on the cursor's own entry, if it still exists.
        if self.step()? {
            // SAFETY: as above.
            let at = check("sd_journal_test_cursor", unsafe {
                (self.lib.test_cursor)(self.j, c.as_ptr())
            })?;
            if at == 0 {
                // Not the cursor's entry (it was rotated away): step back onto
                // it again by reseeking, so the caller's step() returns it.
                // SAFETY: as above.
                check("sd_journal_seek_cursor", unsafe {
                    (self.lib.seek_cursor)(self.j, c.as_ptr())
                })?;
            }
        }
        Ok(())
    }

    /// Positions on the entry at `cursor`; false if it no longer exists.
    pub fn seek_at(&mut self, cursor: &str) -> Result<bool> {
        let c = CString::new(cursor).context("a cursor with a NUL byte")?;
        // SAFETY: `j` is open, `c` a valid C string.
        check("sd_journal_seek_cursor", unsafe {
            (self.lib.seek_cursor)(self.j, c.as_ptr())
        })?;
        if !self.step()? {
            return Ok(false);
        }
        // SAFETY: as above.
        let at = check("sd_journal_test_cursor", unsafe {
            (self.lib.test_cursor)(self.j, c.as_ptr())
        })?;
        Ok(at > 0)
    }

    /// Moves to the previous matching entry; false at the start.
    pub fn back(&mut self) -> Result<bool> {
        // SAFETY: `j` is open.
        Ok(check("sd_journal_previous", unsafe {
            (self.lib.previous)(self.j)
        })? > 0)
    }

    /// Moves to the next matching entry; false at the end.
    pub fn step(&mut self) -> Result<bool> {
        // SAFETY: `j` is open.
        Ok(check("sd_journal_next", unsafe { (self.lib.next)(self.j) })? > 0)
    }

    /// The value of `field` in the current entry, if it has one.
    pub fn data(&mut self, field: &str) -> Result<Option<Vec<u8>>> {
        let f = CString::new(field).context("a field name with a NUL byte")?;
        let mut ptr: *const c_void = std::ptr::null();
        let mut len = 0usize;
        // SAFETY: `j` is open and positioned; out pointers are valid.
        let r = unsafe { (self.lib.get_data)(self.j, f.as_ptr(), &mut ptr, &mut len) };
        if r == -libc_enoent() {
            return Ok(None);
        }
        check("sd_journal_get_data", r)?;
        // SAFETY: sd-journal returns `len` readable bytes, valid until the next call.
        let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
        let value = bytes
            .strip_prefix(field.as_bytes())
            .and_then(|b| b.strip_prefix(b"="))
            .unwrap_or(bytes);
        Ok(Some(value.to_vec()))
    }

    /// The cursor of the current entry.
    pub fn cursor(&mut self) -> Result<String> {
        let mut c: *mut c_char = std::ptr::null_mut();
        // SAFETY: `j` is open and positioned; `c` is a valid out pointer.
        check("sd_journal_get_cursor", unsafe {
            (self.lib.get_cursor)(self.j, &mut c)
        })?;
        // SAFETY: sd-journal returned a malloc'd C string, ours to free.
        let s = unsafe { CStr::from_ptr(c) }.to_string_lossy().into_owned();
        // SAFETY: as above; freed once.
        unsafe { nix::libc::free(c.cast()) };
        Ok(s)
    }

    /// When the current entry was received (µs since the epoch).
    pub fn realtime(&mut self) -> Result<u64> {
        let mut t = 0u64;
        // SAFETY: `j` is open and positioned; `t` is a valid out pointer.
        check("sd_journal_get_realtime_usec", unsafe {
            (self.lib.get_realtime_usec)(self.j, &mut t)
        })?;
        Ok(t)
    }
}

/// The sequence ID and number of the entry at `cursor` (`s=` and `i=`,
/// hexadecimal): journald numbers every entry it stores, in every file,
/// one after the other.
pub fn cursor_seqnum(cursor: &str) -> Option<(&str, u64)> {
    let field = |k: &str| {
        cursor
            .split(';')
            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
    };
    let seq = u64::from_str_radix(field("i")?, 16).ok()?;
    Some((field("s")?, seq))
}

fn libc_enoent() -> c_int {
    nix::libc::ENOENT
}

#[cfg(test)]
mod tests {
    use super::cursor_seqnum;

    #[test]
    fn a_cursor_tells_its_entrys_sequence_number() {
        let c = "s=6d3ac0c1d3b04b7d9b2b8f1c2e1d4a5b;i=1f4;b=0c9d;m=2a;t=5f1;x=77";
        assert_eq!(
            cursor_seqnum(c),
            Some(("6d3ac0c1d3b04b7d9b2b8f1c2e1d4a5b", 0x1f4))
        );
        assert_eq!(cursor_seqnum("s=ab;b=cd"), None, "no i=");
        assert_eq!(cursor_seqnum("s=ab;i=zz"), None, "not hexadecimal");
        assert_eq!(cursor_seqnum("is=ab;i=2;ss=9"), None, "no s=");
    }
}
