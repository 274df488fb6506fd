//! The CLI's verbs, one file each; `main` runs the one asked for.

use super::admin::{gate, limits, set_disabled, set_max_running, set_policy, share};
use super::batch::batch;
use super::cancel::{cancel, hold, update};
use super::info::info;
use super::log::log;
use super::queue::queue;
use super::run::run;
use super::{Cli, Command, QueueArgs};
use anyhow::Result;

pub async fn main(cli: Cli) -> Result<i32> {
    let user = cli.bus.user;
    match cli.command {
        Command::Run(a) if a.pty => super::pty::run_pty(a, user).await,
        Command::Run(a) => run(a, user).await,
        Command::Batch(a) => batch(a, user).await,
        Command::Queue(a) => queue(a, user).await,
        Command::Cancel(a) => cancel(a, user).await,
        Command::Info(a) => info(a, user).await,
        Command::Log(a) => log(a, user).await,
        Command::Show(a) => {
            let q = QueueArgs {
                id: Some(a.id),
                all: false,
                mine: false,
                limit: None,
                json: a.json,
                log: false,
                follow: false,
                start: false,
                cancel: Vec::new(),
            };
            queue(q, user).await
        }
        Command::Policy { policy } => set_policy(&policy, user).await,
        Command::MaxRunning { max_running } => set_max_running(max_running, user).await,
        Command::Exclude { devices } => set_disabled(&devices, true, user).await,
        Command::Include { devices } => set_disabled(&devices, false, user).await,
        Command::Share { json } => share(json, user).await,
        Command::Hold(a) => hold(a, false, user).await,
        Command::Release(a) => hold(a, true, user).await,
        Command::Update(a) => update(a, user).await,
        Command::Limits { set } => limits(set.as_deref(), user).await,
        Command::Gate { setting } => gate(setting.as_deref(), user).await,
        Command::Usage(a) => super::usage::usage(&a, user).await,
        Command::Top { mine } => super::top::top(mine, user).await,
        Command::Metrics {
            openmetrics,
            output,
        } => super::metrics::metrics(openmetrics, output.as_deref(), user).await,
    }
}
