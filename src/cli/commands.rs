//! One function per verb.

use super::client::{connect, explain, get, get_str, Dict, SchedulerProxy};
use super::{
    BatchArgs, CancelArgs, Cli, Command, InfoArgs, LogArgs, QueueArgs, ResourceArgs, SubmitArgs,
};
use crate::core::request::{format_bytes, parse_bytes, parse_duration_secs};
use crate::daemon::spec::entry;
use anyhow::{anyhow, bail, Context, Result};
use std::time::{Duration, Instant};

/// Exit codes of `xrun` for jobs that did not exit on their own; see the README.
pub const EXIT_TIMEOUT: i32 = 124;
pub const EXIT_LAUNCH_FAILED: i32 = 125;
pub const EXIT_LOST: i32 = 126;
pub const EXIT_OOM: i32 = 137;

pub async fn main(cli: Cli) -> Result<i32> {
    let user = cli.user;
    match cli.command {
        Command::Run(a) => run(a, user).await,
        Command::Batch(a) => batch(a, user).await,
        Command::Queue(a) => queue(a, user).await,
        Command::Cancel(a) => cancel(a, user).await,
        Command::Info(a) => info(a, user).await,
        Command::Log(a) => log(a, user).await,
        Command::Show(a) => {
            let q = QueueArgs {
                id: Some(a.id),
                all: false,
                mine: false,
                limit: None,
                json: a.json,
                log: false,
                follow: false,
            };
            queue(q, user).await
        }
        Command::Policy { policy } => {
            let p = connect(user).await?;
            p.set_policy(&policy).await.map_err(|e| explain(e, user))?;
            println!("policy set to {policy}");
            Ok(0)
        }
        Command::MaxRunning { max_running } => {
            let p = connect(user).await?;
            p.set_max_running(max_running)
                .await
                .map_err(|e| explain(e, user))?;
            println!("max running set to {max_running}");
            Ok(0)
        }
        Command::Exclude { devices } => set_disabled(&devices, true, user).await,
        Command::Include { devices } => set_disabled(&devices, false, user).await,
    }
}

