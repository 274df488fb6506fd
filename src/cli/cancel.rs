//! `xcancel ID...`, `xlurm hold`/`release ID...` and `xlurm update ID`.

use super::client::{connect, explain};
use super::{CancelArgs, IdsArgs, UpdateArgs};
use crate::wire::spec::entry;
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

/// `xlurm update ID --time-limit 2h --cpus 4 ...`.
pub(super) async fn update(a: UpdateArgs, user: bool) -> Result<i32> {
    use crate::core::request::{parse_bytes, parse_duration_secs};
    let mut changes = std::collections::HashMap::new();
    let mut add = |(k, v)| {
        changes.insert(k, v);
    };
    if let Some(t) = &a.time_limit {
        let secs = parse_duration_secs(t).map_err(|e| anyhow::anyhow!("--time-limit: {e}"))?;
        add(entry("time_limit", secs));
    }
    if let Some(c) = a.cpus {
        add(entry("cpus", c));
    }
    if let Some(m) = &a.mem {
        add(entry(
            "mem",
            parse_bytes(m).map_err(|e| anyhow::anyhow!("--mem: {e}"))?,
        ));
    }
    if let Some(g) = a.gpus {
        add(entry("gpus", g));
    }
    if let Some(n) = &a.name {
        add(entry("name", n.as_str()));
    }
    if let Some(n) = a.nice {
        add(entry("nice", n));
    }
    if let Some(d) = &a.dependency {
        add(entry("dependency", d.as_str()));
    }
    if changes.is_empty() {
        anyhow::bail!(
            "nothing to change: give --time-limit, --cpus, --mem, --gpus, --name, --nice or --dependency"
        );
    }
    let p = connect(user).await?;
    match p.update(a.id, changes).await {
        Ok(()) => {
            println!("job {} updated", a.id);
            Ok(0)
        }
        Err(e) => {
            eprintln!("xlurm update: job {}: {}", a.id, explain(e, user));
            Ok(1)
        }
    }
}
