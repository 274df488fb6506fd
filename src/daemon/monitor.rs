//! Device monitoring: each backend polled every 2 s off the event loop,
//! health changes applied and logged once, each device's load kept and
//! handed to the job holding it (IdleGPU, and `--idle-gpu-action`).

use super::options::Options;
use super::service::Daemon;
use super::startup::Refusal;
use crate::core::request::parse_duration_secs;
use std::sync::Arc;
use std::time::Duration;

/// `--idle-gpu-below` (percent, 0 to 100) and `--idle-gpu-after` (a
/// duration, or `off`).
pub fn idle_rule(o: &Options) -> Result<crate::core::IdleRule, Refusal> {
    if o.idle_gpu_below > 100 {
        return Err(Refusal(format!(
            "--idle-gpu-below: {} is not a percentage (0 to 100)",
            o.idle_gpu_below
        )));
    }
    let after_secs = match o.idle_gpu_after.trim() {
        "off" | "0" => None,
        t => Some(
            parse_duration_secs(t)
                .map_err(|e| Refusal(format!("--idle-gpu-after: {e} (or give off)")))?,
        ),
    };
    Ok(crate::core::IdleRule {
        below_pct: o.idle_gpu_below as u8,
        after_secs,
        action: match o.idle_gpu_action.as_str() {
            "cancel" => crate::core::IdleAction::Cancel,
            _ => crate::core::IdleAction::Flag,
        },
    })
}

/// Polls one backend forever, applying health changes and logging each change once.
/// Each [`crate::accel::round`] judges the poll against the holds read again after it,
/// under the state lock, so a device given to a job during the poll (even one that
/// ended by then) is never marked busy because that job's process appears. Each
/// device's load is kept (xinfo, metrics) and goes to the job holding it
/// (`core::efficiency`): a job whose accelerator stays idle is flagged IdleGPU.
pub async fn devices(d: Arc<Daemon>, poller: crate::accel::Poller) {
    let procs = crate::accel::ProcCgroups::new("/proc");
    loop {
        let (freed, idle) = crate::accel::round(
            &poller,
            Duration::from_secs(5),
            &d.state,
            |st, dev| match st.sched.machine().slot(dev.vendor, dev.index) {
                Some(slot) => crate::accel::Hold {
                    now: st.sched.holder(slot),
                    last: st.sched.last_holder(slot),
                },
                None => crate::accel::Hold::default(),
            },
            |pid| procs.job_of(pid),
            |st, verdicts, loads| {
                let mut freed = false;
                let mut idle = Vec::new();
                let now = crate::wire::time::now_usec() / 1_000_000;
                for ((dev, verdict), load) in poller.devices().iter().zip(verdicts).zip(loads) {
                    let Some(slot) = st.sched.machine().slot(dev.vendor, dev.index) else {
                        continue;
                    };
                    st.sched.set_load(slot, load);
                    if let Some((id, owner, change)) =
                        st.observe_load(slot, dev.vendor, dev.index, &load, now, d.settings.idle)
                    {
                        idle.push((id, owner, format!("{}:{}", dev.vendor, dev.index), change));
                    }
                    let Some(health) = verdict else { continue };
                    let old = st.sched.machine().devices[slot].health.clone();
                    if old != health {
                        tracing::info!(
                            "{}:{} is now {:?} (was {:?})",
                            dev.vendor,
                            dev.index,
                            health,
                            old
                        );
                        freed |= health == crate::core::Health::Ok;
                        st.sched.set_health(slot, health);
                    }
                }
                (freed, idle)
            },
        )
        .await;
        if freed {
            d.kick.notify_one();
        }
        for (id, owner, dev, change) in idle {
            if let crate::core::IdleChange::First { idle_secs, .. } = change {
                let cancel = d.settings.idle.action == crate::core::IdleAction::Cancel;
                let text = format!(
                    "{dev} of job {id} has been idle (under {}% busy) for {} min: {} (IdleGPU)",
                    d.settings.idle.below_pct,
                    idle_secs / 60,
                    if cancel {
                        "the job is cancelled (xlurmd --idle-gpu-action cancel)"
                    } else {
                        "release it if the job does not need it"
                    }
                );
                tracing::warn!(job = id, "job {id} of {owner}: {text}");
                super::journal::notice(id, "idle-gpu", &text);
                if cancel {
                    if let Err(e) = d.cancel(0, id, true).await {
                        tracing::warn!(job = id, "cancelling idle job {id}: {e}");
                    }
                }
            }
            d.changes.send(id, super::service::Change::Usage);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
