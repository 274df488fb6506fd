//! What `xrun` and `xbatch` share: the spec from the command line's options,
//! the command found as a shell would, and the `--output` file.

use super::client::{explain, Dict, SchedulerProxy};
use super::ResourceArgs;
use crate::core::request::{parse_bytes, parse_duration_secs};
use crate::wire::spec::entry;
use anyhow::{anyhow, bail, Context, Result};

/// Finds `cmd` the way a shell would, so the job runs what the user meant.
pub fn resolve_command(cmd: &str, path_var: Option<&str>, cwd: &std::path::Path) -> Result<String> {
    if cmd.contains('/') {
        let p = std::path::Path::new(cmd);
        return Ok(if p.is_absolute() {
            p.to_path_buf()
        } else {
            cwd.join(p)
        }
        .display()
        .to_string());
    }
    for dir in path_var
        .unwrap_or("/usr/local/bin:/usr/bin:/bin")
        .split(':')
        .filter(|d| !d.is_empty())
    {
        let candidate = std::path::Path::new(dir).join(cmd);
        if let Ok(meta) = std::fs::metadata(&candidate) {
            use std::os::unix::fs::PermissionsExt;
            if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                let full = if candidate.is_absolute() {
                    candidate
                } else {
                    cwd.join(candidate)
                };
                return Ok(full.display().to_string());
            }
        }
    }
    bail!("{cmd}: command not found in your PATH")
}

/// This process's umask (reading it means setting it: set back at once).
fn current_umask() -> u32 {
    use nix::sys::stat::{umask, Mode};
    let m = umask(Mode::from_bits_truncate(0o077));
    umask(m);
    m.bits() & 0o777
}

pub(super) fn spec_from(
    res: &ResourceArgs,
    mut argv: Vec<String>,
    script: Option<String>,
) -> Result<Dict> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    if script.is_none() {
        let path = std::env::var("PATH").ok();
        argv[0] = resolve_command(&argv[0], path.as_deref(), &cwd)?;
    }
    let mut d = Dict::new();
    let mut add = |(k, v): (String, zbus::OwnedVariant)| {
        d.insert(k, v);
    };
    add(entry("argv", argv));
    add(entry("cwd", cwd.display().to_string()));
    // The job creates its files as this shell would (sbatch records the
    // umask too): its unit's UMask=.
    add(entry("umask", current_umask()));
    if let Some(s) = script {
        add(entry("script", s));
    }
    if res.clean_env {
        add(entry("clean_env", true));
    } else {
        let env: Vec<String> = std::env::vars()
            .filter(|(k, _)| crate::wire::spec::valid_env_name(k))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        add(entry("env", env));
    }
    if let Some(n) = &res.name {
        add(entry("name", n.clone()));
    }
    if let Some(c) = res.cpus {
        add(entry("cpus", c));
    }
    if let Some(m) = &res.mem {
        add(entry(
            "mem",
            parse_bytes(m).map_err(|e| anyhow!("--mem: {e}"))?,
        ));
    }
    match (res.gpus, res.device_ids.len()) {
        (Some(g), n) if n > 0 && g as usize != n => {
            bail!("-g {g} does not match the {n} IDs given with -i")
        }
        (Some(g), _) => add(entry("gpus", g)),
        (None, n) if n > 0 => add(entry("gpus", n as u32)),
        // No -g, no -i: one device where the machine has accelerators, none
        // where it has none, settled by xlurmd (a submission is one call).
        (None, _) => add(entry("gpus_default", true)),
    }
    if !res.device_ids.is_empty() {
        add(entry("device_ids", res.device_ids.clone()));
    }
    if !res.exclude_device_ids.is_empty() {
        add(entry("exclude_device_ids", res.exclude_device_ids.clone()));
    }
    if let Some(v) = &res.vendor {
        add(entry("vendor", v.clone()));
    }
    if res.exclusive {
        add(entry("exclusive", true));
    }
    if res.numa_local {
        add(entry("numa_local", true));
    }
    if let Some(t) = &res.time_limit {
        add(entry(
            "time_limit",
            parse_duration_secs(t).map_err(|e| anyhow!("--time-limit: {e}"))?,
        ));
    }
    if res.hold {
        add(entry("hold", true));
    }
    if res.requeue {
        add(entry("requeue", true));
    }
    if let Some(a) = &res.array {
        add(entry("array", a.as_str()));
    }
    if let Some(d) = &res.dependency {
        add(entry("dependency", d.as_str()));
    }
    if res.kill_on_invalid_dep.as_deref() == Some("yes") {
        add(entry("kill_on_invalid_dep", true));
    }
    if let Some(n) = res.nice {
        add(entry("nice", n));
    }
    Ok(d)
}

