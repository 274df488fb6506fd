//! The client starts lean (issue 21): every `xbatch`, `xqueue`... is a start
//! of the `xlurm` binary, so what the loader and the runtime do before
//! `main` is paid at every command. `build.rs` links it as a plain
//! executable (no PIE relocations to apply at each start) with GCC's
//! unwinder linked in (no `libgcc_s.so.1`, whose constructor runs `cpuid`,
//! a trap in a virtual machine); `src/bin/xlurm.rs` has its own C `main`
//! and its own `pow` (no `libm.so.6` to map and relocate).
//! `cargo bench --bench cli` measures the start itself.

use std::process::{Command, Stdio};

const XLURM: &str = env!("CARGO_BIN_EXE_xlurm");

/// The binary's ELF type (`e_type`): 2 is a plain executable, 3 a shared
/// object (a PIE).
fn elf_type(bytes: &[u8]) -> u16 {
    assert_eq!(&bytes[..4], b"\x7fELF", "{XLURM} is an ELF file");
    u16::from_le_bytes([bytes[16], bytes[17]])
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn the_client_is_not_a_pie_and_needs_no_libgcc_s_or_libm() {
    let bytes = std::fs::read(XLURM).unwrap();
    assert_eq!(elf_type(&bytes), 2, "xlurm is linked -no-pie");
    for needle in [&b"libgcc_s.so.1"[..], b"libm.so.6"] {
        assert!(
            !bytes.windows(needle.len()).any(|w| w == needle),
            "xlurm does not load {}",
            String::from_utf8_lossy(needle)
        );
    }
    // xlurmd keeps PIE (it runs as root).
    let daemon = std::fs::read(env!("CARGO_BIN_EXE_xlurmd")).unwrap();
    assert_eq!(elf_type(&daemon), 3, "xlurmd stays a PIE");
}

/// Its own `main` still gets the arguments, prints, and exits as Rust's would.
#[test]
fn the_client_runs_with_its_own_main() {
    let out = Command::new(XLURM).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("xlurm {}\n", env!("CARGO_PKG_VERSION"))
    );
    // A bad option is clap's usage error (exit 2), under any command name.
    let out = Command::new(XLURM)
        .arg("--no-such-option")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-such-option"));
}

/// With its standard output closed, a file it opens does not take
/// descriptor 1: it opens /dev/null there first, as Rust's runtime does.
/// Seen through `__tee-output`, which copies a command's output to its
/// standard output and to the file it opens: the file gets it once.
#[test]
fn a_closed_standard_output_is_not_reused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out");
    let status = Command::new("sh")
        .args([
            "-c",
            &format!(
                "exec 1>&-; exec {XLURM} __tee-output --open {} -- /bin/echo hi",
                file.display()
            ),
        ])
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hi\n");
}
