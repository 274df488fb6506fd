//! xlurmd: see `xlurm::daemon`.
use clap::Parser;

fn main() {
    let options = xlurm::daemon::run::Options::parse();
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
    std::process::exit(rt.block_on(xlurm::daemon::run::main(options)));
}
