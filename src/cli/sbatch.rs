//! `#SBATCH` directives in a batch script: Slurm's words and options, read
//! under the command line's (which win).

use super::ResourceArgs;
use crate::core::request::parse_bytes;
use anyhow::{anyhow, bail, Result};

/// `#SBATCH` options xlurm reads that take a value: `--mem 8G`, `--mem=8G`,
/// `-c 4`, `-c4` and `-c=4` are all the same.
const SBATCH_VALUED: &[&str] = &[
    "--array",
    "-a",
    "--dependency",
    "-d",
    "--kill-on-invalid-dep",
    "--gres",
    "--gpus",
    "-G",
    "--gpus-per-node",
    "--cpus-per-task",
    "-c",
    "--mem",
    "--mem-per-cpu",
    "--time",
    "-t",
    "--job-name",
    "-J",
    "--output",
    "-o",
    "--nodes",
    "-N",
    "--ntasks",
    "-n",
];

/// Slurm options that never take the next word as their value: flags, and
/// options whose value is optional and so only comes attached with `=`
/// (`--exclusive[=user]`). Any other option xlurm does not know takes the
/// next word as its value unless that word starts with `-`.
const SBATCH_FLAGS: &[&str] = &[
    "--exclusive",
    "--nice",
    "--contiguous",
    "--get-user-env",
    "-H",
    "--hold",
    "-h",
    "--help",
    "-I",
    "--immediate",
    "--ignore-pbs",
    "-k",
    "--no-kill",
    "--no-requeue",
    "-O",
    "--overcommit",
    "-s",
    "--oversubscribe",
    "--parsable",
    "-Q",
    "--quiet",
    "--requeue",
    "--spread-job",
    "--test-only",
    "--usage",
    "--use-min-nodes",
    "-v",
    "--verbose",
    "-V",
    "--version",
    "-W",
    "--wait",
];

/// sbatch options that change no outcome on one machine (where the job runs
/// among one host's jobs, who is mailed, what is billed, how it is placed
/// within the host, what sbatch itself prints): ignored, with a warning
/// naming each. Any directive neither honoured, nor here, nor in
/// is refused ([`refusal`]): xlurm cannot tell that an option it does not
/// know changes nothing.
const SBATCH_IGNORED: &[&str] = &[
    "--partition",
    "-p",
    "--account",
    "-A",
    "--mail-type",
    "--mail-user",
    "--comment",
    "--qos",
    "-q",
    "--reservation",
    "--wckey",
    "--licenses",
    "-L",
    "--constraint",
    "-C",
    "--prefer",
    "--clusters",
    "-M",
    "--cluster-constraint",
    "--nodelist",
    "-w",
    "--exclude",
    "-x",
    "--switches",
    "--extra-node-info",
    "-B",
    "--sockets-per-node",
    "--cores-per-socket",
    "--threads-per-core",
    "--ntasks-per-core",
    "--ntasks-per-socket",
    "--hint",
    "--distribution",
    "-m",
    "--mem-bind",
    "--gres-flags",
    "--gpu-bind",
    "--gpu-freq",
    "--cpu-freq",
    "--tres-bind",
    "--spread-job",
    "--contiguous",
    "--use-min-nodes",
    "--mincpus",
    "--tmp",
    "--oversubscribe",
    "-s",
    "--overcommit",
    "-O",
    "--core-spec",
    "-S",
    "--thread-spec",
    "--power",
    "--profile",
    "--acctg-freq",
    "--propagate",
    "--get-user-env",
    "--no-kill",
    "-k",
    "--priority",
    "--time-min",
    "--delay-boot",
    "--reboot",
    "--network",
    "--mcs-label",
    "--burst-buffer",
    "--bb",
    "--bbf",
    "--wait-all-nodes",
    "--ignore-pbs",
    "--error",
    "-e",
    "--wait",
    "-W",
    "--parsable",
    "--quiet",
    "-Q",
    "--verbose",
    "-v",
];

