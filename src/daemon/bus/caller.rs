//! Who calls the Scheduler1 API, and what they may do: the caller as the
//! bus names it, polkit's answer, and the `--output` descriptor a
//! submission carries (the methods themselves are in `api.rs`).

use crate::daemon::bus::api::{Dict, SchedulerApi, ACTION_MANAGE};
use crate::daemon::bus::listing;
use crate::daemon::service::owns;
use crate::daemon::spec;
use crate::wire::error::{ApiError, ApiResult};
use std::collections::HashMap;
use zbus::message::Header;
use zbus::{Connection, Variant};

/// The uid of the connection that sent `hdr`'s call, as the bus tells it
/// (every object's methods ask it here).
pub async fn caller_uid(
    callers: &crate::daemon::bus::callers::Callers,
    conn: &Connection,
    hdr: &Header<'_>,
) -> ApiResult<u32> {
    let sender = hdr
        .sender()
        .ok_or_else(|| ApiError::PermissionDenied("the call has no sender".into()))?;
    callers
        .uid(conn, sender)
        .await
        .map_err(|e| ApiError::PermissionDenied(format!("cannot identify the caller: {e}")))
}

/// Takes `pty_fd` (h, `xrun --pty`'s terminal) out of `spec`, checked to be
/// a pseudo-terminal peer that `uid` owns.
pub(super) fn take_pty(
    spec: &mut Dict,
    uid: u32,
) -> Result<Option<std::os::fd::OwnedFd>, ApiError> {
    let Some(fd) = spec.remove(crate::wire::pty::SPEC_KEY) else {
        return Ok(None);
    };
    let owned = match &*fd {
        Variant::Fd(f) => f.try_clone().map_err(|e| {
            ApiError::InvalidArgs(format!("cannot take the terminal descriptor: {e}"))
        })?,
        other => {
            return Err(ApiError::InvalidArgs(format!(
                "spec key \"pty_fd\" must have type h, not {}",
                other.value_signature()
            )))
        }
    };
    let owned = std::os::fd::OwnedFd::try_from(owned)
        .map_err(|e| ApiError::InvalidArgs(format!("cannot take the terminal descriptor: {e}")))?;
    crate::daemon::pty::check(&owned, uid).map_err(ApiError::InvalidArgs)?;
    Ok(Some(owned))
}

/// Takes `output_fd` (h) and `output_path` (s) out of a Submit spec.
pub(super) fn take_output(
    spec: &mut Dict,
) -> Result<Option<(std::os::fd::OwnedFd, String)>, ApiError> {
    let fd = spec.remove("output_fd");
    let path = spec.remove("output_path");
    let Some(fd) = fd else {
        return match path {
            Some(_) => Err(ApiError::InvalidArgs(
                "spec key \"output_path\" needs \"output_fd\" (h)".into(),
            )),
            None => Ok(None),
        };
    };
    let owned = match &*fd {
        Variant::Fd(f) => f.try_clone().map_err(|e| {
            ApiError::InvalidArgs(format!("cannot take the output descriptor: {e}"))
        })?,
        other => {
            return Err(ApiError::InvalidArgs(format!(
                "spec key \"output_fd\" must have type h, not {}",
                other.value_signature()
            )))
        }
    };
    let path = match path {
        None => String::new(),
        Some(p) => String::try_from(p).map_err(|_| {
            ApiError::InvalidArgs("spec key \"output_path\" must have type s".into())
        })?,
    };
    if path.len() > spec::MAX_PATH_BYTES {
        return Err(ApiError::InvalidArgs(format!(
            "spec key \"output_path\" is longer than {} bytes",
            spec::MAX_PATH_BYTES
        )));
    }
    let owned = std::os::fd::OwnedFd::try_from(owned)
        .map_err(|e| ApiError::InvalidArgs(format!("cannot take the output descriptor: {e}")))?;
    Ok(Some((owned, path)))
}

impl SchedulerApi {
    pub(super) async fn caller(&self, conn: &Connection, hdr: &Header<'_>) -> ApiResult<u32> {
        match self.fixed_uid {
            Some(uid) => Ok(uid),
            None => caller_uid(&self.daemon.callers, conn, hdr).await,
        }
    }

