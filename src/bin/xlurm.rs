//! xlurm, xrun, xbatch, xqueue, xcancel, xinfo: see `xlurm::cli`.
//!
//! Every `xbatch` or `xqueue` is a start of this program, so it starts lean
//! (issue 21): its own C `main` skips what Rust's runtime does first (the
//! main thread's stack-overflow guard reads `/proc/self/maps`), and
//! `build.rs` links it without PIE relocations or `libgcc_s`. What of the
//! runtime's start it needs, it does itself ([`std_fds_open`]); `std::env::args`
//! still works, as glibc hands the arguments to the standard library.
#![no_main]

/// Opens `/dev/null` on any of 0, 1 and 2 that is closed, as Rust's own
/// runtime does, so that no file this program opens (an `--output` file it
/// passes to xlurmd) becomes its standard output.
fn std_fds_open() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: poll reads and writes only the three entries given.
    if unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } < 0 {
        return;
    }
    for p in fds {
        if p.revents & libc::POLLNVAL != 0 {
            // SAFETY: open with a static C string; the lowest free descriptor is the closed one.
            unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        }
    }
}

/// The one libm function the client references (tokio's multi-thread
/// scheduler, linked but never run here, times its polls with it), from the
/// `libm` crate: without a reference left, the client does not load
/// `libm.so.6`, whose mapping, relocations and IFUNC resolvers cost every
/// start about 0.05 ms (issue 21; `tests/cli_start.rs` checks it stays out).
#[no_mangle]
pub extern "C" fn pow(x: f64, y: f64) -> f64 {
    libm::pow(x, y)
}

#[no_mangle]
pub extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    // A panic prints its message and ends the process with 101, as under
    // Rust's own `main`, instead of unwinding out of a C function.
    std::panic::catch_unwind(run).unwrap_or(101)
}

fn run() -> libc::c_int {
    std_fds_open();
    // Die quietly on a closed pipe (`xqueue | head`), as other Unix tools do.
    // SAFETY: setting a signal's disposition to the default before any threads start.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let raw: Vec<String> = std::env::args().collect();
    if raw.get(1).map(String::as_str) == Some("__tee-output") {
        let mut rest = &raw[2..];
        let mut open = None;
        if rest.first().map(String::as_str) == Some("--open") && rest.len() > 1 {
            open = Some(rest[1].as_str());
            rest = &rest[2..];
        }
        let cmd = rest.strip_prefix(&["--".to_string()]).unwrap_or(rest);
        std::process::exit(xlurm::cli::tee::main(open, cmd));
    }
    if raw.get(1).map(String::as_str) == Some("__pty") {
        let rest = &raw[2..];
        let cmd = rest.strip_prefix(&["--".to_string()]).unwrap_or(rest);
        std::process::exit(xlurm::cli::pty_exec::main(cmd));
    }
    let args = xlurm::cli::normalize_args(raw);
    let cli = xlurm::cli::parse(args).unwrap_or_else(|e| e.exit());
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("xlurm: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    match rt.block_on(xlurm::cli::commands::main(cli)) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // Not eprintln!, which panics on a closed stderr (xrun ignores
            // SIGPIPE: `xrun ... 2>&1 | head`).
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "xlurm: {e:#}");
            std::process::exit(1);
        }
    }
}
