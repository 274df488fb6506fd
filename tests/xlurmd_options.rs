//! xlurmd's own command line: a bad option is a refusal (exit 78, which
//! `RestartPreventExitStatus=78` keeps down), not clap's exit 2, which
//! `Restart=on-failure` would turn into a restart loop.

use std::process::Command;

fn xlurmd(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_xlurmd"))
        .args(args)
        .output()
        .expect("running xlurmd")
}

#[test]
fn a_bad_option_exits_78_naming_it() {
    for args in [
        &["--bogus"][..],
        &["--max-running"],
        &["--policy", "a", "--policy", "b"],
    ] {
        let out = xlurmd(args);
        assert_eq!(out.status.code(), Some(78), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("error:"), "{args:?}: {err}");
    }
    assert!(String::from_utf8_lossy(&xlurmd(&["--bogus"]).stderr).contains("--bogus"));
}

#[test]
fn help_and_version_exit_0() {
    for arg in ["--help", "--version"] {
        let out = xlurmd(&[arg]);
        assert_eq!(out.status.code(), Some(0), "{arg}");
        assert!(!out.stdout.is_empty(), "{arg} prints to stdout");
    }
}

#[test]
fn a_cancel_grace_systemd_would_read_as_no_limit_is_refused() {
    for (grace, why) in [
        ("0", "at least 1 second"),
        ("soon", "invalid duration"),
        ("2d", "at most 1d"),
    ] {
        let out = xlurmd(&["--cancel-grace", grace]);
        assert_eq!(out.status.code(), Some(78), "{grace}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--cancel-grace") && err.contains(why),
            "{grace}: {err}"
        );
    }
}