/// An output file opened for `--output`, renamed once the job ID is known if
/// its name has `%j`.
pub struct OutputFile {
    file: std::fs::File,
    opened_as: std::path::PathBuf,
    template: Option<String>,
    /// Whether this submission created it (only then is it removed when the
    /// submission is refused).
    created: bool,
}

/// Opens `--output PATH` with the user's own rights (no symlink at the end),
/// so a path the user cannot write is refused before anything is queued.
pub fn open_output(path: &str, cwd: &std::path::Path) -> Result<OutputFile> {
    use std::os::unix::fs::OpenOptionsExt;
    let full = if path.starts_with('/') {
        std::path::PathBuf::from(path)
    } else {
        cwd.join(path)
    };
    let (opened_as, template) = if path.contains("%j") {
        let tmp = full
            .display()
            .to_string()
            .replace("%j", &format!("pending-{}", std::process::id()));
        (
            std::path::PathBuf::from(tmp),
            Some(full.display().to_string()),
        )
    } else {
        (full.clone(), None)
    };
    // Not truncated here: the job truncates it when it starts (`__tee-output`,
    // as Slurm does), so a file whose submission is refused keeps what it held.
    let open = |create_new: bool| {
        let mut o = std::fs::OpenOptions::new();
        o.write(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
        if create_new {
            o.create_new(true);
        }
        o.open(&opened_as)
    };
    let (file, created) = match open(true) {
        Ok(f) => (Ok(f), true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => (open(false), false),
        Err(e) => (Err(e), false),
    };
    let file = file.map_err(|e| anyhow!("--output {}: {e}", opened_as.display()))?;
    Ok(OutputFile {
        file,
        opened_as,
        template,
        created,
    })
}

/// The `--output` file of `res`, if it names one, opened.
pub(super) fn output_of(res: &ResourceArgs) -> Result<Option<OutputFile>> {
    let cwd = std::env::current_dir()?;
    copied_output(res).map(|o| open_output(o, &cwd)).transpose()
}

/// The `--output` path to copy the job's output into, if any: `/dev/null`
/// (Slurm's way to discard it, common in `#SBATCH` lines) asks for no copy,
/// and the output stays in the journal only.
pub(super) fn copied_output(res: &ResourceArgs) -> Option<&str> {
    res.output.as_deref().filter(|o| *o != "/dev/null")
}

impl OutputFile {
    fn add_to(&self, spec: &mut Dict) {
        let fd = zbus::Fd::from(&self.file);
        if let Ok(v) = zbus::OwnedVariant::try_from(zbus::Variant::Fd(fd)) {
            spec.insert("output_fd".into(), v);
        }
        let (k, v) = entry(
            "output_path",
            self.template
                .clone()
                .unwrap_or_else(|| self.opened_as.display().to_string()),
        );
        spec.insert(k, v);
    }

    /// Gives the file its final name once the job ID is known.
    fn settle(&self, id: u64) -> Result<()> {
        if let Some(t) = &self.template {
            let target = t.replace("%j", &id.to_string());
            std::fs::rename(&self.opened_as, &target)
                .map_err(|e| anyhow!("renaming {} to {target}: {e}", self.opened_as.display()))?;
        }
        Ok(())
    }

    /// The submission was refused: a file it created goes, one that was
    /// there is left as it was.
    fn abandon(&self) {
        if self.created {
            let _ = std::fs::remove_file(&self.opened_as);
        }
    }
}

/// Submits `spec`, with its `--output` file if any.
pub(super) async fn submit_with_output(
    p: &SchedulerProxy<'_>,
    mut spec: Dict,
    output: Option<OutputFile>,
    user: bool,
) -> Result<(u64, Dict)> {
    if let Some(o) = &output {
        o.add_to(&mut spec);
    }
    match p.submit(spec).await {
        Ok((id, info)) => {
            if let Some(o) = &output {
                o.settle(id)?;
            }
            Ok((id, info))
        }
        Err(e) => {
            if let Some(o) = &output {
                o.abandon();
            }
            Err(explain(e, user))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_to_dev_null_discards_it_as_in_slurm() {
        let with = |o: &str| ResourceArgs {
            output: Some(o.into()),
            ..Default::default()
        };
        assert_eq!(copied_output(&with("/dev/null")), None);
        assert!(output_of(&with("/dev/null")).unwrap().is_none());
        assert_eq!(copied_output(&with("out-%j.txt")), Some("out-%j.txt"));
        assert_eq!(copied_output(&ResourceArgs::default()), None);
    }

    #[test]
    fn an_existing_output_file_is_neither_truncated_nor_removed_by_a_refused_submission() {
        let dir = tempfile::tempdir().unwrap();
        let existing = dir.path().join("results.txt");
        std::fs::write(&existing, "last week's results\n").unwrap();
        let o = open_output("results.txt", dir.path()).unwrap();
        assert!(!o.created);
        assert_eq!(
            std::fs::read_to_string(&existing).unwrap(),
            "last week's results\n"
        );
        o.abandon();
        assert!(
            existing.exists(),
            "a refused submission removed the user's file"
        );

        let o = open_output("new.txt", dir.path()).unwrap();
        assert!(o.created);
        o.abandon();
        assert!(!dir.path().join("new.txt").exists(), "its own file goes");

        std::os::unix::fs::symlink(&existing, dir.path().join("link")).unwrap();
        assert!(
            open_output("link", dir.path()).is_err(),
            "no symlink at the end"
        );
    }

    #[test]
    fn a_job_that_names_no_devices_leaves_the_default_to_xlurmd() {
        let spec = |res: &ResourceArgs| spec_from(res, vec!["/bin/true".into()], None).unwrap();
        let get_u = |d: &Dict, k: &str| super::super::client::get::<u32>(d, k);
        let get_b = |d: &Dict, k: &str| super::super::client::get::<bool>(d, k);
        let none = spec(&ResourceArgs::default());
        assert_eq!(get_b(&none, "gpus_default"), Some(true));
        assert_eq!(get_u(&none, "gpus"), None, "no count: xlurmd settles it");
        let zero = spec(&ResourceArgs {
            gpus: Some(0),
            ..Default::default()
        });
        assert_eq!(
            (get_u(&zero, "gpus"), get_b(&zero, "gpus_default")),
            (Some(0), None)
        );
        let ids = spec(&ResourceArgs {
            device_ids: vec![1, 3],
            ..Default::default()
        });
        assert_eq!(
            (get_u(&ids, "gpus"), get_b(&ids, "gpus_default")),
            (Some(2), None)
        );
    }

    #[test]
    fn commands_are_found_as_a_shell_would() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("tool");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.path().display().to_string();
        assert_eq!(
            resolve_command("tool", Some(&path), dir.path()).unwrap(),
            exe.display().to_string()
        );
        assert!(resolve_command("nope-xyz", Some(&path), dir.path()).is_err());
        assert_eq!(
            resolve_command("./a/b", None, std::path::Path::new("/w")).unwrap(),
            "/w/./a/b"
        );
    }
}