/// Why xlurm refuses directive `name`, which changes what runs or how
/// often and which it cannot honour (or which it does not know).
fn refusal(name: &str) -> String {
    let why = match name {
        "--nodes" | "-N" => "xlurm runs every job on this one machine: only -N 1",
        "--ntasks" | "-n" | "--ntasks-per-node" => {
            "xlurm runs one task per job: only 1 (use -c for more CPUs)"
        }
        "--begin" | "-b" => {
            "xlurm starts a job as soon as resources allow and cannot hold it until later: \
             only --begin=now"
        }
        "--deadline" => "xlurm does not remove jobs that cannot end by a deadline",
        "--chdir" | "-D" => {
            "xlurm runs the job in the directory xbatch is run from: cd there first"
        }
        "--input" | "-i" => "xlurm jobs read no standard input",
        "--export" => {
            "xlurm forwards your whole environment (--export=ALL), or none with --clean-env"
        }
        "--export-file" => "xlurm forwards your whole environment (--export=ALL)",
        "--signal" => "xlurm sends no signal before the time limit",
        "--open-mode" => "xlurm empties the --output file when the job starts",
        "--uid" | "--gid" => "jobs run as their submitter",
        "--test-only" => "xbatch cannot test without queueing",
        "--immediate" | "-I" => "xlurm queues a job until resources allow",
        "--cpus-per-gpu" | "--mem-per-gpu" | "--gpus-per-task" | "--gpus-per-socket"
        | "--ntasks-per-gpu" | "--tres-per-task" => {
            "give the job's CPUs, memory and GPUs with -c, --mem and --gres=gpu:N"
        }
        _ => "not a directive xlurm knows, and it may change what runs",
    };
    format!("{why}; nothing was queued")
}

/// `--begin` values that mean "now": `now`, `now+0` with any unit.
fn begins_now(v: &str) -> bool {
    let v = v.to_ascii_lowercase();
    match v.strip_prefix("now") {
        Some("") => true,
        Some(rest) => rest.strip_prefix('+').is_some_and(|n| {
            let digits = n.trim_end_matches(|c: char| c.is_ascii_alphabetic());
            !digits.is_empty() && digits.bytes().all(|b| b == b'0')
        }),
        None => false,
    }
}

