//! `xcancel ID...`, and `xlurm hold`/`release ID...`.

use super::client::{connect, explain};
use super::{CancelArgs, IdsArgs};
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

/// `xlurm hold ID...` (`release`: `xlurm release ID...`).
pub(super) async fn hold(a: IdsArgs, release: bool, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    let (verb, done, already) = if release {
        ("release", "released", "was not held")
    } else {
        ("hold", "held", "was held already")
    };
    let mut rc = 0;
    for id in a.ids {
        let r = if release {
            p.release(id).await
        } else {
            p.hold(id).await
        };
        match r {
            Ok(true) => println!("job {id} {done}"),
            Ok(false) => println!("job {id} {already}"),
            Err(e) => {
                eprintln!("xlurm {verb}: job {id}: {}", explain(e, user));
                rc = 1;
            }
        }
    }
    Ok(rc)
}
