//! `#SBATCH` directives in a batch script: Slurm's words and options, read
//! under the command line's (which win).

use super::ResourceArgs;
use crate::core::request::parse_bytes;
use anyhow::{anyhow, bail, Result};

/// `#SBATCH` options xlurm reads that take a value: `--mem 8G`, `--mem=8G`,
/// `-c 4`, `-c4` and `-c=4` are all the same.
const SBATCH_VALUED: &[&str] = &[
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
/// [`NOT_YET`] is refused ([`refusal`]): xlurm cannot tell that an option
/// it does not know changes nothing.
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
    "--no-requeue",
    "--nice",
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

/// Directives xlurm will honour but does not yet: each is an error naming
/// its line ("not supported yet"), never a warning, because ignoring it
/// would run the script at once, and only once.
///
/// HOOK (issue 18): arrays, dependencies, holds and requeue each take their
/// names out of this list and read them where `apply_sbatch` reads the
/// honoured directives.
const NOT_YET: &[&str] = &[
    "--array",
    "-a",
    "--dependency",
    "-d",
    "--kill-on-invalid-dep",
    "--hold",
    "-H",
    "--requeue",
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
        _ if NOT_YET.contains(&name) => {
            "not supported yet: xlurm would run the script at once, and only once"
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
                "--job-name" | "-J" if v.is_empty() => return Err(bad("the job name is empty")),
                "--job-name" | "-J" => from_script.name = Some(v.to_string()),
                "--output" | "-o" if v.is_empty() => return Err(bad("the file name is empty")),
                "--output" | "-o" => {
                    if v.replace("%j", "").contains('%') {
                        warnings.push(format!(
                            "#SBATCH {shown}: only %j (the job ID) is replaced here; other % patterns stay as written"
                        ));
                    }
                    from_script.output = Some(v.to_string());
                }
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
    res.exclusive |= from_script.exclusive;
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
mod tests {
    use super::*;

    #[test]
    fn sbatch_lines_fill_in_under_command_line_options() {
        let script = "#!/bin/bash\n#SBATCH --gres=gpu:2\n#SBATCH --cpus-per-task=4 --mem=8G\n#SBATCH --time=1-02:00:00\n#SBATCH --job-name=train\n#SBATCH --partition=gpu\n#SBATCH --exclusive\necho hi\n#SBATCH --gpus=7\n";
        let mut res = ResourceArgs {
            cpus: Some(2),
            ..Default::default()
        };
        let warnings = apply_sbatch(script, &mut res).unwrap();
        assert_eq!(res.gpus, Some(2));
        assert_eq!(res.cpus, Some(2), "command line wins");
        assert_eq!(res.mem.as_deref(), Some("8G"));
        assert_eq!(res.time_limit.as_deref(), Some("93600"));
        assert_eq!(res.name.as_deref(), Some("train"));
        assert!(res.exclusive);
        assert_eq!(
            warnings,
            vec!["#SBATCH --partition=gpu is not supported here and was ignored"]
        );
    }

    fn sbatch(lines: &str) -> ResourceArgs {
        let mut res = ResourceArgs::default();
        let warnings = apply_sbatch(&format!("#!/bin/bash\n{lines}\necho hi\n"), &mut res)
            .unwrap_or_else(|e| panic!("{lines:?}: {e:#}"));
        assert_eq!(warnings, Vec::<String>::new(), "{lines:?}");
        res
    }

    fn sbatch_error(lines: &str) -> String {
        let mut res = ResourceArgs::default();
        match apply_sbatch(&format!("#!/bin/bash\n{lines}\necho hi\n"), &mut res) {
            Ok(w) => panic!("{lines:?} was accepted (warnings {w:?})"),
            Err(e) => format!("{e:#}"),
        }
    }

    #[test]
    fn sbatch_options_take_their_value_from_the_next_word() {
        let res = sbatch(
            "#SBATCH --mem 8G\n#SBATCH -c 4\n#SBATCH -t 1:00:00\n#SBATCH -J name\n\
             #SBATCH --output file\n#SBATCH -G 2",
        );
        assert_eq!(res.mem.as_deref(), Some("8G"));
        assert_eq!(res.cpus, Some(4));
        assert_eq!(res.time_limit.as_deref(), Some("3600"));
        assert_eq!(res.name.as_deref(), Some("name"));
        assert_eq!(res.output.as_deref(), Some("file"));
        assert_eq!(res.gpus, Some(2));
        assert_eq!(sbatch("#SBATCH --gres gpu:2").gpus, Some(2));
        assert_eq!(sbatch("#SBATCH --job-name -x").name.as_deref(), Some("-x"));
        let res = sbatch("#SBATCH --cpus-per-task 3 --time 90 --job-name a --exclusive --gpus 1");
        assert_eq!(
            (
                res.cpus,
                res.time_limit.as_deref(),
                res.name.as_deref(),
                res.exclusive,
                res.gpus
            ),
            (Some(3), Some("5400"), Some("a"), true, Some(1))
        );
    }

    #[test]
    fn sbatch_short_options_take_attached_values() {
        let res = sbatch("#SBATCH -c4 -t30 -Jtrain -G1 -oout.%j");
        assert_eq!(res.cpus, Some(4));
        assert_eq!(res.time_limit.as_deref(), Some("1800"));
        assert_eq!(res.name.as_deref(), Some("train"));
        assert_eq!(res.gpus, Some(1));
        assert_eq!(res.output.as_deref(), Some("out.%j"));
        assert_eq!(sbatch("#SBATCH -c=6").cpus, Some(6));
    }

    #[test]
    fn sbatch_mem_without_a_unit_is_megabytes() {
        assert_eq!(sbatch("#SBATCH --mem=4096").mem.as_deref(), Some("4096M"));
        assert_eq!(sbatch("#SBATCH --mem 512").mem.as_deref(), Some("512M"));
        assert_eq!(sbatch("#SBATCH --mem=2g").mem.as_deref(), Some("2g"));
        // --mem-per-cpu: per CPU, times the CPUs asked for (1 if none).
        let res = sbatch("#SBATCH --mem-per-cpu=1000 -c 4");
        assert_eq!(res.mem.as_deref(), Some(&*(4000u64 << 20).to_string()));
        let res = sbatch("#SBATCH --mem-per-cpu 2G");
        assert_eq!(res.mem.as_deref(), Some(&*(2u64 << 30).to_string()));
        let mut res = ResourceArgs {
            cpus: Some(2),
            ..Default::default()
        };
        apply_sbatch("#SBATCH --mem-per-cpu=1G -c 8\n", &mut res).unwrap();
        assert_eq!(
            res.mem.as_deref(),
            Some(&*(2u64 << 30).to_string()),
            "-c 2 wins"
        );
        let mut res = ResourceArgs {
            mem: Some("3G".into()),
            ..Default::default()
        };
        apply_sbatch("#SBATCH --mem-per-cpu=1G\n", &mut res).unwrap();
        assert_eq!(res.mem.as_deref(), Some("3G"), "-m wins");
    }

    #[test]
    fn sbatch_gres_gpu_without_a_count_is_one() {
        assert_eq!(sbatch("#SBATCH --gres=gpu").gpus, Some(1));
        assert_eq!(sbatch("#SBATCH --gres=gpu:3").gpus, Some(3));
        assert_eq!(sbatch("#SBATCH --gres=gpu:0").gpus, Some(0));
        assert_eq!(sbatch("#SBATCH --gpus-per-node=2").gpus, Some(2));
        let mut res = ResourceArgs::default();
        let w = apply_sbatch("#SBATCH --gres=gpu:a100:2,nic:1 --gpus=v100:3\n", &mut res).unwrap();
        assert_eq!(res.gpus, Some(3), "the last directive wins");
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(
            w[0].contains("--gres=gpu:a100:2: the GPU type a100 is ignored"),
            "{w:?}"
        );
        assert!(w[1].contains("--gres=nic:1 is not supported"), "{w:?}");
        assert!(w[2].contains("the GPU type v100 is ignored"), "{w:?}");
        let mut res = ResourceArgs::default();
        apply_sbatch("#SBATCH --gres=gpu:tesla\n", &mut res).unwrap();
        assert_eq!(res.gpus, Some(1));
    }

    #[test]
    fn sbatch_words_follow_slurm_quoting_and_comments() {
        let res = sbatch("#SBATCH --job-name=\"my job\" # a comment --mem=1G");
        assert_eq!(res.name.as_deref(), Some("my job"));
        assert_eq!(res.mem, None, "after # is a comment");
        assert_eq!(sbatch("#SBATCH -J 'a b'").name.as_deref(), Some("a b"));
        assert_eq!(sbatch("#SBATCH -J a\\ b").name.as_deref(), Some("a b"));
        // Directives stop at the first command; comments and blank lines do not stop them.
        let res = sbatch("# setup\n\n#SBATCH -c 2\nexport X=1\n#SBATCH -c 9");
        assert_eq!(res.cpus, Some(2));
    }

    #[test]
    fn sbatch_slurm_only_options_are_warned_about_with_their_values() {
        let mut res = ResourceArgs::default();
        let w = apply_sbatch(
            "#SBATCH --partition gpu -A proj --no-requeue --mail-type=END -e err.txt -N 1 -n 1 -c 2\n\
             #SBATCH --qos=high --exclusive=user --mail-user a@b -p x --nice=5\n",
            &mut res,
        )
        .unwrap();
        assert_eq!(
            res.cpus,
            Some(2),
            "the value of an unknown option is not taken for an option"
        );
        assert!(!res.exclusive, "--exclusive=user is not --exclusive");
        let ignored: Vec<&str> = w
            .iter()
            .map(|w| {
                w.strip_prefix("#SBATCH ")
                    .and_then(|w| w.strip_suffix(" is not supported here and was ignored"))
                    .unwrap_or(w)
            })
            .collect();
        assert_eq!(
            ignored,
            [
                "--partition=gpu",
                "-A proj",
                "--no-requeue",
                "--mail-type=END",
                "-e err.txt",
                "--qos=high",
                "--exclusive=user",
                "--mail-user=a@b",
                "-p x",
                "--nice=5",
            ]
        );
        // Forms of directives that change nothing here are taken silently.
        let res = sbatch(
            "#SBATCH --begin=now --export=ALL --ntasks-per-node=1 -N 1-1 --nodes=1 --ntasks=1\n\
             #SBATCH -b now+0minutes --begin NOW",
        );
        assert_eq!(res.cpus, None);
        // UNLIMITED and 0 leave the time limit to --max-lifetime.
        assert_eq!(sbatch("#SBATCH -t UNLIMITED").time_limit, None);
        assert_eq!(sbatch("#SBATCH -t 0").time_limit, None);
        assert_eq!(
            sbatch("#SBATCH -t 0-05").time_limit.as_deref(),
            Some("18000")
        );
        assert_eq!(
            sbatch("#SBATCH -t 2-0").time_limit.as_deref(),
            Some("172800")
        );
        assert_eq!(
            sbatch("#SBATCH -t 10:30").time_limit.as_deref(),
            Some("630")
        );
    }

    #[test]
    fn sbatch_bad_directives_are_errors_naming_the_line() {
        for (lines, wanted) in [
            ("#SBATCH -c", "line 2: #SBATCH -c needs a value"),
            ("#SBATCH --mem", "line 2: #SBATCH --mem needs a value"),
            (
                "#SBATCH -c four",
                "line 2: #SBATCH -c four: expected a number of CPUs",
            ),
            (
                "#SBATCH --cpus-per-task=0",
                "expected a number of CPUs, at least 1",
            ),
            (
                "#SBATCH --mem=lots",
                "line 2: #SBATCH --mem=lots: invalid size",
            ),
            ("#SBATCH --mem=8X", "invalid size"),
            ("#SBATCH --mem=1.5", "whole number of megabytes"),
            ("#SBATCH --mem-per-cpu 1e3", "whole number of megabytes"),
            (
                "#SBATCH --mem=0",
                "0 (all of a node's memory) is not supported",
            ),
            ("#SBATCH -t 1:xx", "#SBATCH -t 1:xx: expected MINUTES"),
            ("#SBATCH -t 1:2:3:4", "expected MINUTES"),
            ("#SBATCH -t 999999999999999999999", "expected MINUTES"),
            ("#SBATCH --gres=gpu:a:b:c", "expected gpu, gpu:COUNT"),
            ("#SBATCH --gres=gpu:", "expected gpu, gpu:COUNT"),
            ("#SBATCH --gpus=a100", "expected COUNT or TYPE:COUNT"),
            ("#SBATCH -G -1", "expected COUNT or TYPE:COUNT"),
            ("#SBATCH -J ''", "the job name is empty"),
            ("#SBATCH --output=", "the file name is empty"),
            (
                "#SBATCH -J \"unclosed",
                "line 2: #SBATCH line has a \" that is never closed",
            ),
            ("#SBATCH -J x\\", "ends in a backslash"),
            ("#SBATCH 4", "line 2: #SBATCH \"4\" is not an option"),
            (
                "#SBATCH -c 1\n#SBATCH - x",
                "line 3: #SBATCH \"-\" is not an option",
            ),
            ("#SBATCH --mem=1G --mem-per-cpu=1G", "mutually exclusive"),
        ] {
            let e = sbatch_error(lines);
            assert!(e.contains(wanted), "{lines:?}: {e:?} lacks {wanted:?}");
        }
    }

    #[test]
    fn sbatch_directives_that_change_what_runs_are_errors_naming_the_line() {
        // Each: the directive as written, as the error shows it, and why.
        let cases = "\
            -N 2|-N 2|only -N 1
            --nodes=2|--nodes=2|only -N 1
            --nodes=1-2|--nodes=1-2|only -N 1
            -n 4|-n 4|one task per job
            --ntasks 4|--ntasks=4|one task per job
            --ntasks-per-node=2|--ntasks-per-node=2|one task
            --begin=now+1hour|--begin=now+1hour|only --begin=now
            --begin=2030-01-01|--begin=2030-01-01|only --begin=now
            -b 16:00|-b 16:00|only --begin=now
            --deadline=now+1hour|--deadline=now+1hour|deadline
            -D /tmp|-D /tmp|cd there first
            --export=NONE|--export=NONE|--clean-env
            --signal=B:USR1@60|--signal=B:USR1@60|no signal
            --test-only|--test-only|cannot test
            --open-mode=append|--open-mode=append|empties
            --cpus-per-gpu=4|--cpus-per-gpu=4|-c, --mem
            --frobnicate=3|--frobnicate=3|not a directive xlurm knows
            -Z|-Z|not a directive xlurm knows";
        for case in cases.lines() {
            let [written, shown, why] = case.trim().splitn(3, '|').collect::<Vec<_>>()[..] else {
                panic!("{case:?}")
            };
            let e = sbatch_error(&format!("#SBATCH -c 2\n#SBATCH {written}"));
            let want = format!("line 3: #SBATCH {shown}: ");
            assert!(e.starts_with(&want), "{written:?}: {e:?} lacks {want:?}");
            assert!(e.contains(why), "{written:?}: {e:?} lacks {why:?}");
            assert!(e.ends_with("nothing was queued"), "{e:?}");
        }
    }

    #[test]
    fn sbatch_arrays_dependencies_holds_and_requeue_are_not_supported_yet() {
        for (lines, shown) in [
            ("#SBATCH --array=0-9%2", "--array=0-9%2"),
            ("#SBATCH -a 1-3", "-a 1-3"),
            ("#SBATCH --dependency=afterok:12", "--dependency=afterok:12"),
            ("#SBATCH -d afterany:3", "-d afterany:3"),
            (
                "#SBATCH --kill-on-invalid-dep=yes",
                "--kill-on-invalid-dep=yes",
            ),
            ("#SBATCH --hold", "--hold"),
            ("#SBATCH -H -c 2", "-H"),
            ("#SBATCH --requeue", "--requeue"),
        ] {
            let e = sbatch_error(lines);
            let want = format!("line 2: #SBATCH {shown}: not supported yet");
            assert!(e.starts_with(&want), "{lines:?}: {e:?} lacks {want:?}");
        }
    }

    #[test]
    fn sbatch_directive_lists_do_not_overlap() {
        for n in NOT_YET {
            assert!(!SBATCH_IGNORED.contains(n), "{n} is ignored and not yet");
        }
        for n in SBATCH_VALUED {
            assert!(
                !SBATCH_IGNORED.contains(n) && !NOT_YET.contains(n),
                "{n} is honoured and listed"
            );
        }
    }

    #[test]
    fn slurm_times() {
        assert_eq!(slurm_time("30"), Some(1800));
        assert_eq!(slurm_time("1:30"), Some(90));
        assert_eq!(slurm_time("2:00:00"), Some(7200));
        assert_eq!(slurm_time("1-0"), Some(86400));
        assert_eq!(slurm_time("0-5"), Some(18000), "D-HH even with 0 days");
        assert_eq!(slurm_time("1-2:30"), Some(95400));
        assert_eq!(slurm_time("-5"), None);
        assert_eq!(slurm_time(""), None);
        assert_eq!(slurm_time("x"), None);
    }
}
