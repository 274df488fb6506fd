//! The admin verbs: `xlurm policy`, `max-running`, `exclude` and `include`.

use super::client::{connect, explain, get_str, Dict};
use anyhow::{anyhow, bail, Result};

/// `xlurm policy NAME`.
pub(super) async fn set_policy(policy: &str, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    p.set_policy(policy).await.map_err(|e| explain(e, user))?;
    println!("policy set to {policy}");
    Ok(0)
}

/// `xlurm max-running N`.
pub(super) async fn set_max_running(max_running: u32, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    p.set_max_running(max_running)
        .await
        .map_err(|e| explain(e, user))?;
    println!("max running set to {max_running}");
    Ok(0)
}

/// `xlurm exclude|include [VENDOR:]ID[,ID...]`: without a vendor, the machine's only one.
pub(super) async fn set_disabled(list: &str, disabled: bool, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    let (vendor, ids) = match list.split_once(':') {
        Some((v, ids)) => (v.to_string(), ids),
        None => {
            let m = p.get_machine().await.map_err(|e| explain(e, user))?;
            let devices: Vec<Dict> = m
                .get("devices")
                .and_then(|v| v.try_clone().ok())
                .and_then(|v| Vec::<Dict>::try_from(v).ok())
                .unwrap_or_default();
            let mut vendors: Vec<String> = devices.iter().map(|d| get_str(d, "vendor")).collect();
            vendors.dedup();
            match &vendors[..] {
                [v] => (v.clone(), list),
                [] => bail!("this machine has no accelerators"),
                _ => bail!(
                    "several vendors here ({}): name one, e.g. nv:{list}",
                    vendors.join(", ")
                ),
            }
        }
    };
    let ids: Vec<u32> = ids
        .split(',')
        .map(|i| {
            i.trim()
                .parse::<u32>()
                .map_err(|_| anyhow!("{i:?} is not a device ID (e.g. 1,3 or nv:1,3)"))
        })
        .collect::<Result<_>>()?;
    p.set_devices_disabled(&vendor, ids.clone(), disabled)
        .await
        .map_err(|e| explain(e, user))?;
    let what = if disabled { "excluded" } else { "included" };
    println!(
        "{vendor} devices {} {what}",
        ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
    );
    Ok(0)
}
