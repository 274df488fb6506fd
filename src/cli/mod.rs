//! The xlurm command line: `xlurm run|batch|queue|cancel|info`, also installed
//! as `xrun`, `xbatch`, `xqueue`, `xcancel` and `xinfo` (chosen by argv[0]).

pub mod admin;
pub mod args;
pub mod batch;
pub mod cancel;
pub mod client;
pub mod commands;
pub mod follow;
pub mod format;
pub mod info;
pub mod log;
pub mod metrics;
pub mod pty;
pub mod pty_exec;
pub mod queue;
pub mod run;
pub mod sbatch;
pub mod submit;
pub mod tee;
pub mod top;
pub mod usage;

pub use args::*;

/// The command line's parser: [`Cli`], with every command name printing the
/// version as `xlurm --version` does (`xbatch --version`: `xlurm 0.1.0`, as
/// `sbatch --version` prints `slurm VERSION`).
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let cli = Cli::command();
    let subs: Vec<String> = cli
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    subs.iter().fold(cli, |cli, name| {
        cli.mut_subcommand(name, |s| s.display_name("xlurm"))
    })
}

/// Parses `args` (as [`normalize_args`] left them) with [`command`].
pub fn parse(args: Vec<String>) -> Result<Cli, clap::Error> {
    use clap::FromArgMatches;
    if let Some(cli) = parse_one(&args) {
        return Ok(cli);
    }
    Cli::from_arg_matches(&command().try_get_matches_from(args)?)
}

/// `xlurm run|batch|queue|cancel|info ARGS` (every command name's) parsed by
/// a command that has that subcommand's arguments only: building the whole
/// tree costs a fresh process about 0.15 ms (issue 21). Anything it does not
/// take as it stands (help, an error) is `None`, for the whole tree to parse
/// and answer as always; it knows the same arguments (`--version` too), so
/// what it takes, the whole tree takes the same way.
fn parse_one(args: &[String]) -> Option<Cli> {
    use clap::{Args, FromArgMatches};
    fn one<A: Args + FromArgMatches>(name: &'static str, args: &[String]) -> Option<(A, Bus)> {
        let cmd = Bus::augment_args(A::augment_args(
            clap::Command::new(name).version(env!("CARGO_PKG_VERSION")),
        ));
        let m = cmd.try_get_matches_from(&args[1..]).ok()?;
        Some((
            A::from_arg_matches(&m).ok()?,
            Bus::from_arg_matches(&m).ok()?,
        ))
    }
    let (command, bus) = match args.get(1)?.as_str() {
        "run" => one("run", args).map(|(a, b)| (Command::Run(a), b))?,
        "batch" => one("batch", args).map(|(a, b)| (Command::Batch(a), b))?,
        "queue" => one("queue", args).map(|(a, b)| (Command::Queue(a), b))?,
        "cancel" => one("cancel", args).map(|(a, b)| (Command::Cancel(a), b))?,
        "info" => one("info", args).map(|(a, b)| (Command::Info(a), b))?,
        _ => return None,
    };
    Some(Cli { bus, command })
}