/// `xlurm exclude|include [VENDOR:]ID[,ID...]`: without a vendor, the machine's only one.
async fn set_disabled(list: &str, disabled: bool, user: bool) -> Result<i32> {
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

fn spec_from(res: &ResourceArgs, mut argv: Vec<String>, script: Option<String>) -> Result<Dict> {
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
    if let Some(s) = script {
        add(entry("script", s));
    }
    if res.clean_env {
        add(entry("clean_env", true));
    } else {
        let env: Vec<String> = std::env::vars()
            .filter(|(k, _)| crate::daemon::spec::valid_env_name(k))
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
    let gpus = match (res.gpus, res.device_ids.len()) {
        (Some(g), n) if n > 0 && g as usize != n => {
            bail!("-g {g} does not match the {n} IDs given with -i")
        }
        (Some(g), _) => g,
        (None, n) if n > 0 => n as u32,
        (None, _) => 0,
    };
    add(entry("gpus", gpus));
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
    Ok(d)
}

/// An output file opened for `--output`, renamed once the job ID is known if
/// its name has `%j`.
pub struct OutputFile {
    file: std::fs::File,
    opened_as: std::path::PathBuf,
    template: Option<String>,
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
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&opened_as)
        .map_err(|e| anyhow!("--output {}: {e}", opened_as.display()))?;
    Ok(OutputFile {
        file,
        opened_as,
        template,
    })
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

    fn abandon(&self) {
        let _ = std::fs::remove_file(&self.opened_as);
    }
}

/// Submits `spec`, with its `--output` file if any.
async fn submit_with_output(
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

/// `eprintln!` that cannot panic: xrun ignores SIGPIPE, and its stderr may
/// be a pipe whose reader is gone (`xrun ... 2>&1 | head`).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

fn stamp() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Exit code for a finished job as `xrun` reports it.
pub fn exit_code_of(job: &Dict) -> i32 {
    get::<i32>(job, "exit_code").unwrap_or(1)
}

async fn run(a: SubmitArgs, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    let spec = spec_from(&a.res, a.command.clone(), None)?;
    let cwd = std::env::current_dir()?;
    let output = a
        .res
        .output
        .as_deref()
        .map(|o| open_output(o, &cwd))
        .transpose()?;
    // Subscribe before submitting, so no state change is missed.
    let mut changes = p.receive_job_state_changed().await?;
    // A closed stdout (`xrun ... | head`) must not kill xrun silently and
    // leave its job running unseen: writes then fail with EPIPE, and xrun
    // cancels the job like a shell pipeline's writer that dies of SIGPIPE.
    // SAFETY: changes only this signal's disposition, to ignore.
    unsafe {
        nix::libc::signal(nix::libc::SIGPIPE, nix::libc::SIG_IGN);
    }
    let (id, _) = submit_with_output(&p, spec, output, user).await?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    // Created once, before the loop: a signal that arrives while xrun is busy
    // elsewhere is kept for the next select.
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let t0 = Instant::now();
    let (mut said_waiting, mut said_started, mut cancelled) = (false, false, false);
    let mut stream = LogStream::default();
    loop {
        let job = p.get_job(id).await.map_err(|e| explain(e, user))?;
        let state = get_str(&job, "state");
        if get::<u64>(&job, "start_time").unwrap_or(0) > 0 && state == "RUNNING" {
            if !said_started {
                say!("[{}] job {id}: Task started.", stamp());
                said_started = true;
            }
            stream.pump(&p, id, user).await?;
        }
        // The reader may go away while the job prints nothing: then only
        // poll tells.
        if !cancelled && (stream.closed || stdout_closed()) {
            say!(
                "[{}] job {id}: xrun's output was closed (its reader went away); cancelling...",
                stamp()
            );
            if let Err(e) = p.cancel(id).await {
                say!("xrun: cancelling job {id}: {}", explain(e, user));
            }
            // What a shell reports for a writer killed by SIGPIPE.
            return Ok(128 + nix::libc::SIGPIPE);
        }
        match state.as_str() {
            "PENDING" => {
                if !said_waiting && t0.elapsed() > Duration::from_secs(1) {
                    say!(
                        "[{}] job {id}: Waiting for resources... {}",
                        stamp(),
                        get_str(&job, "reason")
                    );
                    said_waiting = true;
                }
            }
            "RUNNING" => {
                if !said_started {
                    say!("[{}] job {id}: Task started.", stamp());
                    said_started = true;
                }
            }
            _ => {
                if !said_started && get::<u64>(&job, "start_time").unwrap_or(0) > 0 {
                    say!("[{}] job {id}: Task started.", stamp());
                }
                if get::<u64>(&job, "start_time").unwrap_or(0) > 0 {
                    stream.drain(&p, id, user).await?;
                }
                let code = exit_code_of(&job);
                let detail = get_str(&job, "detail");
                if state != "COMPLETED" && state != "FAILED"
                    || !detail.is_empty() && state == "FAILED"
                {
                    say!("[{}] job {id}: {state}: {detail}", stamp());
                } else {
                    say!("[{}] job {id}: {state} (exit {code})", stamp());
                }
                return Ok(code);
            }
        }
        // Output is polled while running; otherwise a state change wakes us
        // (with a slow poll as a safety net).
        let tick = if said_started { 200 } else { 1000 };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(tick)) => {}
            _ = wait_for_change(&mut changes, id) => {}
            _ = int.recv(), if !cancelled => { cancelled = true; cancel_for_exit(&p, id, user).await; }
            _ = term.recv(), if !cancelled => { cancelled = true; cancel_for_exit(&p, id, user).await; }
            _ = hup.recv(), if !cancelled => { cancelled = true; cancel_for_exit(&p, id, user).await; }
        }
    }
}

/// Whether standard output's reader went away: a pipe whose other end is
/// closed polls as an error.
fn stdout_closed() -> bool {
    let mut fds = [nix::libc::pollfd {
        fd: 1,
        events: nix::libc::POLLOUT,
        revents: 0,
    }];
    // SAFETY: one valid pollfd, and no waiting.
    let n = unsafe { nix::libc::poll(fds.as_mut_ptr(), 1, 0) };
    n > 0 && fds[0].revents & nix::libc::POLLERR != 0
}

