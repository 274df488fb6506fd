//! Tests of the `#SBATCH` parser (`sbatch.rs`).
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
    assert_eq!(res.nice, Some(5), "--nice is honoured");
    assert!(!res.requeue, "--no-requeue is honoured (the default)");
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
            "--mail-type=END",
            "-e err.txt",
            "--qos=high",
            "--exclusive=user",
            "--mail-user=a@b",
            "-p x",
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
fn sbatch_arrays_are_honoured_and_a_bad_one_names_its_line() {
    assert_eq!(
        sbatch("#SBATCH --array=0-9%2").array.as_deref(),
        Some("0-9%2")
    );
    assert_eq!(
        sbatch("#SBATCH -a 1,3,5-7").array.as_deref(),
        Some("1,3,5-7")
    );
    for (lines, want) in [
        (
            "#SBATCH --array=9-3",
            "line 2: #SBATCH --array=9-3: array range",
        ),
        ("#SBATCH -a 1-3%0", "line 2: #SBATCH -a 1-3%0:"),
    ] {
        let e = sbatch_error(lines);
        assert!(e.starts_with(want), "{lines:?}: {e:?} lacks {want:?}");
        assert!(e.ends_with("nothing was queued"), "{e:?}");
    }
}

#[test]
fn sbatch_dependencies_and_holds_are_honoured_and_a_bad_one_names_its_line() {
    let res = sbatch(
        "#SBATCH --dependency=afterok:12:13,afterany:14
#SBATCH --kill-on-invalid-dep=yes",
    );
    assert_eq!(res.dependency.as_deref(), Some("afterok:12:13,afterany:14"));
    assert_eq!(res.kill_on_invalid_dep.as_deref(), Some("yes"));
    assert!(sbatch("#SBATCH --requeue").requeue);
    assert!(!sbatch("#SBATCH --no-requeue").requeue);
    let res = sbatch("#SBATCH -d singleton -H -c 2");
    assert_eq!(res.dependency.as_deref(), Some("singleton"));
    assert!(res.hold);
    assert_eq!(res.cpus, Some(2));
    assert!(!sbatch("#SBATCH -c 2").hold);
    // The command line wins.
    let mut res = ResourceArgs {
        dependency: Some("afterany:7".into()),
        ..Default::default()
    };
    apply_sbatch("#!/bin/sh\n#SBATCH -d afterok:12\ntrue\n", &mut res).unwrap();
    assert_eq!(res.dependency.as_deref(), Some("afterany:7"));
    for (lines, want) in [
        (
            "#SBATCH --dependency=afterok:",
            "line 2: #SBATCH --dependency=afterok:",
        ),
        ("#SBATCH -d aftercorr:3", "line 2: #SBATCH -d aftercorr:3"),
        ("#SBATCH -d afterok:3,afterany:4?after:5", "line 2:"),
        ("#SBATCH --kill-on-invalid-dep=maybe", "expected yes or no"),
    ] {
        let e = sbatch_error(lines);
        assert!(e.contains(want), "{lines:?}: {e:?} lacks {want:?}");
    }
}

#[test]
fn sbatch_directive_lists_do_not_overlap() {
    for n in SBATCH_VALUED {
        assert!(!SBATCH_IGNORED.contains(n), "{n} is honoured and listed");
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
