//! The admin verbs: `xlurm policy`, `max-running`, `exclude`, `include`,
//! `limits`; and `xlurm share`, which every user may run.

use super::client::{connect, explain, Dict};
use crate::wire::keys;
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
            let devices: Vec<Dict> = keys::machine::DEVICES.get(&m).unwrap_or_default();
            let mut vendors: Vec<String> = devices
                .iter()
                .map(|d| keys::device::VENDOR.text(d))
                .collect();
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

/// `xlurm share [--json]`: fair share per user (like `sshare`).
pub(super) async fn share(json: bool, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    let rows = p.get_shares().await.map_err(|e| explain(e, user))?;
    let num = |d: &Dict, k: keys::Key<f64>| k.get(d).unwrap_or(0.0);
    if json {
        let list: Vec<serde_json::Value> = rows
            .iter()
            .map(|d| {
                serde_json::json!({
                    "uid": keys::share::UID.get(d).unwrap_or(0),
                    "user": keys::share::USER.text(d),
                    "shares": keys::share::SHARES.get(d).unwrap_or(0),
                    "norm_shares": num(d, keys::share::NORM_SHARES),
                    "usage": num(d, keys::share::USAGE),
                    "effective_usage": num(d, keys::share::EFFECTIVE_USAGE),
                    "fair_share": num(d, keys::share::FAIR_SHARE),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(list));
        return Ok(0);
    }
    println!(
        "{:<16} {:>6} {:>10} {:>14} {:>10} {:>10}",
        "USER", "SHARES", "NORM", "USAGE(s)", "EFFECTIVE", "FAIRSHARE"
    );
    for d in &rows {
        println!(
            "{:<16} {:>6} {:>10.4} {:>14.0} {:>10.4} {:>10.4}",
            keys::share::USER.text(d),
            keys::share::SHARES.get(d).unwrap_or(0),
            num(d, keys::share::NORM_SHARES),
            num(d, keys::share::USAGE),
            num(d, keys::share::EFFECTIVE_USAGE),
            num(d, keys::share::FAIR_SHARE),
        );
    }
    Ok(0)
}

/// `xlurm limits [--set FILE]`: shows the limits, or replaces them (admin).
pub(super) async fn limits(set: Option<&str>, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    match set {
        None => {
            println!(
                "{}",
                p.get_user_limits().await.map_err(|e| explain(e, user))?
            );
        }
        Some(path) => {
            let text = if path == "-" {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
                s
            } else {
                std::fs::read_to_string(path).map_err(|e| anyhow!("reading {path}: {e}"))?
            };
            p.set_user_limits(&text)
                .await
                .map_err(|e| explain(e, user))?;
            println!("limits set");
        }
    }
    Ok(0)
}

/// `xlurm gate [on|off]`.
pub(super) async fn gate(setting: Option<&str>, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    if let Some(s) = setting {
        p.set_gate(s == "on").await.map_err(|e| explain(e, user))?;
    }
    let on = p.gate().await.map_err(|e| explain(e, user))?;
    println!(
        "accelerator gate: {}",
        if on {
            "on (only xlurm jobs, root's sessions and accel.slice open the accelerators)"
        } else {
            "off"
        }
    );
    Ok(0)
}