/// Returns when job `id` changes state (or the signal stream ends).
async fn wait_for_change(changes: &mut super::client::JobStateChangedStream, id: u64) {
    use futures_util::StreamExt;
    while let Some(sig) = changes.next().await {
        if sig.args().is_ok_and(|a| a.id == id) {
            return;
        }
    }
    std::future::pending::<()>().await;
}

/// Streams a job's output to stdout, page by page.
#[derive(Default)]
struct LogStream {
    cursor: String,
    /// Whether the "rotated away" warning was printed.
    warned: bool,
    /// Whether stdout was closed by its reader (EPIPE; only where SIGPIPE
    /// is ignored, as in xrun): nothing more is written.
    closed: bool,
}

impl LogStream {
    /// Prints what is new; returns the number of lines and the job's state.
    async fn pump(
        &mut self,
        p: &SchedulerProxy<'_>,
        id: u64,
        user: bool,
    ) -> Result<(usize, String)> {
        use std::io::Write;
        let (lines, cursor, state, missing_before) = p
            .read_log(id, &self.cursor, 20_000)
            .await
            .map_err(|e| explain(e, user))?;
        if missing_before > 0 && !self.warned {
            self.warned = true;
            say!(
                "xlurm: job {id}'s output from before {} is no longer in the journal: \
                 journald rotated it away to stay within its size limits \
                 (admins: journalctl --disk-usage, SystemMaxUse= in journald.conf; \
                 --output PATH keeps a job's whole output in a file)",
                local_time(missing_before, true)
            );
        }
        self.cursor = cursor;
        let mut out = std::io::stdout().lock();
        let written = lines
            .iter()
            .try_for_each(|l| writeln!(out, "{l}"))
            .and_then(|()| out.flush());
        if written.is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) {
            self.closed = true;
        }
        Ok((lines.len(), state))
    }

    /// After the job ended: reads until the journal has nothing more (it may
    /// still be writing the last lines when the unit ends).
    async fn drain(&mut self, p: &SchedulerProxy<'_>, id: u64, user: bool) -> Result<()> {
        // The job's unit has been harvested by now, and journald has read the
        // job's stream to its end: read until a page comes back empty.
        let t0 = Instant::now();
        while !self.closed
            && self.pump(p, id, user).await?.0 > 0
            && t0.elapsed() < Duration::from_secs(30)
        {}
        Ok(())
    }
}

async fn log(a: LogArgs, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    let mut stream = LogStream::default();
    loop {
        let (n, state) = stream.pump(&p, a.id, user).await?;
        let done = !matches!(state.as_str(), "PENDING" | "RUNNING");
        if done {
            stream.drain(&p, a.id, user).await?;
            return Ok(0);
        }
        if !a.follow && n == 0 {
            return Ok(0);
        }
        if a.follow && n == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn cancel_for_exit(p: &SchedulerProxy<'_>, id: u64, user: bool) {
    say!("[{}] job {id}: cancelling...", stamp());
    if let Err(e) = p.cancel(id).await {
        say!("xrun: cancelling job {id}: {}", explain(e, user));
    }
}

/// `#SBATCH` directives xlurm understands, applied under the command line's options.
pub fn apply_sbatch(script: &str, res: &mut ResourceArgs) -> Vec<String> {
    let mut unsupported = Vec::new();
    let mut from_script = ResourceArgs::default();
    for line in script.lines().skip_while(|l| l.starts_with("#!")) {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        let Some(rest) = t.strip_prefix("#SBATCH") else {
            if t.starts_with('#') {
                continue;
            }
            break;
        };
        for opt in rest.split_whitespace() {
            let (k, v) = opt.split_once('=').unwrap_or((opt, ""));
            match k {
                "--gres" => {
                    if let Some(n) = v.rsplit(':').next().and_then(|n| n.parse().ok()) {
                        from_script.gpus = Some(n);
                    }
                }
                "--gpus" | "-G" => from_script.gpus = v.parse().ok(),
                "--cpus-per-task" | "-c" => from_script.cpus = v.parse().ok(),
                "--mem" => from_script.mem = Some(v.to_string()),
                "--time" | "-t" => from_script.time_limit = slurm_time(v),
                "--job-name" | "-J" => from_script.name = Some(v.to_string()),
                "--exclusive" => from_script.exclusive = true,
                "--output" | "-o" => from_script.output = Some(v.to_string()),
                _ => unsupported.push(k.to_string()),
            }
        }
    }
    res.gpus = res.gpus.or(from_script.gpus);
    res.cpus = res.cpus.or(from_script.cpus);
    res.mem = res.mem.take().or(from_script.mem);
    res.time_limit = res.time_limit.take().or(from_script.time_limit);
    res.name = res.name.take().or(from_script.name);
    res.exclusive |= from_script.exclusive;
    res.output = res.output.take().or(from_script.output);
    unsupported
}

/// Slurm's `--time` forms: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH[:MM[:SS]]`, as seconds.
fn slurm_time(v: &str) -> Option<String> {
    let (days, rest) = match v.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, v),
    };
    let parts: Vec<u64> = rest
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let secs = match (days > 0, parts.as_slice()) {
        (false, [m]) => m * 60,
        (false, [m, s]) => m * 60 + s,
        (_, [h, m, s]) => h * 3600 + m * 60 + s,
        (true, [h]) => h * 3600,
        (true, [h, m]) => h * 3600 + m * 60,
        _ => return None,
    };
    Some((days * 86400 + secs).to_string())
}