/// Splits what follows `#SBATCH` into words as Slurm does: quotes group,
/// a backslash escapes the next character, an unquoted `#` starts a comment.
fn sbatch_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (_, '\\') => {
                word.push(chars.next().ok_or("ends in a backslash")?);
                in_word = true;
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '#') => break,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if let Some(q) = quote {
        return Err(format!("has a {q} that is never closed"));
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// `--name=value`, `--name`, `-x`, `-xVALUE` or `-x=VALUE` as the option's
/// name and its attached value; `None` for a word that is no option.
fn sbatch_option(word: &str) -> Option<(String, Option<String>)> {
    if let Some(long) = word.strip_prefix("--").filter(|l| !l.is_empty()) {
        return Some(match long.split_once('=') {
            Some((k, v)) => (format!("--{k}"), Some(v.to_string())),
            None => (word.to_string(), None),
        });
    }
    let mut chars = word.strip_prefix('-')?.chars();
    let c = chars.next().filter(|c| *c != '-')?;
    let rest = chars.as_str();
    let value = (!rest.is_empty()).then(|| rest.strip_prefix('=').unwrap_or(rest).to_string());
    Some((format!("-{c}"), value))
}

/// A GPU request `[TYPE:]COUNT` (`--gpus`) or, for `--gres=gpu`,
/// `[:TYPE][:COUNT]` where a missing count is 1: the count and the type.
fn sbatch_gpus<'a>(
    parts: &[&'a str],
    count_optional: bool,
) -> Result<(u32, Option<&'a str>), String> {
    let count = |n: &str| n.parse::<u32>().ok();
    let form = || {
        if count_optional {
            "expected gpu, gpu:COUNT, gpu:TYPE or gpu:TYPE:COUNT".to_string()
        } else {
            "expected COUNT or TYPE:COUNT".to_string()
        }
    };
    match parts {
        [] if count_optional => Ok((1, None)),
        [n] => match count(n) {
            Some(c) => Ok((c, None)),
            None if count_optional && !n.is_empty() => Ok((1, Some(n))),
            None => Err(form()),
        },
        [t, n] if !t.is_empty() => count(n).map(|c| (c, Some(*t))).ok_or_else(form),
        _ => Err(form()),
    }
}

/// Slurm's memory sizes: a plain number is megabytes; `K`, `M`, `G`, `T`
/// suffixes as usual. As xlurm's size text (checked).
fn slurm_mem(v: &str) -> Result<String, String> {
    let text = if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        if v.bytes().all(|b| b == b'0') {
            return Err(
                "0 (all of a node's memory) is not supported here: give a size, \
                        or use --exclusive for the whole machine"
                    .into(),
            );
        }
        format!("{v}M")
    } else if v.ends_with(|c: char| c.is_ascii_digit()) {
        // 1.5 or 1e3 without a unit: Slurm refuses these; as bytes they would
        // make a budget that kills the job at once.
        return Err(format!(
            "{v:?}: a size without a unit is a whole number of megabytes (e.g. 4000, or 1.5G)"
        ));
    } else {
        v.to_string()
    };
    parse_bytes(&text)?;
    Ok(text)
}

