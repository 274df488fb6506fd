//! `xcancel ID...`.

use super::client::{connect, explain};
use super::CancelArgs;
use anyhow::Result;

pub(super) async fn cancel(a: CancelArgs, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    let mut rc = 0;
    for id in a.ids {
        match p.cancel(id).await {
            Ok(_) => println!("job {id} cancelled"),
            Err(e) => {
                eprintln!("xcancel: job {id}: {}", explain(e, user));
                rc = 1;
            }
        }
    }
    Ok(rc)
}
