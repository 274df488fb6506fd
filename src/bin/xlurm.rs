//! xlurm, xrun, xbatch, xqueue, xcancel, xinfo: see `xlurm::cli`.
use clap::Parser;

fn main() {
    let args = xlurm::cli::normalize_args(std::env::args().collect());
    let cli = xlurm::cli::Cli::parse_from(args);
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
            eprintln!("xlurm: {e:#}");
            std::process::exit(1);
        }
    }
}
