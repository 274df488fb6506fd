//! What the bus hears of each job's changes: one task takes the daemon's
//! change queue ([`ChangeQueue`](crate::daemon::service::ChangeQueue)) in order and
//! sends each change (the job's object, `JobStateChanged`), then counts it
//! sent, which a stopping daemon waits for.

use crate::core::JobId;
use crate::daemon::bus::api::{SchedulerApi, PATH};
use crate::daemon::bus::audience::Audience;
use crate::daemon::service::{Change, Daemon};
use std::sync::Arc;

/// Starts the task that sends `changes` as they come, until the queue closes.
pub fn spawn(
    conn: zbus::Connection,
    d: Arc<Daemon>,
    audience: Arc<Audience>,
    publish: bool,
    mut changes: tokio::sync::mpsc::UnboundedReceiver<(JobId, Change)>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some((id, change)) = changes.recv().await {
            announce(&conn, &d, &audience, publish, id, change).await;
            d.changes.sent();
        }
    })
}

/// Sends job `id`'s `change` on the bus: its object's properties and
/// `JobStateChanged` (to everyone when the list is public, else to those
/// who may see the job).
async fn announce(
    conn: &zbus::Connection,
    d: &Arc<Daemon>,
    audience: &Audience,
    publish: bool,
    id: JobId,
    change: Change,
) {
    let state = match change {
        Change::State(state) => state,
        Change::Invocation => {
            if publish {
                crate::daemon::bus::job_object::invocation_known(conn, d, id).await;
            }
            return;
        }
        Change::Usage => {
            if publish {
                crate::daemon::bus::job_object::usage_changed(conn, d, id).await;
            }
            return;
        }
    };
    crate::daemon::bus::job_object::on_change(conn, d, id, state, publish).await;
    let Ok(em) = zbus::object_server::SignalEmitter::new(conn, PATH) else {
        return;
    };
    if publish {
        let _ = SchedulerApi::job_state_changed(&em, id, state.name()).await;
        return;
    }
    for name in audience.listeners(id, state.is_final()) {
        let em = em.clone().set_destination(name.into());
        let _ = SchedulerApi::job_state_changed(&em, id, state.name()).await;
    }
}