async fn batch(mut a: BatchArgs, user: bool) -> Result<i32> {
    let (script, args) = match (&a.wrap, a.script.split_first()) {
        (Some(w), None) => (format!("#!/bin/bash\n{w}\n"), Vec::new()),
        (Some(_), Some(_)) => bail!("give either --wrap 'COMMAND' or a script, not both"),
        (None, Some((path, rest))) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read batch script {path}"))?;
            if a.res.name.is_none() {
                a.res.name = std::path::Path::new(path)
                    .file_name()
                    .map(|n| n.to_string_lossy().to_string());
            }
            (text, rest.to_vec())
        }
        (None, None) => bail!("give a batch script (xbatch job.sh) or --wrap 'COMMAND'"),
    };
    for d in apply_sbatch(&script, &mut a.res) {
        eprintln!("xbatch: warning: #SBATCH {d} is not supported here and was ignored");
    }
    if a.res.name.is_none() {
        a.res.name = Some("wrap".into());
    }
    let p = connect(user).await?;
    let spec = spec_from(&a.res, args, Some(script))?;
    let cwd = std::env::current_dir()?;
    let output = a
        .res
        .output
        .as_deref()
        .map(|o| open_output(o, &cwd))
        .transpose()?;
    let (id, info) = submit_with_output(&p, spec, output, user).await?;
    let mem = get::<u64>(&info, "mem")
        .map(format_bytes)
        .unwrap_or_default();
    println!("Submitted batch job {id}");
    eprintln!(
        "memory budget {mem}{}",
        if get::<bool>(&info, "mem_default").unwrap_or(false) {
            " (default)"
        } else {
            ""
        }
    );
    Ok(0)
}

async fn cancel(a: CancelArgs, user: bool) -> Result<i32> {
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

fn local_time(usec: u64, with_year: bool) -> String {
    if usec == 0 {
        return "-".into();
    }
    let secs = (usec / 1_000_000) as libc::time_t;
    // SAFETY: localtime_r writes only into `tm`, which we own.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if !ok {
        return "-".into();
    }
    let base = format!(
        "{:02}-{:02} {:02}:{:02}:{:02}",
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    );
    if with_year {
        format!("{}-{base}", tm.tm_year + 1900)
    } else {
        base
    }
}

/// `HH:MM:SS`, or `D-HH:MM:SS` past a day.
pub fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

