//! `xcancel ID...`, `xlurm hold`/`release ID...` and `xlurm update ID`.

use super::client::{connect, explain, SchedulerProxy};
use super::{CancelArgs, IdsArgs, UpdateArgs};
use crate::core::array::{parse_job_ref, JobRef};
use crate::wire::spec::entry;
use anyhow::Result;

pub(super) async fn cancel(a: CancelArgs, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    let mut rc = 0;
    for text in a.ids {
        let r = match parse_job_ref(&text) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("xcancel: {text:?}: {e}");
                rc = 1;
                continue;
            }
        };
        let asked: Vec<(String, zbus::Result<()>)> = match r {
            JobRef::Job(id) => vec![(format!("job {id}"), p.cancel(id).await.map(drop))],
            JobRef::Task(array, i) => vec![(
                format!("task {array}_{i}"),
                p.cancel_task(array, i).await.map(drop),
            )],
            JobRef::Tasks(array, set) => {
                let mut v = Vec::new();
                for i in set.iter() {
                    v.push((
                        format!("task {array}_{i}"),
                        p.cancel_task(array, i).await.map(drop),
                    ));
                }
                v
            }
        };
        for (what, result) in asked {
            match result {
                Ok(()) => println!("{what} cancelled"),
                Err(e) => {
                    eprintln!("xcancel: {what}: {}", explain(e, user));
                    rc = 1;
                }
            }
        }
    }
    Ok(rc)
}

/// The job ID that `text` names: a job ID, or an array's task `123_4`
/// (the task's own job once it started, the array's while it waits).
pub(super) async fn resolve(p: &SchedulerProxy<'_>, text: &str, user: bool) -> Result<u64> {
    match parse_job_ref(text).map_err(|e| anyhow::anyhow!("{text:?}: {e}"))? {
        JobRef::Job(id) => Ok(id),
        JobRef::Task(array, i) => p.find_task(array, i).await.map_err(|e| explain(e, user)),
        JobRef::Tasks(..) => anyhow::bail!("{text:?}: name one job or one task (123 or 123_4)"),
    }
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