    /// Whether the caller acts as an admin (polkit) on job `id`: asked only
    /// where the answer matters, someone else's job (to act on it, `act`, or
    /// to see it on a private queue). On a private queue polkit is asked for
    /// a job that does not exist too, so that no prompt or delay tells
    /// someone else's job from none.
    pub(super) async fn admin_for(
        &self,
        conn: &Connection,
        hdr: &Header<'_>,
        uid: u32,
        id: u64,
        act: bool,
    ) -> ApiResult<bool> {
        let public = self.daemon.settings.list_is_public;
        let owner = self.daemon.state.lock().await.find(id).map(|j| j.uid());
        let ask = match owner {
            Some(o) => !owns(uid, o) && (act || !public),
            None => !public && uid != 0,
        };
        if ask {
            self.authorized(conn, hdr, uid).await
        } else {
            Ok(false)
        }
    }

    /// The caller, who may see job `id` in full, hears of its changes.
    pub(super) fn listen(&self, hdr: &Header<'_>, id: u64) {
        if let Some(sender) = hdr.sender() {
            self.audience.listen(id, sender);
        }
    }

    /// The caller and the listing filter it asked for, if it may.
    pub(super) async fn list_filter(
        &self,
        conn: &Connection,
        hdr: &Header<'_>,
        filter: &Dict,
    ) -> ApiResult<(u32, listing::Filter)> {
        let uid = self.caller(conn, hdr).await?;
        let mut f = listing::Filter::parse(filter)?;
        // On a private queue everyone but admins sees their own jobs only, as
        // Slurm's PrivateData=jobs does: the listing narrows, it does not fail.
        if f.all_users
            && !self.daemon.settings.list_is_public
            && uid != 0
            && !self.authorized(conn, hdr, uid).await?
        {
            f.all_users = false;
        }
        Ok((uid, f))
    }

    /// Whether the caller holds the polkit authorization for admin actions.
    pub(super) async fn authorized(
        &self,
        conn: &Connection,
        hdr: &Header<'_>,
        uid: u32,
    ) -> ApiResult<bool> {
        if uid == 0 {
            return Ok(true);
        }
        if self.fixed_uid.is_some() {
            return Ok(false);
        }
        use zbus_polkit::policykit1::{AuthorityProxy, CheckAuthorizationFlags, Subject};
        let subject = Subject::new_for_message_header(hdr).map_err(|e| {
            ApiError::PermissionDenied(format!("cannot identify the caller for polkit: {e}"))
        })?;
        let sender = hdr.sender().map(|s| s.to_string()).unwrap_or_default();
        let interactive = hdr
            .primary()
            .flags()
            .contains(zbus::message::Flags::ALLOW_INTERACTIVE_AUTH);
        let flags = if interactive {
            CheckAuthorizationFlags::ALLOW_USER_INTERACTION
        } else {
            CheckAuthorizationFlags::empty()
        };
        // Kept a second per bus name, in the user's turn, with a deadline.
        let ask = || async {
            let authority = AuthorityProxy::new(conn)
                .await
                .map_err(|e| ApiError::Failed(format!("polkit is not reachable: {e}")))?;
            let r = authority
                .check_authorization(&subject, ACTION_MANAGE, &HashMap::new(), flags, "")
                .await
                .map_err(|e| ApiError::Failed(format!("polkit check failed: {e}")))?;
            Ok(r.is_authorized)
        };
        self.daemon
            .polkit
            .check(uid, &sender, interactive, ask)
            .await
    }

    /// Whether the caller may raise priority in `specs`: polkit is asked only
    /// when one of them gives a negative nice (root always may).
    pub(super) async fn may_raise<'s>(
        &self,
        conn: &Connection,
        hdr: &Header<'_>,
        uid: u32,
        specs: impl IntoIterator<Item = &'s crate::daemon::spec::Spec>,
    ) -> ApiResult<bool> {
        if uid != 0 && specs.into_iter().any(|s| s.nice < 0) {
            self.authorized(conn, hdr, uid).await
        } else {
            Ok(uid == 0)
        }
    }

    pub(super) async fn require_admin(
        &self,
        conn: &Connection,
        hdr: &Header<'_>,
        what: &str,
    ) -> ApiResult<u32> {
        let uid = self.caller(conn, hdr).await?;
        if self.authorized(conn, hdr, uid).await? {
            Ok(uid)
        } else {
            Err(ApiError::PermissionDenied(format!(
                "{what} needs the polkit authorization {ACTION_MANAGE} (root, or a group granted it by an admin rule)"
            )))
        }
    }
}