fn dict_to_json(d: &Dict) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    let mut keys: Vec<&String> = d.keys().collect();
    keys.sort();
    for k in keys {
        let v = &d[k];
        let j = if let Some(s) = get::<String>(d, k) {
            serde_json::json!(s)
        } else if let Some(x) = get::<u64>(d, k) {
            serde_json::json!(x)
        } else if let Some(x) = get::<u32>(d, k) {
            serde_json::json!(x)
        } else if let Some(x) = get::<i32>(d, k) {
            serde_json::json!(x)
        } else if let Some(x) = get::<bool>(d, k) {
            serde_json::json!(x)
        } else if let Some(x) = get::<Vec<String>>(d, k) {
            serde_json::json!(x)
        } else if let Some(x) = v
            .try_clone()
            .ok()
            .and_then(|v| Vec::<Dict>::try_from(v).ok())
        {
            serde_json::Value::Array(x.iter().map(dict_to_json).collect())
        } else {
            serde_json::Value::Null
        };
        m.insert(k.clone(), j);
    }
    serde_json::Value::Object(m)
}

async fn queue(a: QueueArgs, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    if let (Some(id), true) = (a.id, a.log) {
        drop(p);
        return log(
            LogArgs {
                id,
                follow: a.follow,
            },
            user,
        )
        .await;
    }
    if let Some(id) = a.id {
        let job = p.get_job(id).await.map_err(|e| explain(e, user))?;
        if a.json {
            emit(&json_text(&dict_to_json(&job))?)?;
            return Ok(0);
        }
        emit(&job_text(&job))?;
        return Ok(0);
    }
    let mut filter = Dict::new();
    let (k, v) = entry("all_users", !a.mine);
    filter.insert(k, v);
    let (k, v) = entry("finished", a.all);
    filter.insert(k, v);
    match a.limit.unwrap_or(if a.all { 1000 } else { 100 }) {
        0 => {}
        n => {
            let (k, v) = entry("limit", n);
            filter.insert(k, v);
        }
    }
    // By descriptor: any number of jobs, and far faster than a D-Bus array.
    let fd = p
        .list_jobs_by_file_descriptor(filter)
        .await
        .map_err(|e| explain(e, user))?;
    let listing = crate::daemon::listing::read_fd(fd.into())?;
    let jobs = listing.lines()?;
    if a.json {
        emit(&json_text(&jobs)?)?;
        return Ok(0);
    }
    emit(&queue_table(
        &jobs,
        a.all,
        crate::daemon::service::now_usec(),
    ))?;
    Ok(0)
}

/// The `xqueue` table. `now` is microseconds since the epoch.
pub fn queue_table(jobs: &[crate::daemon::listing::Line<'_>], all: bool, now: u64) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>6} {:<10} {:<16} {:<13} {:<10} {:>4} {:>7} {:<14} {:>10} {}",
        "ID",
        "USER",
        "NAME",
        "STATE",
        "DEVICES",
        "CPUS",
        "MEM",
        "START",
        "TIME",
        if all { "EXIT/REASON" } else { "REASON" }
    );
    for j in jobs {
        let time = match &*j.state {
            "PENDING" => now.saturating_sub(j.submit_time),
            "RUNNING" => now.saturating_sub(j.start_time),
            _ if j.start_time > 0 => j.end_time.saturating_sub(j.start_time),
            _ => 0,
        } / 1_000_000;
        let mem = format!("{}{}", format_bytes(j.mem), if j.spread { "+" } else { "" });
        let last = match &*j.state {
            "PENDING" => j.reason.to_string(),
            "RUNNING" => String::new(),
            _ if j.exit_code >= 0 => j.exit_code.to_string(),
            _ => String::new(),
        };
        let name: String = j.name.chars().take(16).collect();
        let _ = writeln!(
            out,
            "{:>6} {:<10} {:<16} {:<13} {:<10} {:>4} {:>7} {:<14} {:>10} {}",
            j.id,
            j.user,
            name,
            j.state,
            j.devices,
            j.cpus,
            mem,
            local_time(j.start_time, all),
            duration(time),
            last
        );
    }
    out
}

