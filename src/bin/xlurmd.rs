//! xlurmd: see `xlurm::daemon`.
use clap::Parser;

fn main() {
    xlurm::daemon::heap::tune();
    // A bad option is a refusal like any other (exit 78, which the unit's
    // RestartPreventExitStatus keeps down), not clap's 2: with
    // Restart=on-failure that would be a restart loop. --help and --version
    // still exit 0.
    let options = match xlurm::daemon::startup::Options::try_parse() {
        Ok(o) => o,
        Err(e) if e.use_stderr() => {
            let _ = e.print();
            std::process::exit(xlurm::daemon::startup::EX_CONFIG);
        }
        Err(e) => e.exit(),
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("xlurmd: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    std::process::exit(rt.block_on(xlurm::daemon::startup::main(options)));
}
