//! Finding and opening vendor libraries, and small FFI helpers shared by the backends.

use super::AccelError;
use crate::core::Vendor;
use libloading::os::unix::{RTLD_LOCAL, RTLD_NOW};
use libloading::Library;
use std::ffi::{c_char, c_uint, CStr};
use std::path::{Path, PathBuf};

/// Where a vendor's library is looked for when no override names it: the fixed
/// paths, in order, then one name handed to the dynamic loader's own search
/// (`LD_LIBRARY_PATH`, `ld.so.cache`, the default directories).
///
/// [`LibrarySearch::default_for`] is the vendor's documented search; it is what
/// [`super::AccelConfig`] holds unless a test replaces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibrarySearch {
    /// Absolute paths tried first, in order; missing ones are skipped.
    pub candidates: Vec<PathBuf>,
    /// The name finally handed to the dynamic loader.
    pub loader_name: String,
}

impl LibrarySearch {
    pub fn default_for(vendor: Vendor) -> LibrarySearch {
        let (candidates, loader_name): (&[&str], &str) = match vendor {
            Vendor::Nv => (&[], "libnvidia-ml.so.1"),
            Vendor::Asc => (
                &[
                    "/usr/local/dcmi/libdcmi.so",
                    "/usr/local/Ascend/driver/lib64/driver/libdcmi.so",
                ],
                "libdcmi.so",
            ),
            Vendor::Mtt => (&[], "libmtml.so"),
            Vendor::Mx => (
                &[
                    "/opt/mxdriver/lib/libmxsml.so",
                    "/opt/maca/lib/libmxsml.so",
                    "/opt/mxn100/lib/libmxsml.so",
                ],
                "libmxsml.so",
            ),
            Vendor::Ppu => (
                &[
                    "/usr/local/PPU_SDK/lib/libhgml.so",
                    "/usr/local/PPU_SDK/targets/x86_64-linux/lib/libhgml.so",
                ],
                "libhgml.so",
            ),
            Vendor::Hcu => (
                &[
                    "/opt/hyhal/lib/librocm_smi64.so",
                    "/opt/dtk/.hyhal/rocm_smi/lib/librocm_smi64.so",
                ],
                "librocm_smi64.so",
            ),
        };
        LibrarySearch {
            candidates: candidates.iter().map(PathBuf::from).collect(),
            loader_name: loader_name.to_string(),
        }
    }
}

/// A loaded vendor library and where it came from.
pub(crate) struct Lib {
    pub vendor: Vendor,
    pub path: PathBuf,
    lib: Library,
}

fn dlopen(path: &Path) -> Result<Library, String> {
    // SAFETY: loading a vendor library runs its initialisers; that is the point, and the
    // library is either the vendor's (found on its documented paths) or one the
    // administrator named explicitly.
    unsafe { libloading::os::unix::Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }
        .map(Library::from)
        .map_err(|e| {
            let text = e.to_string();
            // libloading prefixes dlerror()'s text; keep only the loader's message.
            match std::error::Error::source(&e) {
                Some(source) => source.to_string(),
                None => text,
            }
        })
}

/// Opens `vendor`'s library: the explicit `override_path` alone when set (it must be
/// absolute; no search), else `search`: its fixed paths, then the loader's search.
pub(crate) fn open(
    vendor: Vendor,
    override_path: Option<&Path>,
    search: &LibrarySearch,
) -> Result<Lib, AccelError> {
    if let Some(path) = override_path {
        let var = super::library_override_var(vendor);
        if !path.is_absolute() {
            return Err(AccelError::RelativeOverride {
                var,
                value: path.to_path_buf(),
            });
        }
        return dlopen(path)
            .map(|lib| Lib {
                vendor,
                path: path.to_path_buf(),
                lib,
            })
            .map_err(|reason| AccelError::Load {
                vendor,
                path: path.to_path_buf(),
                origin: format!(" (from {var}; search disabled)"),
                reason,
            });
    }
    let mut failures = Vec::new();
    for path in &search.candidates {
        if !path.exists() {
            continue;
        }
        match dlopen(path) {
            Ok(lib) => {
                return Ok(Lib {
                    vendor,
                    path: path.to_path_buf(),
                    lib,
                })
            }
            Err(reason) => failures.push((path.to_path_buf(), reason)),
        }
    }
    let name = Path::new(&search.loader_name);
    match dlopen(name) {
        Ok(lib) => Ok(Lib {
            vendor,
            path: name.to_path_buf(),
            lib,
        }),
        Err(reason) => {
            if let Some((path, first)) = failures.first() {
                let mut all = first.clone();
                for (p, r) in failures.iter().skip(1) {
                    all.push_str(&format!("; {}: {r}", p.display()));
                }
                all.push_str(&format!("; {}: {reason}", search.loader_name));
                Err(AccelError::Load {
                    vendor,
                    path: path.clone(),
                    origin: String::new(),
                    reason: all,
                })
            } else if reason.contains("No such file") || reason.contains("cannot open shared") {
                let mut tried: Vec<String> = search
                    .candidates
                    .iter()
                    .map(|c| c.display().to_string())
                    .collect();
                tried.push(format!("{} via the dynamic loader", search.loader_name));
                Err(AccelError::NotInstalled {
                    vendor,
                    library: search.loader_name.clone(),
                    tried: tried.join(", "),
                    var: super::library_override_var(vendor),
                })
            } else {
                Err(AccelError::Load {
                    vendor,
                    path: name.to_path_buf(),
                    origin: String::new(),
                    reason,
                })
            }
        }
    }
}

impl Lib {
    /// A required function; its absence names the symbol and the library.
    ///
    /// # Safety
    /// `T` must be the `unsafe extern "C" fn` type matching the symbol's C signature.
    pub unsafe fn req<T: Copy>(&self, symbol: &str) -> Result<T, AccelError> {
        self.opt(symbol).ok_or_else(|| self.missing(symbol, ""))
    }

    /// An optional function.
    ///
    /// # Safety
    /// As for [`Lib::req`].
    pub unsafe fn opt<T: Copy>(&self, symbol: &str) -> Option<T> {
        self.lib.get::<T>(symbol).ok().map(|s| *s)
    }

    pub fn missing(&self, symbol: &str, detail: &str) -> AccelError {
        AccelError::MissingSymbol {
            vendor: self.vendor,
            path: self.path.clone(),
            symbol: symbol.to_string(),
            detail: detail.to_string(),
        }
    }
}

/// A NUL-terminated C buffer as a string (lossy; stops at the first NUL).
pub(crate) fn buf_string(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A C string returned by a library (may be null).
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string that outlives the call.
pub(crate) unsafe fn c_string(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// Calls an NVML-style "fill this array, or tell me how big it must be" function:
/// `call(&mut count, buffer)` returns a status, `insufficient` meaning "retry with at
/// least `count` entries". Returns the filled entries or the failing status.
pub(crate) fn fill_list<T: Copy>(
    zero: T,
    insufficient: u32,
    mut call: impl FnMut(&mut c_uint, *mut T) -> u32,
) -> Result<Vec<T>, u32> {
    let mut capacity = 64usize;
    for _ in 0..8 {
        let mut buf = vec![zero; capacity];
        let mut count = capacity as c_uint;
        let status = call(&mut count, buf.as_mut_ptr());
        if status == 0 {
            buf.truncate((count as usize).min(capacity));
            return Ok(buf);
        }
        if status != insufficient {
            return Err(status);
        }
        capacity = (count as usize + 16).max(capacity * 2);
    }
    Err(insufficient)
}