/// `xqueue ID`'s text: one "Key: value" line per known field.
fn job_text(job: &Dict) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let id = get::<u64>(job, "id").unwrap_or(0);
    let mut line = |k: &str, v: String| {
        let _ = writeln!(out, "{k:>14}: {v}");
    };
    line("Job", id.to_string());
    line("Name", get_str(job, "name"));
    line("User", get_str(job, "user"));
    line("State", get_str(job, "state"));
    let reason = get_str(job, "reason");
    if !reason.is_empty() {
        line("Reason", reason);
    }
    if let Some(argv) = get::<Vec<String>>(job, "argv") {
        line("Command", argv.join(" "));
        line("WorkDir", get_str(job, "cwd"));
    }
    if let Some(o) = get::<String>(job, "output") {
        let err = get_str(job, "output_error");
        line(
            "Output",
            if err.is_empty() {
                o
            } else {
                format!("{o} ({err})")
            },
        );
    }
    line(
        "Requested",
        format!(
            "{} CPUs, {}, devices {}",
            get::<u32>(job, "cpus").unwrap_or(0),
            format_bytes(get::<u64>(job, "mem").unwrap_or(0)),
            get_str(job, "devices_requested")
        ),
    );
    if let Some(cpus) = get::<String>(job, "alloc_cpus") {
        line(
            "Allocated",
            format!(
                "CPUs {cpus}, memory nodes {}, devices {}",
                get_str(job, "alloc_mem_nodes"),
                get_str(job, "devices")
            ),
        );
    }
    line(
        "Submitted",
        local_time(get::<u64>(job, "submit_time").unwrap_or(0), true),
    );
    line(
        "Started",
        local_time(get::<u64>(job, "start_time").unwrap_or(0), true),
    );
    line(
        "Ended",
        local_time(get::<u64>(job, "end_time").unwrap_or(0), true),
    );
    if let Some(c) = get::<i32>(job, "exit_code") {
        line("Exit code", c.to_string());
    }
    let detail = get_str(job, "detail");
    if !detail.is_empty() {
        line("Detail", detail);
    }
    if let Some(n) = get::<u64>(job, "cpu_nsec") {
        line("CPU time", duration(n / 1_000_000_000));
    }
    if let Some(n) = get::<u64>(job, "memory_peak") {
        line("Memory peak", format_bytes(n));
    }
    let unit = get_str(job, "unit");
    line("Unit", unit.clone());
    line(
        "See",
        format!("systemctl status {unit}; journalctl -u {unit}"),
    );
    out
}

async fn info(a: InfoArgs, user: bool) -> Result<i32> {
    let p = connect(user).await?;
    let m = p.get_machine().await.map_err(|e| explain(e, user))?;
    if a.json {
        emit(&json_text(&dict_to_json(&m))?)?;
        return Ok(0);
    }
    emit(&machine_text(&m))?;
    Ok(0)
}

/// `xinfo`'s text: the policy and counts, the NUMA nodes, the devices.
fn machine_text(m: &Dict) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "policy {}, max running {}, {} pending, {} running",
        get_str(m, "policy"),
        get::<u32>(m, "max_running").unwrap_or(0),
        get::<u32>(m, "pending").unwrap_or(0),
        get::<u32>(m, "running").unwrap_or(0)
    );
    let nodes: Vec<Dict> = m
        .get("nodes")
        .and_then(|v| v.try_clone().ok())
        .and_then(|v| Vec::<Dict>::try_from(v).ok())
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "{:<6} {:<16} {:<16} {:>10} {:>10}",
        "NODE", "CPUS", "FREE", "MEM", "MEM FREE"
    );
    for n in &nodes {
        let _ = writeln!(
            out,
            "{:<6} {:<16} {:<16} {:>10} {:>10}",
            format!("node{}", get::<u32>(n, "id").unwrap_or(0)),
            get_str(n, "cpus"),
            get_str(n, "cpus_free"),
            format_bytes(get::<u64>(n, "mem").unwrap_or(0)),
            format_bytes(get::<u64>(n, "mem_free").unwrap_or(0))
        );
    }
    let devices: Vec<Dict> = m
        .get("devices")
        .and_then(|v| v.try_clone().ok())
        .and_then(|v| Vec::<Dict>::try_from(v).ok())
        .unwrap_or_default();
    if devices.is_empty() {
        let _ = writeln!(out, "no accelerators");
    }
    for d in &devices {
        let job = get::<u64>(d, "job").unwrap_or(0);
        let mut state = if get::<bool>(d, "disabled").unwrap_or(false) {
            "disabled".to_string()
        } else {
            get_str(d, "health")
        };
        if job > 0 {
            state = format!("{state}, job {job}");
        }
        let _ = writeln!(
            out,
            "{}:{} {} node {} {}",
            get_str(d, "vendor"),
            get::<u32>(d, "index").unwrap_or(0),
            get_str(d, "uuid"),
            get::<i32>(d, "numa_node").unwrap_or(-1),
            state
        );
        let err = get_str(d, "monitoring_error");
        if !err.is_empty() {
            let _ = writeln!(out, "    {err}");
        }
    }
    out
}

