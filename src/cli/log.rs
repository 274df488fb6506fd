//! `xlurm log [-f] ID`: a job's output, followed to its end with `-f`.

use super::client::connect;
use super::follow::LogStream;
use super::LogArgs;
use anyhow::Result;
use std::time::Duration;

pub(super) async fn log(a: LogArgs, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    let id = super::cancel::resolve(&p, &a.id, user).await?;
    let mut stream = LogStream::default();
    loop {
        let Some((n, state)) = stream.pump(&p, id, user).await? else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let done = !matches!(state.as_str(), "PENDING" | "RUNNING");
        if done {
            stream.drain(&p, id, user).await?;
            return Ok(0);
        }
        if !a.follow && n == 0 {
            return Ok(0);
        }
        if a.follow && n == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
