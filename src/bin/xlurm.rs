//! xlurm, xrun, xbatch, xqueue, xcancel, xinfo: see `xlurm::cli`.

fn main() {
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