/// Rewrites `xrun ARGS` as `xlurm run ARGS` (and so on) by argv[0].
pub fn normalize_args(args: Vec<String>) -> Vec<String> {
    let prog = args
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
        .unwrap_or_default();
    let sub = match prog.as_str() {
        "xrun" => "run",
        "xbatch" => "batch",
        "xqueue" => "queue",
        "xcancel" => "cancel",
        "xinfo" => "info",
        _ => return args,
    };
    let mut out = vec!["xlurm".to_string(), sub.to_string()];
    out.extend(args.into_iter().skip(1));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole tree's answer: the command, or the error's kind and text.
    fn whole(args: &[String]) -> Result<String, (clap::error::ErrorKind, String)> {
        use clap::FromArgMatches;
        command()
            .try_get_matches_from(args)
            .and_then(|m| Cli::from_arg_matches(&m))
            .map(|c| format!("{c:?}"))
            .map_err(|e| (e.kind(), e.render().to_string()))
    }

    #[test]
    fn one_subcommand_parses_as_the_whole_tree_or_leaves_it_to_it() {
        // Command lines built from the whole tree's own arguments for each
        // command name: every option with no value, a good value, a bad one
        // and a flag-like one, alone, after a command and between others;
        // help and version; a command's own options after it.
        let tree = command();
        let mut lines: Vec<Vec<String>> = Vec::new();
        for sub in ["run", "batch", "queue", "cancel", "info"] {
            let cmd = tree.find_subcommand(sub).unwrap();
            let mut words: Vec<Vec<String>> = vec![
                vec![],
                vec!["--help".into()],
                vec!["-h".into()],
                vec!["--version".into()],
                vec!["-V".into()],
                vec!["--user".into()],
                vec!["--bogus".into()],
                vec!["7".into()],
                vec!["1".into(), "2".into()],
                vec!["--".into(), "echo".into(), "--help".into()],
                vec!["echo".into(), "-V".into(), "--user".into()],
            ];
            for a in cmd.get_arguments() {
                let mut spellings: Vec<String> = Vec::new();
                spellings.extend(a.get_long().map(|l| format!("--{l}")));
                spellings.extend(a.get_short().map(|c| format!("-{c}")));
                for flag in spellings {
                    for value in [
                        None,
                        Some("1"),
                        Some("0-3"),
                        Some("x"),
                        Some("-V"),
                        Some("2h"),
                    ] {
                        let mut w = vec![flag.clone()];
                        w.extend(value.map(String::from));
                        words.push(w.clone());
                        let mut after = w.clone();
                        after.extend(["--wrap".to_string(), "true".to_string()]);
                        words.push(after);
                        let mut cmdline = vec!["-g".to_string(), "0".to_string()];
                        cmdline.extend(w);
                        cmdline.extend(["sleep".to_string(), "1".to_string()]);
                        words.push(cmdline);
                    }
                }
            }
            for w in words {
                let mut line = vec!["xlurm".to_string(), sub.to_string()];
                line.extend(w);
                lines.push(line);
            }
        }
        let mut taken = 0;
        for line in &lines {
            let want = whole(line);
            match (parse_one(line), &want) {
                (Some(got), Ok(w)) => {
                    assert_eq!(&format!("{got:?}"), w, "{line:?}");
                    taken += 1;
                }
                (Some(got), Err(e)) => panic!("{line:?}: took {got:?}, the whole tree: {e:?}"),
                (None, Ok(w)) => panic!("{line:?}: left to the whole tree, which took {w}"),
                (None, Err(_)) => {}
            }
        }
        assert!(taken > 100, "only {taken} of {} taken", lines.len());
    }

    fn parse(args: &[&str]) -> Cli {
        super::parse(normalize_args(args.iter().map(|s| s.to_string()).collect())).unwrap()
    }

    #[test]
    fn every_command_name_prints_the_version_as_sbatch_does() {
        let want = format!("xlurm {}\n", env!("CARGO_PKG_VERSION"));
        for args in [
            &["xbatch", "--version"][..],
            &["xbatch", "-g", "0", "--version"],
            &["xrun", "--version"],
            &["xqueue", "-V"],
            &["xcancel", "--version"],
            &["xinfo", "--version"],
            &["xlurm", "--version"],
            &["xlurm", "log", "--version"],
        ] {
            let e = super::parse(normalize_args(args.iter().map(|s| s.to_string()).collect()))
                .err()
                .unwrap_or_else(|| panic!("{args:?} parsed as a command"));
            assert_eq!(e.kind(), clap::error::ErrorKind::DisplayVersion, "{args:?}");
            assert_eq!(e.render().to_string(), want, "{args:?}");
        }
        // After the command, --version is the command's.
        let Command::Run(a) = parse(&["xrun", "python", "--version"]).command else {
            panic!("not run")
        };
        assert_eq!(a.command, vec!["python", "--version"]);
        let Command::Batch(a) = parse(&["xbatch", "job.sh", "--version"]).command else {
            panic!("not batch")
        };
        assert_eq!(a.script, vec!["job.sh", "--version"]);
    }

    #[test]
    fn xqueue_cancel_takes_ids_and_nothing_else() {
        let Command::Queue(q) = parse(&["xqueue", "--cancel", "3", "4"]).command else {
            panic!("not queue")
        };
        assert_eq!(q.cancel, vec!["3", "4"]);
        let Command::Queue(q) = parse(&["xqueue"]).command else {
            panic!("not queue")
        };
        assert!(q.cancel.is_empty());
        for bad in [
            &["xqueue", "--cancel"][..],
            &["xqueue", "--cancel", "3", "--all"],
            &["xqueue", "--cancel", "x"],
        ] {
            let args = normalize_args(bad.iter().map(|s| s.to_string()).collect());
            assert!(super::parse(args).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn xrun_passes_everything_after_the_command_unchanged() {
        let Command::Run(a) = parse(&[
            "xrun", "-g", "0", "-c", "2", "python", "train.py", "-g", "4", "--lr=1",
        ])
        .command
        else {
            panic!("not run")
        };
        assert_eq!(a.res.gpus, Some(0));
        assert_eq!(a.res.cpus, Some(2));
        assert_eq!(a.command, vec!["python", "train.py", "-g", "4", "--lr=1"]);
        let Command::Run(a) = parse(&["/usr/bin/xrun", "--", "ls", "-l"]).command else {
            panic!()
        };
        assert_eq!(a.command, vec!["ls", "-l"]);
    }

    #[test]
    fn device_options_parse_all_forms() {
        let Command::Run(a) = parse(&[
            "xlurm", "run", "-i", "0,2", "--device", "nvidia", "-x", "3", "-m", "64G", "-t",
            "1h30m", "true",
        ])
        .command
        else {
            panic!()
        };
        assert_eq!(a.res.device_ids, vec![0, 2]);
        assert_eq!(a.res.exclude_device_ids, vec![3]);
        assert_eq!(a.res.vendor.as_deref(), Some("nvidia"));
        assert_eq!(a.res.mem.as_deref(), Some("64G"));
        let Command::Run(a) = parse(&["xrun", "--devices", "2", "true"]).command else {
            panic!()
        };
        assert_eq!(a.res.gpus, Some(2));
    }

    #[test]
    fn other_names_map_to_subcommands() {
        assert!(matches!(
            parse(&["xqueue", "--all"]).command,
            Command::Queue(QueueArgs { all: true, .. })
        ));
        assert!(
            matches!(parse(&["xcancel", "3", "4"]).command, Command::Cancel(CancelArgs { ref ids }) if ids == &["3", "4"])
        );
        assert!(matches!(parse(&["xinfo"]).command, Command::Info(_)));
        assert!(matches!(
            parse(&["xlurm", "show", "7_2"]).command,
            Command::Show(ShowArgs { ref id, json: false }) if id == "7_2"
        ));
        assert!(matches!(
            parse(&["xlurm", "log", "-f", "7"]).command,
            Command::Log(LogArgs {
                ref id,
                follow: true
            }) if id == "7"
        ));
        assert!(matches!(
            parse(&["xbatch", "--wrap", "echo hi"]).command,
            Command::Batch(BatchArgs { wrap: Some(_), .. })
        ));
        assert!(
            super::parse(vec!["xlurm".into(), "run".into()]).is_err(),
            "run needs a command"
        );
    }
}