/// `#SBATCH` directives xlurm understands, applied under the command line's
/// options (which win). Returns a warning for each directive it ignores;
/// a malformed directive it would use is an error naming its line.
pub fn apply_sbatch(script: &str, res: &mut ResourceArgs) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    let mut from_script = ResourceArgs::default();
    let mut output_line: Option<String> = None;
    let mut mem_per_cpu: Option<u64> = None;
    for (i, line) in script.lines().enumerate() {
        let lineno = i + 1;
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        let Some(rest) = t.strip_prefix("#SBATCH") else {
            if t.starts_with('#') {
                continue;
            }
            break; // the first command ends the directives, as in Slurm
        };
        let words = sbatch_words(rest).map_err(|e| anyhow!("line {lineno}: #SBATCH line {e}"))?;
        let mut words = words.into_iter().peekable();
        while let Some(word) = words.next() {
            let (name, attached) = sbatch_option(&word).ok_or_else(|| {
                anyhow!(
                    "line {lineno}: #SBATCH {word:?} is not an option \
                     (#SBATCH lines hold options, e.g. #SBATCH --mem=8G)"
                )
            })?;
            let value = match attached {
                Some(v) => Some(v),
                None if SBATCH_VALUED.contains(&name.as_str()) => Some(
                    words
                        .next()
                        .ok_or_else(|| anyhow!("line {lineno}: #SBATCH {name} needs a value"))?,
                ),
                None if SBATCH_FLAGS.contains(&name.as_str()) => None,
                None => words.next_if(|w| !w.starts_with('-')),
            };
            let shown = match &value {
                Some(v) if name.starts_with("--") => format!("{name}={v}"),
                Some(v) => format!("{name} {v}"),
                None => name.clone(),
            };
            let bad = |e: &str| anyhow!("line {lineno}: #SBATCH {shown}: {e}");
            let v = value.as_deref().unwrap_or_default();
            match name.as_str() {
                "--gres" => {
                    let mut gpus = None;
                    for item in v.split(',') {
                        let parts: Vec<&str> = item.split(':').collect();
                        if parts[0] != "gpu" {
                            warnings.push(format!(
                                "#SBATCH --gres={item} is not supported here and was ignored"
                            ));
                            continue;
                        }
                        let (n, kind) = sbatch_gpus(&parts[1..], true).map_err(|e| bad(&e))?;
                        if let Some(k) = kind {
                            warnings.push(format!("#SBATCH --gres={item}: the GPU type {k} is ignored (choose a vendor with --device)"));
                        }
                        gpus = Some(gpus.unwrap_or(0u32).saturating_add(n));
                    }
                    if gpus.is_some() {
                        from_script.gpus = gpus;
                    }
                }
                "--gpus" | "-G" | "--gpus-per-node" => {
                    let parts: Vec<&str> = v.split(':').collect();
                    let (n, kind) = sbatch_gpus(&parts, false).map_err(|e| bad(&e))?;
                    if let Some(k) = kind {
                        warnings.push(format!(
                            "#SBATCH {shown}: the GPU type {k} is ignored (choose a vendor with --device)"
                        ));
                    }
                    from_script.gpus = Some(n);
                }
                "--cpus-per-task" | "-c" => match v.parse::<u32>() {
                    Ok(n) if n > 0 => from_script.cpus = Some(n),
                    _ => return Err(bad("expected a number of CPUs, at least 1")),
                },
                "--mem" => from_script.mem = Some(slurm_mem(v).map_err(|e| bad(&e))?),
                "--mem-per-cpu" => {
                    let text = slurm_mem(v).map_err(|e| bad(&e))?;
                    mem_per_cpu = Some(parse_bytes(&text).map_err(|e| bad(&e))?);
                }
                "--time" | "-t" => {
                    from_script.time_limit = if ["UNLIMITED", "INFINITE"]
                        .iter()
                        .any(|u| v.eq_ignore_ascii_case(u))
                    {
                        None
                    } else {
                        match slurm_time(v) {
                            Some(0) => None,
                            Some(s) => Some(s.to_string()),
                            None => {
                                return Err(bad(
                                    "expected MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED",
                                ))
                            }
                        }
                    }
                }
                // Slurm's --nice without a value is 100.
                "--nice" => {
                    let n = if v.is_empty() {
                        Ok(100)
                    } else {
                        v.parse::<i32>()
                    };
                    from_script.nice = Some(n.map_err(|_| bad("--nice takes a whole number"))?);
                }
                "--job-name" | "-J" if v.is_empty() => return Err(bad("the job name is empty")),
                "--job-name" | "-J" => from_script.name = Some(v.to_string()),
                "--output" | "-o" if v.is_empty() => return Err(bad("the file name is empty")),
                "--output" | "-o" => {
                    output_line = Some(shown.clone());
                    from_script.output = Some(v.to_string());
                }
                "--hold" | "-H" if value.is_none() => from_script.hold = true,
                "--requeue" if value.is_none() => from_script.requeue = true,
                // Checked here, so that a bad one names its line.
                "--array" | "-a" => {
                    crate::core::ArraySpec::parse(v)
                        .map_err(|e| bad(&format!("{e}; nothing was queued")))?;
                    from_script.array = Some(v.to_string());
                }
                // xlurm's default, as Slurm's with JobRequeue=0.
                "--no-requeue" if value.is_none() => from_script.requeue = false,
                "--dependency" | "-d" if v.is_empty() => {
                    return Err(bad("the dependency is empty"))
                }
                // Checked here, so that a bad one names its line.
                "--dependency" | "-d" => {
                    crate::core::dependency::parse(v)
                        .map_err(|e| bad(&format!("{e}; nothing was queued")))?;
                    from_script.dependency = Some(v.to_string());
                }
                "--kill-on-invalid-dep" => match v {
                    "yes" | "no" => from_script.kill_on_invalid_dep = Some(v.to_string()),
                    _ => return Err(bad("expected yes or no")),
                },
                "--exclusive" if value.is_none() => from_script.exclusive = true,
                // --exclusive=user|mcs|topo: whom the node is shared with.
                "--exclusive" => warnings.push(format!(
                    "#SBATCH {shown} is not supported here and was ignored"
                )),
                // One node and one task is what every xlurm job is.
                "--nodes" | "-N" if matches!(v, "1" | "1-1") => {}
                "--ntasks" | "-n" | "--ntasks-per-node" if v == "1" => {}
                "--begin" | "-b" if begins_now(v) => {}
                "--export" if v.eq_ignore_ascii_case("ALL") => {}
                n if SBATCH_IGNORED.contains(&n) => warnings.push(format!(
                    "#SBATCH {shown} is not supported here and was ignored"
                )),
                n => return Err(bad(&refusal(n))),
            }
        }
    }
    if from_script.mem.is_some() && mem_per_cpu.is_some() {
        bail!("#SBATCH --mem and --mem-per-cpu are mutually exclusive (as in Slurm): give one");
    }
    res.gpus = res.gpus.or(from_script.gpus);
    res.cpus = res.cpus.or(from_script.cpus);
    res.mem = res.mem.take().or(from_script.mem);
    if let (None, Some(per_cpu)) = (&res.mem, mem_per_cpu) {
        let cpus = res.cpus.unwrap_or(1);
        let total = per_cpu
            .checked_mul(u64::from(cpus))
            .ok_or_else(|| anyhow!("#SBATCH --mem-per-cpu times {cpus} CPUs is too large"))?;
        res.mem = Some(total.to_string());
    }
    res.time_limit = res.time_limit.take().or(from_script.time_limit);
    res.name = res.name.take().or(from_script.name);
    res.nice = res.nice.or(from_script.nice);
    res.exclusive |= from_script.exclusive;
    res.hold |= from_script.hold;
    res.requeue |= from_script.requeue;
    res.array = res.array.take().or(from_script.array);
    // Patterns: an array's tasks fill in %A, %a, %j, %u, %x and %%; a
    // single job's file, opened by xbatch before it has an ID, %j only.
    if let (Some(shown), Some(o)) = (output_line, &from_script.output) {
        let known: &[&str] = if res.array.is_some() {
            &["%A", "%a", "%j", "%J", "%u", "%x", "%%"]
        } else {
            &["%j"]
        };
        let rest = known.iter().fold(o.clone(), |t, k| t.replace(k, ""));
        if rest.contains('%') {
            warnings.push(format!(
                "#SBATCH {shown}: only {} {} replaced here; other % patterns stay as written",
                known.join(", "),
                if known.len() == 1 {
                    "(the job ID) is"
                } else {
                    "are"
                }
            ));
        }
    }
    res.dependency = res.dependency.take().or(from_script.dependency);
    res.kill_on_invalid_dep = res
        .kill_on_invalid_dep
        .take()
        .or(from_script.kill_on_invalid_dep);
    res.output = res.output.take().or(from_script.output);
    Ok(warnings)
}

/// Slurm's `--time` forms: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH[:MM[:SS]]`, as seconds.
fn slurm_time(v: &str) -> Option<u64> {
    let (days, rest) = match v.split_once('-') {
        Some((d, r)) => (Some(d.parse::<u64>().ok()?), r),
        None => (None, v),
    };
    let parts: Vec<u64> = rest
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let secs = match (days.is_some(), parts.as_slice()) {
        (false, [m]) => m.checked_mul(60)?,
        (false, [m, s]) => m.checked_mul(60)?.checked_add(*s)?,
        (_, [h, m, s]) => h
            .checked_mul(3600)?
            .checked_add(m.checked_mul(60)?)?
            .checked_add(*s)?,
        (true, [h]) => h.checked_mul(3600)?,
        (true, [h, m]) => h.checked_mul(3600)?.checked_add(m.checked_mul(60)?)?,
        _ => return None,
    };
    days.unwrap_or(0).checked_mul(86400)?.checked_add(secs)
}

#[cfg(test)]
#[path = "sbatch_tests.rs"]
mod tests;