/// Pretty JSON and a newline.
fn json_text<T: serde::Serialize>(v: &T) -> Result<String> {
    Ok(serde_json::to_string_pretty(v)? + "\n")
}

/// Writes a command's whole output at once: a reader that stops early
/// (`xqueue 5 | grep -q RUNNING` under `set -o pipefail`) then never makes
/// the command die of SIGPIPE between two of its lines.
fn emit(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbatch_lines_fill_in_under_command_line_options() {
        let script = "#!/bin/bash\n#SBATCH --gres=gpu:2\n#SBATCH --cpus-per-task=4 --mem=8G\n#SBATCH --time=1-02:00:00\n#SBATCH --job-name=train\n#SBATCH --partition=gpu\n#SBATCH --exclusive\necho hi\n#SBATCH --gpus=7\n";
        let mut res = ResourceArgs {
            cpus: Some(2),
            ..Default::default()
        };
        let unsupported = apply_sbatch(script, &mut res);
        assert_eq!(res.gpus, Some(2));
        assert_eq!(res.cpus, Some(2), "command line wins");
        assert_eq!(res.mem.as_deref(), Some("8G"));
        assert_eq!(res.time_limit.as_deref(), Some("93600"));
        assert_eq!(res.name.as_deref(), Some("train"));
        assert!(res.exclusive);
        assert_eq!(unsupported, vec!["--partition"]);
    }

    fn summary(id: u64, state: &str) -> crate::daemon::api::JobSummary {
        crate::daemon::api::JobSummary {
            id,
            name: "a-very-long-job-name-indeed".into(),
            uid: 1001,
            user: "alice".into(),
            state: state.into(),
            reason: if state == "PENDING" {
                "Priority (held for an earlier job)".into()
            } else {
                "".into()
            },
            submit_time: 1_000_000,
            start_time: 0,
            end_time: 0,
            time_limit: 60,
            cpus: 2,
            mem: 3 << 30,
            spread: true,
            devices: "auto:1".into(),
            exit_code: if state == "FAILED" { 7 } else { -1 },
            detail: "".into(),
        }
    }

    #[test]
    fn queue_table_snapshot() {
        let jobs = [summary(1, "PENDING"), summary(2, "FAILED")];
        let jobs: Vec<_> = jobs
            .iter()
            .map(crate::daemon::api::JobSummary::line)
            .collect();
        let table = queue_table(&jobs, true, 3_661_000_000 + 1_000_000);
        let want = concat!(
            "    ID USER       NAME             STATE         DEVICES    CPUS     MEM START                TIME EXIT/REASON\n",
            "     1 alice      a-very-long-job- PENDING       auto:1        2     3G+ -                01:01:01 Priority (held for an earlier job)\n",
            "     2 alice      a-very-long-job- FAILED        auto:1        2     3G+ -                00:00:00 7\n",
        );
        assert_eq!(table, want);
        let json = serde_json::to_value(&jobs[0]).unwrap();
        assert_eq!(json["state"], "PENDING");
        assert_eq!(json["exit_code"], -1);
        assert_eq!(
            json.as_object().unwrap().len(),
            16,
            "the documented JSON schema has 16 keys"
        );
    }

    #[test]
    fn slurm_times() {
        assert_eq!(slurm_time("30").as_deref(), Some("1800"));
        assert_eq!(slurm_time("1:30").as_deref(), Some("90"));
        assert_eq!(slurm_time("2:00:00").as_deref(), Some("7200"));
        assert_eq!(slurm_time("1-0").as_deref(), Some("86400"));
        assert_eq!(slurm_time("x"), None);
    }

    #[test]
    fn durations_and_commands() {
        assert_eq!(duration(3661), "01:01:01");
        assert_eq!(duration(90061), "1-01:01:01");
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
